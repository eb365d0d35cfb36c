"""The Python interpreter pre-commit's hook runs, where a write root holds it (ADR 0019, session 7).

pre-commit's stub in `.git/hooks` execs `INSTALL_PYTHON -mpre_commit hook-impl ...`, where
`INSTALL_PYTHON` is the interpreter `pre-commit install` ran under. In the usual Python project
that is the repository's own `.venv/bin/python` (pre-commit is a dev dependency), inside the
write root `{repo}`. That interpreter runs, on the operator's next `git commit` and before
pre-commit does anything, every `.pth` file of its site-packages (lines starting `import`),
`sitecustomize`, then the `pre_commit` package and what it imports — files a caged command may
write. A `.pth` planted there ran on the operator's next commit (rvgit6's probe).

The environment stays writable (`pip install` in a step must keep working), so nothing here
prevents; the parent judges after the run what of that start-up code was made or changed
(`judge`), as it judges hooks, and warns at launch (`launch_warnings`) that the configuration
lets a step change what the next commit runs, naming the two fixes: pre-commit installed outside
the repository (`pipx install pre-commit`), or `fs.protect = [".venv"]`.

Judged (made or changed during the run; everything where the environment itself is another
directory than at launch):
- the interpreter path and `pyvenv.cfg` (`home =` names the standard library it runs);
- every `.pth` in its site-packages holding an executable line, or adding a directory that holds
  `sitecustomize`, `usercustomize`, a `pre_commit` or a module another `.pth`'s directory
  provides (the first in name order shadows the other);
- `sitecustomize` / `usercustomize` (any suffix, their byte code) in site-packages and in every
  directory a `.pth` adds to the path (an editable install's `src/`);
- the modules an executable `.pth` imports (each top-level name of site-packages its lines
  mention: setuptools' `distutils-precedence.pth` imports `_distutils_hack`);
- the `pre_commit` distribution and every distribution it requires, transitively (their
  top-level packages and modules as their RECORD lists them, walked whole; `pre_commit` by name
  whatever its RECORD says; their `.dist-info` themselves: a changed METADATA or RECORD — read
  after the run — has its directory judged entry by entry);
- an `entry_points.txt` registering a plugin for one of those (`[virtualenv.activate]`: virtualenv
  imports every such plugin when pre-commit makes a hook's environment).
What the closure follows is read with care (session 8): a METADATA's headers up to their first
empty line only (the long description after it can be megabytes), a RECORD whole; where either
cannot be read — no regular file, a header block over HEADER_READ_LIMIT, a RECORD over
PTH_READ_LIMIT — or the closure exceeds MAX_DISTRIBUTIONS, the run fails closed (a finding
without a path), as beyond ENTRY_BUDGET.
Not judged: what pre-commit imports beyond its declared requirements, the standard library
(outside the environment), the interpreter's shared libraries.

Stdlib only, no subprocess: running that interpreter would run what we look for.
"""

import os
import stat

PTH_READ_LIMIT = 1 << 20       # bytes of one .pth file read (site.py reads any size; fail closed beyond)
HEADER_READ_LIMIT = 256 << 10  # bytes of a METADATA's header block (under 10 KiB measured here; fail closed beyond)
ENTRY_BUDGET = 50_000          # files looked at per environment; beyond it the run fails closed
MAX_DISTRIBUTIONS = 200        # pre_commit's requirement closure (about 10 in practice)
CUSTOMIZE = ("sitecustomize", "usercustomize")
PACKAGE = "pre_commit"
# (`re` is imported by the post-run judge only: the launch warning runs on the build path)
_WORD = r"[A-Za-z_][A-Za-z0-9_]*"
_REQUIREMENT = r"^Requires-Dist:\s*([A-Za-z0-9][A-Za-z0-9._-]*)([^;]*)(;.*)?$"
WHY_FIX = ("install pre-commit outside the repository (`pipx install pre-commit && pre-commit install`) "
           "or keep that environment read-only in the cage (fs.protect = [\"<environment>\"])")


def stub_python(stub: bytes):
    """`INSTALL_PYTHON` of pre-commit's stub (`INSTALL_PYTHON=/x/.venv/bin/python`, shell-quoted
    where needed: `'/a b/python'`), or None (also for the empty value of a template)."""
    for line in stub.splitlines():
        if line.startswith(b"INSTALL_PYTHON="):
            import shlex

            try:
                words = shlex.split(os.fsdecode(line[len(b"INSTALL_PYTHON="):]))
            except ValueError:
                return None
            return words[0] if words and words[0].startswith("/") else None
    return None


def environment(python: str) -> str:
    """The environment `python` (`<env>/bin/python`, as the stub names it: not resolved) runs in."""
    return os.path.dirname(os.path.dirname(python))


def site_dirs(python: str) -> list:
    """`<env>/lib*/python3*/site-packages` that exist (as the interpreter's `site` makes them)."""
    env, found = environment(python), []
    for lib in ("lib", "lib64"):
        base = os.path.join(env, lib)
        try:
            names = sorted(n for n in os.listdir(base) if n.startswith("python"))
        except OSError:
            continue
        for name in names:
            site = os.path.join(base, name, "site-packages")
            if os.path.isdir(site) and os.path.realpath(site) not in [os.path.realpath(s) for s in found]:
                found.append(site)
    return found


def identities(python: str) -> tuple:
    """At launch: which directories the environment and its site-packages are (st_dev, st_ino).
    An environment renamed into place afterwards (`mv .venv old && mv tests/fx/venv .venv`, a
    tracked fixture whose files all keep their old ctime) is another: then judged whole."""
    from sandboy.confine.gitcheck import _identity  # (the git check's: loaded whenever this runs)

    env = environment(python)
    return (_identity(env), *((site, _identity(site)) for site in site_dirs(python)))


def _read_lines(path: str, limit: int = PTH_READ_LIMIT):
    """The lines of a `.pth` file (or RECORD, entry_points.txt): a regular file only, never
    blocking, symlinks followed as site.py does; None when it is anything else or over `limit`."""
    from sandboy.regular_files import read_regular

    try:
        data = read_regular(path, limit, follow_link=True)
    except OSError:
        return None
    return None if data is None else data.decode("utf-8", "replace").splitlines()


def _executable(line: str) -> bool:
    # site.py execs a line starting "import " or "import\t"; wider here (leading blanks, any
    # continuation), failing closed
    return line.lstrip().startswith("import")


def _path_lines(site: str, lines) -> list:
    """The directories a `.pth` adds to the path (site.py: relative to the site directory)."""
    return [os.path.normpath(os.path.join(site, line.rstrip())) for line in lines
            if line.strip() and not line.startswith("#") and not _executable(line)]


def _names_in(directory: str) -> list:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _holds(directory: str, stems) -> list:
    """Entries of `directory` (and its `__pycache__`) that Python imports under one of `stems`."""
    found = [os.path.join(directory, n) for n in _names_in(directory) if n.split(".", 1)[0] in stems]
    cache = os.path.join(directory, "__pycache__")
    found += [os.path.join(cache, n) for n in _names_in(cache) if n.split(".", 1)[0] in stems]
    return found


def _modules_in(directory: str, cache: dict) -> set:
    """The top-level module names `directory` provides (modules, byte code, extensions,
    packages with an `__init__`), listed once per check."""
    if directory not in cache:
        names = set()
        for name in _names_in(directory):
            if name.endswith((".py", ".pyc", ".so")):
                names.add(name.split(".", 1)[0])
            elif os.path.isfile(os.path.join(directory, name, "__init__.py")):
                names.add(name)
        cache[directory] = names
    return cache[directory]


def _normal(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def _distributions(sites) -> dict:
    """normalised name -> every `.dist-info` directory of that name, over `sites` (all of them:
    which one a listing gives first is the command's choice — a `pre_commit-0.dist-info` it
    makes beside the real one must not stand in for it)."""
    found: dict = {}
    for site in sites:
        for name in _names_in(site):
            if name.endswith(".dist-info"):
                found.setdefault(_normal(name[:-len(".dist-info")].rsplit("-", 1)[0]), []).append(
                    os.path.join(site, name))
    return found


def _headers(path: str):
    """The header lines of a METADATA file, up to the first EMPTY line: the long description
    after it can be megabytes (a whole METADATA read against a bound gave no headers at all for
    one over it: its requirements went unjudged). Empty, not blank: a continuation line holding
    only blanks (setuptools' `License:` with the licence's text) belongs to the headers, as for
    the email parser importlib.metadata reads them with. [] when there is no METADATA; None when
    the headers cannot be known — not a regular file, unreadable, or no empty line within
    HEADER_READ_LIMIT bytes (the caller fails closed)."""
    from sandboy.regular_files import read_regular

    try:
        data = read_regular(path, HEADER_READ_LIMIT, follow_link=True, head=True)
    except FileNotFoundError:
        return []
    except OSError:
        return None
    lines = data.split(b"\n")
    complete = len(data) < HEADER_READ_LIMIT
    if not complete:
        lines.pop()  # cut at the bound: the last piece is no whole line
    for at, line in enumerate(lines):
        if line in (b"", b"\r"):
            return [raw.rstrip(b"\r").decode("utf-8", "replace") for raw in lines[:at]]
    if complete:  # headers alone, read to the end of the file
        return [raw.rstrip(b"\r").decode("utf-8", "replace") for raw in lines]
    return None


def _closure(dists: dict, start: str) -> tuple:
    """(the `.dist-info` directories of `start` and of every distribution it requires (not for
    an extra), transitively — what `-mpre_commit` may import; what stopped the walk: a METADATA
    whose headers cannot be known, more than MAX_DISTRIBUTIONS — the caller fails closed).
    Markers are not evaluated: a requirement for another platform or Python is judged too
    (fails closed)."""
    import re

    pending, seen, out, unknown = [_normal(start)], set(), [], []
    while pending:
        name = pending.pop()
        if name in seen or name not in dists:
            continue
        if len(out) >= MAX_DISTRIBUTIONS:
            unknown.append(f"more than {MAX_DISTRIBUTIONS} distributions in pre-commit's requirements")
            break
        seen.add(name)
        out += dists[name]
        for dist_info in dists[name]:
            metadata = os.path.join(dist_info, "METADATA")
            headers = _headers(metadata)
            if headers is None:
                unknown.append(f"{metadata}: no regular file with a header block within "
                               f"{HEADER_READ_LIMIT >> 10} KiB, so what it requires is not known")
                continue
            for line in headers:
                match = re.match(_REQUIREMENT, line)
                if match and "extra" not in (match.group(3) or ""):
                    pending.append(_normal(match.group(1)))
    return out, unknown


def _top_level(dist_info: str):
    """The top-level names a distribution installed (first components of its RECORD, beside its
    `.dist-info`; not `..`: console scripts in bin/ are not what `-mpre_commit` runs); None
    where a RECORD is there but cannot be read (not a regular file, over PTH_READ_LIMIT: the
    caller fails closed — its files are not known)."""
    record = os.path.join(dist_info, "RECORD")
    lines = _read_lines(record)
    if lines is None and os.path.lexists(record):
        return None
    names = set()
    for line in lines or ():
        first = line.split(",", 1)[0].split("/", 1)[0]
        if first and first not in ("..", "__pycache__") and not first.endswith((".dist-info", ".data")):
            names.add(first.split(".", 1)[0])  # `cfgv.py`, `_yaml.cpython-311-....so`, `pre_commit`
    return names


class _Judge:
    def __init__(self, new, writable, full: bool):
        self.new, self.writable, self.full = new, writable, full
        self.found: list = []
        self.paths: set = set()  # the findings' paths again: a renamed-in environment has thousands
        self.left = ENTRY_BUDGET

    def add(self, path, why: str) -> None:
        if path not in self.paths:
            self.paths.add(path)
            self.found.append((path, why))

    def file(self, path: str, why: str, full=False) -> None:
        """A finding where `path` (not followed) was made or changed during the run (or `full`)
        and the command could write it."""
        if (full or self.full or self.new(path) is not None) and self.writable(path):
            self.add(path, why)

    def tree(self, path: str, why: str) -> None:
        """Every file at or below `path` (symlinks not followed; a directory made or renamed in
        during the run has everything below it judged: a rename keeps their ctimes), bounded."""
        pending = [(path, self.full)]
        while pending:
            current, inherited = pending.pop()
            self.left -= 1
            if self.left < 0:
                self.add(None, f"{path}: more than {ENTRY_BUDGET:,} files of the interpreter pre-commit's hook "
                         "runs to look through: not checked to the end")
                return
            try:
                st = os.lstat(current)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                here = inherited or self.new(current) is not None
                pending.extend((os.path.join(current, name), here) for name in _names_in(current))
            else:
                self.file(current, why, inherited)


def judge(python: str, launch, new, writable, reaches, full: bool = False) -> list:
    """[(path, why)]: what of the start-up code of `python` (pre-commit's `INSTALL_PYTHON`) the
    run made or changed. `launch`: `identities(python)` at launch (None: unknown), `new(path)`:
    its lstat when made or changed during the run (else None), `writable(path)`: inside a write
    root; `reaches(path)`: a write root lies at, above or below it. `full`: judge everything
    (the repository was moved in)."""
    import re

    sites = site_dirs(python)
    env = environment(python)
    if not reaches(env) and not any(reaches(s) for s in sites):
        return []
    if launch is not None and launch != identities(python):
        full = True  # the environment or a site directory is another than at launch
    j = _Judge(new, writable, full)
    why = f"start-up code of {python}, the interpreter pre-commit's hook runs, made or changed during the run"
    for path in dict.fromkeys((python, os.path.realpath(python), os.path.join(env, "pyvenv.cfg"))):
        j.file(path, why)
    extra, imported = [], set()
    by_pth: dict = {}  # each .pth -> the directories it adds
    changed_paths: list = []  # path-only .pth files made or changed, not yet findings
    for site in sites:
        for name in sorted(_names_in(site)):
            path = os.path.join(site, name)
            if not name.endswith(".pth"):
                if name.split(".", 1)[0] in CUSTOMIZE:
                    j.tree(path, why)
                continue
            lines = _read_lines(path)
            changed = full or new(path) is not None
            if lines is None:
                if changed and writable(path):
                    j.add(path, f"a .pth file the check cannot read ({why})")
                continue
            dirs = _path_lines(site, lines)
            extra += [d for d in dirs if d not in extra]
            code = [line for line in lines if _executable(line)]
            imported.update(w for line in code for w in re.findall(_WORD, line))
            by_pth[path] = dirs
            if changed and writable(path):
                if code:
                    j.add(path, f"a .pth file with an import line ({why})")
                elif any(_holds(d, (*CUSTOMIZE, PACKAGE)) for d in dirs):
                    j.add(path, f"a .pth file adding a directory that holds sitecustomize or pre_commit ({why})")
                else:
                    changed_paths.append(path)
        for path in _holds(os.path.join(site, "__pycache__"), CUSTOMIZE):
            j.file(path, why)
    # A path-only .pth made or changed whose directory holds a module another .pth's directory
    # provides: `site` appends .pth directories in the .pth files' name order, so one sorting
    # first shadows it (pre-commit, or a requirement of it, reached through a .pth)
    modules: dict = {}
    for path in changed_paths:
        own = set().union(*(_modules_in(d, modules) for d in by_pth[path]))
        others = set().union(*(_modules_in(d, modules) for other, dirs in by_pth.items() if other != path
                               for d in dirs if d not in by_pth[path]))
        shadowed = sorted(own & others)
        if shadowed:
            j.add(path, f"a .pth file adding a directory that holds {', '.join(shadowed[:5])}, also provided "
                  f"through another .pth (one of them shadows the other) ({why})")
    for directory in extra:  # an editable install's src/: a sitecustomize.py there runs at start
        if reaches(directory):
            for path in _holds(directory, CUSTOMIZE):
                j.tree(path, why)
    # the modules old .pth lines import (by name; a new .pth is a finding itself), and the
    # pre_commit distribution with what it requires
    dists = _distributions([*sites, *extra])
    tops = {(site, PACKAGE) for site in sites}  # what `-mpre_commit` runs, whatever a RECORD says
    whole = []  # directories judged entry by entry: the closure's metadata there changed
    closure, unknown = _closure(dists, PACKAGE)
    for reason in unknown:  # (fails closed, like the entry budget: a finding without a path)
        j.add(None, f"{reason}: the start-up code of {python}, the interpreter pre-commit's hook runs, "
              "not checked to the end")
    _plugins(j, sites, {_distribution_name(d) for d in closure}, new, writable, why)
    for dist_info in closure:
        base = os.path.dirname(dist_info)
        if reaches(base):  # (its RECORD read only where the command could write)
            names = _top_level(dist_info)
            if names is None:
                j.add(None, f"{dist_info}/RECORD: no regular file within {PTH_READ_LIMIT >> 20} MiB, so what it "
                      f"installed is not known: the start-up code of {python}, the interpreter pre-commit's "
                      "hook runs, not checked to the end")
            tops |= {(base, name) for name in names or ()}
            # METADATA and RECORD decide what is judged here: read after the run, so a change to
            # them (requirements dropped, RECORD emptied) is a finding, and their directory is
            # then judged whole — the files they named before are not known any more
            before = len(j.found)
            j.tree(dist_info, why)
            if len(j.found) > before and base not in whole:
                whole.append(base)
    for base in whole:
        tops |= {(base, name.split(".", 1)[0]) for name in _names_in(base)}
    for site in sites:
        tops |= {(site, name.split(".", 1)[0]) for name in _names_in(site)
                 if name.split(".", 1)[0] in imported and not name.endswith((".pth", ".dist-info"))}
    wanted: dict = {}  # base directory -> the top-level names judged there
    for base, name in tops:
        if reaches(base):  # (not Sandboy's own environment reached through a .pth: nothing the command could write)
            wanted.setdefault(base, set()).add(name)
    for base, names in sorted(wanted.items()):  # one listing of each directory, however many names
        for path in sorted(os.path.join(base, n) for n in _names_in(base) if n.split(".", 1)[0] in names):
            j.tree(path, why)
        for path in _holds(os.path.join(base, "__pycache__"), names):
            j.file(path, why)
    return j.found


def _distribution_name(dist_info: str) -> str:
    return _normal(os.path.basename(dist_info)[:-len(".dist-info")].rsplit("-", 1)[0])


def _plugins(j, sites, closure_names, new, writable, why) -> None:
    """An `entry_points.txt` made or changed during the run (its `.dist-info` may be new) that
    registers a plugin in a group of a distribution pre-commit requires (`[virtualenv.activate]`):
    that distribution imports every such plugin when it runs — virtualenv does, when pre-commit
    makes a hook's environment with `INSTALL_PYTHON -mvirtualenv` on the operator's commit
    (rvsec7). A console script's `[console_scripts]` is no one's plugin: `pip install` stays quiet."""
    for site in sites:
        for name in _names_in(site):
            if not name.endswith(".dist-info"):
                continue
            dist_info = os.path.join(site, name)
            path = os.path.join(dist_info, "entry_points.txt")
            if not (j.full or new(path) is not None or new(dist_info) is not None) or not writable(path):
                continue
            groups = [line.strip()[1:-1] for line in _read_lines(path) or () if line.strip().startswith("[")]
            if any(_normal(group.split(".", 1)[0]) in closure_names for group in groups):
                j.add(path, f"an entry point plugin for a distribution pre-commit requires ({why})")


def launch_warning(hook: str, python: str, root: str) -> str:
    """The launch warning for a pre-commit stub whose interpreter lies inside the write root `root`."""
    env = environment(python)
    return (f"fs: {hook} (pre-commit's hook) runs {python}, inside the write root {root}: the command can "
            f"change what the operator's next `git commit` runs (a .pth, sitecustomize or the pre_commit "
            f"package of {env}). What it changes there is judged after the run and fails it (125, ADR 0019); "
            f"to keep that environment writable without the risk, "
            + WHY_FIX.replace("<environment>", env))


def launch_warnings(write_roots, managers=None) -> list:
    """At launch (the cage's build): one warning per pre-commit stub of a write root's repository
    whose `INSTALL_PYTHON` lives in an environment inside a write root. One directory read per
    write root holding a `.git` directory (the stubs are read only where a hook is installed),
    none where the protected paths' resolution made the same discovery (`managers`)."""
    from sandboy.confine.protected import discover_managers, hooks_paths
    from sandboy.paths import is_within

    roots = [os.path.realpath(r) for r in write_roots if os.path.isdir(r)]
    warnings = []
    for root in roots:
        if not os.path.isdir(os.path.join(root, ".git")):
            continue
        pythons: list = []
        discover_managers(root, [os.path.join(root, ".git", "hooks"), *hooks_paths(root)], managers, pythons)
        for stub, python in dict.fromkeys(pythons):
            env = os.path.realpath(environment(python))
            holder = next((r for r in roots if is_within(env, r)), None)
            if holder is not None:
                warnings.append(launch_warning(stub, python, holder))
    return warnings
