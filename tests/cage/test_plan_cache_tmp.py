"""`sandboy run`'s plan cache for policies with `{tmp}` (ADR 0028, session 12).

Under the namespace tier `sandboy run`'s `{tmp}` is one fixed host directory per user and temp
directory (`cage.fixed_tmp_dir`: `$TMPDIR/sandboy-tmp-EUID`), never removed, on which every run
mounts a tmpfs of its own inside its own mount namespace: the plan names nothing of one run, so
the plan cache keeps it, and no run leaves anything on the host — not even one killed outright
(a directory per run was made and removed before; a killed run left it). Every probe checks from
the host side: the temp directory's listing, the fixed directory's emptiness and identity, and
each running command's `{tmp}` as the host reads it through `/proc/PID/root`.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prockit import children

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_plan_cache import SANDBOY, Runner, run_a_mutant  # noqa: E402

from sandboy.confine import namespaces  # noqa: E402

pytestmark = pytest.mark.needs_kernel


class TmpRunner(Runner):
    """A `Runner` with a $TMPDIR of its own (what the host side counts: never the shared /tmp)."""

    def __init__(self, tmp_path: Path):
        super().__init__(tmp_path)
        self.tmpdir = tmp_path / "T"
        self.tmpdir.mkdir()
        self.env["TMPDIR"] = str(self.tmpdir)
        for name in ("TEMP", "TMP"):
            self.env.pop(name, None)
        self.mount_point = self.tmpdir / f"sandboy-tmp-{os.geteuid()}"

    def kept(self, *argv, **kwargs):
        """Run until the plan is kept and run from the cache (the first run makes the mount point:
        too new for its times to prove anything, so the second keeps the entry); the hit."""
        for _ in range(4):
            proc = self.run(*argv, **kwargs)
            assert proc.returncode == 0, proc.err
            if proc.hit:
                return proc
            time.sleep(0.1)  # (past fingerprint.TICK_NS)
        raise AssertionError("never a hit")

    def left(self) -> list:
        """What the runs left in $TMPDIR (host side): only the fixed mount point, always empty."""
        names = sorted(os.listdir(self.tmpdir))
        if self.mount_point.exists():
            assert os.listdir(self.mount_point) == [], "the host's mount point holds a run's files"
        return names


@pytest.fixture
def runner(tmp_path) -> TmpRunner:
    if not namespaces.availability()[0]:
        pytest.skip("the fixed {tmp} is the namespace tier's")
    return TmpRunner(tmp_path)


TMP_POLICY = 'write = ["{tmp}"]\n'
# `{tmp}` as a policy path (the fingerprint watches it too) and in an `env.set` value only
WHERE_TMP = {"fs.write": TMP_POLICY, "env.set only": '[env]\nset = { HOME = "{tmp}" }\n'}


def test_a_tmp_policy_is_kept_and_a_hit_runs_it(runner):
    """The twin: `{tmp}` is writable and usable on a hit — a file written, run by a shell (the
    policy grants no exec there), moved into directories made there and removed, `mktemp` in it,
    `$TMPDIR` naming it; the hit really ran the cached plan (no compiler imported); the host's
    $TMPDIR holds only the empty mount point afterwards."""
    runner.write_policy(more=TMP_POLICY)
    script = ('cd "$TMPDIR" && echo "echo ran" > x.sh && sh x.sh && mkdir -p a/b && mv x.sh a/b/ && rm -r a '
              '&& f=$(mktemp) && echo ok > "$f" && cat "$f" && echo "$TMPDIR"')
    hit = runner.kept("/bin/sh", "-c", script)
    assert hit.hit and len(runner.entries()) == 1
    # as the build's run (`exec_mode.hooks_for`: no git check for a policy writing only to `{tmp}`),
    # nor the mount table: nothing can be mounted below the mount point the hit proves unchanged
    # (`plan_keep._mount_roots_to_check`; test_a_kernel_file_system_mounted_at_or_below_...)
    assert "sandboy.confine.gitcheck" not in hit.stderr and "sandboy.confine.kernel_mounts" not in hit.imported
    assert hit.stdout.splitlines() == ["ran", "ok", str(runner.mount_point)], hit.err
    assert runner.left() == [runner.mount_point.name]


def test_env_set_values_naming_tmp_resolve_on_a_hit(runner):
    """`env.set` values with `{tmp}` (`HOME = "{tmp}"`, ADR 0017; a `$TMPDIR` of the policy's) name
    the fixed mount point on a hit as on the build, and it is the command's private tmpfs."""
    runner.write_policy(more=TMP_POLICY + '[env]\nset = { HOME = "{tmp}", TMPDIR = "{tmp}/t", X = "a:{tmp}:b" }\n')
    script = 'mkdir "$TMPDIR" && touch "$HOME/.profile" "$TMPDIR/y" && echo "$HOME|$TMPDIR|$X" && ls -A "$HOME"'
    built = runner.run("/bin/sh", "-c", script)
    hit = runner.kept("/bin/sh", "-c", script)
    mp = str(runner.mount_point)
    assert built.stdout == hit.stdout == f"{mp}|{mp}/t|a:{mp}:b\n.profile\nt\n", (built.err, hit.err)
    assert runner.left() == [runner.mount_point.name]


def test_a_file_left_in_tmp_by_one_run_is_gone_for_the_next(runner):
    runner.write_policy(more=TMP_POLICY)
    runner.kept("/bin/true")
    first = runner.run("/bin/sh", "-c", 'echo secret > "$TMPDIR/left" && ls -A "$TMPDIR"')
    second = runner.run("/bin/sh", "-c", 'ls -A "$TMPDIR"; cat "$TMPDIR/left" 2>&1 || true')
    assert first.hit and second.hit
    assert first.stdout == "left\n" and "secret" not in second.stdout, second.stdout
    assert runner.left() == [runner.mount_point.name]


# (N and the write root W as arguments: the environment is a key, the argv is not)
CONCURRENT = ('N=$1 W=$2; touch "$TMPDIR/mine-$N" && touch "$W/ready-$N" && '
              'while [ ! -e "$W/go" ]; do sleep 0.02; done; ls -A "$TMPDIR"')


def _their_tmp(proc: subprocess.Popen, mount_point: Path) -> list:
    """The `{tmp}` a running `sandboy run` hit's command sees, read by the HOST through
    /proc/PID/root of its namespace's init (the child `sandboy run` started)."""
    inits = children(proc.pid)
    assert len(inits) == 1, inits
    return sorted(os.listdir(f"/proc/{inits[0]}/root{mount_point}"))


def test_concurrent_hits_never_see_each_others_tmp(runner, tmp_path):
    """Two `sandboy run`s from the same kept plan at once: each has its own tmpfs on the one
    mount point. Host side while both wait: each one's `{tmp}` (through /proc/PID/root) holds its
    own file only, the host's directory neither; then each lists only its own."""
    w = tmp_path / "w"
    (w / "sig").mkdir(parents=True)
    # The runs signal through w/sig, not w itself: a file made in the write root changes its
    # listing, which a hit rightly checks — run 1's signal made run 2 a build about 1 time in 3.
    runner.write_policy(more=f'write = ["{{tmp}}", "{w}"]\n')
    time.sleep(0.15)  # (the write root was just made: its stats must be settled for an entry)
    runner.kept("/bin/true")
    w = w / "sig"
    procs = []
    try:
        for n in (1, 2):
            procs.append(subprocess.Popen(
                [sys.executable, "-X", "importtime", SANDBOY, "run", "--policy", str(runner.policy), "--",
                 "/bin/sh", "-c", CONCURRENT, "sh", str(n), str(w)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, env=runner.env, cwd=runner.cwd,
                start_new_session=True))
        deadline = time.monotonic() + 60
        while not all((w / f"ready-{n}").exists() for n in (1, 2)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert all((w / f"ready-{n}").exists() for n in (1, 2)), "the runs never started"
        assert [_their_tmp(proc, runner.mount_point) for proc in procs] == [["mine-1"], ["mine-2"]]
        assert os.listdir(runner.mount_point) == []
        (w / "go").touch()
        outs = [proc.communicate(timeout=60) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for n, (proc, (out, err)) in enumerate(zip(procs, outs), 1):
        assert proc.returncode == 0, err[-2000:]
        assert "sandboy.confine.cage" not in err  # both from the kept plan
        assert out == f"mine-{n}\n"
    assert runner.left() == [runner.mount_point.name]


def test_a_killed_run_leaves_nothing_on_the_host(runner):
    """`sandboy run` killed outright (SIGKILL) while a `{tmp}` hit's command runs, and the
    command then killed too: nothing is left in $TMPDIR but the empty mount point (a directory
    per run was left behind by such a kill before: nothing was there to remove it)."""
    runner.write_policy(more=TMP_POLICY)
    runner.kept("/bin/true")
    proc = subprocess.Popen([sys.executable, "-X", "importtime", SANDBOY, "run", "--policy", str(runner.policy), "--",
                             "/bin/sh", "-c", 'touch "$TMPDIR/busy" && exec sleep 60'],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=runner.env, cwd=runner.cwd, start_new_session=True)
    inits = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            inits = children(proc.pid)
            if inits and os.path.exists(f"/proc/{inits[0]}/root{runner.mount_point}/busy"):
                break
            time.sleep(0.02)
        assert inits and os.path.exists(f"/proc/{inits[0]}/root{runner.mount_point}/busy")
        assert runner.left() == [runner.mount_point.name]  # (while it runs: its files are its tmpfs's)
    finally:
        proc.kill()
        proc.wait()
        for pid in inits:  # its namespace's init (by pid): the command dies with it
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        err = proc.communicate(timeout=30)[1]
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{pid}") for pid in inits) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "sandboy.confine.cage" not in err  # the kept plan's run
    assert runner.left() == [runner.mount_point.name]


@pytest.mark.parametrize("where", sorted(WHERE_TMP))
def test_a_changed_mount_point_is_a_miss_and_the_rebuild_takes_no_other(runner, tmp_path, where):
    """The mount point's identity is a key (`plan_cache._ready`): written to on the host, replaced
    by a link, or removed since the entry was kept — each a miss. The rebuild takes the fixed
    directory only while it is an empty directory of the euid's, mode 0700: a link (to a
    directory holding a file) or a non-empty one makes it use a directory of its own for that
    run (removed after it: host side, $TMPDIR's listing), and the link's target is untouched."""
    runner.write_policy(more=WHERE_TMP[where])
    ls = ("/bin/sh", "-c", 'ls -A "$TMPDIR"; echo "$TMPDIR"')
    runner.kept(*ls)
    (runner.mount_point / "planted").write_text("x")  # a host process wrote there
    planted = runner.run(*ls)
    assert not planted.hit and planted.returncode == 0 and planted.stdout.splitlines()[0] != "planted"
    assert planted.stdout.splitlines()[-1] != str(runner.mount_point)  # not taken: not empty
    assert sorted(os.listdir(runner.tmpdir)) == [runner.mount_point.name]  # its own: removed after the run
    (runner.mount_point / "planted").unlink()
    time.sleep(0.1)
    runner.kept(*ls)
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    (target / "kept").write_text("k")
    runner.mount_point.rmdir()
    runner.mount_point.symlink_to(target)
    linked = runner.run(*ls)
    assert not linked.hit and linked.returncode == 0
    assert linked.stdout.splitlines() == [linked.stdout.splitlines()[-1]]  # an empty {tmp} of its own
    assert linked.stdout.splitlines()[-1] != str(runner.mount_point)
    assert os.listdir(target) == ["kept"] and runner.mount_point.is_symlink()
    assert sorted(os.listdir(runner.tmpdir)) == [runner.mount_point.name]
    runner.mount_point.unlink()
    remade = runner.run(*ls)  # gone: the rebuild makes it again
    assert not remade.hit and remade.stdout.splitlines() == [str(runner.mount_point)]
    assert runner.kept(*ls).hit


# In a mount namespace of its own (private at once: nothing reaches the host's table): the plan
# kept, then a proc file system mounted below the fixed mount point (a directory made in it) or on
# it, and the run again; each run's {tmp} and exit code printed.
KERNEL_MOUNT_AT_TMP = r"""
mount --make-rprivate / || exit 97
run() { out=$("$SANDBOY" -X importtime "$SCRIPT" run --policy "$POLICY" -- /bin/sh -c 'echo "ran $TMPDIR"' \
        </dev/null 2>&1); echo "rc=$? built=$(echo "$out" | grep -c 'sandboy.confine.cage$') $(echo "$out" | grep '^ran')"; }
for i in 1 2 3; do run >/dev/null; sleep 0.1; done
run
case "$HOW" in
  below) mkdir "$MP/p" && mount -t proc proc "$MP/p" || exit 97 ;;
  on) mount -t proc proc "$MP" || exit 97 ;;
esac
run
"""


@pytest.mark.parametrize("how", ["below", "on"])
def test_a_kernel_file_system_mounted_at_or_below_the_mount_point_is_a_miss(runner, how):
    """A hit looks for kernel file systems below the write roots in the mount table — all but
    `{tmp}`'s fixed mount point, which its identity check covers (`plan_keep._mount_roots_to_check`):
    a proc mounted below it needs a directory made in it, one mounted on it is another inode. Each
    is a miss, and the rebuild does not take the changed mount point (a `{tmp}` of the run's own).
    Host side: the runs' exit codes, whether each built, the `{tmp}` each command saw."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root (and unshare) to mount")
    runner.write_policy(more=TMP_POLICY)
    env = dict(runner.env, SANDBOY=sys.executable, SCRIPT=SANDBOY, POLICY=str(runner.policy),
               MP=str(runner.mount_point), HOW=how)
    proc = subprocess.run(["unshare", "-m", "/bin/sh", "-c", KERNEL_MOUNT_AT_TMP], capture_output=True, text=True,
                          env=env, cwd=runner.cwd, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    kept, changed = proc.stdout.splitlines()
    assert kept == f"rc=0 built=0 ran {runner.mount_point}", proc.stdout  # the twin: a hit (no compiler)
    rc, built, ran, tmp = changed.split(" ")
    assert (rc, built, ran) == ("rc=0", "built=1", "ran"), proc.stdout  # a miss: the build ran it
    assert tmp != str(runner.mount_point), proc.stdout  # not the changed mount point


def test_without_the_tier_a_tmp_run_keeps_todays_behaviour(runner):
    """`SANDBOY_NAMESPACES=0`: `{tmp}` is a directory of the run's own, made and removed around it
    by a supervisor (nothing mounts over it): no entry, no fixed directory, nothing left."""
    runner.write_policy(more=TMP_POLICY)
    for _ in range(2):
        proc = runner.run("/bin/sh", "-c", 'touch "$TMPDIR/x" && echo "$TMPDIR"',
                          env={"SANDBOY_NAMESPACES": "0"})
        assert proc.returncode == 0 and not proc.hit, proc.err
        assert os.path.basename(proc.stdout.strip()).startswith("sandboy-")
        assert proc.stdout.strip() != str(runner.mount_point)
    assert runner.entries() == [] and os.listdir(runner.tmpdir) == []


@pytest.mark.parametrize("where", sorted(WHERE_TMP))
def test_a_mount_point_of_another_user_is_not_taken(runner, tmp_path, where):
    """Another user's directory under the fixed name (a shared /tmp): not taken — a directory per
    run, no entry (a plan naming a directory of one run's own is never kept), and that directory
    is left as it was."""
    runner.mount_point.mkdir(mode=0o700)
    os.chown(runner.mount_point, 65534, 65534) if os.geteuid() == 0 else pytest.skip("needs root to chown")
    runner.write_policy(more=WHERE_TMP[where])
    for _ in range(3):
        proc = runner.run("/bin/sh", "-c", 'echo "$TMPDIR"')
        assert proc.returncode == 0 and not proc.hit, proc.err
        assert proc.stdout.strip() != str(runner.mount_point)
        time.sleep(0.06)
    assert runner.entries() == []
    assert sorted(os.listdir(runner.tmpdir)) == [runner.mount_point.name] and os.listdir(runner.mount_point) == []
    assert runner.mount_point.stat().st_uid == 65534


# Each part of the change taken out of a copy of the package: its probe above must then fail.
MUTANTS = {
    # the hit's check of the mount point's identity (test_a_changed_mount_point_is_a_miss_...)
    "the mount point's identity on a hit": ("plan_cache.py", "            if inode_identity(os.lstat(tmp[0])) != tmp[1]:",
                                            "            if False:"),
    # the fixed mount point itself (test_a_killed_run_leaves_nothing_on_the_host)
    "the fixed mount point": ("cli.py", "pieces=pieces, fixed_tmp=True)", "pieces=pieces, fixed_tmp=False)"),
    # a plan naming a directory of its run's own never kept (test_a_mount_point_of_another_user_is_not_taken)
    "only the fixed mount point kept": ("plan_keep.py", "    if shared is None or cage.tier is None or not "
                                        "cage.tier.tmp_private:\n        return False\n",
                                        "    if shared is None or cage.tier is None or not "
                                        "cage.tier.tmp_private:\n        return None\n"),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_each_part_has_a_probe_that_fails_without_it(runner, tmp_path, mutant):
    name, text, replacement = MUTANTS[mutant]
    run_a_mutant(runner, tmp_path, "../cli.py" if name == "cli.py" else name, text, replacement)
    # (`{tmp}` in an env.set value only: no policy path, so the fingerprint does not watch it)
    runner.write_policy(more=TMP_POLICY if mutant == "the fixed mount point" else WHERE_TMP["env.set only"])
    if mutant == "the mount point's identity on a hit":
        runner.kept("/bin/true")
        (runner.mount_point / "planted").write_text("x")
        assert runner.run("/bin/true").hit  # the changed mount point taken as it is
    elif mutant == "only the fixed mount point kept":
        runner.mount_point.mkdir(mode=0o700)
        (runner.mount_point / "not-empty").write_text("x")  # not taken: a directory per run
        runner.run("/bin/true")
        time.sleep(0.06)
        runner.run("/bin/true")
        assert runner.entries()  # a plan naming that run's own directory was kept
    else:
        proc = subprocess.Popen([sys.executable, SANDBOY, "run", "--policy", str(runner.policy), "--",
                                 "/bin/sh", "-c", 'exec sleep 60'], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=runner.env, cwd=runner.cwd, start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            while not children(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.3)
        finally:
            inits = children(proc.pid)
            proc.kill()
            proc.wait()
            for pid in inits:
                os.kill(pid, signal.SIGKILL)
            proc.communicate(timeout=30)
        left = os.listdir(runner.tmpdir)
        assert [name for name in left if name.startswith("sandboy-") and name != runner.mount_point.name], left
