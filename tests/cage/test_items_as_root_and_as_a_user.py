"""Issue 7's probes, each run as root AND as an ordinary user (uid 65534, no capabilities) through
`sandboy run` with the namespace tier, checked from the host side afterwards — where the rest of
the suite had a root probe and at most one unprivileged twin per area (docs/threat-model.md,
"Issue 7, item by item", maps every item to its probes).

Each attack is first shown to work for that same user without Sandboy, so a refusal inside is
the cage's doing. Items here: 1 (chmod/utimensat/setxattr/chown outside the write roots: mode,
mtime, xattrs), 3 (another terminal of the same user under a `/dev` grant: the terminal's
bytes), 5 (git config and hooks planted, with git commit and git clone as the twin: config
bytes, hook file, the host's next `git status`), 6 (host SysV IPC with `sysv = true`: segment
contents, no queue left; twin: the cage's own queue), 7 (scheduling of another process of the
same uid, and `PRIO_USER`: the victim's nice value; twin: `nice` inside; `ss` sees no host
listener), and 2 (a setuid file left in the write root: its mode). Item 4 runs as both users in
test_terminal.py.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time

import pytest
from cagekit import BASE_READ, METADATA, SANDBOY, Result, to_toml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from userkit import as_user, skip_unless_nobody_can_run, world_readable_tmp  # noqa: E402

from sandboy.confine import namespaces  # noqa: E402

pytestmark = [pytest.mark.needs_kernel,
              pytest.mark.skipif(not namespaces.availability()[0],
                                 reason=f"no namespace tier here: {namespaces.availability()[1]}")]

NOBODY = 65534
PY = "/usr/bin/python3"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_CONFIG_NOSYSTEM": "1"}


class Who:
    """Root (the venv's sandboy) or uid 65534 (the system python3 over this source tree), with a
    world-readable base directory, a write root `work` and a copy of the probe, all theirs."""

    def __init__(self, name: str, base, probe: str):
        self.uid = NOBODY if name == "nobody" else 0
        self.base = base
        os.chmod(base, 0o755)
        self.work = base / "work"
        self.work.mkdir()
        self.probe = str(base / "probe")
        shutil.copy(probe, self.probe)
        os.chmod(self.probe, 0o755)
        self.own(base, self.work)
        self.src = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["sandboy"].__file__)))

    def own(self, *paths):
        for path in paths:
            os.chown(path, self.uid, self.uid)

    def as_user(self, argv) -> list:
        if not self.uid:
            return list(argv)
        return as_user(argv, uid=self.uid)

    def outside(self, argv, **kw) -> subprocess.CompletedProcess:
        """`argv` as this user, without Sandboy."""
        return subprocess.run(self.as_user(argv), capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(self.base), **GIT_ENV}, **kw)

    def policy(self, read=(), write=(), exec_=(), **sections) -> dict:
        return {"version": 1, "fs": {"read": [*BASE_READ, "/etc", *read], "exec": ["/usr/bin", "/bin", str(self.base),
                                                                                   *exec_],
                                     "write": [str(self.work), *write]},
                "env": {"pass": [], "set": {"PATH": "/usr/bin:/bin", "HOME": str(self.work), **GIT_ENV}}, **sections}

    def run(self, argv, policy) -> Result:
        path = self.base / "policy.toml"
        path.write_text(to_toml(policy))
        os.chmod(path, 0o644)
        sandboy = [PY, "-m", "sandboy"] if self.uid else [SANDBOY]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.base), "SANDBOY_CACHE_DIR": str(self.base / "cache")}
        if self.uid:
            env["PYTHONPATH"] = self.src
        proc = subprocess.run(self.as_user([*sandboy, "run", "--policy", str(path), "--", *argv]), capture_output=True,
                              text=True, cwd=self.work, env=env, timeout=60)
        return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(params=["root", "nobody"])
def who(request, probe):
    if request.param == "nobody":
        skip_unless_nobody_can_run()
    with world_readable_tmp("sandboy-items-") as base:
        made = Who(request.param, base, probe)
        if made.uid and (r := made.run(["/bin/true"], made.policy())).rc != 0:
            pytest.skip(f"uid 65534 cannot run sandboy from this source tree: {r}")
        yield made


def _metadata(path) -> tuple:
    st = os.stat(path)
    return stat.S_IMODE(st.st_mode), st.st_mtime_ns, st.st_uid, sorted(os.listxattr(path))


def test_item1_metadata_outside_the_write_roots(who):
    """chmod, utimensat, setxattr, chown of the user's own 0600 file outside every grant: EROFS;
    host side: mode, mtime, owner, xattrs unchanged. Twin: the same calls in the write root
    (chmod, touch) reach the host's file. Shown real: the user does it without Sandboy."""
    outside = who.base / "outside"
    outside.mkdir()
    files = {name: outside / name for name in ("id_rsa", "uncaged")}
    for path in files.values():
        path.write_text("key\n")
        os.chmod(path, 0o600)
        os.utime(path, (1_000_000, 1_000_000))
    who.own(outside, *files.values())
    before = _metadata(files["id_rsa"])
    r = who.run([PY, "-c", METADATA, str(files["id_rsa"])], who.policy())
    assert r.out.split() == ["chmod", "EROFS", "utime", "EROFS", "setxattr", "EROFS", "chown", "EROFS"], r
    assert _metadata(files["id_rsa"]) == before
    mine = who.work / "mine"
    mine.write_text("x\n")
    os.chmod(mine, 0o600)
    who.own(mine)
    r = who.run([PY, "-c", METADATA, str(mine)], who.policy())
    assert r.out.split() == ["chmod", "ok", "utime", "ok", "setxattr", "ok", "chown", "ok"], r
    assert _metadata(mine)[:3] == (0o777, 1_000_000_000, who.uid) and os.getxattr(mine, "user.sandboy") == b"planted"
    uncaged = who.outside([PY, "-c", METADATA, str(files["uncaged"])])
    assert uncaged.stdout.split() == ["chmod", "ok", "utime", "ok", "setxattr", "ok", "chown", "ok"], uncaged
    assert _metadata(files["uncaged"])[:2] == (0o777, 1_000_000_000)


def test_item3_another_terminal_of_the_same_user(who):
    """A terminal of the same user (a pty whose slave the user owns, as their login's) under a
    policy granting /dev: the cage does not find it; host side: the line typed there is still
    waiting for its owner. Shown real: the user opens it without Sandboy."""
    master, slave = os.openpty()
    try:
        name = os.ttyname(slave)
        os.chown(name, who.uid, who.uid)
        os.write(master, b"typed-on-that-terminal\n")
        probe = ("import errno, os, sys\n"
                 "try:\n    fd = os.open(sys.argv[1], os.O_RDWR | os.O_NONBLOCK); print('ok', os.read(fd, 100))\n"
                 "except OSError as exc:\n    print(errno.errorcode[exc.errno])\n")
        r = who.run([PY, "-c", probe, name], who.policy(read=["/dev"], write=["/dev/pts"]))
        assert r.out == "ENOENT", r
        time.sleep(0.05)
        assert os.read(slave, 100) == b"typed-on-that-terminal\n"  # nobody inside took it
        opened = who.outside([PY, "-c", "import os, sys; os.close(os.open(sys.argv[1], os.O_RDWR | os.O_NOCTTY));"
                                          " print('opened')", name])
        assert opened.stdout.strip() == "opened", opened
    finally:
        os.close(master)
        os.close(slave)


PLANT = ("printf '[core]\\n\\tfsmonitor = \"touch {marker}; false\"\\n' >> .git/config; "
         "printf '#!/bin/sh\\ntouch {marker}\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; exit 0")
TWIN = ("set -e; git clone -q {origin} copy && cd copy && echo more >> README && git commit -qam cloned && cd .. "
        "&& echo two >> README && git add README && git commit -qm second && git checkout -q -b b2 && echo ok")


def test_item5_git_config_and_hooks_cannot_be_planted_and_git_works(who, tmp_path):
    """core.fsmonitor appended to .git/config and a pre-commit hook planted in the write root's
    repository; host side: config bytes, no hook file, and the host's next `git status` and
    `git commit` run nothing. Twin: git clone and git commit (and a branch) inside the cage."""
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    marker = tmp_path / "PWNED"
    origin = who.base / "origin"
    for repo in (origin, who.work):
        who.outside(["git", "init", "-q", str(repo)], check=True)
        (repo / "README").write_text("hello\n")
        who.own(repo / "README")
        who.outside(["git", "-C", str(repo), "add", "README"], check=True)
        who.outside(["git", "-C", str(repo), "commit", "-qm", "first"], check=True)
    config = (who.work / ".git" / "config").read_bytes()
    policy = who.policy(read=[str(origin)], exec_=["/usr/lib/git-core"])
    r = who.run(["/bin/sh", "-c", PLANT.format(marker=marker)], policy)
    assert r.rc == 0, r
    assert (who.work / ".git" / "config").read_bytes() == config
    assert not (who.work / ".git" / "hooks" / "pre-commit").exists()
    r = who.run(["/bin/sh", "-c", TWIN.format(origin=origin)], policy)
    assert r.rc == 0 and r.out == "ok", r
    host_git = ["git", "-c", "safe.directory=*", "-C", str(who.work)]
    subprocess.run([*host_git, "status"], capture_output=True, env={**os.environ, **GIT_ENV}, check=True)
    subprocess.run([*host_git, "commit", "-q", "--allow-empty", "-m", "host"], capture_output=True,
                   env={**os.environ, **GIT_ENV}, check=True)
    assert not marker.exists(), "the host's git ran a command the cage planted"
    log = subprocess.run([*host_git, "log", "--format=%s", "b2"], capture_output=True, text=True).stdout
    assert log.split() == ["host", "second", "first"]  # the cage's commit, then the operator's
    copy = subprocess.run(["git", "-c", "safe.directory=*", "-C", str(who.work / "copy"), "log", "--format=%s"],
                          capture_output=True, text=True).stdout
    assert copy.split() == ["cloned", "first"]


def test_item6_host_sysv_ipc_with_sysv_granted(who):
    """With `[ipc] sysv = true`: the user's own host segment is neither found by key (to overwrite
    it) nor attached by id; host side: its bytes. Twin: the cage's own queue works — and is gone after the run."""
    key = 0x5F000000 | (os.getpid() & 0xFFFF) << 4 | who.uid & 0xF
    made = who.outside([who.probe, "sysv-make", hex(key), "user-secret"])
    assert made.stdout.startswith("ok"), made
    try:
        shm_id = made.stdout.split()[1]
        policy = who.policy(ipc={"sysv": True})
        assert who.run([who.probe, "sysv", "shmget", hex(key)], policy).out == "ENOENT"
        assert who.run([who.probe, "sysv", "shm-write", hex(key), "overwritten"], policy).out == "ENOENT"
        assert not who.run([who.probe, "sysv", "shmat", shm_id], policy).ok  # by id: not the host's
        assert who.outside([who.probe, "sysv-show", hex(key)]).stdout.strip() == "ok user-secret"
        own = hex(key + 8)
        assert who.run([who.probe, "sysv", "msgget-create", own], policy).ok  # the twin
        assert f"0x{key + 8:08x}" not in subprocess.run(["ipcs", "-q"], capture_output=True, text=True).stdout
        # shown real: uncaged, the same user overwrites the segment
        assert who.outside([who.probe, "sysv", "shm-write", hex(key), "overwritten"]).stdout.startswith("ok")
        assert who.outside([who.probe, "sysv-show", hex(key)]).stdout.strip() == "ok overwritten"
    finally:
        who.outside([who.probe, "sysv-remove", hex(key)])


def _nice(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[16])


def test_item7_another_process_of_the_same_uid_keeps_its_priority(who):
    """The operator's shell (a process of the same uid, without capabilities) as the victim:
    setpriority on its pid, PRIO_USER and PRIO_PGRP, SCHED_IDLE, affinity, I/O class from inside;
    host side: its nice value. Twins: `nice -n 5` inside, the probe renicing itself. Shown real:
    uncaged, the same user renices it. `ss -lnt` inside lists no host listener."""
    victim = subprocess.Popen(as_user(["--bounding-set=-all", "sleep", "60"], uid=who.uid))
    try:
        for _ in range(200):
            with open(f"/proc/{victim.pid}/comm") as fh:
                if fh.read().strip() == "sleep":
                    break
            time.sleep(0.005)
        before = _nice(victim.pid)
        pid = str(victim.pid)
        attacks = [["setpriority", "0", pid, "7"], ["setpriority", "2", "0", "7"], ["setpriority", "1", "0", "7"],
                   ["setscheduler", pid, "5"], ["setaffinity", pid, "0"], ["ioprio", "1", pid], ["ioprio", "3", "0"]]
        script = "; ".join(f"{who.probe} {' '.join(a)}" for a in attacks) + f"; {who.probe} setpriority 0 0 3; " \
                                                                            "nice -n 5 true && echo nice-ok"
        r = who.run(["/bin/sh", "-c", script], who.policy())
        assert r.out.split() == ["EPERM"] * len(attacks) + ["ok", "nice-ok"], r
        assert _nice(victim.pid) == before
        assert who.outside([who.probe, "setpriority", "0", pid, "7"]).returncode == 0
        assert _nice(victim.pid) == 7
    finally:
        victim.kill()
        victim.wait()
    if shutil.which("ss"):
        import socket

        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            port = f":{listener.getsockname()[1]}"
            assert port in who.outside(["ss", "-lnt"]).stdout
            inside = who.run(["ss", "-lnt"], who.policy())
            assert port not in inside.out + inside.err


def test_item2_no_setuid_file_is_left_for_the_host(who):
    """`cp /bin/sh ./rootsh && chmod 4755 ./rootsh` and `open(O_CREAT, 06755)` in the write root;
    host side: no setuid/setgid bit on either. Twin: chmod 755 and touch there. Shown real: the
    user sets the bit on their own file without Sandboy."""
    script = (f"cp /bin/sh rootsh; chmod 4755 rootsh; echo chmod=$?; {who.probe} mode openat created 06755; "
              "chmod 755 rootsh && touch -d @1 rootsh && echo twin")
    r = who.run(["/bin/sh", "-c", script], who.policy())
    assert r.out.split() == ["chmod=1", "EPERM", "twin"], r
    rootsh = os.stat(who.work / "rootsh")
    assert (stat.S_IMODE(rootsh.st_mode), rootsh.st_uid, rootsh.st_mtime) == (0o755, who.uid, 1)
    assert not (who.work / "created").exists()
    assert who.outside(["chmod", "4755", str(who.work / "rootsh")]).returncode == 0
    assert stat.S_IMODE(os.stat(who.work / "rootsh").st_mode) == 0o4755
    os.chmod(who.work / "rootsh", 0o755)
