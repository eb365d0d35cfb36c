"""`sandboy run`'s plan cache keyed with the environment the build READ (ADR 0028, session 12).

An entry was keyed with a digest of the whole environment: OLDPWD after a `cd`, bash's `_`,
SHLVL, a CI's job id, a terminal's WINDOWID each made a miss. Now `sandboy run` records every
lookup of a variable by name (`confine.env_reads.Recording` in `os.environ`'s place) and the
entry is keyed with the values of those names only (absent ones too); any access that sees the
whole environment keys it with all of it, as before. The variables the policy passes are the
command's: a hit takes them from today's environment, as a build would.

Every probe is a real `sandboy run` (test_plan_cache.Runner: `.hit` from `-X importtime`); each
variable the build reads is changed between two runs and the run must miss AND confine as a
build with the cache off does (host side: what was read, refused, written). A recorder of the
test's own, put in `os.environ`'s place before `sandboy` is imported, checks that every name a
whole run reads is in its entry; mutants check that each part of the recording is needed.
"""

import marshal
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_plan_cache import Runner, entry_applies, run_a_mutant  # noqa: E402
from test_plan_cache_write import make_repository, settle  # noqa: E402

from sandboy.confine import env_reads, namespaces  # noqa: E402

pytestmark = pytest.mark.needs_kernel

SHOW = ("/bin/sh", "-c", 'echo "FOO=${FOO-unset}"')


@pytest.fixture
def runner(tmp_path) -> Runner:
    if not namespaces.availability()[0]:
        pytest.skip("the plan cache keeps runs under the namespace tier only")
    return Runner(tmp_path)


def entry_names(runner: Runner):
    """The names the (one) entry is keyed with: a tuple of bytes, or None (all of them)."""
    (entry,) = runner.entries()
    from cachekit import unsealed

    head = marshal.loads(unsealed(entry))
    return head[2]


def cache_off(runner: Runner, *argv, env=None, cwd=None):
    """The same run built with the plan cache off: what a hit or a rebuild must match."""
    return runner.run(*argv, env=dict(env or {}, SANDBOY_PLAN_CACHE="0"), cwd=cwd)


def same(a, b) -> bool:
    return (a.returncode, a.stdout, a.err) == (b.returncode, b.stdout, b.err)


# -- the recorder itself ------------------------------------------------------------------------


def test_a_recording_keeps_each_name_looked_up_and_flags_whole_access():
    real = {"A": "1", "B": "2"}
    rec = env_reads.Recording(real)
    assert rec["A"] == "1" and rec.get("B") == "2" and rec.get("C") is None and "D" not in rec
    with pytest.raises(KeyError):
        rec["E"]
    assert list(rec.names) == ["A", "B", "C", "D", "E"] and not rec.everything
    for whole in (list, len, dict, lambda r: r.copy(), lambda r: list(r.items()), lambda r: list(r.keys()),
                  lambda r: list(r.values()), lambda r: r == {}, repr, lambda r: r._data if hasattr(real, "_data") else r.x,
                  lambda r: r.update(F="3"), lambda r: r.setdefault("G", "4"), lambda r: r.pop("A"),
                  lambda r: r | {}, lambda r: {} | r):
        rec = env_reads.Recording(dict(real))
        try:
            whole(rec)
        except AttributeError:  # (a dict has no `x`: the attribute was asked of the whole anyway)
            pass
        assert rec.everything, whole


def test_os_getenv_expanduser_and_tempfile_go_through_the_recording(monkeypatch, tmp_path):
    import getpass
    import tempfile

    monkeypatch.setenv("HOME", str(tmp_path))
    rec = env_reads.start()
    try:
        os.getenv("SOME_NAME")
        os.path.expanduser("~")
        getpass.getuser()
        saved, tempfile.tempdir = tempfile.tempdir, None
        try:
            tempfile.gettempdir()
        finally:
            tempfile.tempdir = saved
        shutil.which("true")
    finally:
        env_reads.stop(rec)
    assert os.environ is rec.real and type(os.environ) is not env_reads.Recording
    assert {"SOME_NAME", "HOME", "LOGNAME", "TMPDIR", "PATH"} <= set(rec.names) and not rec.everything


# -- unrelated variables: a hit; passed variables: today's values -----------------------------------


def test_an_unrelated_variable_is_a_hit(runner):
    runner.write_policy()
    assert entry_applies(runner, *SHOW).hit
    for unrelated in ({"OLDPWD": "/somewhere"}, {"_": "/usr/bin/ls"}, {"SHLVL": "7"}, {"CI_JOB_ID": "12345"},
                      {"WINDOWID": "4711"}, {"TMPDIR": "/var/tmp"}):
        proc = runner.run(*SHOW, env=unrelated)
        assert proc.hit and proc.returncode == 0, (unrelated, proc.err)
    assert b"OLDPWD" not in entry_names(runner) and b"HOME" in entry_names(runner)


def test_a_passed_variable_reaches_the_command_with_todays_value_on_a_hit(runner):
    """`env.pass` names are the command's: a new value, a name newly present or gone, is passed
    by a hit exactly as a build passes it (compared with a cache-off build); no value is written.
    `pass` holds names, not patterns: "FOO*" passes the variable of that name, never FOOBAR."""
    runner.write_policy(more='[env]\npass = ["FOO", "BAR", "FOO*"]\nset = { BAR = "from-policy" }\n')

    def seen(proc) -> dict:
        return {k: v for k, _, v in (line.partition("=") for line in proc.stdout.splitlines()) if k.startswith(("FOO", "BAR"))}

    assert seen(entry_applies(runner, "/usr/bin/env", env={"FOO": "one"})) == {"FOO": "one", "BAR": "from-policy"}
    for env, expected in (({"FOO": "two"}, {"FOO": "two"}),
                          ({}, {}),  # gone: not passed
                          ({"BAR": "operator"}, {}),  # set wins
                          ({"FOO": "3", "FOOBAR": "x"}, {"FOO": "3"}),  # newly present, not passed
                          ({"FOO": "3", "FOO*": "literal"}, {"FOO": "3", "FOO*": "literal"})):  # newly present, passed
        hit = runner.run("/usr/bin/env", env=env)
        assert hit.hit and seen(hit) == dict(expected, BAR="from-policy"), (env, hit.stdout, hit.err)
        assert same(hit, cache_off(runner, "/usr/bin/env", env=env)), env
    names = entry_names(runner)
    assert not {b"FOO", b"BAR", b"FOO*", b"FOOBAR"} & set(names), names
    data = runner.entries()[0].read_bytes()
    assert b"operator" not in data and b"literal" not in data


# -- each variable the build reads: a miss, and the rebuild's behaviour -----------------------------


def test_home_is_a_key_and_the_rebuild_grants_the_new_home(runner, tmp_path):
    """`{home}` (and the cache directory's default, and the passed HOME): another HOME misses and
    the rebuild grants the new home's files, not the old one's (host side: what cat read)."""
    homes = []
    for name in ("h1", "h2"):
        (tmp_path / name / "data").mkdir(parents=True)
        (tmp_path / name / "data" / "f").write_text(name)
        homes.append(tmp_path / name)
    runner.write_policy(read=', "{home}/data"')
    show = ("/bin/sh", "-c", 'cat "$HOME/data/f"; cat ' + str(homes[0] / "data" / "f"))
    first = entry_applies(runner, *show, env={"HOME": str(homes[0])})
    assert first.hit and first.stdout == "h1h1", first.err
    moved = runner.run(*show, env={"HOME": str(homes[1])})
    assert not moved.hit and moved.stdout == "h2" and "Permission denied" in moved.err, moved.err
    assert same(moved, cache_off(runner, *show, env={"HOME": str(homes[1])}))
    assert runner.run(*show, env={"HOME": str(homes[1])}).hit


def test_a_placeholder_in_env_set_follows_home(runner, tmp_path):
    runner.write_policy(more='[env]\nset = { WHERE = "{home}/x" }\n')
    show = ("/bin/sh", "-c", 'echo "$WHERE"')
    assert entry_applies(runner, *show, env={"HOME": "/h1"}).stdout == "/h1/x\n"
    moved = runner.run(*show, env={"HOME": "/h2"})
    assert not moved.hit and moved.stdout == "/h2/x\n"


def test_the_cache_directory_variables_are_keys_and_the_new_directory_is_denied(runner, tmp_path):
    """XDG_CACHE_HOME (SANDBOY_CACHE_DIR unset): the cache directory the cage is denied. Another
    value misses and the rebuild denies the new one (a granted tree holding both)."""
    del runner.env["SANDBOY_CACHE_DIR"]
    tree = tmp_path / "tree"
    runner.cache = tree / "c1" / "sandboy"
    for name in ("c1", "c2"):
        (tree / name / "sandboy").mkdir(parents=True)
        (tree / name / "sandboy" / "probe").write_text(name)
    runner.write_policy(read=f', "{tree}"')
    show = ("/bin/sh", "-c", f'cat {tree}/c1/sandboy/probe {tree}/c2/sandboy/probe')
    first = entry_applies(runner, *show, env={"XDG_CACHE_HOME": str(tree / "c1")})
    assert first.hit and first.stdout == "c2", first.err  # c1's probe denied
    moved = runner.run(*show, env={"XDG_CACHE_HOME": str(tree / "c2")})
    assert not moved.hit and moved.stdout == "c1", moved.err  # c2's denied now
    assert same(moved, cache_off(runner, *show, env={"XDG_CACHE_HOME": str(tree / "c2")}))


def test_sandboy_namespaces_is_a_key(runner):
    runner.write_policy()
    assert entry_applies(runner, "/bin/sh", "-c", "readlink /proc/self/ns/user").hit
    off = runner.run("/bin/sh", "-c", "readlink /proc/self/ns/user", env={"SANDBOY_NAMESPACES": "0"})
    host = os.readlink("/proc/self/ns/user")
    assert not off.hit and off.stdout.strip() == host  # the fallback: no user namespace, as a build


def test_git_config_global_is_a_key_and_its_hooks_path_is_protected(runner, tmp_path):
    """GIT_CONFIG_GLOBAL (read by the protected paths' resolution and the git check): another
    global config naming a hooks path misses, and the rebuild protects that directory (host side:
    the planted hook is not there) — as a build with the cache off does."""
    runner.write_policy(more='write = ["{cwd}"]\n')
    make_repository(runner.cwd)
    (runner.cwd / "tools" / "hooks").mkdir(parents=True)
    empty, hooked = tmp_path / "empty.gitconfig", tmp_path / "hooked.gitconfig"
    empty.write_text("")
    hooked.write_text(f"[core]\n\thooksPath = {runner.cwd}/tools/hooks\n")
    settle()
    plant = ("/bin/sh", "-c", "echo evil > tools/hooks/pre-commit && echo planted")
    first = runner.run("/bin/true", env={"GIT_CONFIG_GLOBAL": str(empty)})
    settle()
    assert runner.run("/bin/true", env={"GIT_CONFIG_GLOBAL": str(empty)}).hit, first.err
    moved = runner.run(*plant, env={"GIT_CONFIG_GLOBAL": str(hooked)})
    assert not moved.hit and moved.returncode != 0, (moved.stdout, moved.err)
    assert not (runner.cwd / "tools" / "hooks" / "pre-commit").exists()
    assert same(moved, cache_off(runner, *plant, env={"GIT_CONFIG_GLOBAL": str(hooked)}))


def test_path_is_a_key_of_a_write_root_build(runner, tmp_path):
    """PATH (the protected paths: PATH directories, the `sandboy` on PATH's environment — read by
    a build with write roots): another PATH misses and rebuilds as the cache off does."""
    runner.write_policy(more='write = ["{cwd}"]\n')
    settle()
    show = ("/bin/sh", "-c", "echo ok")
    path = runner.env.get("PATH", "/usr/bin:/bin")
    assert entry_applies(runner, *show).hit
    assert b"PATH" in entry_names(runner)
    other = runner.run(*show, env={"PATH": "/usr/local/bin:" + path})
    assert not other.hit and same(other, cache_off(runner, *show, env={"PATH": "/usr/local/bin:" + path}))


def test_tmpdir_is_a_key_of_a_tmp_policy(runner, tmp_path):
    """TMPDIR (read by a build for `{tmp}`: its fixed mount point is `$TMPDIR/sandboy-tmp-EUID`,
    tmp12): another TMPDIR misses, and the command's `{tmp}` and $TMPDIR are at the new place, as
    a build with the cache off gives them (host side: the mount point made there)."""
    runner.write_policy(more='write = ["{tmp}"]\n')
    show = ("/bin/sh", "-c", 'echo "$TMPDIR" && touch "$TMPDIR/x" && echo written')
    places = []
    for name in ("t1", "t2"):
        (tmp_path / name).mkdir()
        places.append(tmp_path / name)
    runner.run(*show, env={"TMPDIR": str(places[0])})  # (makes the mount point: keeps no entry)
    settle()
    first = entry_applies(runner, *show, env={"TMPDIR": str(places[0])})
    assert first.hit and first.stdout.startswith(str(places[0]) + "/") and first.stdout.endswith("written\n"), first.err
    moved = runner.run(*show, env={"TMPDIR": str(places[1])})
    assert not moved.hit and moved.stdout.startswith(str(places[1]) + "/"), (moved.stdout, moved.err)
    assert [p.name for p in places[1].iterdir()] == [moved.stdout.splitlines()[0].rsplit("/", 1)[1]]
    assert same(moved, cache_off(runner, *show, env={"TMPDIR": str(places[1])}))
    assert b"TMPDIR" in entry_names(runner)


# -- the audit: every name a whole run reads is in its entry --------------------------------------

# A recorder of the test's own (not env_reads'), in os.environ's place before `sandboy` is
# imported: each name looked up is appended to a file at once (exec mode leaves by os._exit).
HARNESS = r'''
import os, sys
from _collections_abc import MutableMapping
log = sys.argv.pop(1)
class Seen(MutableMapping):
    def __init__(self, real): self.real = real
    def _note(self, what):
        with open(log, "a") as fh: fh.write(what + "\n")
    def __getitem__(self, k): self._note(str(k)); return self.real[k]
    def get(self, k, d=None): self._note(str(k)); return self.real.get(k, d)
    def __contains__(self, k): self._note(str(k)); return k in self.real
    def __iter__(self): self._note("*ALL*"); return iter(self.real)
    def __len__(self): self._note("*ALL*"); return len(self.real)
    def __setitem__(self, k, v): self._note("*ALL*"); self.real[k] = v
    def __delitem__(self, k): self._note("*ALL*"); del self.real[k]
    def copy(self): self._note("*ALL*"); return self.real.copy()
    @property
    def _data(self): return self.real._data  # (the key's own digest reads it: not the build's)
os.environ = Seen(os.environ)
sys.argv = ["sandboy", *sys.argv[1:]]
from sandboy.cli import entry
entry()
'''


def run_recorded(runner: Runner, log: Path, *argv, env=None) -> set:
    log.unlink(missing_ok=True)
    proc = subprocess.run([sys.executable, "-c", HARNESS, str(log), "run", "--policy", str(runner.policy), "--",
                           *argv], capture_output=True, text=True, stdin=subprocess.DEVNULL, start_new_session=True,
                          env=dict(runner.env, **(env or {})), cwd=runner.cwd)
    assert proc.returncode == 0, proc.stderr
    return set(log.read_text().split())


@pytest.mark.parametrize("kind", ["read-only", "write root, repository", "env.set"])
def test_every_name_a_run_reads_is_in_its_entry(runner, tmp_path, kind):
    more = {"read-only": "", "write root, repository": 'write = ["{cwd}"]\n',
            "env.set": '[env]\nset = { WHERE = "{home}" }\n'}[kind]
    runner.write_policy(more=more + ('' if kind == "env.set" else '[env]\n') + 'pass = ["ONLY_PASSED", "PATH"]\n')
    if kind.startswith("write"):
        make_repository(runner.cwd)
        settle()
    log = tmp_path / "names.log"
    # a first run (no entry), then a miss with an entry (consult's reads too), each recorded whole
    for env in ({"ONLY_PASSED": "1"}, {"ONLY_PASSED": "1", "SANDBOY_NAMESPACES": "1"}):
        read = run_recorded(runner, log, "/bin/true", env=env)
        names = entry_names(runner)
        assert names is not None and "*ALL*" not in read, read
        kept = {name.decode() for name in names}
        assert "ONLY_PASSED" in read  # (the recorder sees the command's variables read)
        # the passed ones are read for the command (today's value on a hit), not for the build
        assert read - {"ONLY_PASSED", "PATH"} <= kept, sorted(read - kept)
        assert "ONLY_PASSED" not in kept
        assert ("PATH" in kept) == kind.startswith("write")  # (a write root's protected paths read it)
        assert {"HOME", "LANG", "LC_ALL", "LC_CTYPE"} <= kept


def test_a_build_that_sees_the_whole_environment_is_keyed_with_all_of_it(runner, tmp_path):
    """A copy of the package whose build iterates os.environ (a future `dict(os.environ)`): its
    entry names nothing, and an unrelated variable then misses, as before session 12."""
    text = "    policy = job.policy\n    # the passed variables"
    run_a_mutant(runner, tmp_path, "protections.py", text, "    len(os.environ)\n" + text)
    runner.write_policy()
    assert entry_applies(runner, "/bin/true").hit
    assert entry_names(runner) is None
    assert not runner.run("/bin/true", env={"OLDPWD": "/elsewhere"}).hit


MUTANTS = {  # file, text, replacement: each must make SANDBOY_NAMESPACES=0 run the kept plan
    "a lookup recorded": ("env_reads.py", "            self.names[name] = None\n", "            pass\n"),
    "the recorded names in the key": ("plan_keep.py", "for name in (*recording.names, *env_reads.READ_AT_START_UP)",
                                      "for name in env_reads.READ_AT_START_UP"),
    "the recording started": ("../cli.py", "        env_reads.start()\n", "        pass\n"),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_each_part_of_the_recording_has_a_probe_that_fails_without_it(runner, tmp_path, mutant):
    """Without the part, a variable the build read changes and the kept plan runs: with
    SANDBOY_NAMESPACES=0 a build takes the fallback (no user namespace: the host's), the stale hit
    the tier's plan (test_sandboy_namespaces_is_a_key). (HOME is no probe here: the interpreter's
    user site, a key of its own since redcage12, lies in it.)"""
    run_a_mutant(runner, tmp_path, *MUTANTS[mutant])
    runner.write_policy()
    show = ("/bin/sh", "-c", "readlink /proc/self/ns/user")
    assert entry_applies(runner, *show).hit
    off = runner.run(*show, env={"SANDBOY_NAMESPACES": "0"})
    host = os.readlink("/proc/self/ns/user")
    if mutant == "the recording started":  # no Recording: keyed with the whole environment (a miss)
        assert not off.hit and off.stdout.strip() == host
    else:
        assert off.hit and off.stdout.strip() != host, (off.stdout, off.err)
