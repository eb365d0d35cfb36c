"""A closed cage must never run anything (issue 8, item 5).

Attack: `c1 = build(narrow); c1.close(); c2 = build(wide); sandboy.run(argv, c1)`. The plan of c1
held the ruleset's fd NUMBER, which c2's ruleset then reused: the command ran under `wide` and read
what only `wide` allows (exit 0). Checked from the host: the bytes the command wrote, and the exit code."""

from __future__ import annotations

import pytest

import sandboy
from sandboy import Policy
from sandboy.confine.cage import build
from sandboy.confine.supervision import Supervision

SYSTEM = ["/usr", "/lib", "/lib64", "/etc"]


def _policies(secret_dir):
    base = {"version": 1, "fs": {"exec": ["/usr/bin", "/bin"]}}
    narrow = Policy.from_mapping({**base, "fs": {**base["fs"], "read": SYSTEM}}, "narrow.toml")
    wide = Policy.from_mapping({**base, "fs": {**base["fs"], "read": [*SYSTEM, str(secret_dir)]}}, "wide.toml")
    return narrow, wide


@pytest.fixture
def secret(tmp_path):
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key").write_text("TOPSECRET")
    return tmp_path / "secret"


def _run_cat(cage_or_policy, secret, out_path, **kw):
    with open(out_path, "wb") as out:
        return sandboy.run(["/bin/cat", str(secret / "key")], cage_or_policy, cwd="/", stdout=out.fileno(),
                           stderr=out.fileno(), **kw)


@pytest.mark.parametrize("supervise", [False, True])
def test_closed_cage_refuses_even_when_its_fd_number_was_reused(secret, tmp_path, supervise):
    narrow, wide = _policies(secret)
    c1 = build(narrow, cwd="/")
    number = c1.ruleset.fd
    c1.close()
    c2 = build(wide, cwd="/")
    try:
        assert c2.ruleset.fd == number  # the attack's premise: the number is handed out again
        out = tmp_path / "out"
        with pytest.raises(sandboy.CageError, match="closed") as err:
            _run_cat(c1, secret, out, supervise=supervise)
        assert err.value.exit_code == 125
        assert b"TOPSECRET" not in out.read_bytes()
    finally:
        c2.close()


def test_closed_cage_refused_by_the_gate_launcher_and_exec_mode(secret):
    narrow, _ = _policies(secret)
    c1 = build(narrow, cwd="/")
    c1.close()
    with pytest.raises(sandboy.CageError, match="closed"):
        Supervision(["/bin/true"], c1).start()
    with pytest.raises(sandboy.CageError, match="closed"):
        c1.plan()
    assert c1.closed


def test_twin_open_cages_still_enforce_their_own_rules(secret, tmp_path):
    narrow, wide = _policies(secret)
    c1, c2 = build(narrow, cwd="/"), build(wide, cwd="/")
    try:
        out = tmp_path / "narrow"
        assert _run_cat(c1, secret, out).returncode != 0 and b"TOPSECRET" not in out.read_bytes()
        out = tmp_path / "wide"
        assert _run_cat(c2, secret, out).returncode == 0 and out.read_bytes() == b"TOPSECRET"
        # reused: a cage runs as often as wanted while open
        assert _run_cat(c2, secret, out).returncode == 0
    finally:
        c1.close()
        c2.close()
