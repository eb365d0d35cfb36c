"""`{tmp}`'s host directory left by a run killed outright is swept by a later one (session 14,
gatemem14; `confine/run_tmp.py`).

Without the namespace tier (and for the gate's and the API's cages) a cage's `{tmp}` is a host
directory the maker removes when the cage is closed; `sandboy run` killed by SIGKILL left it in
$TMPDIR with what the command wrote there, and nothing ever removed it. The maker now holds an
flock on the directory (its fd close-on-exec, inherited by a supervisor it forks, never by the
command); a later `make` in the same place removes `sandboy-run-<12 hex>` directories of this
euid, mode 0700, whose lock it gets — their makers are dead, in whatever PID namespace — and
nothing else.

Probes, all from the host side: the SIGKILLed run's directory (files, a subdirectory, a link to
a directory outside) is there after the kill and gone after the next run, the link's target
untouched; a live concurrent run's directory and file stay while another run comes and goes
(then its own run removes it); hostile entries with the name — a symlink to a directory, another
user's directory, one of ours with another mode, a file — are neither followed nor removed, while
a dead maker's directory beside them is; the remover's chmod never follows a name swapped for a
link (`cleanup._open_unlocked`).
"""

import os
import signal
import stat
import subprocess
import sys
import time

import pytest
from prockit import named

from sandboy.confine import cleanup, run_tmp

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")

POLICY = ('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin"]\nexec = ["/usr/bin", "/bin"]\n'
          'write = ["{tmp}"]\n')


def _env(tmp_path, tmpdir):
    env = {k: v for k, v in os.environ.items() if k not in ("TEMP", "TMP")}
    env.update(TMPDIR=str(tmpdir), SANDBOY_NAMESPACES="0", SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
    return env


def _ours(tmpdir) -> list:
    return sorted(name for name in os.listdir(tmpdir) if name.startswith(run_tmp.PREFIX))


def _start(tmp_path, tmpdir, script: str, *args) -> subprocess.Popen:
    policy = tmp_path / "p.toml"
    policy.write_text(POLICY)
    return subprocess.Popen([SANDBOY, "run", "--policy", str(policy), "--", "/bin/bash", "-c", script, "sh", *args],
                            env=_env(tmp_path, tmpdir), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _made(tmpdir, proc, seconds=60.0) -> str:
    """The name of the one {tmp} directory the run `proc` made in `tmpdir`, once it is there."""
    deadline = time.monotonic() + seconds
    while not _ours(tmpdir):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    (name,) = _ours(tmpdir)
    return name


def _wait_for(path, proc, seconds=60.0) -> None:
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)


def _gone(marker: str, seconds=10.0) -> bool:
    deadline = time.monotonic() + seconds
    while named(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _one_more_run(tmp_path, tmpdir) -> None:
    proc = _start(tmp_path, tmpdir, 'echo "$TMPDIR"')
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert os.path.dirname(out.strip()) == str(tmpdir)


# A command that fills its {tmp}: a file, a subdirectory, a link to a directory outside, then
# says so and waits as a marked process.
FILL = ('mkdir -p "$TMPDIR/sub/deeper" && echo kept > "$TMPDIR/sub/deeper/f" && ln -s "$2" "$TMPDIR/sub/out" '
        '&& touch "$TMPDIR/ready" && exec -a "$1" sleep 60')


def test_a_killed_runs_tmp_is_swept_by_the_next_run(tmp_path):
    tmpdir, outside = tmp_path / "T", tmp_path / "outside"
    tmpdir.mkdir()
    outside.mkdir(mode=0o755)
    (outside / "keep").write_text("outside\n")
    marker = f"sandboy-runtmp-{os.urandom(4).hex()}"
    proc = _start(tmp_path, tmpdir, FILL, marker, str(outside))
    try:
        left = _made(tmpdir, proc)
        _wait_for(tmpdir / left / "ready", proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert _gone(marker), "the killed run's command is still running"
        # the reproduction: the killed run's directory, with what its command wrote, stays
        assert _ours(tmpdir) == [left] and (tmpdir / left / "sub" / "deeper" / "f").read_text() == "kept\n"
        _one_more_run(tmp_path, tmpdir)
        assert _ours(tmpdir) == [], "the killed run's {tmp} (or the next run's own) is left"
        # nothing outside was followed: the link's target, its mode and its file
        assert stat.S_IMODE(os.stat(outside).st_mode) == 0o755 and (outside / "keep").read_text() == "outside\n"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in named(marker):
            os.kill(pid, signal.SIGKILL)


def test_a_live_concurrent_runs_tmp_is_untouched(tmp_path):
    tmpdir = tmp_path / "T"
    tmpdir.mkdir()
    go = tmp_path / "go"
    script = ('echo mine > "$TMPDIR/file" && touch "$TMPDIR/ready"; '
              'for i in $(seq 600); do [ -e "$1" ] && break; sleep 0.1; done; cat "$TMPDIR/file"')
    out, err = outlives_a_sweep(tmp_path, tmpdir, _start(tmp_path, tmpdir, script, str(go)), go)
    assert out == "mine\n", (out, err)
    assert _ours(tmpdir) == []  # (its own run removed it)


def outlives_a_sweep(tmp_path, tmpdir, proc, go) -> tuple:
    """The live run `proc` — its {tmp} in `tmpdir` holding `file` ("mine") and `ready`, then
    waiting for `go` — while another run sweeps that place: its directory and file stay (host
    side: same inode, the bytes). Then let go: its (stdout, stderr), its exit asserted 0."""
    try:
        live = _made(tmpdir, proc)
        _wait_for(tmpdir / live / "ready", proc)
        st = os.lstat(tmpdir / live)
        _one_more_run(tmp_path, tmpdir)  # its make sweeps the place the live run's {tmp} is in
        assert _ours(tmpdir) == [live]
        assert os.lstat(tmpdir / live).st_ino == st.st_ino and (tmpdir / live / "file").read_text() == "mine\n"
        go.write_text("")
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, (out, err)
        return out, err
    finally:
        go.write_text("")
        if proc.poll() is None:
            proc.kill()


# A maker killed outright, in a process of its own: its locked directory (a file in it) stays.
DEAD_MAKER = ("import os, sys; from sandboy.confine import run_tmp; p = run_tmp.make([sys.argv[1]]); "
              "open(os.path.join(p, 'f'), 'w').write('x'); print(p, flush=True); os.kill(os.getpid(), 9)")


def _dead_makers_dir(base) -> str:
    proc = subprocess.run([sys.executable, "-c", DEAD_MAKER, str(base)], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    path = proc.stdout.strip()
    assert os.path.isdir(path)
    return path


def test_hostile_entries_named_like_ours_are_neither_followed_nor_removed(tmp_path):
    base, target = tmp_path / "T", tmp_path / "target"
    base.mkdir()
    target.mkdir(mode=0o755)
    (target / "keep").write_text("t\n")
    name = lambda: run_tmp.PREFIX + os.urandom(6).hex()  # noqa: E731
    link, other, loose, plain = (base / name() for _ in range(4))
    link.symlink_to(target)
    other.mkdir(mode=0o700)
    (other / "keep").write_text("o\n")
    if os.geteuid() == 0:
        os.chown(other, 65534, 65534)
    loose.mkdir(mode=0o755)  # ours, but not a mode make gives
    plain.write_text("a file\n")
    not_hex = base / (run_tmp.PREFIX + "zzzzzzzzzzzz")
    not_hex.mkdir(mode=0o700)
    dead = _dead_makers_dir(base)
    removed = run_tmp.sweep(str(base))
    assert removed == [os.path.basename(dead)] and not os.path.lexists(dead)  # the twin: swept
    assert os.path.islink(link) and os.readlink(link) == str(target)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o755 and (target / "keep").read_text() == "t\n"
    assert loose.is_dir() and plain.read_text() == "a file\n" and not_hex.is_dir()
    if os.geteuid() == 0:  # (as another user the directory is simply another user's already)
        assert (other / "keep").read_text() == "o\n"
    else:
        assert other.is_dir()


def test_a_maker_holding_its_lock_is_never_swept(tmp_path):
    """In-process: a directory this process made (its lock held) is not swept, even by a sweep
    in another process (an flock is per open file: another process's open of it is refused);
    released, the next sweep takes it."""
    base = tmp_path / "T"
    base.mkdir()
    path = run_tmp.make([str(base)])
    try:
        sweep = "import sys; from sandboy.confine import run_tmp; print(run_tmp.sweep(sys.argv[1]))"
        out = subprocess.run([sys.executable, "-c", sweep, str(base)], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "[]" and os.path.isdir(path)
    finally:
        run_tmp.release(path)
    assert run_tmp.sweep(str(base)) == [os.path.basename(path)] and not os.path.exists(path)


def test_the_remover_never_chmods_through_a_link(tmp_path):
    """A name listed as a directory and swapped for a link to one before it is opened (what a
    dead run's leftover process may do while the sweep empties its {tmp}): the chmod that
    unlocks a subdirectory goes to the inode an O_NOFOLLOW open found — none here — and the
    link's target keeps its mode. (`os.chmod(name, dir_fd=...)`, as before, made it 0700.)"""
    top, target = tmp_path / "top", tmp_path / "target"
    top.mkdir()
    target.mkdir(mode=0o755)
    (top / "swapped").symlink_to(target)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError):
            cleanup._open_unlocked("swapped", fd)
    finally:
        os.close(fd)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o755


@pytest.mark.parametrize("tier", ["1", "0"], ids=["tier", "no tier"])
def test_a_killed_gates_step_tmp_is_swept_by_the_next_run(tmp_path, tier):
    """The gate's cages make their `{tmp}` the same way: a gate SIGKILLed while its step runs
    left it (under the tier the empty mount point, without it with the step's file); the next
    `sandboy run` in that place sweeps it (host side)."""
    tmpdir, repo = tmp_path / "T", tmp_path / "repo"
    tmpdir.mkdir()
    (repo / ".007").mkdir(parents=True)
    marker = f"sandboy-gatetmp-{os.urandom(4).hex()}"
    (repo / ".007" / "gate.toml").write_text(
        f'[[step]]\nname = "s"\nrun = "echo hi > $TMPDIR/f && touch ready && exec -a {marker} sleep 60"\n')
    env = {**_env(tmp_path, tmpdir), "SANDBOY_NAMESPACES": tier}
    gate = subprocess.Popen([sys.executable, "-m", "sandboy.gate.cli", str(repo)], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for(repo / "ready", gate)
        (left,) = _ours(tmpdir)
        gate.send_signal(signal.SIGKILL)
        gate.wait()
        assert _gone(marker), "the killed gate's step is still running"
        assert _ours(tmpdir) == [left]  # (the reproduction)
        _one_more_run(tmp_path, tmpdir)
        assert _ours(tmpdir) == []
    finally:
        if gate.poll() is None:
            gate.kill()
        for pid in named(marker):
            os.kill(pid, signal.SIGKILL)


def test_a_place_without_flock_gets_one_unlocked_directory_never_swept(tmp_path, monkeypatch):
    """A file system that refuses flock (ENOLCK: some network and FUSE ones; stood in for here by
    refusing the flock call alone): one directory is made and used unlocked — not a hundred names
    tried and left — and the sweep, whose flock fails the same way there, never takes it."""
    import errno

    from sandboy.confine import _libc

    real = _libc.syscall

    def no_flock(nr, *args):
        if nr == run_tmp.SYS_FLOCK:
            raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
        return real(nr, *args)

    monkeypatch.setattr(_libc, "syscall", no_flock)
    base = tmp_path / "T"
    base.mkdir()
    path = run_tmp.make([str(base)])
    try:
        assert os.listdir(base) == [os.path.basename(path)]
        assert run_tmp.sweep(str(base)) == [] and os.path.isdir(path)
    finally:
        run_tmp.release(path)
        os.rmdir(path)
