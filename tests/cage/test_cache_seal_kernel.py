"""The cache's seal on the real kernel (ADR 0030): where the secret lives (the user keyring), that no
cage reaches it, and the checkout-shipped cache of redcage13 as the ordinary user uid 65534 —
checked from the host side (files' inodes, a directory outside every grant, /proc/keys).

The plan entry, plan piece, walk index and `.cwasm` forgeries have their probes beside the checks
they pass (test_plan_cache's "unsealed, no Landlock" and "another entry's seal", test_plan_cache_pieces'
"ours, without a seal", test_gitcheck_walk_index's "without its seal" and "sealed for another name",
tests/audit/test_host_limits' cwasm test); the parse cache's in test_redteam_cage13.
"""

from __future__ import annotations

import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandboy import cache_seal
from sandboy.confine import namespaces

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: userkit
import userkit  # noqa: E402

pytestmark = pytest.mark.needs_kernel

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
# keyctl(KEYCTL_READ, serial, buf, 32) from a plain python3: what a command allowed the call would do
READ_BY_SERIAL = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
buf = ctypes.create_string_buffer(32)
n = libc.syscall(ctypes.c_long(250), ctypes.c_long(11), ctypes.c_long(int(sys.argv[1])), buf, ctypes.c_long(32))
print(buf.raw.hex() if n == 32 else os.strerror(ctypes.get_errno()))
"""
SEARCH_USER_KEYRING = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
n = libc.syscall(ctypes.c_long(250), ctypes.c_long(10), ctypes.c_long(-4), b"user", sys.argv[1].encode(), ctypes.c_long(0))
print(n if n >= 0 else os.strerror(ctypes.get_errno()))
"""


@pytest.fixture
def secret() -> bytes:
    key = cache_seal.secret()
    if key is None:
        pytest.skip("the kernel's user keyring cannot be used here")
    return key


def _serial() -> int:
    out = subprocess.run(["/usr/bin/python3", "-c", SEARCH_USER_KEYRING, cache_seal.description().decode()],
                         capture_output=True, text=True, check=True).stdout.strip()
    return int(out)


def test_the_secret_is_a_user_key_only_this_uid_reads(secret):
    """Host side: a "user" key of 32 bytes in /proc/keys, possessor view+search, this uid
    view+read+search, nobody else anything; a plain process of this uid reads it by serial (the
    probe below can tell), and a new user namespace's @u does not hold it (its own register)."""
    serial = _serial()
    line = next(entry for entry in open("/proc/keys").read().splitlines() if entry.startswith(f"{serial:08x} "))
    fields = line.split()
    assert fields[4] == "090b0000" and fields[7] == "user" and line.endswith(f"{cache_seal.description().decode()}: 32")
    read = subprocess.run(["/usr/bin/python3", "-c", READ_BY_SERIAL, str(serial)], capture_output=True, text=True)
    assert read.stdout.strip() == secret.hex()
    other = subprocess.run(["unshare", "-U", "-r", "/usr/bin/python3", "-c", SEARCH_USER_KEYRING,
                            cache_seal.description().decode()], capture_output=True, text=True)
    if other.returncode == 0:
        assert other.stdout.strip() == "Required key not available"


@pytest.mark.parametrize("tier", ["1", "0"])
def test_no_cage_reads_the_secret_and_no_policy_may_allow_it(tmp_path, secret, tier):
    """The same read by serial inside a cage: refused by seccomp (EPERM), under the tier (a user
    namespace of its own reads a key of its kuid by serial: measured) and without it. A policy
    asking for keyctl/add_key/request_key is refused, exit 2."""
    if tier == "1" and not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    serial = _serial()
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc"]\nexec = ["/usr/bin"]\n')
    env = dict(os.environ, SANDBOY_NAMESPACES=tier)
    proc = subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", "/usr/bin/python3", "-c", READ_BY_SERIAL,
                           str(serial)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Operation not permitted" and secret.hex() not in proc.stdout
    for name in ("keyctl", "add_key", "request_key"):
        policy.write_text(policy.read_text().split("[seccomp]")[0] + f'[seccomp]\nallow = ["{name}"]\n')
        proc = subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", "/usr/bin/python3", "-c",
                               READ_BY_SERIAL, str(serial)], capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=60)
        assert proc.returncode == 2 and f"seccomp.allow: {name} cannot be allowed" in proc.stderr, proc.stderr
        assert secret.hex() not in proc.stdout


def test_as_an_ordinary_user_a_shipped_parse_cache_entry_is_rebuilt_and_its_own_entries_kept(secret):
    """uid 65534 (its own key, made by its first run): a checkout's `.cache/policies/<name>.marshal`
    widening the policy is not taken (nothing written outside every grant) and is replaced by the
    user's own sealed entry; the next run, a new process, takes that entry (not rewritten: the
    user's key outlived the process that made it)."""
    userkit.skip_unless_nobody_can_run()
    from sandboy.policy import load

    with userkit.world_readable_tmp("cachekey14-") as base:
        project, outside = base / "checkout", base / "outside"
        project.mkdir()
        outside.mkdir(mode=0o777)
        os.chmod(outside, 0o777)
        policy = project / "p.toml"
        raw = b'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin"]\nexec = ["/usr/bin", "/bin"]\n'
        policy.write_bytes(raw)
        table = {"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/etc", "/bin"], "exec": ["/usr/bin", "/bin"],
                                      "write": [str(outside)]}}
        entry = project / ".cache" / "policies" / (load._cache_path(str(policy)).rsplit("/", 1)[1])
        entry.parent.mkdir(parents=True)
        entry.write_bytes(marshal.dumps((load._CACHE_FORMAT, raw, table)))
        for path in (project, project / ".cache", entry.parent, entry, policy):
            os.chown(path, userkit.NOBODY, userkit.NOBODY)
        os.chmod(project / ".cache", 0o700)
        os.chmod(entry.parent, 0o700)
        shipped = entry.stat().st_ino
        env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOY_")}
        env.update(SANDBOY_CACHE_DIR=str(project / ".cache"), HOME=str(base))

        def run(name: str) -> subprocess.CompletedProcess:
            return subprocess.run(userkit.as_user([SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c",
                                                   f"echo planted > {outside}/{name}"]),
                                  cwd=project, env=env, capture_output=True, text=True, timeout=60)

        first = run("shipped")
        assert not (outside / "shipped").exists(), "the checkout's entry chose the policy: " + first.stderr
        assert first.returncode != 0
        rebuilt = entry.stat()
        assert rebuilt.st_ino != shipped and rebuilt.st_uid == userkit.NOBODY
        second = run("second")
        assert not (outside / "second").exists() and second.returncode != 0
        assert entry.stat().st_ino == rebuilt.st_ino  # its own sealed entry taken, not rewritten


def test_as_an_ordinary_user_an_unsealed_plan_without_landlock_is_not_run(secret):
    """uid 65534 under the tier: its own entry is a hit (not rewritten); the same entry with the
    Landlock step taken out and a forged tag (what a checkout could ship: the format is public,
    the key not) is a miss — a world-readable file outside every grant stays unread — and is
    replaced by the user's own sealed entry."""
    userkit.skip_unless_nobody_can_run()
    if not namespaces.availability()[0]:
        pytest.skip("the plan cache keeps runs under the namespace tier only")
    from test_plan_cache import without_landlock

    with userkit.world_readable_tmp("cachekey14-plan-") as base:
        cache, work, outside = base / "cache", base / "work", base / "outside"
        for path, mode in ((cache, 0o700), (work, 0o755), (outside, 0o755)):
            path.mkdir()
            os.chmod(path, mode)
        os.chown(cache, userkit.NOBODY, userkit.NOBODY)
        (outside / "secret").write_text("TOPSECRET\n")
        os.chmod(outside / "secret", 0o644)
        policy = base / "p.toml"
        policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc"]\nexec = ["/usr/bin", "/bin"]\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOY_")}
        env.update(SANDBOY_CACHE_DIR=str(cache), HOME=str(work))

        def run() -> str:
            proc = subprocess.run(userkit.as_user([SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c",
                                                   f"cat {outside}/secret 2>/dev/null || echo refused"]),
                                  cwd=work, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                  timeout=60)
            assert proc.returncode == 0, proc.stderr
            return proc.stdout

        assert run() == run() == "refused\n"
        (entry,) = (cache / "plans").iterdir()
        kept = entry.stat().st_ino
        assert run() == "refused\n" and entry.stat().st_ino == kept  # the twin: its own entry, a hit
        # a tag of zeros before the forged body (the plain-body forgery is test_plan_cache's)
        forged = bytes(cache_seal.TAG_BYTES) + without_landlock(entry.read_bytes()[cache_seal.TAG_BYTES:])
        entry.write_bytes(forged)  # (same inode: still uid 65534's, 0600)
        assert run() == "refused\n", "the forged plan without Landlock was run"
        assert entry.read_bytes() != forged and entry.stat().st_uid == userkit.NOBODY  # its own, sealed again


def test_without_the_keyring_doctor_says_the_cache_is_off(tmp_path, secret):
    """Where keyctl is refused (Docker's default seccomp; here: inside a Sandboy cage, whose filter
    refuses it) there is no secret: `sandboy doctor` says the cache is off and names no plan cache
    directory (`cache_seal.seal`/`unseal` then write and read nothing: tests/test_cache_seal.py).
    Twin: the same doctor outside the cage says sealed, with the plans' directory."""
    import json

    install = os.path.realpath(os.path.dirname(os.path.dirname(sys.executable)))  # (the venv)
    interpreter = os.path.dirname(os.path.realpath(sys.executable))
    source = str(Path(cache_seal.__file__).resolve().parents[1])
    outer = tmp_path / "outer.toml"
    reads = ", ".join(f'"{p}"' for p in ("/usr", "/lib", "/lib64", "/etc", "/proc", install, interpreter,
                                         os.path.dirname(interpreter), source))
    outer.write_text(f'version = 1\n[fs]\nread = [{reads}]\n'
                     f'exec = ["/usr/bin", "/bin", "{os.path.dirname(SANDBOY)}", "{interpreter}"]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOY_")}
    env.update(SANDBOY_NAMESPACES="0", SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
    caged = subprocess.run([SANDBOY, "run", "--policy", str(outer), "--", SANDBOY, "doctor", "--json"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, timeout=120)
    report = json.loads(caged.stdout)
    assert report["cache"].startswith("off:") and report["plan_cache"] is None, report
    said = subprocess.run([SANDBOY, "run", "--policy", str(outer), "--", SANDBOY, "doctor"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, timeout=120).stdout
    assert "plan cache (sandboy run): off (the cache is off: no key" in said, said  # (not "no C executor")
    plain = json.loads(subprocess.run([SANDBOY, "doctor", "--json"], capture_output=True, text=True, env=env,
                                      cwd=tmp_path, timeout=120).stdout)
    assert plain["cache"].startswith("sealed") and plain["plan_cache"] == str(tmp_path / "cache" / "plans"), plain
