"""Helpers for the attacker-side cage tests (imported by conftest.py and the test modules).

A unique module name on purpose: `from conftest import ...` would pick whichever conftest
another test directory put on sys.path first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: containerkit
from containerkit import under_filter  # noqa: E402  (the launcher that loads a BPF program)

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
# What a dynamically linked C program needs to start: libc and the loader cache.
BASE_READ = ["/usr", "/etc/ld.so.cache"]
# The start of an in-cage Python probe: attempt(call) is "ok", or the name of the errno the call
# failed with (what a probe prints and the test compares).
ATTEMPT = r"""
import errno

def attempt(call):
    try:
        call()
        return "ok"
    except OSError as exc:
        return errno.errorcode[exc.errno]
"""


class Result:
    __slots__ = ("rc", "out", "err")

    def __init__(self, rc: int, out: str, err: str):
        self.rc, self.out, self.err = rc, out.strip(), err

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.out.startswith("ok")

    def __repr__(self):
        return f"Result(rc={self.rc}, out={self.out!r}, err={self.err[-400:]!r})"


def to_toml(data: dict) -> str:
    """Enough TOML for test policies: scalars, lists of scalars, tables one level deep."""
    import json

    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + " }"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v)  # ints and strings (JSON string escapes are valid TOML basic strings)

    lines = [f"{k} = {value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for name, table in data.items():
        if isinstance(table, dict):
            lines.append(f"\n[{name}]")
            lines.extend(f"{k} = {value(v)}" for k, v in table.items())
    return "\n".join(lines) + "\n"


class Cage:
    """Runs the probe (or any argv) under a policy, through the API or the CLI (exec mode)."""

    def __init__(self, probe: str, root):
        self.probe = probe
        self.root = root
        self.work = root / "work"
        self.work.mkdir()

    def policy(self, fs=None, **sections) -> dict:
        """A policy that lets the probe start, plus `fs` entries and other sections."""
        fs = dict(fs or {})
        fs["read"] = BASE_READ + list(fs.get("read", []))
        fs["exec"] = [os.path.dirname(self.probe)] + list(fs.get("exec", []))
        return {"version": 1, "fs": fs, **sections}

    def run(self, *args, policy=None, argv=None, via="api", stdin=None, timeout=30,
            pass_fds=(), env=None, tty=False) -> Result:
        argv = list(argv) if argv is not None else [self.probe, *map(str, args)]
        policy = self.policy() if policy is None else policy
        if via == "cli":
            return self.cli(["--", *argv], policy, stdin=stdin, timeout=timeout, pass_fds=pass_fds, env=env)
        from sandboy import Policy, run

        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            result = run(argv, Policy.from_mapping(policy, "<test>"), cwd=str(self.work), timeout=timeout,
                         stdin=stdin, stdout=out.fileno(), stderr=err.fileno(), tty=tty)
            out.seek(0)
            err.seek(0)
            return Result(result.returncode, out.read().decode(), err.read().decode() + (result.error or ""))

    def cli(self, args, policy, stdin=None, timeout=30, pass_fds=(), env=None, policy_path=None) -> Result:
        """`sandboy run --policy FILE ARGS...`; `policy` is a dict, or raw text/bytes for the file
        (`policy_path`: a file to name instead, written by nobody)."""
        path = self.root / "policy.toml"
        if isinstance(policy, dict):
            policy = to_toml(policy)
        path.write_bytes(policy.encode() if isinstance(policy, str) else policy)
        path = policy_path or path
        if env is None:  # keep the policy parse cache out of the user's ~/.cache
            env = dict(os.environ, SANDBOY_CACHE_DIR=str(self.root / "cache"))
        proc = subprocess.run([SANDBOY, "run", "--policy", str(path), *args], cwd=self.work,
                              stdin=stdin, capture_output=True, timeout=timeout, pass_fds=pass_fds,
                              env=env, text=True)
        return Result(proc.returncode, proc.stdout, proc.stderr)


# Every metadata change Landlock does not mediate, tried on each path given; prints "<call> ok"
# or "<call> <ERRNO NAME>" per call (the issue-7 item-1 probe, run inside the cage).
METADATA = r"""
import errno, os, sys
for path in sys.argv[1:]:
    for name, call in (("chmod", lambda: os.chmod(path, 0o777)), ("utime", lambda: os.utime(path, (1, 1))),
                       ("setxattr", lambda: os.setxattr(path, "user.sandboy", b"planted")),
                       ("chown", lambda: os.chown(path, os.getuid(), os.getgid()))):
        try:
            call()
            print(name, "ok")
        except OSError as exc:
            print(name, errno.errorcode[exc.errno])
"""


def filter_only(bpf: bytes, argv) -> Result:
    """Run argv under only this BPF program (no Landlock, capabilities kept), in a new session:
    the cage's seccomp filter alone, on a process that keeps every capability it had. For calls
    the rest of the cage refuses anyway (dropped capabilities, Landlock), this shows the filter
    refuses them too, and that its refusal is not the kernel's (the kernel's answer, without the
    filter, is a different errno or success)."""
    proc = subprocess.run(under_filter(bpf, argv), capture_output=True, text=True, timeout=30,
                          start_new_session=True)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def cage_bpf(policy: dict) -> bytes:
    """The BPF program the cage compiles for `policy` (dict), exactly as `sandboy.run` would."""
    from sandboy import Policy
    from sandboy.confine import cage as cagemod

    cage = cagemod.build(Policy.from_mapping(policy, "<test>"), cwd=tempfile.gettempdir())
    try:
        return cage.compiled["seccomp"].outputs["bpf"]
    finally:
        cage.close()


def use_tier(tier: str, monkeypatch) -> None:
    """For a test parametrized over "tier" / "no-tier": the namespace tier forced off
    (SANDBOY_NAMESPACES=0, put back after the test), or the test skipped where the tier is
    unavailable."""
    from sandboy.confine import namespaces

    if tier == "no-tier":
        monkeypatch.setenv("SANDBOY_NAMESPACES", "0")
    elif not namespaces.availability()[0]:
        import pytest

        pytest.skip("namespace tier unavailable here")


def unused_uid(first: int) -> int:
    """A uid no account has, looked for from `first` (offset by this process's pid): what a uid
    holds — queued signals, inotify instances — is counted per uid, so a probe of such a bound
    runs as a uid nothing else of the machine uses (root's or 65534's count is everyone's)."""
    import pwd

    for uid in range(first + os.getpid() % 1000, first + 2000):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    import pytest

    pytest.skip("no unused uid found")


def run_as_unused_uid(fill: str, driver: str, most: int, extra_env: dict, *, uid_from: int, wall_seconds: int,
                      prefix: str) -> dict:
    """A per-uid bound probed from the host side: as an unused uid (`unused_uid(uid_from)`), the
    Python script `driver` is run with a fresh directory and `most`; it starts `sandboy run` of
    the command `fill.py` (the script `fill`) under a policy reading that directory, writing its
    `w/` and ending the run after `wall_seconds`, and prints what it saw as JSON — returned. Runs
    the checkout's package (PYTHONPATH); skipped where uid 65534 cannot run or read it."""
    import json

    import sandboy
    from userkit import as_user, skip_unless_nobody_can_run, world_readable_tmp

    skip_unless_nobody_can_run()
    uid = unused_uid(uid_from)
    src = os.path.dirname(os.path.dirname(os.path.abspath(sandboy.__file__)))
    with world_readable_tmp(prefix) as where:
        (where / "fill.py").write_text(fill)
        (where / "w").mkdir()
        os.chmod(where, 0o777)
        os.chmod(where / "w", 0o777)
        policy = {"version": 1,
                  "fs": {"read": ["/usr", "/etc", "/proc", str(where)],
                         "exec": ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"], "write": [str(where / "w")]},
                  "limits": {"wall_seconds": wall_seconds}}
        (where / "p.toml").write_text(to_toml(policy))
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": src, "HOME": str(where),
               "SANDBOY_CACHE_DIR": str(where / "cache"), **extra_env}
        if subprocess.run(as_user(["/usr/bin/python3", "-c", "import sandboy"], uid), env=env,
                          capture_output=True).returncode != 0:
            import pytest

            pytest.skip("an ordinary uid cannot read this source tree")
        done = subprocess.run(as_user(["/usr/bin/python3", "-c", driver, str(where), str(most)], uid),
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)
