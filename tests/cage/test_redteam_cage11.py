"""Session 11 review of the cage, from the attacker's side (redcage11).

The uid's kernel objects outside RLIMIT_*: inotify instances and watches, fanotify groups and
marks are counted per uid (`/proc/sys/user/max_inotify_instances`, 128 by default), and a user
namespace's count is charged to its parent's uid too. A caged command opening inotify instances
until EMFILE held the uid's whole 128 while it ran: every other program of that uid got EMFILE
from inotify_init (as root: every root process of the machine — `tail -f`, a file manager,
systemd's path units, an editor's watcher), tier and fallback alike — the same shape as session
10's RLIMIT_SIGPENDING row. Under the tier the cage's user namespace now has its own bounds
(`namespaces.USER_LIMITS`, written by the init before it drops its capabilities), so the command
takes at most those. Without the tier there is no per-process bound for these: the fallback is
documented (threat model, "What it does not stop") and its probe is a strict xfail.

Host side, as an unused uid (root's counts are shared with every engineer's tests on this
machine): what the command got, and an inotify_init / fanotify_init of a host process of that uid
while the command holds its instances. Twin: a command watching a directory still gets the event.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from cagekit import run_as_unused_uid, to_toml
from userkit import as_user, skip_unless_nobody_can_run

from sandboy.confine import namespaces

pytestmark = pytest.mark.needs_kernel

# Inside the cage: inotify instances until refused (at most `most`), one watch on a fresh
# directory per instance, fanotify groups (FAN_REPORT_FID: the unprivileged kind) likewise;
# then a watched file is touched and the event read (the twin's proof that watching works).
FILL = textwrap.dedent("""\
    import ctypes, json, os, select, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    out, most, where = {}, int(sys.argv[2]), sys.argv[1]
    try:  # its own namespace's bound, raised: no CAP_SYS_RESOURCE left there (and a read-only /proc)
        with open("/proc/sys/user/max_inotify_instances", "w") as fh:
            fh.write("100000")
        out["raise"] = "ok"
    except OSError as exc:
        out["raise"] = exc.errno
    os.makedirs(where + "/watched", exist_ok=True)
    fds = []
    while len(fds) < most:
        fd = libc.inotify_init1(0o2000000 | 0o4000)  # IN_CLOEXEC | IN_NONBLOCK
        if fd < 0:
            out["inotify_errno"] = ctypes.get_errno()
            break
        fds.append(fd)
    out["inotify"] = len(fds)
    if fds:
        libc.inotify_add_watch(fds[0], (where + "/watched").encode(), 0x100)  # IN_CREATE
        open(where + "/watched/f", "w").close()
        ready, _, _ = select.select([fds[0]], [], [], 5)
        out["event"] = bool(ready) and len(os.read(fds[0], 4096)) > 0
    groups = 0
    while groups < most:
        fd = libc.fanotify_init(0x200 | 0x1, 0)  # FAN_REPORT_FID | FAN_CLOEXEC
        if fd < 0:
            out["fanotify_errno"] = ctypes.get_errno()
            break
        groups += 1
    out["fanotify"] = groups
    with open(where + "/said.tmp", "w") as fh:
        json.dump(out, fh)
    os.rename(where + "/said.tmp", where + "/said")
    if most > 100:
        time.sleep(60)  # holds them until the run's wall_seconds end it
""")

# Run as the unused uid, outside the cage: starts `sandboy run`, and once the command has taken
# what it could, tries one inotify_init and one fanotify_init of its own.
DRIVER = textwrap.dedent("""\
    import ctypes, json, os, subprocess, sys, time
    where, most = sys.argv[1], sys.argv[2]
    libc = ctypes.CDLL(None, use_errno=True)
    run = subprocess.Popen(["/usr/bin/python3", "-m", "sandboy", "run", "--policy", f"{where}/p.toml", "--",
                            "/usr/bin/python3", f"{where}/fill.py", f"{where}/w", most],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=where)
    deadline = time.monotonic() + 60
    while not os.path.exists(f"{where}/w/said") and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    said = {"inside": json.load(open(f"{where}/w/said")) if os.path.exists(f"{where}/w/said") else None}
    fd = libc.inotify_init1(0o2000000)
    said["host_inotify"] = "ok" if fd >= 0 else ctypes.get_errno()
    fd = libc.fanotify_init(0x200 | 0x1, 0)
    said["host_fanotify"] = "ok" if fd >= 0 else ctypes.get_errno()
    said["rc"] = run.wait(timeout=60)
    said["stderr"] = run.stderr.read().decode(errors="replace")
    print(json.dumps(said))
""")


def _tier_or_skip():
    if not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    return {}


NO_BOUND_WITHOUT_THE_TIER = ("without the namespace tier no bound exists for the uid's inotify instances or fanotify "
                             "groups (no rlimit; the per-namespace sysctls need a user namespace): documented in the "
                             "threat model, 'What it does not stop'")


@pytest.fixture(params=["tier", "forced-off"])
def namespaces_env(request):
    if request.param == "tier":
        return _tier_or_skip()
    return {"SANDBOY_NAMESPACES": "0"}


def _run_as_unused_uid(most: int, extra_env: dict) -> dict:
    return run_as_unused_uid(FILL, DRIVER, most, extra_env, uid_from=45000, wall_seconds=4, prefix="sandboy-uidobj-")


def test_a_command_cannot_hold_its_uids_whole_inotify_and_fanotify_allowance(namespaces_env, request):
    if namespaces_env:
        request.applymarker(pytest.mark.xfail(strict=True, reason=NO_BOUND_WITHOUT_THE_TIER))
    said = _run_as_unused_uid(1000, namespaces_env)
    inside = said["inside"]
    assert inside is not None, said
    # the uid outside still gets its own (was EMFILE: the command held all 128 of each)
    assert said["host_inotify"] == "ok", said
    assert said["host_fanotify"] in ("ok", 1), said  # EPERM: no unprivileged fanotify on this kernel
    if namespaces_env == {}:  # under the tier: the cage's own bounds, whatever the host's are
        assert 0 < inside["inotify"] <= namespaces.USER_LIMITS["max_inotify_instances"], said
        assert inside["fanotify"] <= namespaces.USER_LIMITS["max_fanotify_groups"], said
        assert inside["raise"] in (13, 30), said  # EACCES, EROFS: the command cannot lift them
    assert said["rc"] == 137, said  # ended at its wall_seconds, as the driver expects


def test_twin_a_command_watching_a_directory_still_gets_its_events(namespaces_env):
    said = _run_as_unused_uid(4, namespaces_env)
    inside = said["inside"]
    assert inside is not None and inside["inotify"] == 4 and inside["event"] is True, said
    assert said["rc"] == 0, said


# --- the machine's native AIO allowance -------------------------------------------------------
#
# Native AIO contexts count against one machine-wide bound (fs.aio-max-nr: 65536 here), not per
# uid nor per namespace. One `io_setup(65536, &ctx)` in a cage, of any uid, took it all: while the
# run ran, every other process of the machine — another uid's included — got EAGAIN from io_setup
# (MySQL/MariaDB's InnoDB, QEMU's aio=native). Now refused by the filter (seccomp.DEFAULT_DENY;
# `test_every_rule.py` proves the filter is what refuses and `seccomp.allow` lifts it).

AIO_TAKER = textwrap.dedent("""\
    import ctypes, os, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    ctx = ctypes.c_ulong(0)
    rc = libc.syscall(206, ctypes.c_uint(int(sys.argv[2])), ctypes.byref(ctx))  # io_setup
    with open(sys.argv[1] + ".tmp", "w") as fh:
        fh.write("ok" if rc == 0 else str(ctypes.get_errno()))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(float(sys.argv[3]))
""")

# another uid's io_setup, outside the cage: its answer on stdout ("ok" or the errno)
AIO_NEIGHBOUR = ("import ctypes; libc = ctypes.CDLL(None, use_errno=True); ctx = ctypes.c_ulong(0); "
                 "rc = libc.syscall(206, ctypes.c_uint(1), ctypes.byref(ctx)); "
                 "print('ok' if rc == 0 else ctypes.get_errno())")


def _aio_run(tmp_path, events: int, hold: float, allow=()) -> dict:
    import time

    (tmp_path / "w").mkdir()
    (tmp_path / "take.py").write_text(AIO_TAKER)
    policy = {"version": 1,
              "fs": {"read": ["/usr", "/etc", str(tmp_path)], "exec": ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"],
                     "write": [str(tmp_path / "w")]},
              "seccomp": {"allow": list(allow)}}
    (tmp_path / "p.toml").write_text(to_toml(policy))
    said_at = tmp_path / "w" / "said"
    env = {**os.environ, "SANDBOY_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.Popen([sys.executable, "-m", "sandboy", "run", "--policy", str(tmp_path / "p.toml"), "--",
                            "/usr/bin/python3", str(tmp_path / "take.py"), str(said_at), str(events), str(hold)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while not said_at.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        said = {"inside": said_at.read_text() if said_at.exists() else None}
        if said["inside"] is not None and run.poll() is None:  # the command holds what it got
            neighbour = subprocess.run(as_user(["/usr/bin/python3", "-c", AIO_NEIGHBOUR]), capture_output=True,
                                       text=True, timeout=30)
            said["neighbour"] = neighbour.stdout.strip() or neighbour.stderr[-300:]
    finally:
        said_rc = run.wait(timeout=60)
    said["rc"] = said_rc
    said["stderr"] = run.stderr.read().decode(errors="replace")[-500:]
    return said


def test_a_command_cannot_take_the_machines_native_aio_allowance(tmp_path):
    skip_unless_nobody_can_run()
    with open("/proc/sys/fs/aio-max-nr") as fh:
        machine = int(fh.read())
    said = _aio_run(tmp_path, machine, 1.5)
    assert said["inside"] == "1", said  # EPERM: the filter (was "ok": the machine's whole allowance)
    assert said["neighbour"] == "ok", said  # another uid outside, meanwhile (was 11, EAGAIN)
    assert said["rc"] == 0, said


def test_twin_a_policy_allowing_io_setup_gets_a_context(tmp_path):
    skip_unless_nobody_can_run()
    said = _aio_run(tmp_path, 1, 1.0, allow=["io_setup"])
    assert said["inside"] == "ok" and said["neighbour"] == "ok" and said["rc"] == 0, said


# --- file leases ------------------------------------------------------------------------------
#
# fcntl(F_SETLEASE, F_RDLCK) needs an fd opened for reading and the file's ownership — as root
# (capabilities dropped) that is every root-owned file a read grant reaches. The command took a
# lease on such a file; every host process's open for writing then blocked until the lease broke
# (fs.lease-break-time, 45 s; again at each open while the command re-took it), and the command
# learnt of each open (SIGIO). Now refused by the filter.

LEASE_TAKER = textwrap.dedent("""\
    import fcntl, os, signal, sys, time
    signal.signal(signal.SIGIO, signal.SIG_IGN)
    fd = os.open(sys.argv[1], os.O_RDONLY)
    try:
        fcntl.fcntl(fd, 1024, fcntl.F_RDLCK)  # F_SETLEASE
        said = "ok"
    except OSError as exc:
        said = str(exc.errno)
    with open(sys.argv[2] + ".tmp", "w") as fh:
        fh.write(said)
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    time.sleep(float(sys.argv[3]))
""")


def _lease_run(tmp_path, *, caged: bool) -> dict:
    import time

    (tmp_path / "w").mkdir()
    (tmp_path / "take.py").write_text(LEASE_TAKER)
    victim = tmp_path / "victim"  # the runner's own file (as root: root-owned), granted for reading only
    victim.write_text("operator's\n")
    policy = {"version": 1,
              "fs": {"read": ["/usr", "/etc", str(tmp_path)], "exec": ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"],
                     "write": [str(tmp_path / "w")]}}
    (tmp_path / "p.toml").write_text(to_toml(policy))
    said_at = tmp_path / "w" / "said"
    argv = ["/usr/bin/python3", str(tmp_path / "take.py"), str(victim), str(said_at), "3"]
    if caged:
        argv = [sys.executable, "-m", "sandboy", "run", "--policy", str(tmp_path / "p.toml"), "--", *argv]
    env = {**os.environ, "SANDBOY_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while not said_at.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        said = {"inside": said_at.read_text() if said_at.exists() else None}
        # the host's writer, without blocking: EAGAIN where a lease holds the file
        try:
            os.close(os.open(victim, os.O_WRONLY | os.O_NONBLOCK))
            said["host_write_open"] = "ok"
        except OSError as exc:
            said["host_write_open"] = exc.errno
    finally:
        run.kill()
        run.wait(timeout=30)
    said["stderr"] = run.stderr.read().decode(errors="replace")[-500:]
    return said


def test_a_command_cannot_lease_a_file_it_may_only_read(tmp_path):
    said = _lease_run(tmp_path, caged=True)
    assert said["inside"] == "1", said  # EPERM from the filter (was "ok")
    assert said["host_write_open"] == "ok", said  # was EAGAIN: a blocking open waited 45 s


def test_twin_the_same_lease_outside_the_cage_holds_the_file(tmp_path):
    """What the filter stops is what the kernel grants: uncaged, the same program's lease makes
    the host's non-blocking open for writing EAGAIN."""
    said = _lease_run(tmp_path, caged=False)
    assert said == {"inside": "ok", "host_write_open": 11, "stderr": ""}, said


# --- a stop signal during the post-run git check ------------------------------------------------
#
# A write-root `sandboy run` under the tier waits for its init with the stop signals held (they
# are passed to the command), then runs the git check in this process (`exec_mode._check_in_namespace`
# for a build, `plan_cache.CachedPlan.run` for a hit). The signals were released before the check:
# a ^C, a CI runner's SIGTERM or a hang-up landing once the command had ended killed Sandboy in
# the check's walk or parse — rc -15/-2, no verdict, and the nested repository's `core.fsmonitor`
# the check was about to move stayed for the operator's next git command. The command chooses how
# long that window is (a 4 MiB config to parse, up to 2,000,000 entries to walk). A supervised run
# (`wall_seconds`) held them through its stop hooks: 125, moved. Now the exec-mode check holds them
# too (`init_wait.start_and_wait(supervised=True)`), and `cli.finish` holds them from then on.

PLANT_SLOWLY = textwrap.dedent("""\
    set -e
    mkdir -p sub/.git/objects sub/.git/refs
    echo 'ref: refs/heads/main' > sub/.git/HEAD
    {{ printf '[core]\\n\\tfsmonitor = "touch {marker}; false"\\n'
      /usr/bin/python3 -c 'import sys; sys.stdout.write("[x]\\n\\ty = z\\n" * 330000)'; }} > sub/.git/config
    : > ended
""")


def _interrupted_in_the_check(tmp_path, how: str, sig: int) -> dict:
    import signal
    import time

    if how != "fallback" and not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    work = tmp_path / "repo"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    marker = tmp_path / "PLANT-RAN"
    policy = tmp_path / "p.toml"
    policy.write_text(to_toml({"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/etc", "/bin", "/dev/null"],
                                                    "exec": ["/usr/bin", "/bin"], "write": [str(work)]}}))
    env = {k: v for k, v in os.environ.items() if k not in ("SANDBOY_NAMESPACES", "SANDBOY_PLAN_CACHE", "PYTHONPATH")
           and not (how == "hit" and k == "SANDBOY_NATIVE")}  # (plans are kept for the C executor only)
    env.update(SANDBOY_CACHE_DIR=str(tmp_path / "cache"), SANDBOY_NAMESPACES="0" if how == "fallback" else "1",
               SANDBOY_PLAN_CACHE="1" if how == "hit" else "0")
    argv = [sys.executable, "-X", "importtime", "-m", "sandboy", "run", "--policy", str(policy), "--", "/bin/sh", "-c"]
    if how == "hit":
        for _ in range(2):  # the first builds and keeps the plan, the second shows it is used
            time.sleep(0.15)  # (past fingerprint.TICK_NS: an entry is kept only where the root's stats settled)
            subprocess.run([*argv, "true"], cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=120, check=True)
        time.sleep(0.15)
    run = subprocess.Popen([*argv, PLANT_SLOWLY.format(marker=marker)], cwd=work, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (work / "ended").exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.25)  # the command has ended: the check parses the 4 MiB config (≈ 2 s here)
        in_check = run.poll() is None
        run.send_signal(sig)
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    imported = {line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")}
    err = "\n".join(line for line in err.splitlines() if not line.startswith("import time:"))
    config = work / "sub" / ".git" / "config"
    return {"in_check": in_check, "rc": run.returncode, "err": err[-1500:],
            "hit": "sandboy.confine.cage" not in imported,
            "planted_left": config.exists() and b"fsmonitor" in config.read_bytes()}


@pytest.mark.parametrize("how", ["built", "hit", "fallback"])
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_stop_signal_during_the_post_run_check_does_not_skip_it(tmp_path, how, sig):
    import signal

    said = _interrupted_in_the_check(tmp_path, how, getattr(signal, sig))
    if not said["in_check"]:
        pytest.skip(f"the run ended before the signal (a loaded machine?): {said}")
    assert said["hit"] == (how == "hit"), said
    # the verdict: the plant moved (was left), the run failed closed (was rc -15/-2/-1)
    assert said["planted_left"] is False, said
    if how == "fallback":
        # without the tier the check runs in the forked supervisor, a process of its own: it finishes
        # the check and moves the plant when the CLI it serves is killed (its PDEATHSIG is SIGTERM,
        # which it takes as a stop); the CLI's own exit is then the signal's, its report lost
        return
    assert said["rc"] == 125 and "core.fsmonitor" in said["err"], said


# --- a stowed link that still reaches its launch inode, by another way --------------------------
#
# `~/.ssh/config -> ../.dotfiles/ssh/config`, `.dotfiles -> src/dotfiles` (a dotfiles checkout linked
# into the home, as `stow` and hand-made set-ups do). The mode guard records the file the link
# reaches (`src/dotfiles/ssh/config`: its stats and bytes) and the link (where it leads, which
# inode). links11's shortcut (84e8934) passes a link after the run by one stat where it reaches
# the inode it reached at launch. The command moves that inode away from the recorded path,
# writes it there, and repoints `.dotfiles`: the file record's path is gone ("nothing is run from
# there") and the link still reaches the same inode — rewritten. The operator's next `ssh` reads it.

STOWED = ("mkdir -p .ssh src/dotfiles/ssh && printf 'Host example\\n  User me\\n' > src/dotfiles/ssh/config && "
          "ln -s src/dotfiles .dotfiles && ln -s ../.dotfiles/ssh/config .ssh/config")
MOVED_AND_WRITTEN = ("mkdir -p src/v3/ssh && mv src/dotfiles/ssh/config src/v3/ssh/config && "
                     "printf 'Host *\\n  ProxyCommand sh -c \"touch PWNED\"\\n' >> src/v3/ssh/config && "
                     "ln -s src/v3 .dotfiles.new && mv -T .dotfiles.new .dotfiles")


def test_a_stowed_link_reaching_its_launch_file_by_another_way_is_still_judged(tmp_path):
    import test_redteam_cage10 as cage10

    env, home, policy = cage10._granted_home(tmp_path, STOWED)
    done = cage10._sandboy_run(policy, MOVED_AND_WRITTEN, env, home)
    seen = (home / ".ssh" / "config").read_text() if (home / ".ssh" / "config").exists() else ""
    assert "ProxyCommand" not in seen, (done.returncode, done.stderr[-1500:], seen)  # what ssh reads
    assert done.returncode == 125, done.stderr[-1500:]


def test_twin_a_stowed_link_left_alone_passes(tmp_path):
    import test_redteam_cage10 as cage10

    env, home, policy = cage10._granted_home(tmp_path, STOWED)
    done = cage10._sandboy_run(policy, "mkdir -p src/other && echo x > src/other/notes", env, home)
    assert done.returncode == 0, done.stderr[-1500:]
    assert (home / ".ssh" / "config").read_text() == "Host example\n  User me\n"
