"""What the programs on the operator's PATH load, where a write root holds it (ADR 0013, session 8).

`confine.path_dirs` keeps a PATH directory inside a write root read-only (`~/.local/bin`,
`~/.pyenv/shims`): no `git` can be planted there. What the programs found there load lives
beside it in the same home, and was writable: a pyenv version's standard library
(`~/.pyenv/versions/3.11.7/lib/python3.11/os.py`, run by every `python` through the shims), an
nvm node's `lib/node_modules` (npm itself), the user site `~/.local/lib/python3.X/site-packages`
(a `.pth` there runs at every start of that Python), a pipx tool's environment its
`~/.local/bin` link leads to. A command whose policy may write the home planted code the
operator's next (often root) `python`, `node` or `npm` ran.

Decision — for each PATH directory `path_dirs.on_path` protects (outside the run's working
directory and repository), what its programs load, where a write root holds it:
- a version manager's tree: a PATH directory whose real path passes a component in
  `MANAGER_TREES` below the write root (`~/.pyenv/shims`, `~/.nvm/versions/node/v20/bin`,
  `~/.asdf/installs/python/3.12/bin`, `~/.rustup/toolchains/x/bin`,
  `~/.sdkman/candidates/java/current/bin`) protects the manager's root WHOLE (its interpreters,
  plugins, hooks and the script a start-up file sources: `nvm.sh`, `sdkman-init.sh`): the root
  is the directory holding that component, taken where its name starts with a dot or it holds a
  `shims` directory (the managers' own layouts; a project's `versions/` is no manager). A PATH
  directory holding `rustup` (its proxies: `~/.cargo/bin/cargo`) protects `RUSTUP_HOME`
  (`~/.rustup`), the toolchains they run;
- otherwise an installation prefix: a PATH directory `<P>/bin` (or `sbin`) protects `<P>`'s
  `CODE_DIRS` that exist (`lib`, `lib64`, `libexec`, `include`, a venv's `pyvenv.cfg`): not
  `share` (`~/.local/share` is where programs keep their data); a Go toolchain's root
  (`VERSION`, `src`, `pkg`) whole: its `src/` is compiled into every binary. The Python user base
  (`PYTHONUSERBASE`, else `~/.local`) gets its `lib` made when missing, as `own_install` makes
  the running interpreter's user site: every Python on the host reads
  `<user base>/lib/pythonX.Y/site-packages` unasked;
- a program there that is a symlink into another place a write root holds (pipx:
  `~/.local/bin/black -> ~/.local/share/pipx/venvs/black/bin/black`; `~/bin/node ->
  ~/opt/node/bin/node`): the prefix (or manager root) of the directory it leads to by the same
  two rules, or the file itself where that directory is no `bin`; the symlinks on the way inside
  a write root as themselves. Followed `LINK_DEPTH` levels (the pipx environment's
  `bin/python` leads to a pyenv version). A script there whose `#!` names an interpreter in a
  write root (`pip install --user` run by a venv's or a pyenv version's Python) leads to that
  interpreter's directory the same way — where its name lies (the venv) and where it resolves.

Enforced like Sandboy's own installation (ADR 0024): read-only binds under the namespace tier,
a Landlock read-only split without it — refused, never merely reported: nothing a build makes
lives in another installation's code, and a post-run look at a standard library would be a walk
of thousands of files. Rows come back in `own_install`'s shape and through its rules
(`candidates`/`present`: a write root inside one is protected itself, nested rows folded), so
there is one notion of an installation's paths. A row holding the run's working directory or
repository (or inside one) is project work: left writable, said in a note.
"""

import os

from sandboy.confine.landlock import existing_realpath
from sandboy.paths import is_within

CODE_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libexec", "include", "pyvenv.cfg")
MANAGER_TREES = frozenset({"shims", "versions", "installs", "toolchains", "candidates"})
GO_ROOT = frozenset({"VERSION", "src", "pkg", "bin"})  # a GOROOT (`~/sdk/go1.22`, golang.org/dl): taken whole
LINK_DEPTH = 2
MAX_SCRIPTS = 512  # `#!` lines read per PATH directory (one open and read each)

PREFIX = "PATH prefix"
USER_BASE = "PATH user base"
MANAGER = "PATH version manager"
TARGET = "PATH link target"
KINDS = frozenset({PREFIX, USER_BASE, MANAGER, TARGET})
WHY = {
    PREFIX: "code the programs of a directory on the operator's PATH load (its installation prefix: a Python's "
            "standard library and site-packages, node's lib/node_modules, libexec helpers)",
    USER_BASE: "the Python user base's library beside a directory on the operator's PATH (every Python on the host "
               "runs the .pth files of its lib/pythonX.Y/site-packages)",
    MANAGER: "the version manager behind a directory on the operator's PATH (the interpreters and tools its shims "
             "or proxies run, their libraries, plugins and hooks, the script a start-up file sources)",
    TARGET: "what a program on the operator's PATH links to (or a symlink on the way there)",
}


def _manager_root(real: str, root: str, home: str):
    """The version manager's root a directory `real` (a realpath inside the write root `root`)
    belongs to, or None (see the module's decision): a realpath, but for RUSTUP_HOME (as named)."""
    parts = real[len(root):].strip("/").split("/") if real != root else []
    at = root
    for part in parts:
        if part in MANAGER_TREES and at != root and (os.path.basename(at).startswith(".")
                                                    or os.path.isdir(f"{at}/shims")):
            return at
        at = f"{at}/{part}"
    if os.path.lexists(f"{real}/rustup"):
        return os.path.abspath(os.environ.get("RUSTUP_HOME") or os.path.join(home, ".rustup"))
    return None


def _code_of(bin_dir: str, root: str, home: str, user_base: str) -> list:
    """[(path, kind, real)] of what the programs in `bin_dir` (a realpath inside `root`) load;
    `real`: the path is known to be a realpath (no lookup left to make), else it is resolved."""
    manager = _manager_root(bin_dir, root, home)
    if manager is not None:
        return [(manager, MANAGER, is_within(bin_dir, manager))]
    if os.path.basename(bin_dir) not in ("bin", "sbin"):
        return []
    prefix = os.path.dirname(bin_dir)
    found, names = [], set()
    try:  # one listing, not a lookup per name (a home with many pipx environments: many prefixes)
        with os.scandir(prefix) as entries:
            for entry in entries:
                names.add(entry.name)
                if entry.name in CODE_DIRS:
                    found.append((entry.path, USER_BASE if prefix == user_base and entry.name == "lib" else PREFIX,
                                  not entry.is_symlink()))
    except OSError:
        return found
    if GO_ROOT <= names:
        return [(prefix, PREFIX, True)]  # a Go toolchain: `src/` is compiled into every binary, `pkg/tool` compiles
    if prefix == user_base and not any(kind == USER_BASE for _path, kind, _real in found):
        found.append((f"{prefix}/lib", USER_BASE, True))  # missing: `present` makes it
    return found


def _leads_to(bin_dir: str, roots: list, scripts: bool) -> list:
    """[(target, links)] of what the programs in `bin_dir` (a realpath) lead to in a write root,
    outside `bin_dir` itself (`python3 -> python3.11` beside it is the same installation):
    `target` a realpath of a file whose directory the rules then look at, `links` the symlinks
    met on the way (after the program itself). A symlink leads to its target; with `scripts`, a
    regular file's `#!` interpreter (`pip install --user` run by a pyenv or venv Python writes
    `#!/home/u/.pyenv/versions/3.11.7/bin/python3.11`) leads to it twice: where its name lies
    (a venv's `bin/python`) and where it resolves to (the interpreter the venv was made from).
    At most MAX_SCRIPTS `#!` lines per directory."""
    from sandboy.confine.protected import symlinks_on_the_way

    found = []
    try:
        with os.scandir(bin_dir) as entries:
            programs = [(entry.path, entry.is_symlink()) for entry in entries]
    except OSError:
        return found

    def inside_a_root(target):
        return (target is not None and os.path.dirname(target) != bin_dir
                and any(is_within(target, r) for r in roots))

    read = 0
    for program, is_link in programs:
        if is_link:
            target = existing_realpath(program)
            if not inside_a_root(target):
                continue
            try:
                text = os.readlink(program)
            except OSError:
                continue
            # Most links (pipx's `../share/pipx/venvs/black/bin/black`) lead straight to their
            # target: the text, past leading `..` from the real `bin_dir`, names the real path
            # itself — no other link on the way, and no walk of every component to find none
            parts = [part for part in text.split("/") if part not in ("", ".")]
            while parts and parts[0] == "..":
                parts.pop(0)
            direct = ".." not in parts and os.path.normpath(os.path.join(bin_dir, text)) == target
            found.append((target, () if direct else tuple(symlinks_on_the_way(program)[1:])))
        elif scripts and read < MAX_SCRIPTS:
            read += 1
            interpreter = _interpreter(program)
            if interpreter is None:
                continue
            named = os.path.join(_real(os.path.dirname(interpreter)), os.path.basename(interpreter))
            target = existing_realpath(interpreter)
            links = () if target == interpreter else tuple(symlinks_on_the_way(interpreter))
            for one in dict.fromkeys((named, target)):
                if inside_a_root(one):
                    found.append((one, links))
    return found


def _interpreter(script: str):
    """The absolute interpreter a regular file's `#!` line names (not `/usr/bin/env`'s argument:
    that one is looked up on PATH, whose directories have their own rules), or None. Never
    blocks: a FIFO or device named like a program is not read (`regular_files.read_regular`)."""
    from sandboy.regular_files import read_regular

    try:
        head = read_regular(script, 256, head=True)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].split()
    if not words or not words[0].startswith(b"/"):
        return None
    return os.path.normpath(os.fsdecode(words[0]))


def _resolved(path: str, kind: str, real: bool) -> tuple:
    """`own_install`'s row (path, kind, realpath, symlinks on the way) for `path`, or None where it
    does not exist. `real`: `path` is known to be a realpath (see _code_of)."""
    from sandboy.confine.protected import symlinks_on_the_way

    if real:
        return path, kind, path, ()
    resolved = existing_realpath(path)
    if resolved is None:
        return None
    return path, kind, resolved, tuple(symlinks_on_the_way(path))


def _real(path: str) -> str:
    """`os.path.realpath`, asked of the kernel where the path exists (`landlock.existing_realpath`:
    one open and one readlink, not an lstat per component in Python)."""
    return existing_realpath(path) or os.path.realpath(path)


def inside(write_roots, protected_dirs, work=(), home=None, notes=None) -> list:
    """[(realpath, kind, write root)] of what the programs in `protected_dirs` (`path_dirs.on_path`'s
    protect rows: (entry, realpath, write root)) load, that a write root holds and exists now
    (the user base's `lib` made where missing): `own_install.inside`'s shape, answered by its
    rules. `notes` (a list) gets a launch warning per such path left writable because it holds
    the run's working directory or repository, or lies inside one."""
    from sandboy.confine.own_install import candidates, present

    if not protected_dirs:
        return []
    home = _real(home or os.path.expanduser("~"))
    user_base = _real(os.environ.get("PYTHONUSERBASE") or os.path.join(home, ".local"))
    roots = [_real(r) for r in write_roots]
    wanted: dict = {}  # path -> (kind, whether it is a realpath), in order
    links: dict = {}  # symlinks on the way to a linked program's target, inside a write root
    pending = [(real, root, LINK_DEPTH) for _entry, real, root in protected_dirs if is_within(real, root)]
    seen: set = set()
    managers: list = []  # the version managers' roots found so far (each taken whole)
    while pending:
        bin_dir, root, depth = pending.pop(0)
        if bin_dir in seen:
            continue
        seen.add(bin_dir)
        for path, kind, real in _code_of(bin_dir, root, home, user_base):
            wanted.setdefault(path, (kind, real))
            if kind == MANAGER:
                managers.append(path)
        if depth == 0:
            continue
        for target, on_the_way in _leads_to(bin_dir, roots, scripts=depth == LINK_DEPTH):
            for link in on_the_way:  # (`~/bin/python -> ~/current -> ~/.pyenv/...`: `~/current` too)
                if any(is_within(link, r) for r in roots):
                    links.setdefault(link, TARGET)
            if any(is_within(target, p) for p in managers):
                continue  # (a manager's root is taken whole)
            target_root = next(r for r in roots if is_within(target, r))
            parent = os.path.dirname(target)
            if os.path.basename(parent) in ("bin", "sbin") or _manager_root(parent, target_root, home):
                pending.append((parent, target_root, depth - 1))
            else:
                wanted.setdefault(target, (TARGET, True))
    works = [w for w in (_real(w) for w in work if w) if not is_within(home, w)]
    resolved = [row for row in (_resolved(path, kind, real) for path, (kind, real) in wanted.items())
                if row is not None]
    resolved += [(link, kind, link, ()) for link, kind in links.items()]  # the link as itself
    kept = []
    for row in resolved:
        real = row[2]
        project = next((w for w in works if is_within(w, real) or is_within(real, w)), None)
        if project is None:
            kept.append(row)
        elif notes is not None:
            notes.append(project_note(real, row[1], project))
    return present(candidates(write_roots, tuple(kept), KINDS), made_if_missing=frozenset({USER_BASE}))


def warning(path: str, kind: str, root: str) -> str:
    """The launch warning for one protected path."""
    return (f"fs: {path} is {WHY[kind]}, inside the write root {root}: read-only in the cage, so that the "
            "operator's next `python`, `node` or other program found on their PATH cannot run what the command "
            "leaves there — installing into it (`pip install --user`, `npm install -g`, a new interpreter "
            "version) fails; fs.protect_defaults = false gives that away (ADR 0013)")


def project_note(path: str, kind: str, work: str) -> str:
    return (f"fs: {path} is {WHY[kind]}, and holds or lies in the run's working directory or repository {work}: "
            "it stays writable (project work), so a command can change what that program runs next — "
            f"fs.protect = [\"{path}\"] keeps it read-only (ADR 0013)")
