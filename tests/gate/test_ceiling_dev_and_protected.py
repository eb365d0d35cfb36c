"""The built-in ceiling against a hostile step (issue #7 items 3 and 5), checked from the host.

- No raw `/dev`: a step cannot read a block device or open another terminal of the same user
  (here the test's own pseudo-terminal); `/dev/null` and `/dev/urandom` still work. The twin
  with `/dev` granted (the ceiling as it was) shows that the ceiling is what refuses.
- Protected paths: a step cannot plant `core.fsmonitor` in `.git/config` or a pre-commit hook;
  `git add` and `git commit` in a step still work.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest

from sandboy.gate import ceiling as ceilings

from gatekit import by_name, make_repo, run_json

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org"}


def _block_devices() -> list[str]:
    out = []
    for name in sorted(os.listdir("/dev")):
        path = f"/dev/{name}"
        try:
            if stat.S_ISBLK(os.stat(path).st_mode):
                out.append(path)
        except OSError:
            pass
    return out[:6]


def _readable_here(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            fh.read(1)
        return True
    except OSError:
        return False


def _pending(fd) -> bytes:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 4096)
    except BlockingIOError:
        return b""


# Block devices are only ever read (never written: the twin below grants /dev); the terminal is
# read (what the operator typed) and written (text injected into their screen).
RAW_DEV_STEP = """
for d in DEVICES; do
  if head -c 1 "$d" >/dev/null 2>&1; then echo "ESCAPED: $d"; else echo "REFUSED: $d"; fi
done
if got=$(timeout 5 head -c 6 PTY 2>/dev/null); then echo "ESCAPED: read $got"; else echo "REFUSED: read PTY"; fi
if (echo INJECTED > PTY) 2>/dev/null; then echo "ESCAPED: wrote PTY"; else echo "REFUSED: write PTY"; fi
"""


def _dev_gate(devices: list[str], pty: str) -> str:
    script = RAW_DEV_STEP.replace("DEVICES", " ".join(devices)).replace("PTY", pty)
    return f"""
        [[step]]
        name = "raw-dev"
        run = {json.dumps(script)}

        [[step]]
        name = "dev-twin"
        run = "echo x > /dev/null && head -c 8 /dev/urandom | wc -c && head -c 4 /dev/zero | wc -c"
    """


@pytest.mark.parametrize("namespaces", ["tier", "landlock-only"])
def test_step_cannot_reach_block_devices_or_other_terminals(tmp_path, fake_home, namespaces):
    """With the namespace tier the step's /dev is a minimal tmpfs; without it (forced off, as
    where the kernel refuses namespaces) the ceiling alone keeps /dev out."""
    env = {"SANDBOY_NAMESPACES": "0"} if namespaces == "landlock-only" else {}
    master, slave = os.openpty()
    try:
        pty = os.ttyname(slave)
        devices = _block_devices()
        os.write(master, b"TYPED\n")  # what the operator typed, waiting on their terminal
        repo = make_repo(tmp_path, _dev_gate(devices, pty))
        proc, report = run_json(repo, tmp_path, home=fake_home, env=env)
        steps = by_name(report)
        out = steps["raw-dev"]["output_tail"]
        assert "ESCAPED" not in out, out
        assert out.count("REFUSED") == len(devices) + 2, out
        # host side: the typed line still waits for its owner; nothing was written to the screen
        assert _pending(slave) == b"TYPED\n"
        assert b"INJECTED" not in _pending(master)
        # twin: the minimal device set works
        twin = steps["dev-twin"]
        assert twin["status"] == "passed", twin["output_tail"]
        assert twin["output_tail"].split() == ["8", "4"]
    finally:
        os.close(master)
        os.close(slave)


def test_with_dev_granted_the_same_step_escapes(tmp_path, fake_home):
    """The twin that proves the ceiling is what refuses: `/dev` readable, as it used to be, and
    no namespace tier (whose minimal /dev would hide the devices anyway)."""
    master, slave = os.openpty()
    try:
        pty = os.ttyname(slave)
        devices = [d for d in _block_devices() if _readable_here(d)]  # as root: all of them
        data = dict(ceilings.BUILTIN, fs=dict(ceilings.BUILTIN["fs"]))
        data["fs"]["read"] = [*data["fs"]["read"], "/dev"]
        old = tmp_path / "old-ceiling.toml"
        old.write_text(ceilings.to_toml(data))
        os.write(master, b"TYPED\n")
        repo = make_repo(tmp_path, _dev_gate(devices, pty))
        proc, report = run_json(repo, tmp_path, "--ceiling", old, home=fake_home, env={"SANDBOY_NAMESPACES": "0"})
        out = by_name(report)["raw-dev"]["output_tail"]
        assert "ESCAPED: read TYPED" in out, out  # it read what was typed on another terminal
        assert _pending(slave) == b""
        for device in devices:
            assert f"ESCAPED: {device}" in out, out
    finally:
        os.close(master)
        os.close(slave)


def test_builtin_ceiling_grants_no_dev_directory():
    fs = ceilings.builtin().fs
    assert not any(p == "/dev" or p.startswith("/dev/") for p in (*fs.read, *fs.write, *fs.exec))


# --- protected paths in a gate ---------------------------------------------------------------------


PLANT = """
    [[step]]
    name = "plant"
    run = '''printf '[core]\\n\\tfsmonitor = "touch /tmp/sandboy-pwned-$$"\\n' >> .git/config; printf '#!/bin/sh\\nid\\n' > .git/hooks/pre-commit; exit 0'''

    [[step]]
    name = "commit"
    run = "echo more >> notes.txt && git add notes.txt && git -c user.name=t -c user.email=t@example.org commit -qm from-step && git checkout -q -b step-branch && echo committed"
"""


def _tier_available() -> bool:
    from sandboy.confine import namespaces

    return namespaces.availability()[0]


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout


@pytest.mark.parametrize("namespaces", ["tier", "landlock-only"])
def test_step_cannot_plant_git_config_or_hooks_and_git_still_works(tmp_path, fake_home, namespaces):
    repo = make_repo(tmp_path, PLANT, files={"notes.txt": "one\n"})
    _git(repo, "init", "-q")
    (repo / ".git" / "hooks").mkdir(exist_ok=True)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "first")
    config_before = (repo / ".git" / "config").read_bytes()
    hooks_before = sorted(os.listdir(repo / ".git" / "hooks"))
    env = {"SANDBOY_NAMESPACES": "0"} if namespaces == "landlock-only" else {}
    proc, report = run_json(repo, tmp_path, "--keep-going", home=fake_home, env={**GIT_ENV, **env})
    steps = by_name(report)
    plant = steps["plant"]
    protected_by = plant["enforced"]["landlock"]["fs_protected_by"]
    # twin: git inside the step works either way
    commit = steps["commit"]
    assert commit["status"] == "passed" and "committed" in commit["output_tail"], commit["output_tail"]
    assert _git(repo, "log", "--format=%s").split() == ["from-step", "first"]
    assert _git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "step-branch"
    assert protected_by.startswith("mount") == (namespaces == "tier" and _tier_available())
    if protected_by.startswith("mount"):
        assert (repo / ".git" / "config").read_bytes() == config_before
        assert sorted(os.listdir(repo / ".git" / "hooks")) == hooks_before
        assert plant["status"] == "passed", plant
    else:
        degraded = [d for d in plant["degraded"] if d.startswith("fs.protect_defaults")]
        assert degraded and ".git/config" in degraded[0] and ".git/hooks" in degraded[0], json.dumps(plant)
        # nothing bound .git/config: the post-run git check found the planted key, put the
        # launch content back and failed the step and the gate closed (ADR 0019)
        assert plant["status"] == "cage_error" and "core.fsmonitor" in plant["error"], plant
        assert proc.returncode == 125
        assert (repo / ".git" / "config").read_bytes() == config_before
