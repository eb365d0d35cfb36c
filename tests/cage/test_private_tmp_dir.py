"""The host directory behind a cage's `{tmp}` (cage.make_private_dir): made where
`tempfile.mkdtemp` would make it, mode 0700, without importing `tempfile` on `sandboy run`'s path
(it brings shutil, random, hashlib and OpenSSL: ≈ 10-15 ms of every `{tmp}` run's start-up)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile

import pytest

from sandboy.confine import cage, namespaces

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")


def _made_in(path: str, base) -> bool:
    return os.path.dirname(path) == os.path.abspath(str(base))


def test_it_is_new_private_and_named_with_the_prefix(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    made = {cage._mkdtemp_without_tempfile() for _ in range(20)}
    assert len(made) == 20
    for path in made:
        st = os.lstat(path)
        assert _made_in(path, tmp_path) and os.path.basename(path).startswith("sandboy-")
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
        assert os.listdir(path) == []


def test_it_goes_where_tempfile_would_in_the_same_order(tmp_path, monkeypatch):
    """$TMPDIR, $TEMP, $TMP, then /tmp...: a place where nothing can be made is passed over, as
    tempfile.gettempdir() passes it over. (This test process has imported tempfile, so the
    function that stands in for it is called directly; the CLI's path is the last test.)"""
    missing, temp, tmp = tmp_path / "missing", tmp_path / "temp", tmp_path / "tmp"
    temp.mkdir()
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(missing))
    monkeypatch.setenv("TEMP", str(temp))
    monkeypatch.setenv("TMP", str(tmp))
    assert tempfile._candidate_tempdir_list()[:3] == [str(missing), str(temp), str(tmp)]  # tempfile's order
    assert _made_in(cage._mkdtemp_without_tempfile(), temp)
    monkeypatch.delenv("TEMP")
    assert _made_in(cage._mkdtemp_without_tempfile(), tmp)
    for name in ("TMPDIR", "TEMP", "TMP"):
        monkeypatch.delenv(name, raising=False)
    assert tempfile._candidate_tempdir_list()[0] == "/tmp"
    made = cage._mkdtemp_without_tempfile()
    os.rmdir(made)
    assert _made_in(made, "/tmp")
    if os.geteuid() != 0:  # root writes through a read-only mode: the twin needs a user
        ro = tmp_path / "read-only"
        ro.mkdir(mode=0o500)
        monkeypatch.setenv("TMPDIR", str(ro))
        monkeypatch.setenv("TMP", str(tmp))
        assert _made_in(cage._mkdtemp_without_tempfile(), tmp)


def test_without_tempfile_loaded_it_is_not_loaded(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "tempfile")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert _made_in(cage.make_private_dir(), tmp_path)
    assert "tempfile" not in sys.modules


def test_a_program_that_set_tempfiles_directory_keeps_it(tmp_path, monkeypatch):
    """Where the caller has imported tempfile (and perhaps set tempfile.tempdir), mkdtemp decides."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", "/tmp")
    assert _made_in(cage.make_private_dir(), tmp_path)


def test_sandboy_run_with_tmp_does_not_import_tempfile(tmp_path):
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64"]\nexec = ["/usr/bin", "/bin"]\n'
                      'write = ["{tmp}"]\n')
    argv = [SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c", 'touch "$TMPDIR/x" && echo "$TMPDIR"']
    subprocess.run(argv, check=True, capture_output=True, stdin=subprocess.DEVNULL, start_new_session=True)  # warm
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, start_new_session=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert os.path.dirname(proc.stdout.strip()) == str(tmp_path)  # the run's {tmp} was made there
    used = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "sandboy.confine.cage" in used  # the measurement works
    # nor the tree remover: under the tier a tmpfs covered {tmp}, so it is removed with one rmdir
    assert not used & {"tempfile", "shutil", "random", "hashlib", "sandboy.confine.cleanup"}, used
    assert left_of_the_run(tmp_path) == ["p.toml"]


def left_of_the_run(tmpdir) -> list:
    """What `sandboy run`s left in `tmpdir` (host side) besides the fixed mount point of the
    namespace tier (`cage.fixed_tmp_dir`: never removed, other runs mount on it), which must be
    empty: a run's own directory is removed after it."""
    fixed = f"sandboy-tmp-{os.geteuid()}"
    left = sorted(os.listdir(tmpdir))
    if fixed in left:
        assert namespaces.availability()[0] and os.listdir(os.path.join(tmpdir, fixed)) == []
        left.remove(fixed)
    return left


def test_no_usable_place_is_a_cage_error(tmp_path, monkeypatch):
    if os.geteuid() == 0:
        pytest.skip("root can make directories in read-only places")
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    for name in ("TMPDIR", "TEMP", "TMP"):
        monkeypatch.setenv(name, str(ro))
    monkeypatch.setattr(cage, "_TMP_DIRS", (str(ro),))
    monkeypatch.chdir(ro)
    with pytest.raises(cage.CageError, match="no usable directory"):
        cage._mkdtemp_without_tempfile()


def test_a_removed_working_directory_is_passed_over(tmp_path):
    """The working directory is the last place (as tempfile's); a process whose working directory
    was removed still gets its {tmp} in $TMPDIR (it raised FileNotFoundError before anything was tried)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    program = ("import os; from sandboy.confine import cage; os.chdir(os.environ['GONE']); "
               "os.rmdir(os.environ['GONE']); print(cage._mkdtemp_without_tempfile())")
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          env={**os.environ, "TMPDIR": str(tmp_path), "GONE": str(gone)})
    assert proc.returncode == 0, proc.stderr
    assert _made_in(proc.stdout.strip(), tmp_path)


@pytest.mark.parametrize("tier", ["1", "0"])
def test_a_run_refused_at_launch_removes_its_tmp(tmp_path, tier):
    """The git check's launch refusal (a write root beyond its walk bound: 125) comes after the
    cage, and its {tmp} host directory, was made: the refused run left it in $TMPDIR."""
    home, tmpdir = tmp_path / "home", tmp_path / "T"
    tmpdir.mkdir()
    for i in range(300):
        (home / f"d{i}" / "sub").mkdir(parents=True)
    policy = tmp_path / "p.toml"
    policy.write_text(f'version = 1\n[fs]\nread = ["/"]\nexec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]\n'
                      f'write = ["{home}", "{{tmp}}"]\n')
    code = ("import sys\nimport sandboy.confine.gitcheck as g\ng.WALK_BUDGET = 500\n"  # a stand-in for a whole home
            "from sandboy.cli import finish, main\nsys.exit(finish(main, sys.argv[1:]))\n")
    env = {**os.environ, "TMPDIR": str(tmpdir), "SANDBOY_NAMESPACES": tier, "SANDBOY_CACHE_DIR": str(tmp_path / "c")}
    proc = subprocess.run([sys.executable, "-c", code, "run", "--policy", str(policy), "--", "/bin/true"],
                          capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 125 and "more than 500 entries" in proc.stderr, proc.stderr
    assert left_of_the_run(tmpdir) == []


@pytest.mark.parametrize("tier", ["1", "0"])
@pytest.mark.parametrize("token", ["{home}", "{cwd}"])
def test_a_tmpdir_spelled_with_a_placeholder_stays_literal(tmp_path, tier, token):
    """$TMPDIR = '.../{home}': the {tmp} made in it holds the text '{home}', which must not be
    expanded again into a grant on the home (or the working directory); the run writes only in
    its own {tmp} (the twin), which is removed afterwards."""
    base, home, work = tmp_path / token, tmp_path / "home", tmp_path / "work"
    for d in (base, home, work):
        d.mkdir()
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin"]\n'
                      'exec = ["/usr", "/bin"]\nwrite = ["{tmp}"]\n')
    script = 'touch "$TMPDIR/mine" && echo "$TMPDIR"; touch "$0/home-file" "$1/work-file" 2>/dev/null; exit 0'
    env = {**os.environ, "TMPDIR": str(base), "HOME": str(home), "SANDBOY_NAMESPACES": tier,
           "SANDBOY_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c", script, str(home), str(work)],
                          capture_output=True, text=True, cwd=work, env=env, stdin=subprocess.DEVNULL, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert os.path.dirname(proc.stdout.strip()) == str(base)  # made there, the text kept
    assert os.listdir(home) == [] and os.listdir(work) == []  # host side: no grant on either
    assert left_of_the_run(base) == []  # and removed after the run (or the tier's empty mount point)


def test_no_usable_place_is_a_cage_error_even_as_root(tmp_path):
    """The twin of the test above that runs as root too: every place missing (the working
    directory removed) — a CageError naming them, not an OSError from deep inside."""
    gone, missing = tmp_path / "gone", tmp_path / "missing"
    gone.mkdir()
    program = ("import os; from sandboy.confine import cage\n"
               "cage._TMP_DIRS = (os.environ['MISSING'],)\n"
               "os.chdir(os.environ['GONE']); os.rmdir(os.environ['GONE'])\n"
               "try:\n    cage._mkdtemp_without_tempfile()\n"
               "except cage.CageError as exc:\n    print('refused:', exc)\n")
    env = {**os.environ, "TMPDIR": str(missing), "TEMP": str(missing), "TMP": str(missing),
           "GONE": str(gone), "MISSING": str(missing)}
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("refused: no usable directory for the cage's {tmp}"), proc.stdout
    assert not missing.exists()
