"""The thin CLI: the `run` fast path agrees with argparse, start-up stays lean, help teaches."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sandboy.cli import parse_run_fast
from sandboy.cli_parser import build_parser

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
TRUE_POLICY = 'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64"]\nexec = ["/usr/bin", "/bin"]\n'


@pytest.fixture
def policy(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(TRUE_POLICY)
    return str(path)


@pytest.mark.parametrize("argv", [
    ["--policy", "p.toml", "--", "make", "test"],
    ["-p", "p.toml", "make", "-j4"],
    ["--policy=p.toml", "--status-json", "s.json", "--", "ls", "--", "-x"],
    ["--policy", "p.toml", "--status-fd", "7", "--cwd", "/src", "--", "true"],
    ["--policy", "p.toml", "--dry-run", "--json"],
    ["--policy", "p.toml", "--tty", "--", "bash", "-i"],
])
def test_fast_path_agrees_with_argparse(argv):
    fast = parse_run_fast(argv)
    ns = build_parser().parse_args(["run", *argv])
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    assert fast is not None
    assert (fast.policy, fast.status_json, fast.status_fd, fast.dry_run, fast.json, fast.cwd, fast.tty, fast.command) == (
        ns.policy, ns.status_json, ns.status_fd, ns.dry_run, ns.json, ns.cwd, ns.tty, command)


@pytest.mark.parametrize("argv", [["--help"], ["--polcy", "x"], ["--policy"], ["--", "true"],
                                  ["--policy", "p", "--status-fd", "x", "true"]])
def test_fast_path_defers_what_it_does_not_know(argv):
    assert parse_run_fast(argv) is None


def _imported_modules(argv) -> set[str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True)
    return {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("path", ["built", "cached plan"])
def test_run_start_up_imports_nothing_heavy(policy, path, tmp_path, monkeypatch):
    """`sandboy run` must not pull in re, tomllib, argparse, json, enum... (docs/performance.md),
    whether it builds the cage or runs a plan an earlier run kept (ADR 0028; the warm-up run has
    the measured run's stdio then, so its entry applies). A cache directory of the test's own:
    an entry an earlier session left for the same policy path would turn "built" into a hit."""
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(tmp_path / "cache"))
    if path == "built":
        subprocess.run([SANDBOY, "run", "--policy", policy, "--", "/bin/true"], check=True)  # warm the parse cache
    else:
        _imported_modules([SANDBOY, "run", "--policy", policy, "--", "/bin/true"])  # keeps the plan
    floor = _imported_modules(["-c", "pass"])
    used = _imported_modules([SANDBOY, "run", "--policy", policy, "--", "/bin/true"]) - floor
    if path == "built":
        assert "sandboy.confine.cage" in used  # the measurement itself works
    else:  # no compiler, no policy loader
        assert "sandboy.confine.plan_cache" in used
        assert not used & {"sandboy.confine.cage", "sandboy.policy.load", "sandboy.confine.seccomp"}, used
    heavy = {"re", "tomllib", "argparse", "json", "enum", "typing", "dataclasses", "subprocess", "signal",
             "inspect", "glob", "shutil", "tempfile", "wasmtime", "jsonschema_rs",
             # shared-object loads the C executor and hand-written code avoid (docs/performance.md)
             "ctypes", "_ctypes", "struct", "_struct", "resource", "zlib"}
    assert used & heavy == set()
    # nothing can be protected without a write root: confine.protected is not needed then
    assert "sandboy.confine.protected" not in used
    # each module costs ≈ 0.1 ms to find and load whatever its size (docs/performance.md,
    # session 4): errno's table for two numbers (seccomp.EPERM/ENOSYS), a module of key tables;
    # the TOML parse on a parse-cache hit, the terminal relay and argparse's parser in exec mode
    # (session 6)
    needless = {"errno", "sandboy.policy.keys", "sandboy.policy.toml_file", "sandboy.confine.relay", "sandboy.cli_parser"}
    assert not used & needless, used & needless


@pytest.mark.parametrize("repository", [False, True], ids=["no repository", "a repository"])
def test_a_write_root_run_from_a_cached_plan_imports_the_git_check_only(tmp_path, monkeypatch, repository):
    """`[fs] write = ["{cwd}"]` from a kept plan (ADR 0028, session 9): the CLI and the "cached
    run" group, the git check's modules, and the hook managers' discovery where a repository is
    there (not the protected paths' module since session 11) — not the judgement, even in a repository, where the run
    left the repository's configs and hooks alone (ADR 0019 session 10: judged by their stats;
    test_gitjudge_loaded has the runs that do load it) — no compiler, no policy loader, none of
    the protected paths' resolution."""
    import time

    from sandboy import bytecode_bundle
    from sandboy.confine import namespaces

    if not namespaces.availability()[0]:
        pytest.skip("no plan kept here (no namespace tier)")
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(tmp_path / "cache"))
    work = tmp_path / "work"
    (work / ".git" / "hooks").mkdir(parents=True) if repository else work.mkdir()
    if repository:
        (work / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        (work / ".git" / "config").write_text("[core]\n\tbare = false\n")
    time.sleep(0.15)  # the root's stats settle (fingerprint.TICK_NS): the first run keeps its plan
    policy = tmp_path / "w.toml"
    policy.write_text(TRUE_POLICY + 'write = ["{cwd}"]\n')
    argv = [sys.executable, "-X", "importtime", SANDBOY, "run", "--policy", str(policy), "--", "/bin/true"]
    for _ in range(4):  # a build (its entry kept), then a hit
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=work, stdin=subprocess.DEVNULL,
                              start_new_session=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        used = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
        if "sandboy.confine.cage" not in used:
            break
    groups = bytecode_bundle.RUN_PATH_GROUPS
    # (a repository at launch: the mode guard of its git files — and no hook managers' discovery
    # where its hooks directory holds no hook, as `git init` makes it: session 13; nor the protected
    # paths' resolution, session 11; the judgement neither there nor outside one, session 10; never
    # the git check's run hook, `gitcheck_hook`; nor the exception classes, session 13)
    # (the is-within rule the checks share: `paths`, not the policy's resolver, session 12)
    expected = {*groups["cli"], *groups["cached run"], *groups["plan cache"], *groups["git check"], *groups["paths"],
                *(groups["mode guard"] if repository else ())}
    assert {name for name in used if name.startswith("sandboy.")} - {"sandboy"} == expected


@pytest.mark.parametrize("kept", ["{tmp}", "egress", "wall_seconds", "processes as root"])
def test_a_policy_the_plan_cache_never_keeps_does_not_import_it(tmp_path, monkeypatch, kept):
    """ADR 0028 session 9: with no entry to compare with, `sandboy run` asks the plan cache only
    once the loaded policy may be kept — a policy it never keeps (`{tmp}` with the namespace tier
    turned off, egress, a deadline: always supervised, never exec mode) imports neither
    `plan_cache` nor `fingerprint`, and no entry is written; a policy it keeps still writes one on
    its first run (the twin)."""
    if kept == "processes as root" and os.geteuid() != 0:
        pytest.skip("an ordinary user's limits.processes is RLIMIT_NPROC: kept")
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(tmp_path / "cache"))
    never = tmp_path / "never.toml"
    never.write_text(TRUE_POLICY + {"{tmp}": '[env]\nset = { HOME = "{tmp}" }\n',
                                    "egress": '[net]\ndomains = ["example.invalid"]\n',
                                    "wall_seconds": "[limits]\nwall_seconds = 60\n",
                                    "processes as root": "[limits]\nprocesses = 64\n"}[kept])
    kept_policy = tmp_path / "kept.toml"
    kept_policy.write_text(TRUE_POLICY)
    # (`{tmp}` under the tier is kept since session 12: test_plan_cache_tmp.py)
    # (a deadline too: held by exec mode's C wait under the tier since session 12, test_plan_cache_deadline.py)
    # (and as root a pids cgroup: made and removed by that wait since session 13, test_exec_pids_cgroup.py)
    never_env = dict(os.environ, SANDBOY_NAMESPACES="0") if kept != "egress" else None
    for path, imports_it in ((never, False), (never, False), (kept_policy, True)):
        proc = subprocess.run([sys.executable, "-X", "importtime", SANDBOY, "run", "--policy", str(path), "--", "/bin/true"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, start_new_session=True,
                              env=never_env if path == never else None)
        assert proc.returncode == 0, proc.stderr[-2000:]
        used = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
        assert "sandboy.confine.cage" in used  # built (the measurement works)
        assert ("sandboy.confine.plan_cache" in used) is imports_it, (path, kept)
        assert ("sandboy.confine.fingerprint" in used) is imports_it
    plans = tmp_path / "cache" / "plans"
    assert len(list(plans.iterdir())) == 1  # the kept policy's entry only


@pytest.mark.parametrize("entry", [False, True], ids=["no entry", "an entry kept before"])
def test_the_plan_cache_turned_off_is_not_imported(tmp_path, monkeypatch, entry):
    """`SANDBOY_PLAN_CACHE=0` (session 10): no entry read or written, and none of the plan cache
    imported either — asking `plan_cache.enabled()` imported it (≈ 0.45 ms of every such run),
    also where an entry kept earlier exists for the run; the twin with the cache on imports it
    and keeps (or reads) the entry."""
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(tmp_path / "cache"))
    policy = tmp_path / "kept.toml"
    policy.write_text(TRUE_POLICY)
    run = [sys.executable, "-X", "importtime", SANDBOY, "run", "--policy", str(policy), "--", "/bin/true"]
    plans = tmp_path / "cache" / "plans"
    if entry:
        subprocess.run(run, capture_output=True, stdin=subprocess.DEVNULL, start_new_session=True, check=True)
        assert len(list(plans.iterdir())) == 1
    before = sorted((p.name, p.stat().st_mtime_ns) for p in plans.iterdir()) if plans.exists() else []
    for off, imports_it in (("0", False), ("1", True)):
        proc = subprocess.run(run, capture_output=True, text=True, stdin=subprocess.DEVNULL, start_new_session=True,
                              env=dict(os.environ, SANDBOY_PLAN_CACHE=off))
        assert proc.returncode == 0, proc.stderr[-2000:]
        used = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
        assert ("sandboy.confine.plan_cache" in used) is imports_it, off
        assert ("sandboy.confine.fingerprint" in used) is imports_it, off
        if not imports_it:
            assert "sandboy.confine.cage" in used  # built (the measurement works)
            after = sorted((p.name, p.stat().st_mtime_ns) for p in plans.iterdir()) if plans.exists() else []
            assert after == before  # nothing written
    assert len(list(plans.iterdir())) == 1


def test_a_run_with_a_terminal_on_stdin_pays_nothing_of_an_entry(tmp_path, monkeypatch):
    """A terminal on fd 0-2 is always relayed by a supervisor (`exec_mode.supervisor_needed`):
    such a run never execs in place, where an entry is made, so the plan cache takes no `Miss` for
    it (no fingerprint, key or code identities: ≈ 0.17 ms of a build here) and writes nothing;
    from /dev/null the same policy is kept (the twin)."""
    import pty

    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(tmp_path / "cache"))
    policy = tmp_path / "kept.toml"
    policy.write_text(TRUE_POLICY)
    ask = ("import sys; from sandboy.confine import plan_keep; "
           "print(plan_keep.Miss.first(sys.argv[1], None, open(sys.argv[1], 'rb').read()) is not None)")
    run = [SANDBOY, "run", "--policy", str(policy), "--", "/bin/true"]
    master, slave = pty.openpty()
    try:
        asked = subprocess.run([sys.executable, "-c", ask, str(policy)], capture_output=True, text=True, stdin=slave,
                               start_new_session=True, timeout=60)
        assert asked.stdout == "False\n", asked.stderr
        for _ in range(2):
            proc = subprocess.run(run, capture_output=True, text=True, stdin=slave, start_new_session=True, timeout=60)
            assert proc.returncode == 0, proc.stderr[-2000:]
    finally:
        os.close(slave)
        os.close(master)
    plans = tmp_path / "cache" / "plans"
    assert not plans.exists() or not list(plans.iterdir())
    asked = subprocess.run([sys.executable, "-c", ask, str(policy)], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, start_new_session=True, timeout=60)
    assert asked.stdout == "True\n", asked.stderr
    proc = subprocess.run(run, capture_output=True, text=True, stdin=subprocess.DEVNULL, start_new_session=True)
    assert proc.returncode == 0 and len(list(plans.iterdir())) == 1, proc.stderr[-2000:]


def test_run_warning_and_error_paths_do_not_import___future__(tmp_path):
    """`from __future__ import annotations` imports the `__future__` module at run time (≈ 0.59 M
    instructions, docs/performance.md session 7): the modules a `sandboy run` may print through
    (`escape`, for a warning or a policy error) or supervise with (`cgroup`) go without it."""
    work = tmp_path / "work"
    work.mkdir()
    warned = tmp_path / "warned.toml"  # a protected path that is not there yet: a launch warning
    warned.write_text(TRUE_POLICY + f'write = ["{work}"]\nprotect = ["{work}/not-yet"]\n')
    missing = tmp_path / "missing.toml"  # a policy error before any parse (a parse imports tomllib, which
    # has __future__ of its own)
    subprocess.run([SANDBOY, "run", "--policy", str(warned), "--", "/bin/true"], stdin=subprocess.DEVNULL,
                   capture_output=True, start_new_session=True)  # warm the parse cache
    for policy, code, said in ((warned, 0, "does not exist"), (missing, 2, "cannot read")):
        argv = [SANDBOY, "run", "--policy", str(policy), "--", "/bin/true"]
        proc = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, start_new_session=True)
        assert proc.returncode == code and said in proc.stderr, proc.stderr[-2000:]
        used = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
        assert "sandboy.escape" in used  # the path under test printed through escape
        assert "__future__" not in used
    import sandboy.confine.cgroup  # noqa: F401 — the pids cgroup of a supervised run as root

    found = subprocess.run([sys.executable, "-c", "import sys, sandboy.confine.cgroup, sandboy.escape; "
                            "print('__future__' in sys.modules)"], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False"


def test_without_write_roots_nothing_is_protected_and_nothing_is_looked_up(tmp_path):
    """protections.protected_paths skips confine.protected for a policy with no write root;
    the real resolver gives the same (empty) answer for the same inputs, even with a protected
    path that exists and the defaults on."""
    from sandboy.confine.protected import resolve_protected
    from sandboy.confine.protections import protected_paths

    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]\n")
    explicit = (str(tmp_path / ".git" / "config"), str(tmp_path / "missing"))
    assert resolve_protected((), explicit, True) == ([], [])
    assert protected_paths((), explicit, True) == ([], [], [])
    # the twin: with the directory as a write root the same path is protected (and no part of
    # Sandboy's own installation lies in a fresh temporary directory)
    assert protected_paths((str(tmp_path),), explicit, True) == (*resolve_protected((str(tmp_path),), explicit, True), [])
    assert str(tmp_path / ".git" / "config") in [*sum(protected_paths((str(tmp_path),), explicit, True)[:2], [])]


def test_policy_error_is_exit_2_with_file_and_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('version = 1\n[net]\nconnect_tcp = ["443"]\n')
    proc = subprocess.run([SANDBOY, "run", "--policy", str(bad), "--", "/bin/true"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert f"{bad}: net.connect_tcp[0]: expected a TCP port" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_command_is_usage_error(policy):
    proc = subprocess.run([SANDBOY, "run", "--policy", policy], capture_output=True, text=True)
    assert proc.returncode == 2 and "no command given" in proc.stderr


@pytest.mark.parametrize("command", [["run"], ["doctor"], ["gate"], ["audit"]])
def test_help_teaches(command):
    proc = subprocess.run([SANDBOY, *command, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "usage: sandboy" in proc.stdout


def test_run_help_lists_exit_codes():
    out = subprocess.run([SANDBOY, "run", "--help"], capture_output=True, text=True).stdout
    assert "125" in out and "examples:" in out


def test_doctor_json_reports_this_kernel():
    proc = subprocess.run([SANDBOY, "doctor", "--json"], capture_output=True, text=True)
    report = json.loads(proc.stdout)
    assert report["landlock_abi"] >= 1
    assert report["protections"]["seccomp_filter"] is True
    assert proc.returncode == (0 if report["cage_available"] else 1)


def test_doctor_says_where_the_plan_cache_is(tmp_path):
    """ADR 0028: the directory `sandboy run` keeps plans in, or that it keeps none."""
    env = dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path))
    env.pop("SANDBOY_NATIVE", None)
    on = json.loads(subprocess.run([SANDBOY, "doctor", "--json"], capture_output=True, text=True, env=env).stdout)
    assert on["plan_cache"] == str(tmp_path / "plans")
    off = subprocess.run([SANDBOY, "doctor"], capture_output=True, text=True, env=dict(env, SANDBOY_PLAN_CACHE="0"))
    assert "plan cache (sandboy run): off (SANDBOY_PLAN_CACHE=0)" in off.stdout


def test_dry_run_json_shows_rules_and_runs_nothing(policy, tmp_path):
    marker = tmp_path / "ran"
    proc = subprocess.run([SANDBOY, "run", "--policy", policy, "--dry-run", "--json", "--", "touch", str(marker)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["enforced"]["seccomp"]["native_arch_only"] is True
    assert any(path == "/usr/bin" for path, _ in report["enforced"]["landlock"]["fs_rules"])
    assert not marker.exists()


def test_dry_run_with_tty_shows_the_cage_a_tty_run_gets(policy):
    """`--dry-run --tty` builds the cage as `--tty` runs it (it built the plain one): under the
    namespace tier the command's /dev then keeps /dev/tty."""

    def report(*extra):
        proc = subprocess.run([SANDBOY, "run", "--policy", policy, "--dry-run", "--json", *extra],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, start_new_session=True)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    plain, tty = report(), report("--tty")
    assert (plain["supervised"], tty["supervised"]) == (False, True)
    dev = (plain["enforced"].get("namespaces") or {}).get("dev")
    if not dev:
        pytest.skip("no namespace tier here: the command's /dev is the host's either way")
    assert "/dev/tty" not in dev
    assert "/dev/tty" in tty["enforced"]["namespaces"]["dev"]


def test_exec_mode_imports_no_supervision(policy):
    """Exec mode (no terminal, nothing that needs a supervisor) imports exec_mode and none of
    the supervision modules (ADR 0020): the split did not lengthen `sandboy run`'s path."""
    subprocess.run([SANDBOY, "run", "--policy", policy, "--", "/bin/true"], check=True, stdin=subprocess.DEVNULL,
                   start_new_session=True)  # warm the parse cache
    proc = subprocess.run([sys.executable, "-X", "importtime", SANDBOY, "run", "--policy", policy, "--", "/bin/true"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, start_new_session=True)
    assert proc.returncode == 0, proc.stderr
    used = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "sandboy.confine.exec_mode" in used
    assert not used & {"sandboy.confine.launch", "sandboy.confine.supervision", "sandboy.confine.supervisor",
                       "sandboy.confine.reaping", "sandboy.confine.result"}, used


def test_supervised_egress_run_imports_only_what_it_uses(tmp_path):
    """`sandboy run` with net.domains under the namespace tier supervises in its own process
    (supervisor.run_here): it imports neither the API module (launch) nor the `fcntl`, `select`
    and `errno` shared objects (the proxy's SIGIO set-up goes through _libc.syscall), and the
    command still runs and still gets its proxy."""
    from sandboy.confine import namespaces

    if not namespaces.availability()[0]:
        pytest.skip("no namespace tier here: a forked supervisor runs the proxy (launch.run)")
    policy = tmp_path / "egress.toml"
    policy.write_text(TRUE_POLICY + '\n[net]\ndomains = ["example.org"]\n')
    argv = [SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c", 'test -n "$http_proxy"']
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, start_new_session=True)  # warm the parse cache
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, start_new_session=True)
    assert proc.returncode == 0, proc.stderr
    used = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert {"sandboy.confine.supervisor", "sandboy.egress.session"} <= used  # the measurement works
    assert not used & {"sandboy.confine.launch", "fcntl", "select", "errno"}, used


@pytest.mark.parametrize("namespaces", ["1", "0"])
def test_exit_without_interpreter_teardown_loses_nothing(policy, tmp_path, namespaces):
    """`sandboy run` leaves with os._exit (interpreter teardown cost 3-4 ms, docs/performance.md):
    the command's status, sandboy's own messages on stderr and the status file must all arrive."""
    env = dict(os.environ, SANDBOY_NAMESPACES=namespaces)
    status = tmp_path / "status.json"
    ran = subprocess.run([SANDBOY, "run", "--policy", str(policy), "--status-json", str(status), "--",
                          "/bin/sh", "-c", "echo out; echo err >&2; exit 7"],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, start_new_session=True)
    assert (ran.returncode, ran.stdout) == (7, "out\n")
    assert "err\n" in ran.stderr
    assert json.loads(status.read_text())["policy"] == str(policy)
    missing = subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", "/bin/no-such-command"],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                             start_new_session=True)
    assert missing.returncode == 127
    assert "/bin/no-such-command: No such file or directory" in missing.stderr
