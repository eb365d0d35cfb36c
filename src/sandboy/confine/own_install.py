"""Sandboy's own installation: read-only in every cage whose write roots hold it (ADR 0024).

A caged command that may write the directory Sandboy is installed in could plant code for the
operator's next unconfined `sandboy` (often as root): a `.pth` file in the environment's
site-packages (run at every interpreter start), an edited `sandboy/cli.py`, a replaced run-path
bundle (ADR 0023) or `.pyc`, a swapped console script or `bin/python`. That happens whenever a
write root holds the installation — Sandboy's own gate on its own checkout (`make setup` puts
`.venv` and the editable source tree `src/` inside `{repo}`), a home directory holding a user
install or a pyenv interpreter.

This module only says WHICH paths make up the Sandboy that is running now (`installation`) and
which of them lie inside a set of write roots (`inside`). They are added to the protected paths
at launch by `protections.protected_paths`, as part of `fs.protect_defaults`, and enforced like
`fs.protect` entries: a read-only bind under the namespace tier, a Landlock read-only split
without it (never merely reported: unlike `.git`, nothing a build needs is made inside them).

Narrow on purpose: only the installation that is running (and the operator's PYTHONPATH
entries, which the next `sandboy` imports from first), never any virtual environment, so a
repository's own `.venv` stays writable for `pip install` in the cage.
"""

import os
import site
import sys

from sandboy.policy.resolve import PathSet, is_within, is_within_any

# Why each kind of path is protected: the launch warning names it.
WHY = {
    "prefix": "the Python environment running Sandboy (its bin/python, console scripts, site-packages and .pth files)",
    "base prefix": "the Python installation under the environment running Sandboy (its standard library)",
    "package": "the sandboy package (its modules, byte code and run-path bundle)",
    "import path": "the import path entry holding the sandboy package (an editable install's source tree)",
    "import path (PYTHONPATH)": "a PYTHONPATH entry the interpreter running Sandboy imports from before the standard "
                                "library (a sitecustomize.py or a module shadowing one there runs at the next start)",
    "user site": "the user site-packages directory whose .pth files the interpreter running Sandboy runs",
    "pycache prefix": "the byte code the interpreter running Sandboy reads instead of __pycache__ (PYTHONPYCACHEPREFIX)",
    "console script": "the `sandboy` command the operator runs next",
    "next environment": "the Python environment the `sandboy` command on PATH runs in (its script's interpreter)",
    "policy file": "the policy file `sandboy run` was given (the rules of its next run)",
}
# Kinds whose whole tree is Sandboy's: a write root INSIDE one of them (e.g. `write =
# [".venv/lib/python3.11/site-packages"]`) is protected itself. The base prefix may hold
# unrelated write roots (/usr/local/src with a /usr interpreter), so it is not one of them.
ALL_OURS = frozenset({"prefix", "package", "import path", "user site", "pycache prefix", "next environment"})

# Directories the interpreter running Sandboy reads code from that need not exist yet: missing
# inside a write root, the command could make one and plant a `.pth` or `.pyc` there (the host's
# next Python would read it), so Sandboy makes them at launch — as pip and Python themselves
# would on first use — and protects them like the rest (as protected._complete_git_dir does for
# `.git/hooks`). A PYTHONPATH entry too: the interpreter skips a missing one, and reads the
# `sitecustomize.py` a command made there at the next start.
MADE_IF_MISSING = frozenset({"user site", "pycache prefix", "import path (PYTHONPATH)"})

_CACHED = None
_POLICY_FILES: list = []  # `sandboy run --policy FILE` (`protect_policy_file`): a row of its own


def protect_policy_file(path: str) -> None:
    """`sandboy run`'s policy file is part of what the next run is made of, as the installation
    is: in a write root (the README's own example: `policy.example.toml` in the project, `write =
    ["."]`) the command rewrote it — `write` on the home, `[net] unrestricted = true` — and the
    next `sandboy run --policy` of the same command line ran under that (redcage13). A row of the
    installation from here on (read-only in the cage with the rest, looked up again by a kept
    plan's fingerprint); the gate reads its policies once, up front, and the API is given one."""
    global _CACHED, _RESOLVED
    path = os.path.abspath(path)
    if path not in _POLICY_FILES:
        _POLICY_FILES.append(path)
        _CACHED = _RESOLVED = None  # (made again with the row)


def _made(path: str) -> bool:
    """Make the missing directory `path` (and its parents); False where that fails (the caged
    command, same uid with fewer rights, cannot make it either)."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return False
    return True


def _package_dir() -> str:
    import sandboy

    return os.path.dirname(os.path.abspath(sandboy.__file__))


def _console_scripts() -> list[str]:
    """The `sandboy` the operator runs next: the first on PATH, the one beside this interpreter,
    and the one this process was started as (absolute, not resolved: a symlink to it in a
    write root, `~/.local/bin/sandboy -> ~/venvs/sandboy/bin/sandboy`, is protected as itself)."""
    found = []
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if directory and os.path.isfile(os.path.join(directory, "sandboy")):
            found.append(os.path.join(os.path.abspath(directory), "sandboy"))
            break
    found.append(os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "sandboy"))
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    if os.path.basename(argv0) == "sandboy":
        found.append(os.path.abspath(argv0))
    return found


def _environment_of(script: str):
    """The virtual environment a console script runs in (`#!/x/venv/bin/python` with
    `/x/venv/pyvenv.cfg`), or None: the `sandboy` first on PATH may belong to another
    installation than this process's (pipx, a second venv), and that one runs next."""
    try:
        with open(script, "rb") as fh:
            first = fh.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if not words or not words[0].startswith("/"):
        return None
    environment = os.path.dirname(os.path.dirname(words[0]))
    return environment if os.path.isfile(os.path.join(environment, "pyvenv.cfg")) else None


def installation() -> tuple:
    """((path, kind), ...): every path that makes up the Sandboy running now, absolute but not
    resolved (`inside` resolves them and the symlinks on the way). Computed once per process:
    it describes the code this process was started from."""
    global _CACHED
    if _CACHED is not None:
        return _CACHED
    rows = []

    def add(path, kind):
        if path and (path := os.path.abspath(path)) not in [p for p, _ in rows]:
            rows.append((path, kind))

    add(sys.prefix, "prefix")
    add(sys.exec_prefix, "prefix")
    add(sys.base_prefix, "base prefix")
    add(sys.base_exec_prefix, "base prefix")
    package = _package_dir()
    add(package, "package")
    if site.ENABLE_USER_SITE and site.USER_SITE:
        add(site.USER_SITE, "user site")
    # A path or editable install (`pip install -e .` of a src layout: src/ of a checkout). Its
    # `.pth` file needs no row of its own: every site directory lies in a prefix or the user
    # site, protected whole (a NEW .pth there would run as well).
    # (compared as written: one that lies in a prefix only through a symlink gets a row of its
    # own, folded into the prefix's by `inside` — no realpath here, this runs at start-up)
    entry = os.path.dirname(package)
    if not is_within_any(entry, [p for p, kind in rows if kind in ("prefix", "base prefix", "user site")]):
        add(entry, "import path")
    # The operator's PYTHONPATH (their shell's `export PYTHONPATH=$PWD/lib`): the next `sandboy`
    # started with it imports from each entry before the standard library — a `sitecustomize.py`
    # or a shadowing module planted there runs. Split as Python does (empty entries dropped,
    # relative ones against the working directory). Not `sys.path[0]` of `python -c`/`-m`
    # (the working directory of a later run, unknown here; ADR 0024).
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry:
            add(entry, "import path (PYTHONPATH)")
    add(getattr(sys, "pycache_prefix", None), "pycache prefix")
    prefixes = [p for p, kind in rows if kind == "prefix"]
    for script in _console_scripts():
        add(script, "console script")
        if not is_within_any(script, prefixes):  # the running environment's own: nothing to read
            add(_environment_of(script), "next environment")
    for path in _POLICY_FILES:
        add(path, "policy file")
    _CACHED = tuple(rows)
    return _CACHED


_RESOLVED = None


def _resolved() -> tuple:
    """((path, kind, realpath, symlinks on the way), ...) of `installation()`, resolved once per
    process: `inside` runs at every build and every reuse check of a compiled cage, where a
    realpath and an lstat per component of each row cost ~300 µs (measured: 20 µs without)."""
    global _RESOLVED
    if _RESOLVED is None:
        from sandboy.confine.protected import realpath_and_links

        _RESOLVED = tuple((path, kind, *(lambda real, links: (real, tuple(links)))(*realpath_and_links(path)))
                          for path, kind in installation())
    return _RESOLVED


def inside(write_roots, lookups=None) -> list:
    """[(realpath, kind, write root)] of the installation's paths that exist now (or were made:
    MADE_IF_MISSING) and lie inside one of `write_roots` (or, for the kinds in ALL_OURS, a write
    root lying inside one of them),
    plus each symlink met on the way to one (replacing a link replaced the file). Nested paths
    are folded into the outermost: a read-only bind of the environment covers its console
    script. `present(candidates(write_roots))`. `lookups`: the build's `resolve.BuildLookups`
    (each write root resolved once per build), None to resolve them anew."""
    return present(candidates(write_roots, lookups=lookups))


def candidates(write_roots, resolved=None, all_ours=None, lookups=None) -> tuple:
    """The rows `inside` may answer for `write_roots`, before any file system lookup but the write
    roots' realpaths: ((path, kind, [(realpath, kind, write root)]), ...), one per installation
    path a write root holds by the string comparisons alone. Nothing here changes while the
    write roots lead to the same directories, so a compiled cage keeps it for its reuse check
    (`fingerprint.Fingerprint`), which then pays only `present`'s lookups (none for the usual write
    root, which holds no part of the installation).

    `resolved`: other rows of the same shape as `_resolved()`'s, (path, kind, realpath, symlinks
    on the way), with `all_ours` the kinds whose whole tree is theirs: the installations the
    programs on the operator's PATH load (`confine.path_prefixes`, ADR 0013 session 8) are
    answered by the same rules as Sandboy's own. `lookups`: as `inside`'s."""
    realpath = os.path.realpath if lookups is None else lookups.realpath
    roots = [realpath(r) for r in write_roots]
    all_ours = ALL_OURS if all_ours is None else all_ours  # (read at call time: the mutation check sets it)
    found = []
    for path, kind, real, links in (_resolved() if resolved is None else resolved):
        # (a row EQUAL to a write root — `fs.write = ["{repo}/src"]` for an editable install, a
        # flat layout's checkout granted whole, a PYTHONPATH entry granted — makes that write
        # root read-only whole, warning said: the interpreter imports `sitecustomize` and any
        # module from every entry, so a new file beside the package runs at the next `sandboy`)
        here = []
        for root in roots:
            if is_within(real, root):
                here.append((real, kind, root))
            elif kind in all_ours and is_within(root, real):
                here.append((root, kind, root))
            here.extend((link, kind, root) for link in links if is_within(link, root))
        if here:
            found.append((path, kind, tuple(here)))
    return tuple(found)


def candidates_to_watch(write_roots, lookups=None) -> tuple:
    """`candidates` less the policy file's rows, for a kept cage's fingerprint: a plan cache hit
    has just read that file by its path, and the file's identity is in the entry's key
    (`plan_cache._key`), so its row stands without a lookup — and the hit imports none of this
    module for it (≈ 0.5 ms: this module brings the resolver)."""
    return tuple(row for row in candidates(write_roots, lookups=lookups) if row[1] != "policy file")


def present(candidates, made_if_missing=None) -> list:
    """`inside`'s answer from its `candidates`: the rows whose installation path exists now (or
    was made: the kinds in `made_if_missing`), nested ones folded into the outermost."""
    made_if_missing = MADE_IF_MISSING if made_if_missing is None else made_if_missing
    found: list = []
    for path, kind, here in candidates:
        if os.path.lexists(path) or (kind in made_if_missing and _made(path)):
            found.extend(here)
    found.sort(key=lambda row: len(row[0]))
    kept: list = []
    outer = PathSet()  # (a set of the kept paths: the rows of many pipx environments, ADR 0013 session 8)
    for row in found:
        # anything under a directory bound read-only (a symlink too) cannot be changed anyway
        if not outer.covers(row[0]):
            kept.append(row)
            outer.add(row[0])
    return kept


def warning(path: str, kind: str, root: str) -> str:
    """The launch warning for one protected path of the installation."""
    return (f"fs: {path} is {WHY[kind]}, inside the write root {root}: read-only in the cage, so that "
            "the next `sandboy` on this host cannot run what the command leaves there "
            "(fs.protect_defaults = false gives that away; ADR 0024)")


def first_import_warning(write_roots, lookups=None) -> list:
    """[warning] where this process imports from a directory inside a write root before the
    standard library and its installation: `sys.path[0]` of `python -m sandboy`, `python -c` or
    a script there (the working directory, the script's directory), without `-P` /
    `PYTHONSAFEPATH` (ADR 0024, session 7). A module the command leaves there — `sandboy/`, or
    one named like a standard module (`signal.py`, `keyword.py`) — runs at the next such start
    from that directory, before any Sandboy code: nothing Sandboy could check then. It is not
    protected (it is the run's working directory, every name in it a possible module) nor
    judged after the run (any new `.py` named like one of ~300 standard modules — `test.py`,
    `types.py`, `queue.py` — would be a finding); said, with the fix. [] otherwise (the
    `sandboy` command's own `bin/` directory is in the installation's prefix). `lookups`: as
    `inside`'s."""
    if sys.flags.safe_path or not sys.path or sys.path[0] is None:
        return []
    realpath = os.path.realpath if lookups is None else lookups.realpath
    first = realpath(sys.path[0] or os.getcwd())  # '' is the working directory (-c, the REPL)
    if any(is_within(first, real) for _path, kind, real, _links in _resolved() if kind in ALL_OURS):
        return []  # one of the installation's own directories: protected with it
    root = next((r for r in (realpath(w) for w in write_roots) if is_within(first, r)), None)
    if root is None:
        return []
    return [f"fs: {first} is where the Python running Sandboy imports from first (sys.path[0]: started as "
            f"`python -m sandboy`, `python -c` or a script there, without -P), inside the write root {root}: a "
            "module the command leaves there (`sandboy/`, or one named like a standard module: `signal.py`) runs "
            "at the next such start from that directory, before Sandboy — start Sandboy as the `sandboy` command, "
            "or `python -P -m sandboy` (PYTHONSAFEPATH=1) (ADR 0024)"]
