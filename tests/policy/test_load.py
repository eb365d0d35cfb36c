"""Policy loading: validation messages, defaults, and the parse cache (ADR 0004)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sandboy.errors import PolicyError
from sandboy.policy import load
from sandboy.policy.model import DEFAULT_ENV_PASS, Policy


def _load_text(tmp_path, text, name="p.toml"):
    path = tmp_path / name
    path.write_text(text)
    return Policy.load(path, use_cache=False)


def test_absent_sections_grant_nothing(tmp_path):
    policy = _load_text(tmp_path, "version = 1\n")
    assert policy.fs.read == () and policy.fs.write == () and policy.fs.exec == ()
    assert policy.net.connect_tcp == () and not policy.net.udp and not policy.net.unrestricted
    assert policy.env.pass_ == DEFAULT_ENV_PASS
    assert policy.sections == frozenset()


@pytest.mark.parametrize("text, key, fragment", [
    ("", "version", "missing"),
    ("version = 2", "version", "expected 1"),
    ("version = true", "version", "expected 1"),
    ("version = 1\n[fs]\nraed = []", "fs.raed", "did you mean 'read'"),
    ("version = 1\n[fs]\nread = \"/usr\"", "fs.read", "expected a list of strings"),
    ("version = 1\n[fs]\nread = [1]", "fs.read[0]", "expected a string"),
    ("version = 1\n[fs]\nwrite = [\"{tmpdir}/x\"]", "fs.write[0]", "unknown placeholder {tmpdir}"),
    ("version = 1\n[fs]\nwrite = [\"{tmp\"]", "fs.write[0]", "unclosed placeholder"),
    ("version = 1\n[net]\nconnect_tcp = [0]", "net.connect_tcp[0]", "1-65535"),
    ("version = 1\n[net]\nudp = \"no\"", "net.udp", "true or false"),
    ("version = 1\n[net]\nprivate = [\"8.8.8.0/24\"]", "net.private[0]", "not a private"),
    ("version = 1\n[net]\ndomains = [\"exa mple.org\"]", "net.domains[0]", "not a host name"),
    ("version = 1\n[seccomp]\ndeny = [\"ptrac\"]", "seccomp.deny[0]", "did you mean ptrace"),
    ("version = 1\n[env]\nset = { A = 1 }", "env.set.A", "expected a string"),
    ("version = 1\n[limits]\nprocesses = -1", "limits.processes", ">= 0"),
    ("version = 1\n[compat]\nlandlock = \"lax\"", "compat.landlock", "best-effort"),
    ("version = 1\nnetwork = {}", "network", "unknown key"),
    ("version = 1\n[ipc]\nsysv = 1", "ipc.sysv", "true or false"),
    ("version = 1\n[ipc]\nsysvipc = true", "ipc.sysvipc", "did you mean 'sysv'"),
    ("version = 1\n[icp]\nsysv = true", "icp", "did you mean 'ipc'"),
])
def test_errors_name_file_key_and_expectation(tmp_path, text, key, fragment):
    with pytest.raises(PolicyError) as info:
        _load_text(tmp_path, text)
    assert info.value.key == key
    assert fragment in str(info.value)
    assert str(info.value).startswith(str(tmp_path / "p.toml") + ": ")


@pytest.mark.parametrize("raw, fragment", [
    (b"version = 1\n[fs\n", "TOML syntax error"),
    (b"version = 1\n\xff\xfe", "not UTF-8"),
    (b"a=" + b"[" * 100000, "TOML"),
])
def test_unparseable_files_are_policy_errors(tmp_path, raw, fragment):
    path = tmp_path / "p.toml"
    path.write_bytes(raw)
    with pytest.raises(PolicyError) as info:
        Policy.load(path, use_cache=False)
    assert fragment in str(info.value)


def test_ipc_sysv_defaults_to_refused(tmp_path):
    assert _load_text(tmp_path, "version = 1\n").ipc.sysv is False
    assert _load_text(tmp_path, "version = 1\n[ipc]\n").ipc.sysv is False
    policy = _load_text(tmp_path, "version = 1\n[ipc]\nsysv = true\n")
    assert policy.ipc.sysv is True and "ipc" in policy.sections
    assert Policy.from_mapping(policy.to_toml_dict(), policy.source) == policy


def test_load_and_model_form_no_import_circle():
    """The validator never imports the records (they import it, lazily, to validate)."""
    code = ("import sys; import sandboy.policy.load as l; "
            "print('sandboy.policy.model' in sys.modules, 'sandboy.policy.meet' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(load))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m and m.startswith("sandboy.policy.model") for m in imported)


def test_oversized_and_missing_files(tmp_path):
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (load.MAX_POLICY_BYTES + 1))
    with pytest.raises(PolicyError, match="larger than"):
        Policy.load(big)
    with pytest.raises(PolicyError, match="larger than"):  # bytes a caller read (the plan cache's)
        Policy.load(big, raw=big.read_bytes())
    with pytest.raises(PolicyError, match="cannot read"):
        Policy.load(tmp_path / "absent.toml")
    with pytest.raises(PolicyError, match="directory"):
        Policy.load(tmp_path)


def test_round_trip_through_toml_dict(tmp_path):
    text = ('version = 1\n[fs]\nread = ["/usr", "."]\ndeny = [".env"]\n[net]\nconnect_tcp = [443, 80]\n'
            '[env]\nset = { CI = "true" }\n[limits]\nwall_seconds = 5\n')
    policy = _load_text(tmp_path, text)
    again = Policy.from_mapping(policy.to_toml_dict(), policy.source)
    assert again == policy
    assert policy.net.connect_tcp == (80, 443)


def test_cache_hit_skips_tomllib_and_is_revalidated(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "p.toml"
    path.write_text('version = 1\n[fs]\nread = ["/usr"]\n')
    first = Policy.load(path)
    code = ("import sys; from sandboy.policy.model import Policy; p = Policy.load(sys.argv[1]); "
            "print(p.fs.read, 'tomllib' in sys.modules)")
    env = dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env).stdout
    assert out.strip() == "('/usr',) False"
    # an edited file is a miss: the new content wins
    path.write_text('version = 1\n[fs]\nread = ["/etc"]\n')
    assert Policy.load(path).fs.read == ("/etc",) != first.fs.read


@pytest.mark.parametrize("sandboy", [None, "", "/c/sb", "rel/sb/"])
@pytest.mark.parametrize("xdg", [None, "", "/x", "/x/", "/x//", "/", "rel"])
@pytest.mark.parametrize("home", [None, "", "/", "//", "/root", "/root/", "/h//", "rel"])
def test_cache_dir_is_the_plain_rule(monkeypatch, sandboy, xdg, home):
    """`cache_dir` skips expanduser and join where it can (start-up cost); the strings are theirs."""
    from sandboy.policy import load

    for name, value in (("SANDBOY_CACHE_DIR", sandboy), ("XDG_CACHE_HOME", xdg), ("HOME", home)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    plain = os.environ.get("SANDBOY_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "sandboy")
    assert load.cache_dir() == plain


def test_cache_cannot_widen_a_policy(tmp_path, monkeypatch):
    """A tampered cache entry is validated like a file: bad data is an error, not a grant."""
    import marshal

    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "p.toml"
    raw = b'version = 1\n[fs]\nread = ["/usr"]\n'
    path.write_bytes(raw)
    Policy.load(path)
    from cachekit import write_sealed

    cache_file = load._cache_path(str(path))
    # (sealed with this user's key: what is behind the seal is validated again all the same)
    write_sealed(cache_file, marshal.dumps((1, raw, {"version": 1, "fs": {"read": ["/"], "bogus": []}})))
    with pytest.raises(PolicyError, match="fs.bogus"):
        Policy.load(path)
    # a cache file others can write is ignored entirely
    write_sealed(cache_file, marshal.dumps((1, raw, {"version": 1, "fs": {"read": ["/"]}})))
    os.chmod(cache_file, 0o666)
    assert Policy.load(path).fs.read == ("/usr",)


def test_long_lists_validate_in_linear_time():
    """A hostile gate's step policy may list as many paths (or ports) as 1 MiB holds: each list is
    deduplicated in one pass, first occurrence kept (`item not in out` took ≈ 4 s for 20,000
    paths, and a gate reads up to 1,000 policy files before any step runs)."""
    import time

    paths = [f"/p/{i}" for i in range(70_000)]
    ports = list(range(1, 65536)) * 2
    started = time.monotonic()
    policy = Policy.from_mapping({"version": 1, "fs": {"read": [*paths, "/p/1", "/p/0"]},
                                  "net": {"connect_tcp": ports[::-1]}})
    assert time.monotonic() - started < 2
    assert policy.fs.read == tuple(paths)
    assert policy.net.connect_tcp == tuple(range(1, 65536))


@pytest.mark.parametrize("text, fragment", [
    ("version = 1\n[net]\ndomains = [\"example.org:\"]", "bad port"),
    ("version = 1\n[limits]\nprocesses = " + "9" * 5000, "unusable TOML value"),
    ("a" + ".a" * 20000 + " = 1\n", "dotted parts"),
    ("[a" + ".a" * 300 + "]\n", "dotted parts"),
])
def test_hostile_toml_is_a_quick_policy_error(tmp_path, text, fragment):
    """A repository writes gate and policy files: none of these may crash or stall the loader."""
    import time

    started = time.monotonic()
    with pytest.raises(PolicyError) as info:
        _load_text(tmp_path, text)
    assert fragment in str(info.value)
    assert time.monotonic() - started < 2


def test_fs_protect_and_protect_defaults(tmp_path):
    policy = _load_text(tmp_path, "version = 1\n")
    assert policy.fs.protect == () and policy.fs.protect_defaults is True  # on unless turned off
    policy = _load_text(tmp_path, "version = 1\n[fs]\nprotect = [\"{repo}/.envrc\"]\nprotect_defaults = false\n")
    assert policy.fs.protect == ("{repo}/.envrc",) and policy.fs.protect_defaults is False
    assert Policy.from_mapping(policy.to_toml_dict(), policy.source) == policy


@pytest.mark.parametrize("text, key, fragment", [
    ("version = 1\n[fs]\nprotect = [\"**/.bashrc\"]", "fs.protect[0]", "literal paths, not globs"),
    ("version = 1\n[fs]\nprotect = [\"{nope}/x\"]", "fs.protect[0]", "unknown placeholder"),
    ("version = 1\n[fs]\nprotect = \".git\"", "fs.protect", "expected a list of strings"),
    ("version = 1\n[fs]\nprotect_defaults = \"no\"", "fs.protect_defaults", "true or false"),
    ("version = 1\n[fs]\nprotect_default = false", "fs.protect_default", "did you mean 'protect_defaults'"),
])
def test_fs_protect_errors_name_the_key(tmp_path, text, key, fragment):
    with pytest.raises(PolicyError) as info:
        _load_text(tmp_path, text)
    assert info.value.key == key and fragment in str(info.value)


@pytest.mark.parametrize("key", ["private", "domains_deny"])
def test_egress_keys_without_domains_are_refused_not_ignored(key):
    """net.private / net.domains_deny shape the egress proxy; without net.domains there is none,
    and a rule that silently does nothing is refused (issue 9)."""
    from sandboy.errors import PolicyError
    from sandboy.policy.model import Policy

    value = ["127.0.0.0/8"] if key == "private" else ["evil.test"]
    with pytest.raises(PolicyError) as err:
        Policy.from_mapping({"version": 1, "net": {"connect_tcp": [443], key: value}}, "p.toml")
    assert err.value.key == f"net.{key}" and "add net.domains" in str(err.value)
    Policy.from_mapping({"version": 1, "net": {"domains": ["ok.test"], key: value}}, "p.toml")  # the twin


def test_unknown_key_names_the_kind_of_thing_and_the_near_miss():
    assert load.unknown_key("limts", ("limits", "fs")) == (
        "unknown key (did you mean 'limits'? expected one of: limits, fs)")
    assert load.unknown_key("zzz", ("limits", "fs"), what="preset 'zzz'") == (
        "unknown preset 'zzz' (expected one of: limits, fs)")


def test_checked_table_returns_the_table_or_names_the_bad_key():
    table = {"a": 1}
    assert load.checked_table("p.toml", "sec", table, ("a", "b")) is table
    with pytest.raises(PolicyError) as err:
        load.checked_table("p.toml", "sec", {"c": 1}, ("a", "b"))
    assert (err.value.key, err.value.problem) == ("sec.c", "unknown key (expected one of: a, b)")
    with pytest.raises(PolicyError) as err:
        load.checked_table("p.toml", "sec", [1], ("a",))
    assert (err.value.key, err.value.problem) == ("sec", "expected a table [sec], got a list")


def test_check_domain_refuses_what_egress_refuses():
    load.check_domain("p.toml", "net.domains[0]", "*.pypi.org")
    with pytest.raises(PolicyError) as err:
        load.check_domain("p.toml", "net.domains[0]", "exa mple.com")
    assert err.value.key == "net.domains[0]" and "exa mple.com" in err.value.problem


def test_kind_of_names_toml_types_in_words():
    assert [load.kind_of(v) for v in ("s", True, 1, 1.5, [], {})] == [
        "a string", "a boolean", "an integer", "a float", "a list", "a table"]
    assert load.kind_of(None) == "NoneType"  # not a TOML type: its Python name


def _env_policy(tmp_path, value_len: int):
    return _load_text(tmp_path, f'version = 1\n[env.set]\nBIG = "{"x" * value_len}"\n')


def test_an_env_value_execve_would_refuse_is_a_policy_error(tmp_path):
    # "BIG=" + value + NUL one byte over MAX_ARG_STRLEN: refused at load, naming the key and the limit
    # (it used to load, then every command failed 126 "Argument list too long" naming nothing).
    with pytest.raises(PolicyError) as info:
        _env_policy(tmp_path, 131072 - len("BIG=") - 1 + 1)  # (the kernel's number, not the module's)
    assert info.value.key == "env.set.BIG" and "131,072" in str(info.value)


def test_twin_an_env_value_at_the_kernels_limit_reaches_the_command(tmp_path):
    # The largest string execve takes loads, and the confined command really receives it (the kernel
    # is the judge: a limit set too low refuses this policy, one set too high lets the test above load).
    size = 131072 - len("BIG=") - 1  # MAX_ARG_STRLEN on every Linux architecture with 4 KiB pages
    (tmp_path / "p.toml").write_text(f'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/bin"]\n'
                                     f'exec = ["/usr/bin", "/bin"]\n[env.set]\nBIG = "{"x" * size}"\n')
    sandboy = os.path.join(os.path.dirname(sys.executable), "sandboy")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOY_")}
    env["SANDBOY_CACHE_DIR"] = str(tmp_path / "cache")
    proc = subprocess.run([sandboy, "run", "--policy", str(tmp_path / "p.toml"), "--", "/bin/sh", "-c",
                           'printf %s "$BIG" | wc -c'], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == str(size), proc.stderr[-500:]
