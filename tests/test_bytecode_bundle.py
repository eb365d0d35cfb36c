"""The run path's byte-code bundle (ADR 0023): it serves exactly the run path's modules, never
stale code, and a broken bundle costs nothing but its speed.

Each test copies the package into a temporary directory, writes the bundle there with the real
builder, changes real files, and asks a fresh interpreter (PYTHONPATH selecting the copy) which
loader each module came from and what the code does.
"""

from __future__ import annotations

import json
import marshal
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandboy import bytecode_bundle

SRC = Path(__file__).resolve().parents[1] / "src"
SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
POLICY = 'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64"]\nexec = ["/usr/bin", "/bin"]\n'

# Imports the run path as `sandboy run` does, then reports what served each module.
PROBE = """
import json, sys
import sandboy
from sandboy.bytecode_bundle import RUN_PATH_MODULES
for name in RUN_PATH_MODULES:
    __import__(name)
print(json.dumps({
    "finder": [type(f).__name__ for f in sys.meta_path if type(f).__name__ == "BundleFinder"],
    "served": sorted(n for n, m in sys.modules.items()
                     if getattr(getattr(m, "__spec__", None), "loader_state", None) == sandboy.SERVED_FROM_BUNDLE),
    "plain": sorted(n for n in RUN_PATH_MODULES if sys.modules[n].__spec__.loader_state != sandboy.SERVED_FROM_BUNDLE
                    and type(sys.modules[n].__spec__.loader).__name__ in ("SourceFileLoader", "ExtensionFileLoader")),
    "exit_not_executable": sandboy.exit_codes.EXIT_NOT_EXECUTABLE,
}))
"""


def copy_package(dest: Path) -> Path:
    """The package under dest/src/sandboy (sources and the built C executor, no byte code)."""
    shutil.copytree(SRC / "sandboy", dest / "src" / "sandboy", ignore=shutil.ignore_patterns("__pycache__"))
    return dest / "src" / "sandboy"


@pytest.fixture
def package(tmp_path) -> Path:
    pkg = copy_package(tmp_path / "tree")
    bytecode_bundle.build(str(pkg))
    return pkg


def bundle_of(pkg: Path) -> Path:
    return Path(bytecode_bundle.bundle_path(str(pkg)))


def index_of(pkg: Path) -> dict:
    data = bundle_of(pkg).read_bytes()
    end = 12 + int.from_bytes(data[8:12], "little")
    return {entry[0]: dict(zip(bytecode_bundle.INDEX_FIELDS, entry), start=end) for entry in marshal.loads(data[12:end])}


def env_for(pkg: Path) -> dict:
    return dict(os.environ, PYTHONPATH=str(pkg.parent))


def probe(pkg: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env_for(pkg), cwd=pkg.parent)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def sandboy_run(pkg: Path, tmp_path: Path, *python_options: str) -> subprocess.CompletedProcess:
    policy = tmp_path / "p.toml"
    policy.write_text(POLICY)
    argv = [sys.executable, *python_options, "-c", "from sandboy.cli import entry; entry()", "run", "--policy", str(policy),
            "--", "/bin/true"]
    return subprocess.run(argv, capture_output=True, text=True, env=env_for(pkg), cwd=tmp_path,
                          stdin=subprocess.DEVNULL, start_new_session=True)


# exec mode from a cached plan (ADR 0028): the same run again; a miss (or the cache off) builds
EXEC_MODE = (bytecode_bundle.RUN_PATH_GROUPS["cli"] + bytecode_bundle.RUN_PATH_GROUPS["cached run"]
             + bytecode_bundle.RUN_PATH_GROUPS["plan cache"])
# (the BPF assembler too: no seccomp program kept for these inputs yet, plan_pieces.Pieces)
# (and the is-within rule the resolver imports: a group of its own, which a write-root hit reads too)
EXEC_MODE_BUILT = (EXEC_MODE + bytecode_bundle.RUN_PATH_GROUPS["cage"] + bytecode_bundle.RUN_PATH_GROUPS["plan pieces"]
                   + bytecode_bundle.RUN_PATH_GROUPS["seccomp"] + bytecode_bundle.RUN_PATH_GROUPS["paths"]
                   + bytecode_bundle.RUN_PATH_GROUPS["policy package"] + bytecode_bundle.RUN_PATH_GROUPS["errors"])
RUNS = {  # a policy (POLICY + what is added) and options: the kinds of run the groups are for
    "exec mode": ("", []),
    "exec mode, plan cache off": ("", []),
    "exec mode, a miss": ("", []),  # another value of a variable the build read than the run that kept the plan
    "write roots": ('write = ["{tmp}/work"]\n', []),
    "write roots, a repository": ('write = ["{tmp}/repo"]\n', []),  # (the git check judges it)
    # pre-commit installed from an interpreter (its stub's INSTALL_PYTHON): confine.hook_python
    "write roots, pre-commit's interpreter": ('write = ["{tmp}/pre-commit"]\n', []),
    "--tty": ("", ["--tty"]),
    "net.domains": ('\n[net]\ndomains = ["example.org"]\n', []),
    "include": ('', [], 'include = ["system"]\n'),  # (a top-level key: before POLICY's [fs])
    "include, a miss": ('', [], 'include = ["system"]\n'),  # (the presets resolved: a build)
    "a warning": ('write = ["{tmp}/work"]\nprotect = ["{tmp}/work/not-yet"]\n', []),  # "... does not exist"
    "limits.processes": ('\n[limits]\nprocesses = 64\n', []),  # as root: the run's pids cgroup (a hit's too)
}


def run_imports(kind: str, tmp_path: Path) -> set[str]:
    """The package's modules a real `sandboy run` of this kind imports (`-X importtime`), less
    `sandboy` and this module."""
    extra, options, *top = RUNS[kind]
    (tmp_path / "work").mkdir(exist_ok=True)
    (tmp_path / "repo" / ".git" / "hooks").mkdir(parents=True, exist_ok=True)
    (tmp_path / "repo" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    hooks = tmp_path / "pre-commit" / ".git" / "hooks"
    hooks.mkdir(parents=True, exist_ok=True)
    (hooks.parent / "HEAD").write_text("ref: refs/heads/main\n")
    (hooks / "pre-commit").write_text("#!/usr/bin/env bash\n# File generated by pre-commit: https://pre-commit.com\n"
                                      f"INSTALL_PYTHON={sys.executable}\n"
                                      "ARGS=(hook-impl --config=.pre-commit-config.yaml --hook-type=pre-commit)\n")
    policy = tmp_path / "p.toml"
    policy.write_text("".join(top) + POLICY + extra.replace("{tmp}", str(tmp_path)))
    argv = [SANDBOY, "run", "--policy", str(policy), *options, "--", "/bin/true"]
    # the C executor and the namespace tier are on the path (the fallback without the tier adds
    # modules of its own — escape, explain, launch — which are imported the usual way)
    env = {k: v for k, v in os.environ.items() if k not in ("SANDBOY_NATIVE", "SANDBOY_NAMESPACES")}
    env["SANDBOY_CACHE_DIR"] = str(tmp_path / "cache")
    if kind.endswith("plan cache off"):
        env["SANDBOY_PLAN_CACHE"] = "0"
    # warms the parse cache and, for a run it keeps, the plan cache (stdio as in the measured run)
    subprocess.run(argv, check=True, capture_output=True, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    if kind.endswith("a miss"):
        # a variable the build reads, with a value that changes nothing it makes (the namespace
        # tier stays on): a miss (an unrelated variable is a hit since session 12, ADR 0028)
        env["SANDBOY_NAMESPACES"] = "1"
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    assert proc.returncode == 0, proc.stderr
    used = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "sandboy.cli" in used  # the measurement works
    return {name for name in used if name.startswith("sandboy.")} - {"sandboy.bytecode_bundle"}


@pytest.fixture
def tier() -> None:
    from sandboy.confine import namespaces

    if not namespaces.availability()[0]:
        pytest.skip("no namespace tier here: the runs take the fallback's path (escape, explain, launch), "
                    "which the bundle does not hold")


def test_exec_mode_imports_exactly_the_cli_and_cached_run_groups(tier, tmp_path):
    """A run from a cached plan imports no compiler; on a miss the cage group comes too — without
    the BPF assembler where an earlier run kept the seccomp program for the same inputs — and with
    the plan cache off the cage group and the assembler, none of the plan cache (session 10)."""
    assert run_imports("exec mode", tmp_path) == set(EXEC_MODE)
    groups = bytecode_bundle.RUN_PATH_GROUPS
    assert run_imports("exec mode, a miss", tmp_path) == {*EXEC_MODE, *groups["cage"], *groups["plan pieces"],
                                                          *groups["paths"], *groups["policy package"], *groups["errors"]}
    assert run_imports("exec mode, plan cache off", tmp_path) == {*groups["cli"], *groups["cached run"], *groups["cage"],
                                                                  *groups["seccomp"], *groups["paths"],
                                                                  *groups["policy package"], *groups["errors"]}


def test_a_presets_hit_asks_their_questions_without_the_presets(tier, tmp_path):
    """`include` kept (ADR 0028, session 12): a hit imports the recorded questions' module, not
    the presets (nor the loader: no "cage" group); a miss resolves the presets."""
    groups = bytecode_bundle.RUN_PATH_GROUPS
    assert run_imports("include", tmp_path) == {*EXEC_MODE, *groups["preset lookups"], *groups["policy package"]}
    assert set(groups["include"]) <= run_imports("include, a miss", tmp_path)


def test_every_listed_module_is_imported_by_some_run_and_no_run_imports_another(tier, tmp_path):
    """Each kind of run imports only listed modules, and every listed module is imported by one
    of them."""
    imported = {kind: run_imports(kind, tmp_path) for kind in RUNS}
    for kind, names in imported.items():
        assert names <= set(bytecode_bundle.RUN_PATH_MODULES), (kind, names - set(bytecode_bundle.RUN_PATH_MODULES))
    # (an ordinary user's `limits.processes` is RLIMIT_NPROC, a plan step: no cgroup)
    as_root = set() if os.geteuid() == 0 else set(bytecode_bundle.RUN_PATH_GROUPS["pids cgroup"])
    assert set().union(*imported.values()) == set(bytecode_bundle.RUN_PATH_MODULES) - as_root


def test_a_processes_hit_as_root_reads_the_pids_cgroup_not_the_memory_one(tier, tmp_path):
    """`limits.processes` as root, kept since session 13: a hit imports the pids cgroup's module
    only (cgroup.py, the memory cgroup's, is ≈ 47 kB of byte code a run never needs)."""
    if os.geteuid() != 0:
        pytest.skip("as an ordinary user limits.processes is RLIMIT_NPROC: no cgroup")
    groups = bytecode_bundle.RUN_PATH_GROUPS
    assert run_imports("limits.processes", tmp_path) == {*EXEC_MODE, *groups["pids cgroup"]}


def test_sandboy_run_is_served_from_the_bundle(package, tmp_path):
    """The real CLI (`python -v` names each module's loader): every listed module comes from the
    bundle, nothing else does, and the run succeeds. The C executor's file is named by the
    index (its loader is importlib's own): nothing lists the package's directories."""
    proc = sandboy_run(package, tmp_path, "-v")
    assert proc.returncode == 0, proc.stderr[-3000:]
    served = {line.split("'")[1] for line in proc.stderr.splitlines()
              if line.startswith("import 'sandboy") and "BundledSourceLoader" in line}
    assert served == set(EXEC_MODE_BUILT) - {"sandboy.confine._native"}  # (a first run: the plan cache misses)
    assert "import 'sandboy.confine._native'" in proc.stderr
    assert probe(package)["served"] == sorted(bytecode_bundle.RUN_PATH_MODULES)
    script = ("import sys; from sandboy.cli import main; import sandboy.confine.cage; "
              "print(sorted(p for p in sys.path_importer_cache if p.startswith(sys.argv[1])))")
    listed = subprocess.run([sys.executable, "-c", script, str(package)], capture_output=True, text=True,
                            env=env_for(package), cwd=tmp_path)
    assert (listed.returncode, listed.stdout) == (0, "[]\n"), listed.stderr


def test_nothing_is_written_at_run_time(tmp_path):
    """Without a bundle the run imports the usual way and writes none."""
    pkg = copy_package(tmp_path / "tree")
    assert not bundle_of(pkg).exists()
    proc = sandboy_run(pkg, tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = probe(pkg)
    assert (result["finder"], result["served"]) == ([], [])
    assert not bundle_of(pkg).exists()


def test_an_edit_that_keeps_the_size_runs_the_new_code(package):
    """Same size, new mtime and bytes: the hash differs, so that module is imported from its source."""
    source = package / "exit_codes.py"
    text = source.read_text()
    edited = text.replace("EXIT_NOT_EXECUTABLE = 126", "EXIT_NOT_EXECUTABLE = 121")
    assert edited != text and len(edited) == len(text)
    source.write_text(edited)
    recorded = index_of(package)["sandboy.exit_codes"]
    assert (source.stat().st_size, source.stat().st_mtime_ns) != (recorded["source_size"], recorded["source_mtime_ns"])
    assert source.stat().st_size == recorded["source_size"]
    result = probe(package)
    assert result["exit_not_executable"] == 121
    assert result["plain"] == ["sandboy.exit_codes"]
    assert result["served"] == sorted(set(bytecode_bundle.RUN_PATH_MODULES) - {"sandboy.exit_codes"})


def test_a_source_rewritten_while_the_bundle_is_built_runs_the_new_code(package, monkeypatch):
    """`make compile` while an editor rewrites a file in place (same size): the builder must
    not record the new file's mtime beside the code of the old bytes. The rewrite happens on
    disk right after the builder has read exit_codes.py (its own `open`, wrapped)."""
    source = package / "exit_codes.py"
    text = source.read_text()
    edited = text.replace("EXIT_NOT_EXECUTABLE = 126", "EXIT_NOT_EXECUTABLE = 121")
    assert len(edited) == len(text)
    real_open = open

    class RewrittenAfterRead:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def fileno(self):
            return self.fh.fileno()

        def read(self):
            data = self.fh.read()
            with real_open(source, "r+") as out:  # in place: same inode, later mtime
                out.write(edited)
            st = source.stat()
            os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
            return data

    def opener(path, mode="r", *args, **kwargs):
        fh = real_open(path, mode, *args, **kwargs)
        return RewrittenAfterRead(fh) if Path(path) == source else fh

    monkeypatch.setattr(bytecode_bundle, "open", opener, raising=False)
    bytecode_bundle.build(str(package))
    monkeypatch.undo()
    assert source.read_text() == edited
    result = probe(package)
    assert (result["exit_not_executable"], result["plain"]) == (121, ["sandboy.exit_codes"])


def test_an_edit_that_changes_the_size_runs_the_new_code(package):
    source = package / "exit_codes.py"
    source.write_text(source.read_text().replace("EXIT_NOT_EXECUTABLE = 126", "EXIT_NOT_EXECUTABLE = 1260"))
    result = probe(package)
    assert (result["exit_not_executable"], result["plain"]) == (1260, ["sandboy.exit_codes"])


def test_a_touched_source_is_still_served_by_its_hash(package):
    """New mtimes, same bytes (what pip does to an installed wheel): served, after a hash check."""
    for name, entry in index_of(package).items():
        source = package / entry["relative_path"]
        os.utime(source, ns=(source.stat().st_atime_ns, entry["source_mtime_ns"] + 5_000_000_000))
    result = probe(package)
    assert (result["served"], result["plain"]) == (sorted(bytecode_bundle.RUN_PATH_MODULES), [])
    assert result["exit_not_executable"] == 126


def _damage(bundle: Path, how: str) -> None:
    data = bundle.read_bytes()
    if how == "missing":
        bundle.unlink()
    elif how == "empty":
        bundle.write_bytes(b"")
    elif how == "short header":
        bundle.write_bytes(data[:10])
    elif how == "truncated":
        bundle.write_bytes(data[: len(data) // 2])
    elif how == "foreign magic":  # Python 3.8's MAGIC_NUMBER: another interpreter's byte code
        bundle.write_bytes((3413).to_bytes(2, "little") + b"\r\n" + data[4:])
    elif how == "corrupt index":
        bundle.write_bytes(data[:12] + b"\xff" * 64 + data[76:])
    elif how == "index of the wrong shape":
        index = marshal.dumps(("sandboy.cli", 1, 2))
        bundle.write_bytes(data[:8] + len(index).to_bytes(4, "little") + index + data[12:])
    elif how == "an entry of the wrong type":  # exit_codes.py's size missing; the index keeps its length
        end = 12 + int.from_bytes(data[8:12], "little")
        entries = [list(entry) for entry in marshal.loads(data[12:end])]
        next(entry for entry in entries if entry[0] == "sandboy.exit_codes")[3] = None
        index = marshal.dumps(tuple(map(tuple, entries)))
        assert len(index) <= end - 12
        bundle.write_bytes(data[:12] + index.ljust(end - 12, b"\0") + data[end:])
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["missing", "empty", "short header", "truncated", "foreign magic", "corrupt index",
                                 "index of the wrong shape", "an entry of the wrong type"])
def test_a_broken_bundle_means_plain_imports_and_no_traceback(package, tmp_path, how):
    _damage(bundle_of(package), how)
    result = probe(package)
    assert (result["finder"], result["served"]) == ([], [])
    assert result["plain"] == sorted(bytecode_bundle.RUN_PATH_MODULES)
    proc = sandboy_run(package, tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


def test_a_corrupt_group_in_the_bundle_is_imported_from_its_sources(package, tmp_path):
    """The group holding the CLI is garbage: its modules are imported from their sources, the
    other group is still served."""
    entry = index_of(package)["sandboy.cli"]
    bundle = bundle_of(package)
    data = bytearray(bundle.read_bytes())
    start = entry["start"] + entry["offset"]
    data[start : start + entry["length"]] = b"\xff" * entry["length"]
    bundle.write_bytes(bytes(data))
    group = bytecode_bundle.RUN_PATH_GROUPS["cli"]
    result = probe(package)
    assert result["plain"] == sorted(group)
    assert result["served"] == sorted(set(bytecode_bundle.RUN_PATH_MODULES) - set(group))
    proc = sandboy_run(package, tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


def test_only_the_groups_a_process_imports_are_read(package):
    """The index at `import sandboy`, each group when its first module is imported: exec mode
    never reads the supervised, write-root and egress groups (≈ 200 kB of page faults)."""
    script = ("import sandboy, sys; import sandboy.cli; "
              "print(sorted(next(f for f in sys.meta_path if type(f).__name__ == 'BundleFinder').groups))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env_for(package))
    assert proc.returncode == 0, proc.stderr
    cli = index_of(package)["sandboy.cli"]
    assert json.loads(proc.stdout) == [cli["start"] + cli["offset"]]


def _another_cli_group(package, tmp_path):
    """(our bundle, a twin's bundle, where the CLI group's bytes start and end): the twin's package
    sits at a path as long as ours and its exit_codes.py says 121 where ours says 126, so its CLI
    group has the same length and other code."""
    other = copy_package(tmp_path / "twin")
    errors = other / "exit_codes.py"
    errors.write_text(errors.read_text().replace("EXIT_NOT_EXECUTABLE = 126", "EXIT_NOT_EXECUTABLE = 121"))
    bytecode_bundle.build(str(other))
    ours, theirs = bundle_of(package).read_bytes(), bundle_of(other).read_bytes()
    entry = index_of(package)["sandboy.cli"]
    start, end = entry["start"] + entry["offset"], entry["start"] + entry["offset"] + entry["length"]
    assert index_of(other)["sandboy.cli"]["length"] == entry["length"] and theirs[start:end] != ours[start:end]
    return ours, theirs, start, end


def test_a_bundle_replaced_after_its_index_was_read_is_not_served(package, tmp_path):
    """A group is read when it is needed, from the file opened again: if `make compile` (or anyone)
    replaced the bundle since the index was read, the new file's groups do not belong to the old
    index. Here the replacement keeps the layout but its CLI group holds another exit_codes.py (126
    became 121, same length): served, the process would run code no source of it matches."""
    ours, theirs, start, end = _another_cli_group(package, tmp_path)
    replacement = tmp_path / "replacement.bundle"
    replacement.write_bytes(ours[:start] + theirs[start:end] + ours[end:])
    script = (f"import os, sandboy; os.replace({str(replacement)!r}, {str(bundle_of(package))!r}); "
              "import sandboy.exit_codes as e; print(e.EXIT_NOT_EXECUTABLE, type(e.__spec__.loader).__name__)")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env_for(package))
    assert (proc.returncode, proc.stdout.split()) == (0, ["126", "SourceFileLoader"]), proc.stderr


def test_a_bundle_edited_in_place_after_its_index_was_read_is_not_served(package, tmp_path):
    """The same file (device and inode), the same size and its mtime put back (os.utime: any
    writer of the file may) — but a group's bytes rewritten in place between the index read and
    the group's read: its ctime, which no one can set, tells. Served, the process would run code
    no source of it matches (126 became 121, same length, as above)."""
    ours, theirs, start, end = _another_cli_group(package, tmp_path)
    group = tmp_path / "group"
    group.write_bytes(theirs[start:end])
    script = (f"import os, sandboy; path = {str(bundle_of(package))!r}; st = os.stat(path); "
              f"fd = os.open(path, os.O_WRONLY); os.pwrite(fd, open({str(group)!r}, 'rb').read(), {start}); "
              "os.close(fd); os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns)); "
              "after = os.stat(path); assert (after.st_ino, after.st_size, after.st_mtime_ns) == "
              "(st.st_ino, st.st_size, st.st_mtime_ns); "
              "import sandboy.exit_codes as e; print(e.EXIT_NOT_EXECUTABLE, type(e.__spec__.loader).__name__)")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env_for(package))
    assert (proc.returncode, proc.stdout.split()) == (0, ["126", "SourceFileLoader"]), proc.stderr

def test_tracebacks_and_inspect_show_the_real_source(tmp_path):
    """Built in one directory, moved to another (as a wheel's build directory is): the code's
    file names are the sources where they are now, so a traceback shows the file, the line and
    its text, and inspect reads the source."""
    built = copy_package(tmp_path / "built")
    bytecode_bundle.build(str(built))
    moved = tmp_path / "moved" / "src" / "sandboy"
    shutil.copytree(built, moved)  # copy2: same mtimes, so served by (size, mtime)
    script = """
import inspect, json, sys, traceback
import sandboy.cli
try:
    sandboy.cli.parse_run_fast(None)
except TypeError:
    tb = traceback.format_exc()
print(json.dumps({"loader": type(sandboy.cli.__spec__.loader).__name__, "file": sandboy.cli.__file__,
                  "co_filename": sandboy.cli.parse_run_fast.__code__.co_filename, "traceback": tb,
                  "source": inspect.getsource(sandboy.cli.parse_run_fast).splitlines()[0]}))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env_for(moved))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    cli = str(moved / "cli.py")
    assert result["loader"] == "BundledSourceLoader"
    assert (result["file"], result["co_filename"]) == (cli, cli)
    lines = (moved / "cli.py").read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if "while i < len(argv):" in text)
    assert f'File "{cli}", line {line}, in parse_run_fast\n    while i < len(argv):' in result["traceback"]
    assert str(built) not in proc.stdout
    assert result["source"] == "def parse_run_fast(argv: list[str]) -> RunArgs | None:"


def test_doctor_says_whether_the_bundle_is_in_use_and_what_changed(package):
    def doctor() -> dict:
        proc = subprocess.run([sys.executable, "-c", "from sandboy.cli import entry; entry()", "doctor", "--json"],
                              capture_output=True, text=True, env=env_for(package), cwd=package.parent)
        assert "Traceback" not in proc.stderr, proc.stderr
        return json.loads(proc.stdout)

    report = doctor()
    assert report["bytecode_bundle"] == {"path": str(bundle_of(package)), "modules": len(bytecode_bundle.RUN_PATH_MODULES),
                                         "stale": []}
    source = package / "policy" / "resolve.py"
    source.write_text(source.read_text() + "\n# edited\n")
    report = doctor()
    assert report["bytecode_bundle"]["stale"] == ["sandboy.policy.resolve"]
    assert any("sandboy.policy.resolve" in note for note in report["notes"])
    bundle_of(package).unlink()
    report = doctor()
    assert report["bytecode_bundle"] is None
    assert any("no byte-code bundle" in note for note in report["notes"])


def test_under_optimisation_the_bundle_is_not_used(package):
    """`python -O` compiles differently (no asserts): the bundle's code is not that code."""
    proc = subprocess.run([sys.executable, "-O", "-c", PROBE], capture_output=True, text=True, env=env_for(package),
                          cwd=package.parent)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["finder"], result["served"]) == ([], [])


def test_reloading_the_package_keeps_one_finder(package):
    script = ("import importlib, sys, sandboy; importlib.reload(sandboy); "
              "print(sum(type(f).__name__ == 'BundleFinder' for f in sys.meta_path))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env_for(package))
    assert (proc.returncode, proc.stdout) == (0, "1\n"), proc.stderr
