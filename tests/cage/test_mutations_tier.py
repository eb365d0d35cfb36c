"""The mutation check for the namespace tier: remove each namespace flag, each step of its plan,
each Landlock rule it adds for its private mounts, each size option and the nosuid/nodev/noexec
flags of each mount in turn, and require a check of `test_tier_steps.py` to fail.

The mechanism is the other mutation checks' (tests/cage/mutantkit.py runs them): `namespaces.compile`
is wrapped (pytest's monkeypatch, in this test only) so that the Tier it returns lacks one thing,
the cage is built in-process with it, and the checks run on the real kernel. Nothing in
production reads a switch for this.

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
of mutants serves both identities. See the test's printout for what kills each as whom — e.g.
"flag CLONE_NEWUSER" is a refused clone as 65534, a refused setgroups write as root.

29 mutants as root, 30 as uid 65534, are killed only by the cage refusing to start (125; the
printout marks them; counted in session 14): the set-up steps the others need (the id maps, each /dev node's mount point and copy,
/dev's own mount under its mkdirs) and three namespace flags. For those three flags and /dev's
mount the same is removed again with the steps that cannot work without it ("whole ..."):
without its PID namespace the battery reads host processes' command lines, without its mount
namespace it chmods a file outside the write roots, without the minimal /dev it sees the host's
devices and a host file in /dev/shm; without its user namespace (as root) the command's
inotify and fanotify objects have no bounds of the cage's own (`user limits`: the session-11
bounds live in that namespace's /proc/sys/user). No equivalent mutant is left (EQUIVALENT_AS_ROOT
was the user namespace as a whole, as root, until those bounds).

Budget: 108 mutants here (5 clone flags, 3 flags and /dev's mount as a whole, 84 steps, the
init, 5 rules, 4 size options, 5 mounts' flags), one battery run each (the /dev and --tty runs only for what the
battery does not kill):
3-5 s per identity on this 2-core machine when quiet (9-10 s for the module with its set-up),
20-30 s per identity while the full suite ran beside it; each bounded at 90 s.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys

import pytest
import test_tier_steps as tier_checks
from mutantkit import (MS_SHARED, drop_to, first_failure, forget_built_cages, in_child, mutant,
                       private_mount_namespace, report, run_mutants)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from userkit import skip_unless_nobody_can_run, world_readable_tmp  # noqa: E402

from sandboy.confine import namespaces  # noqa: E402

pytestmark = [pytest.mark.needs_kernel, pytest.mark.mutation,
              pytest.mark.skipif(not namespaces.availability()[0],
                                 reason=f"no namespace tier here: {namespaces.availability()[1]}"),
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a mount namespace of its own")]

BUDGET_SECONDS = 90
# by hand (linux/sched.h), not from the module under test
FLAGS = {"CLONE_NEWUSER": 0x10000000, "CLONE_NEWNS": 0x00020000, "CLONE_NEWIPC": 0x08000000,
         "CLONE_NEWPID": 0x20000000, "CLONE_NEWNET": 0x40000000}
# A namespace flag removed alone is killed by the cage refusing to start (its own steps fail:
# 125), which shows the step is needed, not that the namespace is what stops an attack. So each
# is removed again together with the steps that cannot work without it (chosen here by hand, by
# what each step does); the cage then starts, and the battery's attacks must show it: host
# processes' command lines (PID), a chmod outside the write roots (mount), the host's devices and
# a host file in /dev/shm (/dev). The user namespace as a whole: the battery's `user limits` as
# root (its bounds on the uid's inotify/fanotify objects), a refused clone as any other user.
ID_MAP_STEPS = re.compile(r"(open|write|close) (uid_map|gid_map|setgroups)$")
# The user namespace's own bounds (its /proc/sys/user): without the namespace they would be
# written to the HOST's (as root: machine-wide), so "whole CLONE_NEWUSER" takes them out with it.
USER_LIMIT_STEPS = re.compile(r"(open|write|close) user\.max_")
WHOLE = {"CLONE_NEWPID": (0x20000000, lambda label: label == "mount /proc"),
         "CLONE_NEWNS": (0x00020000, lambda label: not ID_MAP_STEPS.match(label)),
         "CLONE_NEWUSER": (0x10000000, lambda label: bool(ID_MAP_STEPS.match(label) or USER_LIMIT_STEPS.match(label))),
         # not a flag: the minimal /dev as a whole (its mount, and every step that builds in it)
         "mount /dev": (0, lambda label: "/dev" in label)}
# Survivors no check can tell apart from the intact tier, with the reason (checked: exactly these).
# (as root, the user namespace as a whole was one until session 11: without it the mounts are not
# locked, but nothing in the cage can undo them — the command holds no capability and seccomp refuses
# the mount calls. Its own inotify/fanotify bounds now tell it apart: `user limits`.)
EQUIVALENT_AS_ROOT: dict = {}
SIZE_OPTION = re.compile(rb",?(size|max|nr_inodes)=[^,\0]*")
MOUNT_FLAGS = 0x2 | 0x4 | 0x8  # MS_NOSUID | MS_NODEV | MS_NOEXEC
SYS_MOUNT = 165
INIT_LABEL = "become the PID namespace's init"
NOBODY = 65534


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
            tier.plan = lambda in_netns=(), handoff=None: [step for step in whole_plan(in_netns, handoff)
                                                           if step[0] != target]
        elif kind == "whole":  # the flag, and every step and rule that cannot work without it
            flag, needs_it = WHOLE[target]
            tier.flags &= ~flag
            tier.steps = [(label, step) for label, step in tier.steps if not needs_it(label)]
            if target == "CLONE_NEWNS":
                tier.rules = []  # (they name the private mounts)
            if target == "CLONE_NEWPID":  # no PID namespace: no init of it either
                whole_plan = tier.plan
                tier.plan = lambda in_netns=(), handoff=None: [step for step in whole_plan(in_netns, handoff)
                                                               if step[0] != INIT_LABEL]
        elif kind == "size":
            tier.steps = [(label, tuple(SIZE_OPTION.sub(b"", a) if isinstance(a, bytes) else a for a in step)
                           if _key(label, tmp) == target else step) for label, step in tier.steps]
        return tier
    return compile


CHECKS = (("battery", tier_checks.check_battery), ("/dev read-only", tier_checks.check_dev_stays_read_only),
          ("--tty plan", tier_checks.check_tty_plan))


def _mutation_run(bench) -> dict:
    real = namespaces.compile
    seen: set = set()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(namespaces, "compile", _recording(real, seen))
        forget_built_cages()
        intact = first_failure(CHECKS, bench)  # the intact tier passes every check (and shows its plans)
    if intact:
        return {"intact": intact}
    mutants = [("flag", name, bit) for name, bit in FLAGS.items()]
    mutants += [("whole", name, name) for name in WHOLE]
    mutants += [(kind, target, target) for kind, target in sorted(seen)]
    # and still passes them after the mutants (they hit only their cages)
    return run_mutants([mutant(f"{kind} {label}", namespaces, "compile", _mutated(real, kind, target))
                        for kind, label, target in mutants],
                       lambda _mutant: first_failure(CHECKS, bench), budget_seconds=BUDGET_SECONDS,
                       intact_when=("after",))


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
        base, bench = tier_checks.nobody_bench(tmp_path, probe, _Bench)
        try:
            return in_child(lambda: _mutation_run(bench), before=lambda: _become(NOBODY, base))
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

    try:
        return in_child(read_all, before=lambda: drop_to(NOBODY))
    except AssertionError:
        return False


def _raise(exc):
    raise exc


def _become(uid: int, home) -> None:
    """This process becomes `uid` without capabilities (dumpable again: else the tier's child could
    not write its own uid_map), set up to run cages as that user."""
    drop_to(uid)
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
        private_mount_namespace()
        libc = ctypes.CDLL(None, use_errno=True)
        shared = fn.shared_dir
        if (libc.mount(b"tmpfs", os.fsencode(shared), b"tmpfs", 0, b"size=1m") != 0
                or libc.mount(None, os.fsencode(shared), None, MS_SHARED, None) != 0):
            raise OSError(ctypes.get_errno(), "a shared tmpfs")

    return in_child(fn, before=private_mounts)


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
    report(outcome, "tier mutants", equivalent=EQUIVALENT_AS_ROOT if identity is _as_root else {})
    kinds = {label.split()[0] for label in outcome["killed"]}
    assert kinds == {"flag", "whole", "step", "rule", "size", "flags", "init"}, kinds
