"""`sandboy run`'s plan cache (ADR 0028), from the attacker's side and the operator's.

Every run here is a real `sandboy run` on the real kernel, with its own cache directory
(SANDBOY_CACHE_DIR in the test's temporary directory) and stdio of a shape the cache keeps (stdin
/dev/null, stdout and stderr pipes). Whether a run came from a cached plan is seen from outside:
`-X importtime` lists the modules it imported, and a run from a cached plan imports no compiler
(`sandboy.confine.cage`).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandboy.confine import namespaces
from sandboy.policy.resolve import plan_entry_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: userkit
from userkit import as_user, world_readable_tmp  # noqa: E402

pytestmark = pytest.mark.needs_kernel

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
BASE = 'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc"{read}]\nexec = ["/usr/bin", "/bin"]\n{more}'


@pytest.fixture
def tier():
    if not namespaces.availability()[0]:
        pytest.skip("the plan cache keeps runs under the namespace tier only")


class Runner:
    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.cache = tmp_path / "cache"
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("SANDBOY_NATIVE", "SANDBOY_NAMESPACES", "SANDBOY_PLAN_CACHE")}
        self.env["SANDBOY_CACHE_DIR"] = str(self.cache)
        self.cwd = tmp_path / "work"
        self.cwd.mkdir()
        self.policy = tmp_path / "p.toml"

    def write_policy(self, read: str = "", more: str = "") -> None:
        self.policy.write_text(BASE.format(read=read, more=more))

    def run(self, *argv, env=None, cwd=None, stdin=subprocess.DEVNULL, options=()) -> subprocess.CompletedProcess:
        """A real `sandboy run`; `.hit` says whether it ran a cached plan (no compiler imported)."""
        proc = subprocess.run([sys.executable, "-X", "importtime", SANDBOY, "run", "--policy", str(self.policy),
                               *options, "--", *argv],
                              capture_output=True, text=True, stdin=stdin, start_new_session=True,
                              env=dict(self.env, **(env or {})), cwd=cwd or self.cwd)
        imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                    if line.startswith("import time:")}
        assert "sandboy.cli" in imported, proc.stderr  # the measurement works
        proc.hit = "sandboy.confine.cage" not in imported
        proc.imported = imported
        proc.err = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("import time:"))
        assert "Traceback" not in proc.err, proc.err
        return proc

    def entries(self) -> list[Path]:
        plans = self.cache / "plans"
        return sorted(plans.iterdir()) if plans.is_dir() else []


@pytest.fixture
def runner(tmp_path, tier) -> Runner:
    return Runner(tmp_path)


PROBES = r'''
for what in 'cat /etc/hostname' 'ls /root' 'cat $SECRET' 'touch $PLANT' 'touch $PWD/x' 'id -u' \
            'cat /proc/1/cmdline' 'kill -0 1'; do
  if sh -c "$what" >/dev/null 2>&1; then echo "$what: ok"; else echo "$what: refused"; fi
done
'''


def test_a_cached_plan_confines_as_the_built_cage(runner, tmp_path):
    """The same probes (a granted read, a host directory, a file outside the grants, writes,
    the network, the PID namespace) give the same answers from the built cage and the plan it
    kept; nothing was planted on the host."""
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    plant = tmp_path / "planted"
    runner.write_policy(more='[env]\npass = ["SECRET", "PLANT", "PATH"]\n')
    env = {"SECRET": str(secret), "PLANT": str(plant)}
    built = runner.run("/bin/sh", "-c", PROBES, env=env)
    assert not built.hit and len(runner.entries()) == 1
    cached = runner.run("/bin/sh", "-c", PROBES, env=env)
    assert cached.hit
    assert (cached.returncode, cached.stdout) == (built.returncode, built.stdout)
    assert "cat /etc/hostname: ok" in cached.stdout
    for refused in ("ls /root", "cat $SECRET", "touch $PLANT", "touch $PWD/x"):
        assert f"{refused}: refused" in cached.stdout.splitlines(), (refused, cached.stdout)
    assert not plant.exists() and not (runner.cwd / "x").exists()


def test_the_exit_status_and_a_signal_pass_through_a_cached_plan(runner):
    runner.write_policy()
    runner.run("/bin/true")
    code = runner.run("/bin/sh", "-c", "exit 7")
    assert code.hit and code.returncode == 7
    killed = runner.run("/bin/sh", "-c", "kill -TERM $$")
    assert killed.hit and killed.returncode == -15  # this process ended by the command's signal


def test_a_command_that_cannot_start_is_reported_as_a_build_would(runner):
    """A cached plan whose start fails never explains it: nothing ran, the cage is built and run
    again, and its message and exit code are the built cage's."""
    runner.write_policy()
    runner.run("/bin/true")
    missing = runner.run("no-such-command-anywhere")
    assert missing.returncode == 127 and not missing.hit
    assert missing.err.count("no-such-command-anywhere") == 1, missing.err
    refused = runner.run("/sbin/ldconfig")  # not in fs.exec
    assert refused.returncode == 126 and not refused.hit


def run_a_mutant(runner, tmp_path, relative: str, text: str, replacement: str) -> None:
    """The runner's runs take a copy of the package in which `text` (found once) in the file
    `relative` (to `sandboy/confine/`) reads `replacement`: a check taken out, for its probe."""
    tree = tmp_path / "tree"
    shutil.copytree(Path(namespaces.__file__).parents[2] / "sandboy", tree / "sandboy",
                    ignore=shutil.ignore_patterns("__pycache__"))
    source = tree / "sandboy" / "confine" / relative
    assert source.read_text().count(text) == 1, (relative, text)
    source.write_text(source.read_text().replace(text, replacement))
    runner.env["PYTHONPATH"] = str(tree)


def entry_applies(runner, *argv, **kwargs):
    """Run twice; the second run's (hit, stdout)."""
    runner.run(*argv, **kwargs)
    second = runner.run(*argv, **kwargs)
    return second


def test_a_policy_edit_is_a_miss_and_the_new_rule_holds(runner, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a").write_text("A")
    (data / "b").write_text("B")
    runner.write_policy(read=f', "{data}"')
    assert entry_applies(runner, "/bin/cat", str(data / "b")).stdout == "B"
    runner.write_policy(read=f', "{data}"', more=f'deny = ["{data}/b"]\n')
    after = runner.run("/bin/cat", str(data / "b"))
    assert not after.hit and after.returncode != 0 and "Permission denied" in after.err
    again = runner.run("/bin/cat", str(data / "b"))
    assert again.hit and again.returncode != 0


def test_a_denied_path_made_since_is_a_miss_and_refused(runner, tmp_path):
    """The fingerprint: a deny naming a file that did not exist when the plan was kept. A
    rebuild splits the directory around it; the kept plan granted the whole directory."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "a").write_text("A")
    runner.write_policy(read=f', "{data}"', more=f'deny = ["{data}/secret"]\n')
    first = entry_applies(runner, "/bin/cat", str(data / "a"))
    assert first.hit and first.stdout == "A"
    (data / "secret").write_text("S")
    after = runner.run("/bin/cat", str(data / "secret"))
    assert not after.hit and after.returncode != 0 and after.stdout == ""
    assert runner.run("/bin/cat", str(data / "secret")).stdout == ""


def test_a_file_added_to_a_split_directory_is_a_miss(runner, tmp_path):
    """A directory split around a deny grants its entries one by one: one added since is a
    miss, and the rebuild grants it (a kept plan would refuse it)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "a").write_text("A")
    (data / "secret").write_text("S")
    runner.write_policy(read=f', "{data}"', more=f'deny = ["{data}/secret"]\n')
    assert entry_applies(runner, "/bin/cat", str(data / "a")).hit
    (data / "new").write_text("N")
    after = runner.run("/bin/cat", str(data / "new"))
    assert not after.hit and after.stdout == "N"


def test_the_environment_the_working_directory_and_stdio_are_keys(runner, tmp_path):
    """The variables the build read, the working directory and fd 0-2's shape are keys; a passed
    variable is the command's (today's value on a hit) and an unrelated one no key at all
    (session 12: tests/cage/test_plan_cache_env.py)."""
    runner.write_policy(more='[env]\npass = ["FOO"]\n')
    show = ("/bin/sh", "-c", 'echo "$FOO $PWD"')
    assert entry_applies(runner, *show, env={"FOO": "1"}).stdout == f"1 {runner.cwd}\n"
    changed = runner.run(*show, env={"FOO": "2"})
    assert changed.hit and changed.stdout == f"2 {runner.cwd}\n"
    unrelated = runner.run(*show, env={"FOO": "2", "UNRELATED": "x"})  # not read by the build: no key
    assert unrelated.hit and unrelated.stdout == f"2 {runner.cwd}\n"
    read = runner.run(*show, env={"FOO": "2", "UNRELATED": "x", "SANDBOY_NAMESPACES": "1"})  # read: a key
    assert not read.hit and read.stdout == f"2 {runner.cwd}\n"
    other = tmp_path / "other"
    other.mkdir()
    moved = runner.run(*show, env={"FOO": "2", "UNRELATED": "x"}, cwd=other)
    assert not moved.hit and moved.stdout == f"2 {other}\n"
    assert runner.run(*show, env={"FOO": "2", "UNRELATED": "x"}, cwd=other).hit
    # stdin a pipe instead of /dev/null: the cage puts its own /dev/null only on the latter
    piped = runner.run(*show, env={"FOO": "2", "UNRELATED": "x"}, cwd=other, stdin=subprocess.PIPE)
    assert not piped.hit and piped.returncode == 0
    off = runner.run(*show, env={"FOO": "2", "UNRELATED": "x", "SANDBOY_NAMESPACES": "0"}, cwd=other)
    assert not off.hit  # (the fallback without the tier is never kept)


def test_the_code_that_built_it_is_a_key(runner, tmp_path):
    """A copy of the package: an edit of a compiler the cached run never imports is a miss."""
    tree = tmp_path / "tree"
    shutil.copytree(Path(namespaces.__file__).parents[2] / "sandboy", tree / "sandboy",
                    ignore=shutil.ignore_patterns("__pycache__"))
    runner.env["PYTHONPATH"] = str(tree)
    runner.write_policy()
    assert entry_applies(runner, "/bin/true").hit
    seccomp = tree / "sandboy" / "confine" / "seccomp.py"
    seccomp.write_text(seccomp.read_text() + "\n# edited\n")
    assert not runner.run("/bin/true").hit
    assert runner.run("/bin/true").hit


def test_what_is_never_kept(runner, tmp_path):
    """`{tmp}` without the tier (a write root of it too), the egress proxy,
    --status-json, --dry-run, a regular file on fd 1, SANDBOY_PLAN_CACHE=0: no entry is written.
    (Other write roots are kept: test_plan_cache_write.py; since session 12 `include`, glob denies
    and `{tmp}` under the tier: test_plan_cache_presets.py, test_plan_cache_globs.py,
    test_plan_cache_tmp.py.)"""
    (tmp_path / "w").mkdir()
    for more, env in ((f'write = ["{tmp_path}/w", "{{tmp}}"]\n', {"SANDBOY_NAMESPACES": "0"}),
                      ('write = ["{tmp}"]\n', {"SANDBOY_NAMESPACES": "0"}),
                      ('[net]\ndomains = ["example.org"]\n', None)):
        runner.write_policy(more=more)
        runner.run("/bin/true", env=env)
        assert runner.entries() == [], more
    runner.write_policy()
    runner.run("/bin/true", options=("--status-json", str(tmp_path / "s.json")))
    runner.run("/bin/true", env={"SANDBOY_PLAN_CACHE": "0"})
    with open(tmp_path / "out", "w") as out:
        subprocess.run([SANDBOY, "run", "--policy", str(runner.policy), "--", "/bin/true"], stdout=out,
                       stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=runner.env, cwd=runner.cwd, check=True)
    assert runner.entries() == []
    runner.run("/bin/true")
    assert len(runner.entries()) == 1
    assert not runner.run("/bin/true", env={"SANDBOY_PLAN_CACHE": "0"}).hit


def unpack(entry: Path) -> tuple[list, list]:
    """An entry's (head, body): (FORMAT, key, code, fingerprint) and the plan's part."""
    import marshal

    from cachekit import unsealed

    *head, body = marshal.loads(unsealed(entry))
    return head, list(marshal.loads(body))


def pack(entry: Path, head, body) -> None:
    import marshal

    from cachekit import write_sealed

    write_sealed(entry, marshal.dumps((*head, marshal.dumps(tuple(body)))))


def without_landlock(data: bytes) -> bytes:
    """An entry's body (unsealed) with its plan's landlock_restrict_self step taken out, otherwise
    valid (the key still matches; the seccomp step's position follows): run, it would leave the
    command unconfined by Landlock."""
    import marshal

    *head, body = marshal.loads(data)
    body = list(marshal.loads(body))
    plan = tuple(step for step in body[0] if step[0] != 446)
    body[0], body[1] = plan, tuple(i for i, step in enumerate(plan) if step[0] == 445)
    body[2] = next(i for i, step in enumerate(plan) if step[0] == 317)
    return marshal.dumps((*head, marshal.dumps(tuple(body))))


def forge_without_landlock(entry: Path) -> None:
    """`without_landlock` of the entry, sealed again with this user's key."""
    from cachekit import unsealed, write_sealed

    write_sealed(entry, without_landlock(unsealed(entry)))


def _make_entry(runner) -> Path:
    runner.write_policy()
    assert entry_applies(runner, "/bin/true").hit
    (entry,) = runner.entries()
    return entry


CONFINED = ("/bin/sh", "-c", "ls /root >/dev/null 2>&1 && echo open || echo refused")


@pytest.mark.parametrize("damage", ["foreign owner", "group writable", "world writable", "symlink", "huge",
                                    "truncated", "garbage", "empty", "a directory", "dir group writable",
                                    "another format", "a garbled plan", "a garbled rule", "unsealed, no Landlock",
                                    "another entry's seal"])
def test_a_damaged_entry_is_a_miss_and_the_run_is_confined(runner, damage):
    import marshal

    if damage == "foreign owner" and os.geteuid() != 0:
        pytest.skip("giving a file away needs root")
    entry = _make_entry(runner)
    good = entry.read_bytes()
    if damage == "foreign owner":
        os.chown(entry, 65534, 65534)
    elif damage == "group writable":
        entry.chmod(0o620)
    elif damage == "world writable":
        entry.chmod(0o602)
    elif damage == "symlink":
        target = entry.with_name("elsewhere")
        target.write_bytes(good)
        entry.unlink()
        entry.symlink_to(target.name)
    elif damage == "huge":
        entry.write_bytes(good + bytes(5 << 20))
    elif damage == "truncated":
        entry.write_bytes(good[: len(good) // 2])
    elif damage == "garbage":
        entry.write_bytes(os.urandom(len(good)))
    elif damage == "empty":
        entry.write_bytes(b"")
    elif damage == "a directory":
        entry.unlink()
        entry.mkdir()
    elif damage == "dir group writable":
        entry.parent.chmod(0o770)
    elif damage == "another format":
        from cachekit import unsealed, write_sealed

        write_sealed(entry, marshal.dumps(("another format", *marshal.loads(unsealed(entry))[1:])))
    elif damage == "unsealed, no Landlock":  # ours, 0600, the key matching: what a checkout could ship (ADR 0030)
        from cachekit import unsealed

        forge_without_landlock(entry)
        entry.write_bytes(unsealed(entry))
    elif damage == "another entry's seal":  # the forged entry sealed for another name, copied here
        from cachekit import unsealed
        from sandboy import cache_seal

        forge_without_landlock(entry)
        entry.write_bytes(cache_seal.seal(str(entry.parent), "0" * 16 + ".plan", unsealed(entry)))
    elif damage in ("a garbled plan", "a garbled rule"):  # the key still matches: the executor refuses it
        head, body = unpack(entry)
        if damage == "a garbled plan":
            body[0] = (("not a system call",), *body[0][1:])
        else:
            abi, rules, *rest = body[4]
            body[4] = (abi, (("/usr", "not rights"),), *rest)
        pack(entry, head, body)
    proc = runner.run(*CONFINED)
    assert not proc.hit, damage  # (a garbled plan is read and tried: the executor refuses it, then a build)
    assert (proc.returncode, proc.stdout) == (0, "refused\n"), proc.err


def test_a_forged_plan_in_a_foreign_entry_is_not_run(runner, tmp_path):
    """An entry whose plan does not enforce Landlock, owned by another uid: not run (the mutant of
    the owner check below runs it: the command then lists /root)."""
    if os.geteuid() != 0:
        pytest.skip("giving a file away needs root")
    entry = _make_entry(runner)
    forge_without_landlock(entry)
    os.chown(entry, 65534, 65534)
    proc = runner.run(*CONFINED)
    assert not proc.hit and proc.stdout == "refused\n"


@pytest.mark.parametrize("tier_on", [True, False], ids=["tier", "no tier"])
def test_a_cage_cannot_write_replace_or_plant_the_cache(tmp_path, tier, tier_on):
    """The cache directory inside a write root (a writable $HOME, where it lives by default): a
    caged command cannot write an entry, replace one, plant one where none is, link one in, or
    move the directory away — checked from the host side."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("SANDBOY_NATIVE", "SANDBOY_NAMESPACES", "SANDBOY_PLAN_CACHE", "SANDBOY_CACHE_DIR",
                        "XDG_CACHE_HOME")}
    env["HOME"] = str(home)
    keep = tmp_path / "keep.toml"
    keep.write_text(BASE.format(read="", more=""))
    for _ in range(2):
        subprocess.run([SANDBOY, "run", "--policy", str(keep), "--", "/bin/true"], capture_output=True,
                       stdin=subprocess.DEVNULL, env=env, cwd=tmp_path, check=True)
    plans = home / ".cache" / "sandboy" / "plans"
    (entry,) = plans.iterdir()
    before = (entry.read_bytes(), entry.stat().st_ino)
    attack = tmp_path / "attack.toml"
    attack.write_text(BASE.format(read="", more=f'write = ["{home}"]\n'))
    script = f'''
p={plans}; e={entry}
echo forged > "$e" && echo wrote
echo forged > "$p/planted.plan" && echo planted
ln -s /etc/passwd "$p/linked.plan" && echo linked
mv "$e" "$p/moved" && echo renamed
rm -f "$e" && echo removed
mv {home}/.cache/sandboy {home}/.cache/gone && echo moved-dir
mv {home}/.cache {home}/.cache-gone && echo moved-parent
mkdir -p {home}/x && echo forged > {home}/x/e && mv {home}/x/e "$e" && echo replaced
true
'''
    run_env = dict(env) if tier_on else dict(env, SANDBOY_NAMESPACES="0")
    proc = subprocess.run([SANDBOY, "run", "--policy", str(attack), "--", "/bin/sh", "-c", script],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, env=run_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "", proc.stdout  # every attempt refused
    # (under the tier the attack policy's own run may be kept too, by the host side after the run,
    # where the write root's stats had settled by then: nothing else may be there)
    attacks = {os.path.basename(plan_entry_path(str(attack), str(tmp_path)))} if tier_on else set()
    assert {p.name for p in plans.iterdir()} - attacks == {entry.name}
    assert (entry.read_bytes(), entry.stat().st_ino) == before
    assert (home / ".cache" / "sandboy").is_dir() and not (home / ".cache-gone").exists()


def test_concurrent_runs_never_read_a_half_written_entry(runner):
    """Twelve runs at once, all missing and writing the same entry (rename over it), then twelve
    reading it while six more rewrite it (a changed environment keeps them missing): every run is
    confined and exits 0, and no temporary file is left."""
    runner.write_policy()
    def start(env=None):
        return subprocess.Popen([SANDBOY, "run", "--policy", str(runner.policy), "--", *CONFINED],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                text=True, env=dict(runner.env, **(env or {})), cwd=runner.cwd)
    for batch in ([start() for _ in range(12)],
                  [start() for _ in range(12)] + [start({"X": str(i)}) for i in range(6)]):
        for proc in batch:
            out, err = proc.communicate(timeout=120)
            assert (proc.returncode, out) == (0, "refused\n"), err
            assert "Traceback" not in err
    assert [p.suffix for p in runner.entries()] == [".plan"]
    runner.run(*CONFINED)  # (the last writer may have been one of the other environment's)
    assert runner.run(*CONFINED).hit


KEY_CHECK = r'''
import os, sys
from sandboy.confine import plan_cache, ruleset
policy = sys.argv[1]
sys.path[0] = sys.argv[2]  # where the `sandboy` command imports from first (a key: own_install.first_import_warning)

def applies():
    hit = plan_cache.consult(policy)[0]
    if hit is not None:
        hit.close()
    return hit is not None

real = {"getgroups": os.getgroups, "getegid": os.getegid, "getuid": os.getuid, "uname": os.uname}
out = {"as written": applies()}
for name, fake in (("getgroups", lambda: real["getgroups"]() + [4242]), ("getegid", lambda: 4242),
                   ("getuid", lambda: 4242), ("uname", lambda: tuple(real["uname"]())[:2] + ("9.9.9-other",) + tuple(real["uname"]())[3:])):
    setattr(os, name, fake)
    out[name] = applies()
    setattr(os, name, real[name])
abi = ruleset.abi_version
ruleset.abi_version = lambda: abi() - 1
out["landlock abi"] = applies()
ruleset.abi_version = abi
version, sys.version = sys.version, sys.version + " (another build)"
out["interpreter"] = applies()
sys.version = version
executable, sys.executable = sys.executable, "/usr/bin/python3"
out["interpreter path"] = applies()
sys.executable = executable
out["again"] = applies()
print(out)
'''


def test_ids_the_kernel_and_the_interpreter_are_keys(runner):
    """The key's process-wide inputs, each changed in a process that otherwise matches the run
    that kept the plan (same environment, directory and stdio): groups, gid, uid, the kernel's
    release, its Landlock ABI, the interpreter. (A real other uid or kernel cannot be had in a
    test; the entry and the comparison are real.)"""
    runner.write_policy()
    runner.run("/bin/true")
    proc = subprocess.run([sys.executable, "-c", KEY_CHECK, str(runner.policy), os.path.dirname(SANDBOY)],
                          capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=runner.env, cwd=runner.cwd)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str({"as written": True, "getgroups": False, "getegid": False, "getuid": False,
                                       "uname": False, "landlock abi": False, "interpreter": False,
                                       "interpreter path": False, "again": True})


def test_another_users_run_neither_reads_nor_writes_the_entries(tier):
    """The plans directory is the uid's own (0700): a run as another user with the same cache
    directory setting misses and runs confined (its build cannot make or use the directory).
    In a directory uid 65534 can reach (not pytest's tmp_path: /tmp/pytest-of-root is 0700)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("running as another user needs root and setpriv")
    with world_readable_tmp("sandboy-plan-cache-") as base:
        runner = Runner(base)
        os.chmod(runner.cwd, 0o755)
        runner.write_policy()
        assert entry_applies(runner, "/bin/true").hit
        before = {p.name: p.stat().st_ino for p in runner.entries()}
        proc = subprocess.run(as_user([SANDBOY, "run", "--policy", str(runner.policy), "--", *CONFINED]),
                              capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, env=runner.env, cwd=runner.cwd)
        assert (proc.returncode, proc.stdout) == (0, "refused\n"), proc.stderr
        assert {p.name: p.stat().st_ino for p in runner.entries()} == before


def test_a_file_on_stdin_is_never_run_from_a_kept_plan(runner, tmp_path):
    """The tier reopens a file handed in on fd 0 for the file it is (namespaces.StdioHandoff):
    with an entry kept for /dev/null on stdin, a run reading a file misses, reads it, and keeps
    nothing for it."""
    runner.write_policy(read=f', "{tmp_path}"')
    assert entry_applies(runner, "/bin/cat").hit
    (entry,) = runner.entries()
    kept = entry.stat().st_ino
    data = tmp_path / "input"
    data.write_text("from a file\n")
    with open(data) as stdin:
        proc = runner.run("/bin/cat", stdin=stdin)
    assert not proc.hit and proc.stdout == "from a file\n"
    assert entry.stat().st_ino == kept


# Each check of a hit, taken out of a copy of the package: the probe above that covers it must
# then see the wrong behaviour (else the probe could not fail). (source text, replacement)
MUTANTS = {
    "the key": ("kept_key != key", "False"),
    "the fingerprint": ("not Fingerprint.from_state(fingerprint).unchanged(resolve=False)", "False"),
    "the code": ("not _code_unchanged(code)", "False"),
    # (the cache's one reader, `_libc.read_private`: `_open_entry` is it)
    "the owner": ("st.st_mode & 0o170000 != 0o100000 or st.st_uid != os.geteuid() or", "st.st_mode & 0o170000 != 0o100000 or",
                  "_libc.py"),
}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_each_check_of_a_hit_has_a_probe_that_fails_without_it(runner, tmp_path, mutant):
    text, replacement, *where = MUTANTS[mutant]
    run_a_mutant(runner, tmp_path, where[0] if where else "plan_cache.py", text, replacement)
    data = tmp_path / "data"
    data.mkdir()
    (data / "a").write_text("A")
    if mutant == "the key":  # test_a_policy_edit_is_a_miss_and_the_new_rule_holds (a passed
        # variable's new value no longer shows it: an entry refers to the operator's values by name)
        runner.write_policy(read=f', "{data}"')
        assert entry_applies(runner, "/bin/cat", str(data / "a")).hit
        runner.write_policy(read=f', "{data}"', more=f'deny = ["{data}/a"]\n')
        assert runner.run("/bin/cat", str(data / "a")).stdout == "A"  # the newly denied file read
    elif mutant == "the fingerprint":  # test_a_denied_path_made_since_is_a_miss_and_refused
        runner.write_policy(read=f', "{data}"', more=f'deny = ["{data}/secret"]\n')
        assert entry_applies(runner, "/bin/cat", str(data / "a")).hit
        (data / "secret").write_text("S")
        assert runner.run("/bin/cat", str(data / "secret")).stdout == "S"  # the denied file read
    elif mutant == "the code":  # test_the_code_that_built_it_is_a_key
        runner.write_policy()
        assert entry_applies(runner, "/bin/true").hit
        seccomp = tmp_path / "tree" / "sandboy" / "confine" / "seccomp.py"  # (run_a_mutant's copy)
        seccomp.write_text(seccomp.read_text() + "\n# edited\n")
        assert runner.run("/bin/true").hit  # the old code's plan
    else:  # test_a_forged_plan_in_a_foreign_entry_is_not_run
        if os.geteuid() != 0:
            pytest.skip("giving a file away needs root")
        entry = _make_entry(runner)
        forge_without_landlock(entry)
        os.chown(entry, 65534, 65534)
        assert runner.run(*CONFINED).stdout == "open\n"  # the forged plan ran: no Landlock
