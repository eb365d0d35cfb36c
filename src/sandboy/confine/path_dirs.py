"""Directories on the operator's PATH inside a write root (ADR 0013, session 7).

The operator's next command is looked up on the PATH of the shell that started Sandboy. Where a
directory of that PATH lies inside a write root — `~/.local/bin` or `~/bin` with the home
granted, an activated `<repo>/.venv/bin`, `node_modules/.bin` — a command can plant `git`,
`sandboy` or `ls` there, found before the real one: the operator runs it next, with their rights.

Decision: a PATH directory inside a write root but OUTSIDE the run's working directory and
repository (a home's bin directories, a tool directory) is a start-up place of the host like
`.bashrc`: part of the default protected set (`fs.protect_defaults`), bound read-only under the
namespace tier, reported degraded without it — and made first where it is missing, as
`own_install.MADE_IF_MISSING` does for the user site (a command could make `~/.local/bin` and
fill it). One INSIDE the working directory or repository (an activated venv's `bin/`,
`node_modules/.bin`) stays writable — installing console scripts there is ordinary work — and
is named in a launch warning. The operator's home is never a "working directory" for this: a
run started from `~` does not make `~/.local/bin` project files.

Only absolute PATH entries (and `~/...`, which bash expands when it looks a command up): an
empty or relative entry names the directory the operator's shell is in later, which cannot be
known here (ADR 0013 says so).
"""

import os
import stat

from sandboy.paths import is_within

_RESOLVED: dict = {}  # PATH text -> ((entry, realpath, its ancestors, links on the way), ...): per process


def _link_identity(link: str):
    """(st_dev, st_ino, st_ctime_ns) of the symlink `link` (None: gone or no longer a link). A
    symlink cannot be changed in place: repointing one makes a new one (a new ctime, even where
    its inode number is reused), and a rename or hard link of an old one changes its ctime."""
    try:
        st = os.lstat(link)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns) if stat.S_ISLNK(st.st_mode) else None


def _row(entry: str) -> tuple:
    from sandboy.confine.protected import realpath_and_links

    real, on_the_way = realpath_and_links(entry)  # (one walk where no symlink is on the way)
    parts = real.split("/")
    links = tuple((link, _link_identity(link)) for link in on_the_way)
    return entry, real, frozenset(["/"] + ["/".join(parts[:i]) for i in range(2, len(parts) + 1)]), links


def _entries(path_text: str) -> tuple:
    """The absolute, distinct entries of `path_text` with their realpaths, the set of those
    realpaths' ancestors and themselves (a reuse check then needs one set intersection per
    entry to know that no write root holds it) and the symlinks on the way with their
    identities. Kept per process, but an entry with a symlink on the way is resolved again when
    one of its links is another now: in a gate, a link repointed by one step (`~/.nix-profile`)
    is seen by the next step's launch — one lstat per link (`/bin -> usr/bin`) per look."""
    cached = _RESOLVED.get(path_text)
    if cached is None:
        seen, rows = set(), []
        for entry in path_text.split(os.pathsep):
            if entry.startswith("~"):  # bash expands a literal `~/bin` in PATH (`export PATH="~/bin:$PATH"`)
                entry = os.path.expanduser(entry)
            if entry.startswith("/") and (entry := _spelled(entry)) not in seen:
                seen.add(entry)
                rows.append(_row(entry))
        cached = _RESOLVED[path_text] = _cached(rows)
    else:
        for link, identity in cached[1]:
            if _link_identity(link) != identity:
                cached = _RESOLVED[path_text] = _cached([_row(row[0]) if row[3] else row for row in cached[0]])
                break
    return cached[0]


def _spelled(entry: str) -> str:
    """`entry` without empty and `.` components — but every `..` kept where it stands: the shell
    resolves `~/link/../bin` physically (the parent of where `link` leads), and os.path.normpath's
    lexical `~/bin` protected the wrong directory while a command planted `git` in the one the
    operator's shell searches (redcage9)."""
    return "/" + "/".join(part for part in entry.split("/") if part and part != ".")


def _cached(rows: list) -> tuple:
    """(rows, every (link, identity) of theirs, distinct): what a later look compares."""
    return tuple(rows), tuple(dict.fromkeys(pair for row in rows for pair in row[3]))


def on_path(write_roots, work=(), path_text=None, home=None, lookups=None) -> tuple:
    """(protect, warn): [(entry, realpath, write root)] of the PATH directories (the process's
    `PATH`, or `path_text`) inside a write root — `protect` those outside every `work` directory
    (the run's working directory and repository; not the home), `warn` those inside one. A
    missing directory to protect is made now (where it cannot be, the command — same uid, fewer
    rights — cannot make it either). An entry reached through a symlink inside a write root
    that leads out of it (`~/.nix-profile/bin`, `~/.nix-profile -> /nix/var/...`; `~/bin ->
    /opt/tools/bin`) is one too, `root` then the root holding the link: repointing the link
    replaces the directory (`held` keeps the link, not the directory outside). String
    comparisons only but for the launch's first call and an lstat per link on the way: this
    runs again at every reuse check of a compiled cage. `lookups`: the build's
    `resolve.BuildLookups` — a build asks this three times (its protected paths' watch, their
    resolution, the launch warnings): answered once per build; None (a check) asks anew."""
    path_text = os.environ.get("PATH", "") if path_text is None else path_text
    if not path_text or not write_roots:
        return [], []
    if lookups is None:
        return _on_path(write_roots, work, path_text, home, os.path.realpath)
    return lookups.once(("path_dirs.on_path", tuple(write_roots), tuple(work), path_text, home),
                        lambda: _on_path(write_roots, work, path_text, home, lookups.realpath))


def _on_path(write_roots, work, path_text: str, home, realpath) -> tuple:
    roots = [realpath(r) for r in write_roots]
    wanted = frozenset(roots)
    inside = []  # (entry, real, root, where: the path that lies in the root)
    for entry, real, above, links in _entries(path_text):
        if not wanted.isdisjoint(above):
            inside.append((entry, real, next(root for root in roots if is_within(real, root)), real))
        elif links:
            # a link's path has a real parent (symlinks_on_the_way): string tests against the roots
            held_link = next(((link, root) for link, _identity in links for root in roots if is_within(link, root)),
                             None)
            if held_link is not None:
                inside.append((entry, real, held_link[1], held_link[0]))
    if not inside:
        return [], []  # the usual case: string lookups only, no further stat
    home = _home_real(home)
    # a working directory at or above the home (`~`, `/home`, `/`) does not make the home's bin
    # directories project files
    works = [w for w in (realpath(w) for w in work if w) if not is_within(home, w)]
    protect, warn = [], []
    for entry, real, root, where in inside:
        if any(is_within(where, w) for w in works):
            warn.append((entry, real, root))
        elif where != real or os.path.isdir(real) or _made(real):
            protect.append((entry, real, root))
    return protect, warn


def held(entry: str, real: str, root: str) -> list:
    """What keeps the PATH directory `entry` (resolving to `real`, inside the write root `root`)
    the operator's: the directory, and each symlink on the way inside `root` (`~/bin ->
    dotfiles/bin`: replacing the link replaced the directory) — bound read-only under the tier,
    judged after the run without it. Where `real` lies outside `root` (the entry linked out of
    it: `~/.nix-profile/bin`), the links alone: the directory is not the command's to write."""
    from sandboy.confine.protected import symlinks_on_the_way

    return [*([real] if is_within(real, root) else []),
            *(link for link in symlinks_on_the_way(entry) if is_within(link, root))]


_HOMES: dict = {}


def _home_real(home) -> str:
    key = home or os.path.expanduser("~")
    if key not in _HOMES:
        _HOMES[key] = os.path.realpath(key)
    return _HOMES[key]


def _made(path: str) -> bool:
    try:
        os.makedirs(path, mode=0o755, exist_ok=True)
    except OSError:
        return False
    return True


def protect_warning(entry: str, root: str) -> str:
    return (f"fs: {entry} is on PATH (where the operator's next command is looked up), inside the write root "
            f"{root}: read-only in the cage, so that a command cannot plant `git`, `sandboy` or `ls` there for the "
            "host — installing console scripts there (`pip install --user`, `npm install -g` with that prefix) "
            "fails; fs.protect_defaults = false gives that away (ADR 0013)")


def warn_warning(entry: str, root: str) -> str:
    return (f"fs: {entry} is on PATH (where the operator's next command is looked up) and inside the run's "
            f"working directory or repository (write root {root}): it stays writable, so a command can leave a "
            "program there (`git`, `ls`, `sandboy`) that a later command of this shell runs instead of the real "
            "one — run that shell's next commands with the directory off PATH (deactivate the venv), or "
            f"fs.protect = [\"{entry}\"] (ADR 0013)")
