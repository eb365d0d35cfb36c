"""The run path's byte code in one file: what it holds, its format, and its writer (ADR 0023).

`sandboy run` spends more of its start-up finding and loading its modules than running their
bodies: importlib's path finder and source loader are Python code that costs ≈ 75 k instructions
and ≈ 11 system calls per module whatever its size (docs/performance.md, session 5). `make compile` and a wheel build
therefore write the code of the modules `sandboy run` imports into ONE file beside the package's
byte code, `sandboy/__pycache__/run-path.<cache tag>.bundle`. The reader is in `sandboy/__init__.py`
(a module of its own cost every run importlib's path machinery): it reads the index and puts
`BundleFinder` first on `sys.meta_path`, which reads a group of code when the first of its modules
is imported. The file is never written at run time; nothing here runs on a `sandboy run`.

It keeps Python's own trust and invalidation model for byte code (PEP 3147, PEP 552): a module is
served only when its source is the one the code was compiled from, checked when the module is
imported — (size, mtime_ns) equal, or size equal and `_imp.source_hash` equal (an installed wheel:
pip gives the files new mtimes); otherwise the finder answers None and importlib imports that
module the usual way. A missing, short, corrupt or foreign (other interpreter) bundle is ignored
as a whole. Served modules get their real source path (`__file__`, `co_filename`), so tracebacks,
`linecache` and `inspect` read the real source.

Modules are kept in groups of modules imported together (RUN_PATH_GROUPS), each group one
marshalled tuple of code objects, read and unmarshalled when the first of its modules is imported: one
marshal.loads shares the names and constants the modules have in common, which separate ones
create and intern again (callgrind, exec mode's 16: 0.66 M instructions fewer).

File layout: the interpreter's MAGIC_NUMBER (4 bytes), BUNDLE_FORMAT (4 bytes), the index's length
(4 bytes, little-endian), the index (marshal: one tuple per module, see INDEX_FIELDS), then the
groups; an entry's offset and length are its group's, counted from the end of the index, and
its position is its place in the group's tuple. An extension module has length 0.

    python -c 'import sandboy.bytecode_bundle as b; b.build("src/sandboy")'   # what `make compile` runs
"""

import marshal
import os

import _frozen_importlib_external as _external
import _imp

from sandboy import BUNDLE_FORMAT, bundle_path

# What `sandboy run` imports, besides `sandboy` itself (which installs the finder), in groups of
# modules imported together. tests/test_bytecode_bundle.py fails if exec mode imports anything but
# "cli" + "cached run" + "plan cache" from a kept plan, those + "cage" + "plan pieces" on a miss
# whose seccomp program is kept ("seccomp" too where none is: plan_pieces.Pieces), or "cli" +
# "cached run" + "cage" + "seccomp" with the plan cache off; if any run imports a module not
# listed, or if a listed module is imported by none, so the list cannot drift. The C executor is
# an extension module: no code of it is kept, the bundle only remembers its file, which saves
# importlib listing the directory.
RUN_PATH_GROUPS = {
    # every `sandboy` command
    "cli": ("sandboy.exit_codes", "sandboy.cli"),
    # the exceptions (their classes): a build, a write-root hit's checks — not a plain hit (session 12)
    "errors": ("sandboy.errors",),
    # exec mode with a cached plan (ADR 0028): what a hit imports, and a build first
    # (not the policy's resolver: a hit asks only cache_places and _libc's PATH search, session 12)
    "cached run": ("sandboy.cache_places", "sandboy.cache_seal", "sandboy.confine", "sandboy.confine._libc", "sandboy.confine._native",
                   "sandboy.confine.env_reads", "sandboy.confine.ruleset", "sandboy.confine.terminal",
                   "sandboy.confine.init_wait"),
    # the one is-within rule: a build's resolver, and a write-root hit's checks without it (session 12)
    "paths": ("sandboy.paths",),
    # the policy package itself (its docstring): a build's loader, and an `include` hit's recorded
    # questions (`policy.lookups`) without the loader — not a plain hit (session 12)
    "policy package": ("sandboy.policy",),
    # the plan cache itself: a hit, a miss, a run it may keep (and a reused cage's fingerprint:
    # the gate, the API) — not a run it never keeps, which thus unmarshals none of its ≈ 53 kB
    "plan cache": ("sandboy.confine.fingerprint", "sandboy.confine.plan_cache"),
    # the parts of a build kept apart from the plans (the seccomp program): a miss, a first run;
    # the writer of the cache's files (an entry or piece is written only after such a build); and
    # what keeps the plan a build made (`plan_keep`: a hit reads none of it, session 12); and the
    # build side of the fingerprint, taken only for a cage that may run again: a kept plan, the
    # API's and the gate's reused cages (`fingerprint_build`, session 12)
    "plan pieces": ("sandboy.confine.plan_pieces", "sandboy.confine.cache_files", "sandboy.confine.plan_keep",
                    "sandboy.confine.fingerprint_build"),
    # the cage's build: imported together by `sandboy run` (a miss), the gate, doctor and the API
    # (and exec mode's decisions — the hooks, whether a supervisor stays — which a build's run
    # takes and a hit does not: exec_mode, apart from the wait a hit runs, init_wait, session 12)
    "cage": ("sandboy.policy.resolve", "sandboy.confine.hygiene", "sandboy.confine.landlock",
             "sandboy.confine.namespaces", "sandboy.confine.protections", "sandboy.confine.cage", "sandboy.policy.load",
             "sandboy.policy.model", "sandboy.confine.exec_mode"),
    # `limits.processes` as root: the run's own pids cgroup, a hit's too (init_wait.start_and_wait,
    # session 13) — not the memory cgroup's module (cgroup.py)
    "pids cgroup": ("sandboy.confine.pids_cgroup",),
    # the BPF assembler: a build, unless a miss takes the program an earlier run kept (plan_pieces.Pieces)
    "seccomp": ("sandboy.confine.seccomp",),
    # a supervised run: --tty, a terminal on fd 0-2, a post-run check, net.domains
    "supervised": ("sandboy.confine.result", "sandboy.confine.reaping", "sandboy.confine.supervision",
                   "sandboy.confine.supervisor", "sandboy.confine.relay"),
    # a policy with write roots: the post-run git check and the kernel mounts below a write root —
    # what a plan cache hit of such a policy imports too (ADR 0028, session 9), and all a hit in a
    # plain directory reads (session 10)
    "git check": ("sandboy.confine.gitcheck", "sandboy.confine.kernel_mounts", "sandboy.confine.walk_index"),
    # the modes on the way to protected paths and git's files, put back after the run: where the
    # write roots hold any (a repository, a start-up file) — not a hit in a plain directory
    "mode guard": ("sandboy.confine.loosened",),
    # the protected paths' names: the build's resolution
    "protected paths": ("sandboy.confine.protected",),
    # what a repository's hooks run from its worktree (hooks directories, husky, the hook managers'
    # configs): the git check's launch side where a repository is there — a plan cache hit's too,
    # which reads none of "protected paths" (session 11) — the build's resolution and the judgement
    "hook managers": ("sandboy.confine.hook_managers",),
    # its judgement: a write root holding a repository (or one made by the run)
    "git judgement": ("sandboy.confine.gitjudge",),
    # the build's other modules for write roots: the protected paths' resolution, and the git
    # check as the build's run hook (GitCheck, a cage's Scope, the gate's launch record) — none
    # of which a plan cache hit runs (session 11)
    "write roots": ("sandboy.confine.own_install", "sandboy.confine.path_dirs", "sandboy.confine.gitcheck_hook"),
    # the interpreter a pre-commit hook stub runs (its launch warning, its start-up code judged
    # after the run): only where a write root's repository has such a stub
    "pre-commit interpreter": ("sandboy.confine.hook_python",),
    # a warning or an error to print (`sandboy: warning: ...`, a policy error): the escaping every
    # printed line goes through (0.80 -> 0.56 M instructions to import from here: session 7)
    "messages": ("sandboy.escape",),
    # `include = [...]`: the presets, resolved on this machine at every load (a module found by
    # importlib's path finder costs ≈ 0.22 M instructions more than one served here: session 7)
    "include": ("sandboy.policy.presets",),
    # the machine's answers the presets were resolved from, recorded at a load and asked again by
    # a plan cache hit of such a policy (ADR 0028, session 12), which reads none of "include"
    "preset lookups": ("sandboy.policy.lookups",),
    # net.domains (Layer 3): its rules and the proxy's session
    "egress": ("sandboy.egress", "sandboy.egress.rules", "sandboy.egress.enforcement", "sandboy.egress.session",
               "sandboy.confine.netns_listener"),
}
RUN_PATH_MODULES = tuple(name for group in RUN_PATH_GROUPS.values() for name in group)

# an index entry, in the order `sandboy.BundleFinder` unpacks it
INDEX_FIELDS = ("name", "is_package", "relative_path", "source_size", "source_mtime_ns", "source_hash", "offset",
                "length", "position")


def file_of(package_dir: str, name: str) -> tuple[str, bool] | None:
    """The file importlib would load for module `name`, relative to the top package's directory,
    and whether it is a package; None for a module that is not there (an extension module that
    was not built)."""
    relative = "/".join(name.split(".")[1:])
    if os.path.isfile(f"{package_dir}/{relative}/__init__.py"):
        return f"{relative}/__init__.py", True
    for suffix in (*_imp.extension_suffixes(), ".py"):  # importlib's own order: extensions first
        if os.path.isfile(f"{package_dir}/{relative}{suffix}"):
            return relative + suffix, False
    return None


def build(package_dir: str, groups=RUN_PATH_GROUPS) -> str:
    """Compile the modules of `groups` from the sources under `package_dir` (the `sandboy`
    directory) into its bundle; return the bundle's path. Written to a temporary file and
    renamed, so a reader never sees half a bundle."""
    package_dir = os.path.abspath(package_dir)
    path = bundle_path(package_dir)
    if path is None:
        raise SystemExit("this interpreter keeps no byte code (or runs with -O): no bundle written")
    entries, blobs, offset = [], [], 0
    for names in groups.values():
        members, codes = [], []
        for name in names:
            found = file_of(package_dir, name)
            if found is None:
                continue  # e.g. the C executor where no compiler built it: importlib looks for it
            relative_path, is_package = found
            source_path = f"{package_dir}/{relative_path}"
            with open(source_path, "rb") as fh:
                # stat BEFORE reading, as importlib's source loader does: a file rewritten in
                # place after the stat gets a newer mtime, so the bundle's code is then checked
                # by hash; stat after the read recorded the new mtime beside the old code
                st = os.fstat(fh.fileno())
                source = fh.read()
            if not relative_path.endswith(".py"):
                entries.append((name, False, relative_path, st.st_size, st.st_mtime_ns, b"", 0, 0, -1))
                continue
            members.append((name, is_package, relative_path, st.st_size, st.st_mtime_ns,
                            _imp.source_hash(_external._RAW_MAGIC_NUMBER, source)))
            codes.append(compile(source, source_path, "exec", dont_inherit=True))
        blob = marshal.dumps(tuple(codes))
        entries.extend((*member, offset, len(blob), position) for position, member in enumerate(members))
        blobs.append(blob)
        offset += len(blob)
    index = marshal.dumps(tuple(entries))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f"{path}.{os.getpid()}.tmp"
    with open(partial, "wb") as fh:
        fh.write(_external.MAGIC_NUMBER + BUNDLE_FORMAT + len(index).to_bytes(4, "little") + index)
        for blob in blobs:
            fh.write(blob)
    os.replace(partial, path)
    return path

