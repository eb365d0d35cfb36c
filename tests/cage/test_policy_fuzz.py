"""Malformed policies: the loader answers with a PolicyError (`FILE: key: problem`, exit 2) or a
valid Policy, never another exception and never a traceback."""

from __future__ import annotations

import string
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandboy.errors import PolicyError
from sandboy.policy.model import LIMIT_KEYS, Policy

from cagekit import SANDBOY, to_toml

from_mapping = Policy.from_mapping

SRC = "fuzz.toml"
SECTION_KEYS = {
    "fs": ("read", "exec", "write", "deny"),
    "net": ("connect_tcp", "bind_tcp", "udp", "unix", "domains", "private", "domains_deny", "unrestricted"),
    "seccomp": ("deny", "allow"),
    "env": ("pass", "set"),
    "limits": LIMIT_KEYS,
    "compat": ("landlock",),
}

# Values TOML can produce (and a few it cannot, for the API), biased towards plausible ones.
interesting_str = st.sampled_from([
    "", ".", "/usr", "{tmp}", "{cwd}/x", "{nope}", "{tmp", "a}", "**/*.pem", "[", "ptrace", "ptrac",
    "pypi.org", "*.x.org", "a:²", "host:0", "host:99999", "[::1]:443", "127.0.0.0/8", "8.8.8.8/32",
    "::1/200", "best-effort", "strict", "PATH", "A=B", "x\0y", "é", "\udcff",
])
scalar = st.one_of(
    st.booleans(), st.integers(min_value=-(1 << 70), max_value=1 << 70), st.floats(allow_nan=True),
    interesting_str, st.text(max_size=12), st.datetimes(), st.none(),
)
value = st.recursive(scalar, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=8) | interesting_str, inner, max_size=3), max_leaves=8)


@st.composite
def policies(draw):
    """Mostly well-shaped tables with some wrong keys, types and values."""
    data = {}
    if draw(st.integers(0, 9)):
        data["version"] = draw(st.sampled_from([1, 1, 1, 2, 0, True, 1.0, "1"]))
    for section, keys in SECTION_KEYS.items():
        if not draw(st.booleans()):
            continue
        if draw(st.integers(0, 9)) == 0:
            data[section] = draw(value)
            continue
        table = {}
        for key in draw(st.lists(st.sampled_from(keys) | st.text(max_size=6), max_size=4)):
            table[key] = draw(st.lists(interesting_str | scalar, max_size=3) | value | st.integers(0, 70000))
        data[section] = table
    if draw(st.integers(0, 9)) == 0:
        data[draw(st.text(max_size=8))] = draw(value)
    return data


def valid_or_policy_error(load, arg, source: str) -> None:
    """`load(arg, source)` returns a Policy or raises a one-line `source: key: problem`."""
    try:
        load(arg, source)
    except PolicyError as exc:
        assert str(exc).startswith(f"{source}: "), exc
        assert exc.problem and "\n" not in exc.key and "\x1b" not in exc.key


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policies() | value)
def test_from_mapping(data):
    valid_or_policy_error(from_mapping, data, SRC)


toml_line = st.one_of(
    st.builds(lambda s: f"[{s}]", st.sampled_from([*SECTION_KEYS, "fs.x", "net", "[fs]"]) | st.text(max_size=5)),
    st.builds(lambda k, v: f"{k} = {v}", st.sampled_from(["version", *sum(SECTION_KEYS.values(), ())])
              | st.text(string.ascii_letters, max_size=5),
              st.sampled_from(["1", "2", "true", '"x"', "[1, 2]", '["/usr", "{tmp}"]', "[", "{}",
                               '{ CI = "1" }', "1979-05-27", "inf", "0x10", '"""', "'a'", "[[1]]"])
              | st.text(max_size=8)),
    st.text(max_size=20),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(toml_line, max_size=8).map(lambda lines: "\n".join(lines).encode("utf-8", "surrogatepass"))
       | st.binary(max_size=64))
def test_load_file_tomlish(tmp_path, raw):
    path = tmp_path / "p.toml"
    path.write_bytes(raw)
    valid_or_policy_error(lambda p, _: Policy.load(p, use_cache=False), path, str(path))


@pytest.mark.needs_kernel
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=80), policies().map(lambda d: _toml_or_none(d)).filter(lambda text: text is not None)))
def test_cli_exit_2_never_a_traceback(cage, raw):
    """Through `sandboy run --dry-run`: valid policies may build (0) or be refused as
    unenforceable (125); anything else is exit 2 with one `sandboy: FILE: ...` line."""
    r = cage.cli(["--dry-run", "--json", "--", "true"],
                raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass"))
    assert "Traceback" not in r.err, r.err
    assert r.rc in (0, 2, 125), r
    if r.rc == 2:
        lines = r.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"sandboy: {cage.root / 'policy.toml'}: "), r.err


def _toml_or_none(data):
    try:
        return to_toml(data)
    except (TypeError, ValueError, UnicodeEncodeError):
        return None


def test_unicode_digit_port_in_domain_is_a_policy_error():
    """`"²".isdigit()` is True but int("²") raises: found by the structured fuzzer."""
    with pytest.raises(PolicyError, match=r"net\.domains\[0\]"):
        from_mapping({"version": 1, "net": {"domains": ["a:²"]}}, SRC)


def test_hostile_key_is_quoted_in_the_message():
    with pytest.raises(PolicyError) as info:
        from_mapping({"version": 1, "fs": {"\x1b[2Jok\n": []}}, SRC)
    assert str(info.value).startswith('fuzz.toml: fs."\\u001b[2Jok\\n": unknown key')


def test_cli_unknown_key_message_names_file_and_key(cage):
    r = cage.cli(["--", "true"], "version = 1\n[limits]\nwall_second = 3\n")
    assert r.rc == 2
    assert r.err == (f"sandboy: {cage.root / 'policy.toml'}: limits.wall_second: unknown key "
                     f"(did you mean 'wall_seconds'? expected one of: {', '.join(LIMIT_KEYS)})\n")
    assert subprocess.run([SANDBOY, "run", "--policy"], capture_output=True).returncode == 2
