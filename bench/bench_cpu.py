#!/usr/bin/env python3
"""CPU time of `sandboy run`, the API and the gate, against the baselines of the wall-clock
benchmarks (bench_run.py, bench_gate.py), measured in the same run.

CPU time here is the task-clock of a process and of all its descendants (`perf stat`;
without perf, `getrusage(RUSAGE_CHILDREN)`, which misses what bwrap's unwaited child does). On this project's shared 2-core machines
wall-clock ratios move by ±0.2 between runs when other test suites run; CPU time counts the work
done, not the wait for a core, so its ratios hold under load. It does not replace the wall-clock
targets (a run also waits for the kernel, e.g. RCU grace periods at namespace teardown); it says
where the work went.

    .venv/bin/python bench/bench_cpu.py [--rounds N] [--before SRC] [--only cli|gate|api]

--before SRC: also measure the `sandboy` package under SRC (a directory holding `sandboy/`:
e.g. `git archive REV src | tar -x -C /tmp/before`, then `python setup.py build_ext --inplace`,
`python -m compileall -q src` and, for a tree that has one, the run path's byte-code bundle
(`PYTHONPATH=src python -c 'import sandboy.bytecode_bundle as b; b.build("src/sandboy")'`, what
`make compile` does: ADR 0023) in it), interleaved with this tree, for a before/after.

Cases (medians of N rounds):
  floor        python -c pass (same venv)
  run CLI      sandboy run --policy P -- /bin/true                 (/ floor): from its cached plan
               (ADR 0028: the warm-up run keeps it), in another environment (an unrelated
               variable changed each run: a miss before session 12, a hit since — the key holds
               the variables the build read), as a plan cache miss (a variable the build reads,
               SANDBOY_NAMESPACES, another value each run, "0" never: the key differs, the cage
               is built, the entry written),
               as a policy's first run (no entry under its name; the parts kept by earlier runs stay:
               plan-pieces/, ADR 0028 session 10), as the first run of all (those pieces gone too),
               with the cache turned off
               (SANDBOY_PLAN_CACHE=0), and with stdout on a regular file (a run never kept)
  {tmp}        `sandboy run` with `[fs] write = ["{tmp}"]` added to the same policy, steady (a
               $TMPDIR of its own): under the tier a kept plan since session 12
  write root   `sandboy run` with `[fs] write = ["{cwd}"]` (an agent editing its repository: the
               protected paths and the post-run git check come with it), run in a git repository
               and in a directory outside one: from its cached plan and as a miss (as above); and
               from its cached plan in a committed repository of 10,000 files in 1,000 directories
               (a checkout's shape: half of them hold subdirectories; the git check walks it twice)
  example      the README's policy (policy.example.toml, copied into the project, run from there
               as the README does: `include = ["system", "python"]`, `write = [".", "{tmp}"]`, a
               glob deny, `[net]`) in a small committed project, and in one that also holds a
               `.venv` of 3,000 more files (a real `python -m venv` with a site-packages tree:
               the python preset reads it, the git check walks it under the write root "."), each
               in steady state (its Nth run) and as its first run (the plans removed after each
               run, the cache directory's other parts kept); and `include = ["system", "python"]`
               alone (no write root), from the small project: steady and first run. Each tree its
               own cache directory per case (SANDBOY_CACHE_DIR), so nothing else reaches them;
               and the README's policy without `{tmp}`, the glob deny and the supervised limits
               (EXAMPLE_KEPT_EDITS: what a kept presets plan runs since session 12), in both projects;
               and the same with its glob deny (kept since session 12: EXAMPLE_GLOB_EDITS), in both
               projects, and as `**/*.pem` in the .venv project (the glob walks every directory there);
               the README's policy again as an ordinary user (uid 65534, setpriv; over its own floor,
               `python -c pass` as that user): as root its `processes` limit needs a supervisor, so
               the root rows never run a kept plan of it (`user_projects`)
  bwrap        bwrap --unshare-all --ro-bind / / /bin/true
  API          per sandboy.run(["/bin/true"], policy) in a loop of 20, from a process with no
               extra heap and with 100 MB more (the tier's clone used to copy the caller)
  gate         per step of `true` in a 100-step gate (its start-up included), over plain
               `bash -lc true`, vs isolated bwrap
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
POLICY = 'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc"]\nexec = ["/usr/bin", "/bin"]\n'
API_LOOP = """
import os, sys
ballast = [bytearray(1000) for _ in range(int(sys.argv[2]) * 1024)]  # MB of heap, touched
import sandboy
policy = sandboy.Policy.load(sys.argv[1])
null = os.open(os.devnull, os.O_RDWR)
for _ in range(int(sys.argv[3])):
    assert sandboy.run(["/bin/true"], policy, stdin=null, stdout=null, stderr=null).ok
"""
API_RUNS = 20
GATE_STEPS = 100
BIG_REPO = "(10k repo)"
GIT_ENV = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.org", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@example.org", "GIT_CONFIG_NOSYSTEM": "1"}


def commit_all(root: str, message: str) -> None:
    """`root` made a git repository holding every file in it, committed (GIT_ENV's author)."""
    env = {**os.environ, **GIT_ENV}
    subprocess.run(["git", "init", "-q", root], check=True, env=env)
    subprocess.run(["git", "-C", root, "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", root, "commit", "-qm", message], check=True, env=env)


def make_checkout(root: str, dirs: int = 1_000, files_per_dir: int = 10) -> None:
    """A committed git repository of `dirs` directories holding `files_per_dir` small files each,
    shaped like a checkout: directory i lies in directory (i - 1) // 2, so half of them hold
    subdirectories besides their files (the post-run git check lists those and looks up `.git` and
    `HEAD` in the others, ADR 0019)."""
    paths = [root]
    for i in range(1, dirs):
        paths.append(os.path.join(paths[(i - 1) // 2], f"d{i}"))
    for i, path in enumerate(paths):
        os.makedirs(path, exist_ok=True)
        for j in range(files_per_dir):
            with open(os.path.join(path, f"f{j}.txt"), "w") as fh:
                fh.write(f"{i} {j}\n")
    commit_all(root, "tree")


VENV_PACKAGES, VENV_DIRS, VENV_FILES = 30, 10, 10  # 3,000 files in 330 directories of site-packages
EXAMPLE_POLICY = os.path.join(os.path.dirname(HERE), "policy.example.toml")
PRESETS_POLICY = 'version = 1\ninclude = ["system", "python"]\n'
# The README's policy without `{tmp}`, the glob deny and what makes every run supervised
# (wall_seconds; processes as root): the presets, the write root ".", `.env` denied, [net], the
# limits that need no supervisor — the first README-shaped plan the cache kept (session 12,
# presets12). `{tmp}` and the glob deny are kept since (tmp12, glob12): these rows, measured
# before them, show what each costs beside the whole README policy's rows
EXAMPLE_KEPT_EDITS = (('write = [".", "{tmp}"]', 'write = ["."]'), ('deny  = [".env", "*.pem"]', 'deny  = [".env"]'),
                      (', HOME = "{tmp}"', ""), ("wall_seconds  = 600", "wall_seconds  = 0"),
                      ("processes     = 512", "processes     = 0"))


# The same with the glob deny kept (ADR 0028 session 12, glob12): `*.pem` as written, and as
# `**/*.pem` (the walk then looks into every directory of the project, its .venv's included)
EXAMPLE_GLOB_EDITS = tuple(edit for edit in EXAMPLE_KEPT_EDITS if not edit[0].startswith("deny"))
EXAMPLE_ALL_PEM_EDITS = (*EXAMPLE_GLOB_EDITS, ('"*.pem"]', '"**/*.pem"]'))


def example_kept_policy(edits=EXAMPLE_KEPT_EDITS) -> str:
    with open(EXAMPLE_POLICY) as fh:
        text = fh.read()
    for old, new in edits:
        assert text.count(old) == 1, f"policy.example.toml changed: {old!r} (bench/bench_cpu.py EXAMPLE_KEPT_EDITS)"
        text = text.replace(old, new)
    return text


def make_project(root: str, venv_files: bool) -> None:
    """A small committed project holding the README's policy (policy.example.toml) and a
    presets-only one (presets.toml); with `venv_files`, also a `.venv` (a real `python -m venv
    --without-pip`: pyvenv.cfg and bin/python3, which the python preset reads) whose site-packages
    holds VENV_PACKAGES x VENV_DIRS x VENV_FILES small modules, ignored by git as a project's is."""
    for rel, text in (("README.md", "# a project\n"), ("src/app/__init__.py", ""),
                      ("src/app/main.py", "def main():\n    return 0\n"),
                      ("tests/test_main.py", "from app.main import main\n\ndef test_main():\n    assert main() == 0\n"),
                      (".gitignore", ".venv/\n"), ("presets.toml", PRESETS_POLICY),
                      ("example-kept.toml", example_kept_policy()),
                      ("example-globs.toml", example_kept_policy(EXAMPLE_GLOB_EDITS)),
                      ("example-all-pem.toml", example_kept_policy(EXAMPLE_ALL_PEM_EDITS))):
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "w") as fh:
            fh.write(text)
    shutil.copyfile(EXAMPLE_POLICY, os.path.join(root, "policy.example.toml"))
    if venv_files:
        venv = os.path.join(root, ".venv")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
        site = os.path.join(venv, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")
        for p in range(VENV_PACKAGES):
            for d in range(VENV_DIRS):
                package = os.path.join(site, f"pkg{p}", f"sub{d}")
                os.makedirs(package)
                for f in range(VENV_FILES):
                    with open(os.path.join(package, f"mod{f}.py"), "w") as fh:
                        fh.write(f"VALUE = {p * 100 + d * 10 + f}\n")
    commit_all(root, "project")


# The README's example as an ordinary user (uid 65534, as the tests drop to it: tests/userkit.py):
# as root its `processes` limit is a pids cgroup, which a supervisor holds (pids13), so the root
# rows above never measure a kept plan of it; as a user it is RLIMIT_NPROC, and the plan is kept.
# The user runs this tree's interpreter and sources (world-readable here: the bench checks) in
# copies of the projects it owns, with a home and a $TMPDIR of its own ({tmp}, HOME = "{tmp}").
USER_UID = 65534
AS_USER = " as uid 65534"


def as_user() -> list:
    return ["setpriv", f"--reuid={USER_UID}", f"--regid={USER_UID}", "--clear-groups", "--inh-caps=-all"]


def user_env(env: dict, home: str) -> dict:
    return dict(env, HOME=home, TMPDIR=os.path.join(home, "tmp"))


def user_projects(base: str, projects: dict) -> tuple:
    """(the user's home, {case name as the user: (its copy of the project, policy)}) for the README
    example's rows of `projects`, or None where this process cannot become USER_UID (not root, no
    setpriv) or that user cannot run this interpreter with Sandboy's sources."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return None
    probe = subprocess.run([*as_user(), sys.executable, "-P", "-c", "import sandboy"], env=with_src(SRC),
                           cwd="/", capture_output=True)
    if probe.returncode != 0:
        print(f"(no rows as uid {USER_UID}: it cannot import sandboy from {SRC} with {sys.executable})")
        return None
    os.chmod(base, 0o755)  # (TemporaryDirectory's is 0700: the user reaches its own parts only)
    home = os.path.join(base, "user-home")
    os.makedirs(os.path.join(home, "tmp"))
    copies = {}
    for name, (cwd, policy) in projects.items():
        if policy != "policy.example.toml":
            continue
        copy = os.path.join(base, "user-" + os.path.basename(cwd))
        if not os.path.isdir(copy):
            shutil.copytree(cwd, copy, symlinks=True)
        copies[name + AS_USER] = (copy, policy)
    subprocess.run(["chown", "-R", f"{USER_UID}:{USER_UID}", home, *{c for c, _ in copies.values()}], check=True)
    return home, copies


FIXED_CLI_CASES = ("run CLI", "run CLI, another environment", "run CLI, plan cache miss", "run CLI, first run",
                   "run CLI, first of all", "run CLI, cache off", "run CLI, stdout a file")
PERF = shutil.which("perf")


def cpu_of(argv, env=None, cwd=None, stdout=subprocess.DEVNULL) -> float:
    """Seconds of CPU (user + system) that `argv` and all its descendants used: `perf stat`'s
    task-clock, which counts every descendant (bwrap's monitor does not wait for its child, so
    getrusage(RUSAGE_CHILDREN), the fallback without perf, misses bwrap's sandboxed work)."""
    if PERF:
        fd, out = tempfile.mkstemp(prefix="sandboy-bench-perf-")
        os.close(fd)
        argv = [PERF, "stat", "-x", ",", "-e", "task-clock", "-o", out, "--", *argv]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=stdout,
                          stderr=subprocess.PIPE, start_new_session=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed ({proc.returncode}): {' '.join(argv)}\n"
                         + proc.stderr.decode(errors="replace")[-2000:])
    if not PERF:
        return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    try:
        with open(out) as fh:
            for line in fh:
                fields = line.split(",")
                if len(fields) > 2 and fields[2].startswith("task-clock"):
                    return float(fields[0]) / 1000  # msec
    finally:
        os.unlink(out)
    raise SystemExit(f"perf stat printed no task-clock for {' '.join(argv)}")


def with_src(src: str) -> dict:
    return dict(os.environ, PYTHONPATH=src)


def project_cases(label: str, env: dict, home: str, projects: dict, prefix=()) -> dict:
    """The README's policy and the presets alone, run from their project directory as an agent
    does (`sandboy run --policy policy.example.toml -- /bin/true`), steady and as a first run:
    `projects` is {case name: (directory, policy file name in it)}; `prefix`: put before the
    interpreter (`as_user`: the run as an ordinary user, `home` and the projects then its own)."""
    tag = label.strip(" ()").replace(" ", "-") or "this"
    cases = {}
    for name, (cwd, policy) in projects.items():
        # -P: as for the write roots (`python -c` would import from the working directory first)
        argv = [*prefix, sys.executable, "-P", "-c", "from sandboy.cli import entry; entry()", "run", "--policy",
                policy, "--", "/bin/true"]
        slug = "".join(c if c.isalnum() else "-" for c in name)
        steady = os.path.join(home, f"cache-{slug}-{tag}")
        first = os.path.join(home, f"cache-{slug}-first-{tag}")

        def first_run(argv=argv, cwd=cwd, first=first):
            # the policy's first run here: its entry removed after each run, the rest of the
            # cache directory (the seccomp pieces, the policy's parse) kept, as first_run below
            try:
                return cpu_of(argv, dict(env, SANDBOY_CACHE_DIR=first), cwd)
            finally:
                plans = os.path.join(first, "plans")
                for entry in os.listdir(plans) if os.path.isdir(plans) else ():
                    os.unlink(os.path.join(plans, entry))

        cases[f"run CLI, {name}{label}"] = lambda argv=argv, cwd=cwd, steady=steady: cpu_of(
            argv, dict(env, SANDBOY_CACHE_DIR=steady), cwd)
        cases[f"run CLI, {name}, first run{label}"] = first_run
    return cases


def cases_for(label: str, src: str, policy: str, repo: str, home: str, write_dirs=None, projects=None,
              user=None) -> dict:
    """`user`: (its home, {case name: (project, policy)}) for the rows run as USER_UID, or None."""
    env = with_src(src)
    py = sys.executable

    def api(mb):
        # the loop's CPU minus the same process making no run: the runs alone, per run
        return lambda: (cpu_of([py, "-c", API_LOOP, policy, str(mb), str(API_RUNS)], env)
                        - cpu_of([py, "-c", API_LOOP, policy, str(mb), "0"], env)) / API_RUNS

    # each tree its own policy file (the same text): the entry's name is of the policy's path, so
    # two trees with a plan cache would otherwise replace each other's entry (every "hit" a miss)
    tag = label.strip(" ()").replace(" ", "-")
    if tag:
        shutil.copyfile(policy, policy[:-len(".toml")] + f"-{tag}.toml")
        policy = policy[:-len(".toml")] + f"-{tag}.toml"
    run_cli = [py, "-c", "from sandboy.cli import entry; entry()", "run", "--policy", policy, "--", "/bin/true"]
    # the misses keep their own entry (another policy file of the same text: another entry name),
    # so they never overwrite the one the hits read
    miss_policy = policy[:-len(".toml")] + "-miss.toml"
    shutil.copyfile(policy, miss_policy)
    run_miss = [*run_cli[:5], miss_policy, *run_cli[6:]]
    other_policy = policy[:-len(".toml")] + "-other.toml"  # (its own entry too: a miss rewrites it)
    shutil.copyfile(policy, other_policy)
    run_other = [*run_cli[:5], other_policy, *run_cli[6:]]
    misses = iter(range(1 << 30))
    first = os.path.join(home, f"first-{tag}")

    # (the first runs' cache directories are inside `base`: removed with it)
    shutil.copyfile(policy, first + ".toml")

    def first_run(cache="-cache", folders=("plans",)):
        # no entry for this run yet (a policy's first run, or the first in this directory): its
        # entry removed after each run (the plans directory, the pieces earlier runs kept and the
        # policy's parse stay); "plan-pieces" in `folders`: nothing kept but the parse (a cache
        # directory of its own, so that the other first runs keep theirs)
        try:
            return cpu_of([*run_cli[:5], first + ".toml", *run_cli[6:]], dict(env, SANDBOY_CACHE_DIR=first + cache))
        finally:
            for folder in folders:
                plans = os.path.join(first + cache, folder)
                for name in os.listdir(plans) if os.path.isdir(plans) else ():
                    os.unlink(os.path.join(plans, name))

    # `[fs] write = ["{tmp}"]` beside the same policy (ADR 0028 session 12: kept under the tier, its
    # {tmp} the fixed mount point; before, built at every run), with a $TMPDIR of its own per tree
    tmp_policy, tmpdir = policy[:-len(".toml")] + "-tmp.toml", os.path.join(home, f"tmpdir-{tag or 'this'}")
    with open(policy) as src_fh, open(tmp_policy, "w") as fh:
        fh.write(src_fh.read() + 'write = ["{tmp}"]\n')
    os.makedirs(tmpdir, exist_ok=True)
    run_tmp = [*run_cli[:5], tmp_policy, *run_cli[6:]]

    def to_a_file():
        # stdout on a regular file: a run the plan cache never keeps (the init reopens or relays it)
        with open(first + ".out", "wb") as out:
            return cpu_of(run_cli, env, stdout=out)

    write_cases = {}
    for where, (write_policy, cwd) in (write_dirs or {}).items():
        # `[fs] write = ["{cwd}"]`, the policy an agent that edits its repository uses: the
        # protected paths (ADR 0013) and the post-run git check (ADR 0019) come with it; each
        # tree its own policy files (see `tag`), hits and misses their own
        own = write_policy[:-len(".toml")] + (f"-{tag}" if tag else "")
        if tag:
            shutil.copyfile(write_policy, own + ".toml")
        shutil.copyfile(write_policy, own + "-miss.toml")
        # -P: `python -c` run in the write root would import from it first, which the build warns
        # about (own_install.first_import_warning: printed each run); the `sandboy` command's
        # sys.path[0] is its bin directory
        argv = [py, "-P", *run_cli[1:5], own + ".toml", *run_cli[6:]]
        argv_miss = [py, "-P", *run_cli[1:5], own + "-miss.toml", *run_cli[6:]]
        write_cases[f"run CLI, write root {where}{label}"] = lambda argv=argv, cwd=cwd: cpu_of(argv, env, cwd)
        if where != BIG_REPO:  # (a hit only there: the tree's walks are the question, not the build)
            write_cases[f"run CLI, write root {where}, miss{label}"] = (
                lambda argv=argv_miss, cwd=cwd: cpu_of(argv, dict(env, SANDBOY_NAMESPACES=str(next(misses) + 1)), cwd))
    return {
        f"run CLI{label}": lambda: cpu_of(run_cli, env),
        # ADR 0028: another value of a variable the build reads each time (SANDBOY_NAMESPACES:
        # any value but "0" keeps the namespace tier), so the plan cache misses, builds and
        # writes its entry (a tree without the cache simply builds)
        f"run CLI, plan cache miss{label}": lambda: cpu_of(run_miss, dict(env, SANDBOY_NAMESPACES=str(next(misses) + 1))),
        # an unrelated variable changed each time (OLDPWD after a `cd`, a CI's job id): a miss
        # while the whole environment was the key, a hit since session 12 (ADR 0028)
        f"run CLI, another environment{label}": lambda: cpu_of(run_other, dict(env, SANDBOY_BENCH_OTHER=str(next(misses)))),
        f"run CLI, first run{label}": first_run,
        f"run CLI, first of all{label}": lambda: first_run("-all-cache", ("plans", "plan-pieces")),
        f"run CLI, cache off{label}": lambda: cpu_of(run_cli, dict(env, SANDBOY_PLAN_CACHE="0")),
        f"run CLI, stdout a file{label}": to_a_file,
        f"run CLI, write {{tmp}}{label}": lambda: cpu_of(run_tmp, dict(env, TMPDIR=tmpdir)),
        **write_cases,
        **project_cases(label, env, home, projects or {}),
        **({} if user is None else project_cases(label, user_env(env, user[0]), user[0], user[1], as_user())),
        f"API, small caller{label}": api(0),
        f"API, caller +100 MB{label}": api(100),
        f"gate, per step{label}": lambda: cpu_of([py, "-m", "sandboy.gate.cli", repo, "--json",
                                                  os.path.join(home, "report.json")], dict(env, HOME=home)) / GATE_STEPS,
    }


def before_labels(trees: list) -> list:
    """(label, absolute path) of each --before tree: " (before)" for one, " (before N)" for more."""
    if len(trees) == 1:
        return [(" (before)", os.path.abspath(trees[0]))]
    return [(f" (before {i})", os.path.abspath(src)) for i, src in enumerate(trees, 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--before", metavar="SRC", action="append", default=[],
                        help="a `sandboy` source tree to compare with (see --help); may be given twice or more")
    parser.add_argument("--only", choices=("cli", "gate", "api"),
                        help="cli: only the floor and `sandboy run` (no API, gate, bwrap); "
                             "gate: only plain bash, isolated bwrap and the gate; "
                             "api: only bwrap --unshare-all and the API")
    parser.add_argument("--match", metavar="TEXT", action="append", default=[],
                        help="only the `sandboy run` cases whose name holds TEXT (=TEXT: whose name is TEXT, "
                             "the tree's label aside), and the floors; may be repeated")
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    bwrap = shutil.which("bwrap") if args.only != "cli" else None
    with tempfile.TemporaryDirectory(prefix="sandboy-bench-cpu-") as base:
        policy = os.path.join(base, "bench.toml")
        with open(policy, "w") as fh:
            fh.write(POLICY)
        repo = os.path.join(base, "repo")
        os.makedirs(os.path.join(repo, ".007"))
        with open(os.path.join(repo, ".007", "gate.toml"), "w") as fh:
            fh.write("".join(f'[[step]]\nname = "s{i}"\nrun = "true"\n' for i in range(GATE_STEPS)))
        home = os.path.join(base, "home")
        os.mkdir(home)
        write_dirs, projects = {}, {}
        if args.only not in ("gate", "api"):  # (the API and the gate need no write roots)
            # a write root of the working directory, in a git repository and outside one
            write_policy = os.path.join(base, "write.toml")
            with open(write_policy, "w") as fh:
                fh.write(POLICY + 'write = ["{cwd}"]\n')
            for where, git in (("(git repo)", True), ("(no repo)", False), (BIG_REPO, None)):
                work = os.path.join(base, {True: "work-repo", False: "work-plain", None: "work-big"}[git])
                if git is None:
                    make_checkout(work)
                else:
                    os.mkdir(work)
                    with open(os.path.join(work, "README"), "w") as fh:
                        fh.write("a file\n")
                if git:
                    subprocess.run(["git", "init", "-q", work], check=True)
                # one policy file per directory: each its own plan cache entries
                own = write_policy[:-len(".toml")] + {True: "-repo", False: "-plain", None: "-big"}[git] + ".toml"
                shutil.copyfile(write_policy, own)
                write_dirs[where] = (own, work)
            small, venv = os.path.join(base, "project"), os.path.join(base, "project-venv")
            make_project(small, venv_files=False)
            make_project(venv, venv_files=True)
            projects = {"example (small project)": (small, "policy.example.toml"),
                        f"example (+ .venv {VENV_PACKAGES * VENV_DIRS * VENV_FILES} files)": (venv, "policy.example.toml"),
                        "presets only": (small, "presets.toml"),
                        "example w/o {tmp}, glob, limits (small project)": (small, "example-kept.toml"),
                        "example w/o {tmp}, glob, limits (+ .venv)": (venv, "example-kept.toml"),
                        # the glob deny kept too (session 12, glob12): `*.pem`; `**/*.pem` over the .venv
                        "example w/o {tmp}, limits (small project)": (small, "example-globs.toml"),
                        "example w/o {tmp}, limits (+ .venv)": (venv, "example-globs.toml"),
                        "example w/o {tmp}, limits, **/*.pem (+ .venv)": (venv, "example-all-pem.toml")}
        plain_env = dict(os.environ, HOME=home)
        user = None if args.only in ("gate", "api") else user_projects(base, projects)
        cases = {
            "floor": lambda: cpu_of([sys.executable, "-c", "pass"]),
            "plain bash -lc true": lambda: cpu_of(["bash", "-lc", "true"], plain_env, repo),
        }
        if bwrap:
            cases["bwrap --unshare-all"] = lambda: cpu_of([bwrap, "--unshare-all", "--ro-bind", "/", "/", "/bin/true"])
            cases["isolated bwrap bash -lc true"] = lambda: cpu_of(
                [bwrap, "--unshare-all", "--new-session", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                 "bash", "-lc", "true"], plain_env, repo)
        if user is not None:  # (setpriv's own exec in both: the user's rows over this floor)
            cases["floor" + AS_USER] = lambda: cpu_of([*as_user(), sys.executable, "-c", "pass"], cwd="/")
        if args.only == "cli":
            del cases["plain bash -lc true"]
        if args.only == "gate":
            del cases["floor"], cases["bwrap --unshare-all"]
        if args.only == "api":
            del cases["floor"], cases["plain bash -lc true"], cases["isolated bwrap bash -lc true"]
        wanted = {None: "", "cli": "run CLI", "gate": "gate, per step", "api": "API"}[args.only]
        trees = [("", SRC)] + before_labels(args.before)
        for label, src in trees:
            chosen = cases_for(label, src, policy, repo, home, write_dirs, projects, user)
            cases.update({name: fn for name, fn in chosen.items() if name.startswith(wanted)
                          and (not args.match or any(name.removesuffix(label) == text[1:] if text.startswith("=")
                                                     else text in name for text in args.match))})
        for fn in cases.values():  # warm caches (policy parse cache, page cache)
            fn()
        samples = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, fn in cases.items():
                samples[name].append(fn())
    med = {name: statistics.median(values) for name, values in samples.items()}
    print(f"CPU time ({'perf stat task-clock' if PERF else 'rusage'}, descendants included), "
          f"medians of {args.rounds} interleaved rounds (load {load_start:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end)")
    for name, secs in med.items():
        print(f"  {name:<56} {secs * 1000:8.2f} ms")
    print("  ratios")
    for label, src in before_labels(args.before):
        print(f"  {label.strip()}: {src}")
    for label, _ in [("", SRC)] + before_labels(args.before):
        for name in med:  # every `sandboy run` case of this tree, in the order measured
            if name.startswith("run CLI") and name.endswith(label) and (label or "(before" not in name):
                what = name[:len(name) - len(label)]
                if what not in FIXED_CLI_CASES:  # (their rows' names as before: scripts read them)
                    what = what.removeprefix("run CLI, ")
                floor = "floor" + AS_USER if AS_USER in what else "floor"
                what += f" / {floor}{label}"
                print(f"    {what:<60} {med[name] / med[floor]:6.2f}x")
        if args.only in (None, "api") and bwrap:
            print(f"    API (small caller) / bwrap --unshare-all{label} "
                  f"{med[f'API, small caller{label}'] / med['bwrap --unshare-all']:6.2f}x")
        if bwrap and f"gate, per step{label}" in med:
            over = med[f"gate, per step{label}"] - med["plain bash -lc true"]
            bw = med["isolated bwrap bash -lc true"] - med["plain bash -lc true"]
            print(f"    gate step over plain{label}: +{over * 1000:.2f} ms (isolated bwrap +{bw * 1000:.2f} ms)")
        if args.only in (None, "api"):
            print(f"    API caller +100 MB / small caller{label} "
                  f"{med[f'API, caller +100 MB{label}'] / med[f'API, small caller{label}']:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
