"""The mutation check for the namespace tier: remove each namespace flag, each step of its plan,
each Landlock rule it adds for its private mounts, each size option and the nosuid/nodev/noexec
flags of each mount in turn, and require a check of `test_tier_steps.py` to fail.

The mechanism is `test_mutations.py`'s: `namespaces.compile` is wrapped (pytest's monkeypatch, in
this test only) so that the Tier it returns lacks one thing, the cage is built in-process with
it, and the checks run on the real kernel. Nothing in production reads a switch for this.

The mutants are not listed by hand: they are every step label of the plans the checks use (the
battery's policy, the same with write on /dev, the --tty plan), so a step added to
`namespaces.plan_mounts` is mutated the day it lands, and a step no check notices fails this
test by name. Left out on purpose: the `close ...` steps (their fds are O_CLOEXEC copies or
maps, closed at exec anyway). The final "become the PID namespace's init" is mutated too
(without it the command itself is pid 1: the battery's `pid` fact).

Everything runs in a forked child that first makes a mount namespace of its own, private
recursively, and mounts one SHARED tmpfs in it: so no mutant can touch the host's mounts, and
the step "make / private" is observable (without it the cage's copy of that mount is a slave,
tagged `master:` in its mount table — on this host every mount is private already, so it would
otherwise be an equivalent mutant).

Twice: as root, and as uid 65534 without capabilities (a grandchild that switched uids after
the root child made the bench: the user's SysV segment, a root-owned victim process). As an
ordinary user the tier's user namespace is what grants the mounts at all, and as root it is
what locks them; the battery's expectations are the same for both but its ids, so one table
of mutants serves both identities. Today no mutant is equivalent for either identity (each is
killed in both; see the test's printout for what kills it as whom — e.g. "flag CLONE_NEWUSER"
is a refused clone as 65534, a refused setgroups write as root).

Budget: 86 mutants here (5 clone flags, 66 steps, the init, 5 rules, 4 size options, 5 mounts'
flags), one battery run each (the /dev and --tty runs only for what the battery does not kill):
3-5 s per identity on this 2-core machine when quiet (9-10 s for the module with its set-up),
20-30 s per identity while the full suite ran beside it; each bounded at 90 s.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import time
import traceback

import pytest
import test_tier_steps as tier_checks
from test_mutations import _forget_built_cages

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from userkit import skip_unless_nobody_can_run, world_readable_tmp  # noqa: E402

from sandboy.confine import namespaces  # noqa: E402

pytestmark = [pytest.mark.needs_kernel, pytest.mark.mutation,
              pytest.mark.skipif(not namespaces.availability()[0],
                                 reason=f"no namespace tier here: {namespaces.availability()[1]}"),
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a mount namespace of its own")]

BUDGET_SECONDS = 90
CLONE_NEWNS, MS_REC, MS_PRIVATE, MS_SHARED = 0x00020000, 0x4000, 1 << 18, 1 << 20
# by hand (linux/sched.h), not from the module under test
FLAGS = {"CLONE_NEWUSER": 0x10000000, "CLONE_NEWNS": 0x00020000, "CLONE_NEWIPC": 0x08000000,
         "CLONE_NEWPID": 0x20000000, "CLONE_NEWNET": 0x40000000}
SIZE_OPTION = re.compile(rb",?(size|max)=[^,\0]*")
MOUNT_FLAGS = 0x2 | 0x4 | 0x8  # MS_NOSUID | MS_NODEV | MS_NOEXEC
SYS_MOUNT = 165
INIT_LABEL = "become the PID namespace's init"
NOBODY = 65534
PR_SET_DUMPABLE = 4


def _key(label: str, tmp) -> str:
    """A step's label with this build's {tmp} path taken out (each cage build gets its own)."""
    return label.replace(tmp, "{tmp}") if tmp else label


def _recording(real, seen: set):
    def compile(policy, grants, tmp, *args, **kwargs):
        tier = real(policy, grants, tmp, *args, **kwargs)
        if tier is not None:
            seen.update(("step", _key(label, tmp)) for label, _ in tier.steps if not label.startswith("close "))
            seen.update(("rule", _key(path, tmp)) for path, *_ in tier.rules)
            seen.update(("size", _key(label, tmp)) for label, step in tier.steps
                        if any(isinstance(a, bytes) and SIZE_OPTION.search(a) for a in step))
            seen.update(("flags", _key(label, tmp)) for label, step in tier.steps
                        if step[0] == SYS_MOUNT and isinstance(step[5], int) and step[5] & MOUNT_FLAGS)
            seen.update(("init", label) for label, _ in tier.plan() if label == INIT_LABEL)
        return tier
    return compile


def _mutated(real, kind: str, target):
    def compile(policy, grants, tmp, *args, **kwargs):
        tier = real(policy, grants, tmp, *args, **kwargs)
        assert tier is not None, "the tier is unavailable: nothing to mutate"
        if kind == "flag":
            tier.flags &= ~target
        elif kind == "step":
            tier.steps = [(label, step) for label, step in tier.steps if _key(label, tmp) != target]
        elif kind == "rule":
            tier.rules = [rule for rule in tier.rules if _key(rule[0], tmp) != target]
        elif kind == "flags":
            tier.steps = [(label, step[:5] + (step[5] & ~MOUNT_FLAGS,) + step[6:]) if _key(label, tmp) == target
                          else (label, step) for label, step in tier.steps]
        elif kind == "init":
            whole_plan = tier.plan
            tier.plan = lambda in_netns=(): [step for step in whole_plan(in_netns) if step[0] != target]
        elif kind == "size":
            tier.steps = [(label, tuple(SIZE_OPTION.sub(b"", a) if isinstance(a, bytes) else a for a in step)
                           if _key(label, tmp) == target else step) for label, step in tier.steps]
        return tier
    return compile


CHECKS = (("battery", tier_checks.check_battery), ("/dev read-only", tier_checks.check_dev_stays_read_only),
          ("--tty plan", tier_checks.check_tty_plan))


def _first_failure(bench) -> str | None:
    """The name of the first check that fails, with its message; None if every check passes."""
    for name, check in CHECKS:
        try:
            check(bench)
        except AssertionError as exc:
            return f"{name}: {str(exc).splitlines()[0][:160]}"
    return None


def _mutation_run(bench) -> dict:
    real = namespaces.compile
    started = time.monotonic()
    seen: set = set()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(namespaces, "compile", _recording(real, seen))
        _forget_built_cages()
        intact = _first_failure(bench)  # the intact tier passes every check (and shows its plans)
    if intact:
        return {"intact": intact}
    mutants = [("flag", name, bit) for name, bit in FLAGS.items()]
    mutants += [(kind, target, target) for kind, target in sorted(seen)]
    killed, survivors = {}, []
    for kind, label, target in mutants:
        _forget_built_cages()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(namespaces, "compile", _mutated(real, kind, target))
            failure = _first_failure(bench)
        _forget_built_cages()
        if failure is None:
            survivors.append(f"{kind} {label}")
        else:
            killed[f"{kind} {label}"] = failure
        if time.monotonic() - started > BUDGET_SECONDS:
            return {"over budget": f"after {kind} {label}"}
    _forget_built_cages()
    intact = _first_failure(bench)  # and still passes them after the mutants (they hit only their cages)
    if intact:
        return {"intact": f"after the mutants: {intact}"}
    return {"killed": killed, "survivors": survivors, "seconds": round(time.monotonic() - started, 1)}


class _Bench(tier_checks.Bench):
    """The battery's bench, usable once this process IS its uid: the SysV helper then runs the
    probe directly (setpriv's --clear-groups needs CAP_SETGID, gone after the switch)."""

    def _sysv(self, *args):
        if self.uid == 0 or os.geteuid() != self.uid:
            return super()._sysv(*args)
        argv = [self.probe, args[0], hex(self.sysv_key), *args[1:]]
        return subprocess.run(argv, capture_output=True, text=True).stdout.strip()


def _as_root(tmp_factory, probe) -> dict:
    bench = _Bench(tmp_factory.mktemp("tier-bench"), probe)
    try:
        return _mutation_run(bench)
    finally:
        bench.close()


def _as_nobody(_tmp_factory, probe) -> dict:
    """The same mutants with this process turned into uid 65534 without capabilities (its own
    forked child): the tier's user namespace then maps 65534 to itself, as for any ordinary
    user. The bench (a root-owned victim process, the user's SysV segment) is made and removed
    by the root parent; the child only runs cages."""
    with world_readable_tmp("sandboy-tier-mutants-") as tmp_path:
        copy = tmp_path / "bin"
        copy.mkdir()
        shutil.copy(probe, copy / "probe")
        os.chmod(copy / "probe", 0o755)
        base = tmp_path / "nobody"
        base.mkdir()
        bench = _Bench(base, str(copy / "probe"), uid=NOBODY)
        try:
            return _in_child(lambda: _mutation_run(bench), before=lambda: _become(NOBODY, base))
        finally:
            bench.close()


def _nobody_reads_the_source() -> bool:
    """Can uid 65534 read Sandboy's source (the child imports what it has not yet)? Not in a
    checkout under a private home directory."""
    import sandboy

    def read_all():
        for top, _dirs, files in os.walk(os.path.dirname(sandboy.__file__), onerror=_raise):
            for name in files:
                if name.endswith(".py"):
                    open(os.path.join(top, name), "rb").close()
        return True

    def drop():
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)

    try:
        return _in_child(read_all, before=drop)
    except AssertionError:
        return False


def _raise(exc):
    raise exc


def _become(uid: int, home) -> None:
    """This process becomes `uid` (and gid), with no supplementary groups and, as a root process
    changing all its uids to another, no capabilities left (capabilities(7))."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    # The uid change made this process undumpable (its /proc/self then belongs to root, and the
    # tier's child could not write its own uid_map): a process an ordinary user starts is dumpable.
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE)")
    with open("/proc/self/status") as fh:
        caps = {k: v.strip() for k, v in (line.split(":", 1) for line in fh) if k in ("CapEff", "CapPrm")}
    assert set(caps.values()) == {"0000000000000000"}, caps
    os.environ.update(HOME=str(home), SANDBOY_CACHE_DIR=str(home / "cache"))
    namespaces._AVAILABLE.clear()  # probed again as this user (a root probe said nothing about it)
    ok, why = namespaces.availability()
    assert ok, f"uid {uid} cannot make the namespace tier here: {why}"


def _in_own_mount_namespace(fn):
    """fn() in a forked child with a private mount namespace holding one shared tmpfs; its
    JSON-able result comes back over a pipe."""
    def private_mounts():
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWNS) != 0 or libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            raise OSError(ctypes.get_errno(), "a private mount namespace")
        shared = fn.shared_dir
        if (libc.mount(b"tmpfs", os.fsencode(shared), b"tmpfs", 0, b"size=1m") != 0
                or libc.mount(None, os.fsencode(shared), None, MS_SHARED, None) != 0):
            raise OSError(ctypes.get_errno(), "a shared tmpfs")

    return _in_child(fn, before=private_mounts)


def _in_child(fn, before):
    """before(), then fn() in a forked child (which never returns into pytest); fn's JSON-able
    result comes back over a pipe, a failure as the child's traceback."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            before()
            result = {"result": fn()}
        except BaseException:
            result = {"error": traceback.format_exc()}
        data = json.dumps(result).encode()
        while data:
            data = data[os.write(write_end, data):]
        os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    answer = json.loads(b"".join(chunks) or b'{"error": "the child said nothing"}')
    assert "error" not in answer, answer["error"]
    return answer["result"]


def _mount_points() -> list:
    with open("/proc/self/mountinfo") as fh:
        return [line.split()[4] for line in fh]


def _root_mount_options() -> list:
    with open("/proc/self/mountinfo") as fh:
        return [line.split()[5] for line in fh if line.split()[4] == "/"]


@pytest.mark.parametrize("identity", [_as_root, _as_nobody], ids=["root", "nobody"])
def test_every_tier_step_has_a_check_that_fails_without_it(identity, probe, tmp_path_factory):
    if identity is _as_nobody:
        skip_unless_nobody_can_run()
        if not _nobody_reads_the_source():
            pytest.skip("uid 65534 cannot read this source tree")

    def run():
        return identity(tmp_path_factory, probe)

    run.shared_dir = str(tmp_path_factory.mktemp("shared-mount"))
    root_before = _root_mount_options()
    outcome = _in_own_mount_namespace(run)
    # nothing of it reached this process's mount table: no mount on the test's own paths, "/"
    # as writable as before (other sessions may mount elsewhere meanwhile: not compared)
    ours = str(tmp_path_factory.getbasetemp())
    assert not [p for p in _mount_points() if p == ours or p.startswith(ours + "/")]
    assert _root_mount_options() == root_before
    assert "intact" not in outcome, f"the intact tier fails a check: {outcome['intact']}"
    assert "over budget" not in outcome, outcome
    for label, failure in sorted(outcome["killed"].items()):
        print(f"{label:60} killed by {failure}")
    assert not outcome["survivors"], f"tier steps no check depends on: {outcome['survivors']}"
    kinds = {label.split()[0] for label in outcome["killed"]}
    assert kinds == {"flag", "step", "rule", "size", "flags", "init"}, kinds
    print(f"{len(outcome['killed'])} tier mutants killed in {outcome['seconds']} s")
