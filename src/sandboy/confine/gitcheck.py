"""After a run: what the command left for the host's next git command (issue #7 item 5, ADR 0019).

The mount namespace binds `.git/config`, `.git/hooks` and friends read-only where they exist at
launch (`confine.protected`, ADR 0013). It cannot bind what does not exist: an absent name in a
directory git must keep writing (`.git` itself) has no mount point. Two doors stayed open that
way — a `.git/commondir` naming a directory the command wrote (git then reads config and hooks
from there), and a nested repository whose own `.git/config` carries `core.fsmonitor`,
registered as a gitlink so the host's `git status` at the top recurses into it — and more of
the same shape: repositories below the top of a write root, a `core.hooksPath` directory made
during the run, configs included by included configs, submodule git directories under
`.git/modules`.

So the parent, unconfined, checks after the command and every process of it have ended:

    snap = snapshot(write_roots)          # at launch, before the child starts (GitSnapshot.at_launch)
    findings = snap.verify()              # after the run
    moved = quarantine(findings)          # out of git's way, kept (nothing is deleted)

What counts as changed by the run: a file whose ctime is at or after the snapshot's clock
reading. The command cannot set a ctime (utimensat sets atime/mtime only; the realtime clock
needs CAP_SYS_TIME), and creating, writing, chmod, rename and link() all update it. A pointer
made during the run (a `.git` file or symlink, a `commondir`) makes everything it leads to
judged as new.

What counts as executable configuration: in a git config, every key NOT on a short list of keys
a clone, a submodule, a worktree or `git config user.*` write and that never name a program
(`SAFE_KEYS`): a key git adds in a later version is flagged rather than trusted. In a hooks
directory (and below it), every file or symlink but `*.sample`, whatever its mode (a hook sources
its neighbours), and husky's scripts beside its `.husky/_` (`protected.husky_scripts`). A
`commondir` anywhere but in a linked worktree's admin directory (where it must lead back to the
repository's own).

Every write root but the tier's private `{tmp}` is walked (bounded: `WALK_BUDGET` entries), whether or
not it held a repository at launch — the command may `git init` one anywhere it writes: each
`.git` (directory, file or symlink) below it, each directory git takes for a git directory
itself (a bare layout), plus the repository a write root lies in, plus `.git/modules/**` and
`.git/worktrees/*` of each. Gitlinks in the index need no separate read: the directory a
gitlink names holds a `.git` the walk finds.

Two modules, along the seam between what the launch records and the judging after the run:
this one holds the launch side (Scope, GitSnapshot with the launch configs and the census,
GitDirs and LaunchRecord, carried from one gate step to the next), the walk that finds git
directories (`_Walk`) and the supervision hook; `gitjudge` holds the judgement (`is_safe`, what
in a config, a hooks directory, a hook manager's files or a PATH directory was planted) and the
quarantine. It is loaded only when there is something to judge (`GitSnapshot.verify`): a gate
or a run whose write roots hold no repository never imports it. Its names stay reachable here.

Stdlib only, no subprocess: running the host's git here would run what we look for.
"""

import os
import stat
import time

from sandboy.paths import is_within, is_within_any

# (`confine.hook_managers` is imported where a repository is at launch: a run whose write roots
# hold none — a plan-cache hit outside a repository — reads none of its code (session 10); and
# never `confine.protected`, the build's resolution of the protected paths (session 11))

EPERM, ENOENT, ENOTDIR, EACCES = 1, 2, 20, 13  # Linux errno values (`errno` stays off the exec-mode path)
CLOCK_REALTIME_COARSE = 5  # Linux; what file timestamps are taken from (not in Python's `time`)
WALK_BUDGET = 2_000_000    # directory entries per run; beyond that the run fails closed
MAX_INCLUDE_DEPTH = 10     # git's own limit
MAX_GITDIRS = 10_000
MAX_NESTING = 32           # submodules within submodules, and `/` in a submodule's name
# The longest path of a directory holding a `.git` or `HEAD` that the check looks below: what it
# reads there (`.git/config`, `hooks/<name>`, `worktrees/<name>/...`) is spelled by whole path,
# which fails (ENAMETOOLONG) from PATH_MAX on and read as "nothing there", while git run in the
# directory reads it relative to its working directory. Deeper: a finding, never a pass.
DEEPEST_REPOSITORY = 4096 - 512
QUARANTINE_DIR = ".sandboy-quarantine"
CONFIG_READ_LIMIT = 4 << 20
# Config bytes parsed per check, all files together: one large config hard-linked into many
# nested repositories costs the command nothing per link, and each parse ~0.5 s per MiB here.
# Beyond it the run fails closed (a finding), as for WALK_BUDGET. Real configs are kilobytes.
CONFIG_PARSE_BUDGET = 16 << 20
MESSAGE_FINDINGS = 20      # findings named in the run's error; the MANIFEST lists them all


class Finding:
    """One place the host's git would take executable configuration from, made or changed by
    the run. `path`: what `quarantine` moves (None: nothing to move, the run just fails);
    `why`: in words, for the report; `restore`: the bytes the file had at launch, put back in
    its place once the changed file is in quarantine (a repository's config, so git keeps
    working), or None."""

    __slots__ = ("path", "why", "restore")

    def __init__(self, path, why: str, restore=None):
        self.path, self.why, self.restore = path, why, restore

    def __repr__(self):
        return f"Finding({self.path!r}, {self.why!r})"

    def __eq__(self, other):
        return isinstance(other, Finding) and (self.path, self.why) == (other.path, other.why)

    def __hash__(self):
        return hash((self.path, self.why))


# --- git's config syntax (config.c), enough to see every key git would see -----------------


class ConfigSyntaxError(ValueError):
    pass


def parse_config(text: str) -> list:
    """[(name, value)] of a git config file, as git reads it: `section[.subsection].key` with
    section and key lower-cased, the subsection as written; value None for a bare key. Quotes,
    escapes, `\\`-continued lines, comments and `[section "sub"]` / `[section.sub]` headers are
    handled the way git does, so a key hidden in a continued value is not mistaken for one (and
    the reverse). Raises ConfigSyntaxError where git would refuse the file."""
    text = text.replace("\r\n", "\n")
    if text.startswith("\ufeff"):
        text = text[1:]
    n, i, section, out = len(text), 0, "", []
    while i < n:
        c = text[i]
        if c in " \t\n\r\f\v":
            i += 1
            continue
        if c in "#;":
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if c == "[":
            section, i = _parse_header(text, i + 1)
            continue
        if not c.isascii() or not c.isalpha():
            raise ConfigSyntaxError(f"bad character {c!r} at offset {i}")
        j = i
        while j < n and text[j].isascii() and (text[j].isalnum() or text[j] == "-"):
            j += 1
        key = text[i:j].lower()
        i = j
        while i < n and text[i] in " \t":
            i += 1
        if i < n and text[i] == "=":
            value, i = _parse_value(text, i + 1)
        elif i >= n or text[i] in "\n#;":
            value = None
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        else:
            raise ConfigSyntaxError(f"bad key line at offset {i}")
        out.append((f"{section}.{key}" if section else key, value))  # git takes a key before any section
    return out


def _parse_header(text: str, i: int) -> tuple:
    n, name = len(text), []
    while i < n:
        c = text[i]
        i += 1
        if c == "]":
            return "".join(name).lower(), i
        if c in " \t":
            while i < n and text[i] in " \t":
                i += 1
            if i >= n or text[i] != '"':
                raise ConfigSyntaxError("bad section header")
            i += 1
            sub = []
            while i < n and text[i] != '"':
                if text[i] == "\n":
                    raise ConfigSyntaxError("newline in a subsection name")
                if text[i] == "\\":
                    i += 1
                    if i >= n or text[i] == "\n":
                        raise ConfigSyntaxError("bad escape in a subsection name")
                sub.append(text[i])
                i += 1
            if i + 1 >= n or text[i + 1] != "]":
                raise ConfigSyntaxError("bad section header")
            return "".join(name).lower() + "." + "".join(sub), i + 2
        if not (c.isascii() and (c.isalnum() or c in "-.")):
            raise ConfigSyntaxError(f"bad character {c!r} in a section name")
        name.append(c)
    raise ConfigSyntaxError("unterminated section header")


_ESCAPES = {"t": "\t", "b": "\b", "n": "\n", '"': '"', "\\": "\\"}


def _parse_value(text: str, i: int) -> tuple:
    n, quote, comment, space, value = len(text), False, False, 0, []  # `value`: one char per item
    while True:
        if i >= n:
            if quote:
                raise ConfigSyntaxError("unterminated quote")
            return "".join(value), i
        c = text[i]
        i += 1
        if c == "\n":
            if quote:
                raise ConfigSyntaxError("newline inside quotes")
            return "".join(value), i
        if comment:
            continue
        if c in " \t\r\f\v" and not quote:
            if value:
                space += 1
            continue
        if not quote and c in ";#":
            comment = True
            continue
        value.extend(" " * space)
        space = 0
        if c == "\\":
            if i >= n:
                raise ConfigSyntaxError("backslash at the end of the file")
            c = text[i]
            i += 1
            if c == "\n":
                continue
            if c not in _ESCAPES:
                raise ConfigSyntaxError(f"bad escape \\{c}")
            value.append(_ESCAPES[c])
            continue
        if c == '"':
            quote = not quote
            continue
        value.append(c)


def _read_config(path: str, limit: int = CONFIG_READ_LIMIT):
    """The first `limit` + 1 bytes of a regular file `path` (not followed if a symlink), or None.
    (`_read_config_stat`, without the stat.)"""
    return _read_config_stat(path, limit)[0]


def _read_config_stat(path: str, limit: int = CONFIG_READ_LIMIT) -> tuple:
    """(the first `limit` + 1 bytes of a regular file `path` (not followed if a symlink), or None;
    the fstat of what was read, or None).

    Anything else is never opened: the parent is often root, and a planted include can name any
    path — open(2) alone acts on some devices (/dev/watchdog arms, a tty can become the
    controlling terminal). No device node can appear in a write root during the run (mknod
    needs CAP_MKNOD in the host's namespace; a hard link to /dev crosses file systems), and
    nothing else writes paths outside them then, so the lstat decides for the open."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None, None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None, None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, None
        # the size the fstat gave, plus one byte: a buffer of `limit` + 1 (4 MiB) for a config of
        # a few hundred bytes was a fresh mapping each (mmap, mremap, munmap: a write-root run reads
        # four to six such files, session 13); a file that grew since is read on up to the limit
        want = limit + 1
        data = os.read(fd, min(st.st_size + 1, want))
        if len(data) == st.st_size + 1 < want:
            parts = [data]
            got = len(data)
            while got < want:
                more = os.read(fd, want - got)
                if not more:
                    break
                parts.append(more)
                got += len(more)
            data = b"".join(parts)
        return data, st
    finally:
        os.close(fd)


def _valid_head(path: str) -> bool:
    """Whether `path` is a HEAD git accepts (`ref: refs/...`, a symlink into refs/, or an
    object id): half of what makes git take a directory for a git directory."""
    if os.path.islink(path):
        try:
            return os.readlink(path).startswith("refs/")
        except OSError:
            return False
    data = _read_config(path, 255)
    if not data:
        return False
    text = data.decode("ascii", "replace").strip()
    if text.startswith("ref:"):
        return text[4:].lstrip().startswith("refs/")
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)


def _is_git_directory(path: str) -> bool:
    """Whether git's discovery may take `path` itself for a git directory (setup.c's
    is_git_directory): a valid HEAD, and `objects` and `refs` that pass access(X_OK) here or in
    the directory a `commondir` names. A bare repository, or a worktree-style one, in a
    subdirectory has no `.git` entry, yet the operator's git run in it reads its config and
    hooks. Judged wider than git, to fail closed: a valid HEAD with a `commondir` or an
    `objects` of any kind — git's access(X_OK) follows symlinks and passes an executable file,
    so `objects -> ../elsewhere/objects` (in a directory with no subdirectory of its own) or an
    empty executable file `objects` made a git directory the walk took for none."""
    if not _valid_head(os.path.join(path, "HEAD")):
        return False
    return os.path.lexists(os.path.join(path, "commondir")) or os.path.lexists(os.path.join(path, "objects"))


def _hooks_paths_in(parsed, top: str, home: str) -> list:
    """The `core.hooksPath` directories named in parsed configs (lists of entries), resolved as
    git does for a repository whose worktree top is `top`."""
    found: dict = {}  # each once, however often named
    for entries in parsed:
        for name, value in entries:
            if name == "core.hookspath" and value:
                from sandboy.confine.hook_managers import hooks_directory

                found[hooks_directory(value, top, home)] = None
    return list(found)


def _samples_only(hooks_dirs) -> bool:
    """Whether every one of `hooks_dirs` is absent, unreadable or holds nothing but `*.sample`
    files — what `git init` makes. A hook manager's stub is a file named as a hook git runs
    (`hook_managers.GIT_HOOK_NAMES`, none of them ending in `.sample`), so its discovery
    (`hook_manager_configs`: the same listing) finds nothing there: the launch of a write-root
    run in such a repository reads none of its code (≈ 0.1 ms of a fresh process, session 13)."""
    for hooks in hooks_dirs:
        try:
            names = os.listdir(hooks)
        except OSError:
            continue  # (as the discovery: a hooks directory it cannot list holds no stub it reads)
        if any(not name.endswith(".sample") for name in names):
            return False
    return True


def _commondir_of(gitdir: str, path: str) -> tuple:
    """(its text, the directory it leads to or None) of `gitdir`'s `commondir` file `path`: a
    regular file, not followed, never a FIFO that would block us (`_read_config`)."""
    data = _read_config(path, 8192)
    text = data[:8192].decode("utf-8", "surrogateescape").strip() if data else ""
    return text, (real_path(os.path.join(gitdir, text)) if text else None)


def _safe_entries(path: str, data):
    """Launch entries of `data` (None when absent or unreadable by git too)."""
    if data is None:
        return None
    try:
        return _entries(path, data)
    except ConfigSyntaxError:
        return None


def _entries(path: str, data=None):
    """The config entries of `path` (or of `data`), or None when it cannot be read. Raises
    ConfigSyntaxError for a file git would refuse too."""
    data = _read_config(path) if data is None else data
    if data is not None and len(data) > CONFIG_READ_LIMIT:
        raise ConfigSyntaxError(f"larger than {CONFIG_READ_LIMIT >> 20} MiB: not read to the end")
    return None if data is None else parse_config(data.decode("utf-8", "surrogateescape"))


# --- the snapshot and the check -------------------------------------------------------------


def _identity(path: str):
    """(st_dev, st_ino) of `path`, or None when it is gone."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _enclosing_git(path: str):
    """The `.git` of the repository `path` lies in (a directory above it), or None."""
    parent = os.path.dirname(path)
    while parent and parent != path:
        candidate = os.path.join(parent, ".git")
        if os.path.lexists(candidate):
            return candidate
        path, parent = parent, os.path.dirname(parent)
    return None


def _gitdir_of(dot_git: str, parent_real: bool = False):
    """Where a `.git` entry leads, as git reads it: itself (a directory), or the `gitdir: X` of a
    git file (X relative to the directory holding `.git`), symlinks followed for both (a `.git`
    symlink to a git file is a git file to git). None when unreadable or neither.
    `parent_real`: the directory holding `.git` is a realpath (a write root, one of its
    ancestors, or reached from one by the walk, which follows no symlink): a `.git` directory is
    then its own realpath, and one lstat says so instead of one per component."""
    if parent_real:
        try:
            if stat.S_ISDIR(os.lstat(dot_git).st_mode):
                return dot_git
        except OSError:
            return None
    real = real_path(dot_git)
    try:
        st = os.stat(real)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return real
    data = _read_config(real)  # a regular file, never a FIFO that would block us
    if not data:
        return None
    # exactly as setup.c's read_gitfile_gently: "gitdir: " with its space, then everything up to
    # a NUL but the trailing CRs and LFs — spaces and inner newlines are part of the path (a
    # stripped reading led to `cache/evil` while git used `cache/evil  `, a planted git dir)
    data = data.split(b"\0", 1)[0]
    if not data.startswith(b"gitdir: "):
        return None
    target = data[len(b"gitdir: "):].rstrip(b"\r\n")
    if not target:
        return None
    return real_path(os.path.join(os.path.dirname(dot_git), os.fsdecode(target)))


def followed(name: str):
    """What the check follows a config entry `name` (`section.key`, lower case) to: "include"
    (include.path, includeIf.*.path), "hooks" (core.hooksPath), else None."""
    section, _, rest = name.partition(".")
    key = rest.rsplit(".", 1)[-1]
    if key == "path" and (section == "include" or section == "includeif"):
        return "include"
    if section == "core" and key == "hookspath" and "." not in rest:
        return "hooks"
    return None


def split_roots(write_roots, exclude=()) -> tuple:
    """(directories to walk, files) among `write_roots`, as realpaths (each resolved once).

    Directories: every one but those in `exclude` (the run's `{tmp}`) and those inside another
    (its walk covers them — unless below a `.git`, which the walk never enters). Whether a root
    held a repository at launch does not matter: a command may `git init` one anywhere it can
    write, and the operator's next git command in that directory runs its config (ADR 0019).
    Files: a policy may grant one file (`.git/config`, a hook); no walk reaches it, so the
    repository it lies in is judged after the run."""
    dirs, files = [], []
    for root in write_roots:
        real = real_path(root)
        if real in dirs or real in files:
            continue
        try:
            mode = os.stat(real).st_mode
        except OSError:
            continue
        if not stat.S_ISDIR(mode):
            files.append(real)
        elif real not in exclude:
            dirs.append(real)

    def covered(real, other):  # the walk of `other` reaches `real`: it never enters a `.git`
        return other != real and is_within(real, other) and ".git" not in real[len(other):].split("/")

    return [real for real in dirs if not any(covered(real, other) for other in dirs)], files


def walk_roots(write_roots, exclude=()) -> list:
    """The directories among `write_roots` to walk after the run (see `split_roots`)."""
    return split_roots(write_roots, exclude)[0]


GLOBAL = "<the operator's global git config>"  # GitSnapshot.known's key for it


def global_configs(home=None) -> list:
    """The operator's own git config files (every repository of theirs reads them):
    `$GIT_CONFIG_GLOBAL` where set, else `~/.gitconfig` and `$XDG_CONFIG_HOME/git/config`; and the
    system's, `$GIT_CONFIG_SYSTEM` or `/etc/gitconfig` (git's own unless `$GIT_CONFIG_NOSYSTEM`:
    a relative `core.hooksPath` or an include there is followed in every repository as a global
    one's — unread, a `.githooks/pre-commit` the run planted passed and ran; rvsec10)."""
    system = [] if _git_env_true("GIT_CONFIG_NOSYSTEM") else [os.environ.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig"]
    if os.environ.get("GIT_CONFIG_GLOBAL"):
        return [os.environ["GIT_CONFIG_GLOBAL"], *system]
    home = home if home is not None else os.path.expanduser("~")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return [os.path.join(home, ".gitconfig"), os.path.join(xdg, "git", "config"), *system]


def _git_env_true(name: str) -> bool:
    """git's reading of a boolean environment variable (`git_env_bool`): only these skip the
    system config; anything else reads it (reading one more config fails no run)."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


class Scope:
    """What one run's check covers, looked up once when it is set up: `roots` to walk, the
    operator's global configs a write root reaches (`globals_inside`), every write root as a
    realpath (`writable`: a `.git` file may lead into any of them), the roots never walked
    (`exclude`: the run's `{tmp}`) and the operator's `home`."""

    __slots__ = ("roots", "files", "globals_inside", "writable", "exclude", "home", "path_dirs", "protected",
                 "installed", "links_only")

    def __init__(self, write_roots, exclude=(), home=None, path_dirs=(), protected=(), installed=(), links_only=False):
        # `installed`: those of `protected` that are installations' code (their link scan is
        # best-effort past its bound); `links_only`: `fs.protect_defaults = false` with `fs.protect`
        # entries inside a write root — no git check, only what `confine.loosened` guards for
        # them (their modes, their other names: ADR 0013 "Session 11")
        self.installed = tuple(installed)
        self.links_only = links_only
        # `path_dirs`: directories of the operator's PATH no mount keeps read-only (confine.path_dirs:
        # without the namespace tier), judged after the run like a hooks directory
        self.path_dirs = tuple(path_dirs)
        # `protected`: the cage's protected paths (Cage.protected): their modes, and those of the
        # directories between them and their write root, are put back if loosened (confine.loosened)
        self.protected = tuple(protected)
        self.exclude = tuple(real_path(e) for e in exclude)
        self.home = home if home is not None else os.path.expanduser("~")
        self.roots, self.files = split_roots(write_roots, self.exclude)
        # every write root, `{tmp}` and missing ones included: resolved once more only where
        # split_roots left it out (the rest are realpaths already)
        kept = set(self.roots) | set(self.files)
        self.writable = list(dict.fromkeys(r if r in kept else real_path(r) for r in write_roots))
        self.globals_inside = [p for p in global_configs(self.home)
                               if is_within_any(real_path(p), self.writable)]

    def __bool__(self):
        return bool(self.roots or self.files or self.globals_inside or self.path_dirs)


def snapshot(write_roots, exclude=(), home=None, path_dirs=()):
    """At launch, before the command starts: a GitSnapshot of `write_roots` (paths), or None
    when no write root is a directory to walk nor reaches the operator's global git config (a
    home directory granted for writing: a `~/.gitconfig` made by the command would configure
    every repository of theirs). `exclude`: roots not to walk (the run's `{tmp}`)."""
    return GitSnapshot.at_launch(Scope(write_roots, exclude, home, path_dirs), load_judgement=True)


def _whole_second_timestamps(path: str, sample: int = 8) -> bool:
    """Whether the file system holding `path` keeps timestamps in whole seconds: the ctime of
    `path` and of up to `sample` entries in it (or beside it) all end in .000000000. On a file
    system with finer timestamps the chance of that is below one in a million per entry; the
    command cannot set a ctime, and `path` is looked at before it runs."""
    try:
        base = path if os.path.isdir(path) else os.path.dirname(path)
        stamps = [os.lstat(base).st_ctime_ns]
        if stamps[0] % 1_000_000_000:
            return False  # (the usual answer, known from the first: no listing)
        with os.scandir(base) as entries:
            for count, entry in enumerate(entries):
                if count >= sample:
                    break
                stamps.append(entry.stat(follow_symlinks=False).st_ctime_ns)
    except OSError:
        return False
    return all(stamp % 1_000_000_000 == 0 for stamp in stamps)


def _mount_points_below(roots, table=None) -> list:
    """The mount points strictly below `roots`, of any file system (`kernel_mounts.points_below`;
    `table`: the mount table's text the run read moments ago, else read now); where the table
    cannot be read, the roots themselves (their answer is already asked)."""
    from sandboy.confine.kernel_mounts import points_below

    try:
        return points_below(roots, table=table)
    except OSError:
        return []


_GLOBAL_PARSED: dict = {}  # path -> (identity, parsed at, entries): a gate would parse it for every step


def _global_entries(path: str):
    """The entries of the operator's global config `path` (None: absent, unreadable or refused
    by git), parsed again only when the file is another or changed: its device, inode, size,
    mtime and ctime (which no one sets back) are the key — and only for a file whose ctime was
    well before the earlier parse (a change within the same clock tick keeps the ctime).

    The check takes nothing from a global config but the entries it follows (`followed`:
    `include.path`, `includeIf.*.path`, `core.hooksPath`), each a key `path` or `hookspath`: a key
    is ASCII letters, digits and `-`, never escaped nor split across lines, and git matches it
    case-insensitively. A file whose bytes hold no `path` in any case has none: [] without a
    parse (≈ 50–70 µs a small file in a fresh process: every `sandboy run` with a write root reads
    the operator's `~/.gitconfig` and `/etc/gitconfig`; session 11)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    cached = _GLOBAL_PARSED.get(path)
    if cached is not None and cached[0] == identity and st.st_ctime_ns + 50_000_000 < cached[1]:
        return cached[2]
    parsed_at = time.clock_gettime_ns(CLOCK_REALTIME_COARSE)
    data = _read_config(path)
    try:
        entries = None if data is None else [] if b"path" not in data.lower() else _entries(path, data)
    except ConfigSyntaxError:
        entries = None  # git refuses it too
    _GLOBAL_PARSED[path] = (identity, parsed_at, entries)
    return entries


class GitSnapshot:
    """The write roots to check and the clock reading that separates before from during. The
    configs of the repositories found at the top of each root are read now, so a run that
    edits one legitimately (`git config user.name`, where no mount protects it) is judged by
    what it added, not by what the operator had there."""

    times_tracked = False  # (set by __init__ where the roots are walked; see there)

    def __init__(self, scope: Scope, since_ns: int, carried=None, managers=None, load_judgement=False,
                 mount_table=None):
        # why the run is refused before it starts where a protected start-up path holds more than
        # the link scan looks at (`loosened.ModeGuard.cut`; `beyond_bound` then names it too)
        self.links_cut = None
        self.links_only = scope.links_only
        if scope.links_only:
            self._guard_only(scope, since_ns)
            return
        self.roots = list(scope.roots)
        self.files = list(scope.files)
        self.global_inside = list(scope.globals_inside)
        # Everything the command could write (all write roots, `{tmp}` included): a `.git` file
        # in a checked root may lead to a git directory it made in any of them.
        self.writable = list(scope.writable)
        self.exclude = frozenset(scope.exclude)
        self.home = scope.home
        self.path_dirs = {d: _identity(d) for d in scope.path_dirs}  # -> which directory each is at launch
        self.since_ns = since_ns
        # (and the file systems mounted below a root: a second disk, a vfat stick, an NFS or 9p
        # share, a loop-mounted ext4 of 128-byte inodes — on one of those, a nested repository's
        # config written in the snapshot's second, or a `.git` made in a directory whose census
        # listing the walk reuses by its ctime, passed as older than the run: redcage10)
        # what the last complete walk of each root found in its directories (`walk_index`; ADR 0019
        # "Session 12"), bound to the mount table read now: (that binding, {root: entries}), the
        # entries of all those roots together in `prior`
        self.index_where, self.index_kept, self.prior = None, {}, {}
        if mount_table is None and self.roots:
            from sandboy.confine.kernel_mounts import read_table

            try:
                mount_table = read_table()  # (read once: the mount points below the roots too)
            except OSError:
                pass
        # Whether a directory's ctime moves with its entries on every file system of the roots,
        # which both reuses of a listing rest on: the census's after the run (session 10) and the
        # walk index's across runs. A FUSE or network root's server may keep a directory's times
        # when an entry is made in it (rvsec12): there every directory is listed again.
        from sandboy.confine.kernel_mounts import directory_times_tracked

        self.times_tracked = mount_table is not None and bool(self.roots) and directory_times_tracked(
            self.roots, mount_table)
        if self.times_tracked and self._may_index():
            from sandboy.confine import walk_index

            if walk_index.enabled():
                self.index_where = walk_index.machine(mount_table)
                self.index_kept = {root: walk_index.load(root, self.index_where) for root in self.roots}
                for entries in self.index_kept.values():
                    self.prior = entries if not self.prior else {**self.prior, **entries}
        if any(_whole_second_timestamps(root) for root in self.roots + self.global_inside) or any(
                _whole_second_timestamps(point) for point in _mount_points_below(self.roots, mount_table)):
            # ext2/ext3, ext4 with 128-byte inodes: a ctime is cut to its second, so a file the
            # command writes in the snapshot's second looks older than the snapshot. Counted from
            # the second's start, that file is the run's (a change the operator made earlier in
            # that same second counts as the run's too: fails closed).
            self.since_ns -= since_ns % 1_000_000_000
        self.global_entries = []  # [(path, entries)] of the operator's global configs
        for path in global_configs(self.home):
            entries = _global_entries(path)
            if entries:
                self.global_entries.append((path, entries))
        self.known = {}   # gitdir -> {config file: (bytes, [(name, value)] or None) at launch}
        # those config files -> (st_dev, st_ino, st_size) of what was read at launch (None: none
        # read): one found after the run with the same, and a ctime before the snapshot, holds the
        # launch bytes — its launch parse stands (`_Walk.unchanged`)
        self.config_stats = {}
        self.manager_launch = {}  # hook managers' config files of those repositories -> launch bytes
        self.python_launch = {}  # pre-commit's INSTALL_PYTHON -> hook_python.identities at launch
        # their core.hooksPath directories -> (st_dev, st_ino) at launch: a directory ABOVE one
        # renamed away and a tracked one put in its place (`mv scripts scripts-old && mv
        # tests/fx/scripts scripts`, `core.hooksPath = scripts/git-hooks`) leaves hooks and
        # their directory with old ctimes; another identity there has every hook judged
        self.hooks_launch = {}
        for root in self.roots:
            # (a root that is itself a git directory — a bare repository granted for writing —
            # is its own: its config's launch bytes are kept, put back if a planted one is moved)
            for dot_git in (os.path.join(root, ".git"), _enclosing_git(root), root if _is_git_directory(root) else None):
                # (`root` and its ancestors are realpaths: split_roots)
                gitdir = (root if dot_git == root else _gitdir_of(dot_git, parent_real=True)) if dot_git else None
                if gitdir is None or gitdir in self.known:
                    continue
                configs = {}
                for name in ("config", "config.worktree"):
                    path = os.path.join(gitdir, name)
                    data, st = _read_config_stat(path)
                    configs[path] = (data, _safe_entries(path, data))
                    self.config_stats[path] = None if st is None else (st.st_dev, st.st_ino, st.st_size)
                self.known[gitdir] = configs
                if os.path.basename(gitdir) == ".git":
                    # what an installed pre-commit or lefthook runs, as it was: put back when a
                    # changed one is moved, so the operator's next commit still runs their hooks
                    top = os.path.dirname(gitdir)
                    parsed = [entries for _data, entries in configs.values() if entries]
                    parsed += [entries for _path, entries in self.global_entries]
                    hooks_paths = _hooks_paths_in(parsed, top, self.home)
                    for path in hooks_paths:
                        self.hooks_launch[path] = _identity(real_path(path))
                    hooks_dirs = [os.path.join(gitdir, "hooks"), *hooks_paths]
                    if _samples_only(hooks_dirs):
                        continue  # no hook manager's stub there: its discovery finds nothing
                    from sandboy.confine.hook_managers import discover_managers

                    pythons: list = []
                    # (the discovery the cage's build made just before, where it made the same one)
                    for path in discover_managers(top, hooks_dirs, managers, pythons):
                        data = _read_config(path)
                        if data is not None and len(data) <= CONFIG_READ_LIMIT:
                            self.manager_launch[path] = data
                    for _stub, python in pythons:  # pre-commit's interpreter (hook_python, session 7)
                        from sandboy.confine.hook_python import identities

                        self.python_launch[python] = identities(python)
        self.known[GLOBAL] = {path: (data, _safe_entries(path, data)) for path in self.global_inside
                              for data in (_read_config(path),)}
        # Where every git directory in reach is at launch: one found after the run anywhere else
        # (or not at all) is judged whole (session 6). A rename keeps the ctime of everything
        # below what it moves: `mv tests/fixtures/evil vendor/x/.git` (a git directory the project
        # ships as tracked files) behind a gitlink, or over `.git` itself, left every file "old".
        # (st_dev, st_ino) -> (entries, `.git` there, `HEAD` there, names of the subdirectories
        # walked) of each directory the census listed: after the run, one whose ctime is still
        # before `since_ns` is not listed again (`_Walk.walk`)
        self.listings = {}
        self.launch_dirs = self._census(carried)
        # what no mount keeps: the modes on the way to the protected paths and the git directories
        # in reach (ADR 0019, "Session 9"), taken now, put back by `verify`
        # and each git directory's own config and hooks: git runs what they name when the
        # operator's git runs in it — a nested repository's or a submodule's (`.git/modules/x`),
        # which no mount protects: `chmod 0666 vendor/lib/.git/config` stayed, and another user
        # then added a core.fsmonitor the operator's next `git status` ran (redcage10)
        git_files = [os.path.join(gitdir, name) for gitdir in self.launch_dirs.values() if _is_git_directory(gitdir)
                     for name in ("config", "config.worktree", "hooks")]
        # and every other file the check reads as git's own at launch: the operator's global
        # configs inside a write root (`~/.config` granted: `chmod 0666 ~/.config/git/config`
        # stayed, no default name there to bind), the configs read at launch, the hooksPath
        # directories and the hook managers' configs (redcage10)
        git_files += [*self.global_inside, *(path for gitdir, configs in self.known.items() if gitdir != GLOBAL
                                             for path in configs), *self.hooks_launch, *self.manager_launch]
        targets = (*scope.protected, *self.launch_dirs.values(), *git_files)
        self.modes = None  # nothing to guard (no protected path, no git directory or file): no module
        if targets:        # loaded — a plan-cache hit outside a repository (session 10)
            from sandboy.confine.loosened import ModeGuard, guarded_paths

            self.modes = ModeGuard(guarded_paths(self.writable, targets), scope.protected, self.writable,
                                   scope.installed)
            self._take_cut()
        self._after = None  # (roots, files, dirs) as the check found them after the run: `after`
        # Whether the check after the run may pass a git directory it reaches by its stats alone
        # (`_Walk.unchanged`), without the judgement: nothing at launch leads the check elsewhere
        # — no global config inside a write root or following an include or core.hooksPath, no
        # PATH directory to look through — and no config read at launch includes a file or names
        # a hooks directory (`_Walk.unchanged` takes their launch parse as it stands).
        self.by_stats = not (self.global_inside or self.path_dirs or any(
            value and followed(name) for _path, entries in self.global_entries for name, value in entries)
        ) and self._launch_configs_follow_nothing()
        if self._to_judge() and (load_judgement or not self.by_stats):
            # loaded now, while the parent has file descriptors: after the run it may have none
            # left (a proxy's thread still holding the run's connections), and an import opens
            # files. `load_judgement` False (no egress proxy in the run: GitCheck, a plan-cache
            # hit, which never has one): where the stats may decide, loaded after the run only
            # if they do not.
            import sandboy.confine.gitjudge  # noqa: F401

    def _may_index(self) -> bool:
        """Whether the walk index may be read and written for this run's roots: not where the
        run's `{tmp}` lies inside one (the walk leaves it out of a listing: another run's listing
        of the same directory would not)."""
        return not any(is_within(excluded, root) for excluded in self.exclude for root in self.roots)

    def _save_index(self, walk) -> None:
        """What `walk` (complete, no finding) gathered per root, kept for the next run's census."""
        from sandboy.confine import walk_index

        for root, entries in walk.gathered.items():
            walk_index.save(root, self.index_where, entries, self.index_kept.get(root))

    def _guard_only(self, scope, since_ns: int) -> None:
        """The snapshot of a `links_only` scope (`fs.protect_defaults = false`, `fs.protect`
        entries inside a write root): no census, no configs, no judgement — the mode guard over
        the protected paths, what they reach by other names (`confine.loosened`), nothing else."""
        from sandboy.confine.loosened import ModeGuard, guarded_paths

        self.roots, self.files, self.global_inside = list(scope.roots), list(scope.files), []
        self.writable, self.exclude, self.home = list(scope.writable), frozenset(scope.exclude), scope.home
        self.path_dirs, self.since_ns, self.global_entries = {}, since_ns, []
        self.known, self.config_stats, self.manager_launch, self.python_launch, self.hooks_launch = {}, {}, {}, {}, {}
        self.listings, self.launch_dirs, self.beyond_bound, self._after, self.by_stats = {}, {}, None, None, True
        self.index_where, self.index_kept, self.prior = None, {}, {}
        self.modes = ModeGuard(guarded_paths(self.writable, scope.protected), scope.protected, self.writable,
                               scope.installed)
        self._take_cut()

    def _take_cut(self) -> None:
        if self.modes.cut is not None:
            from sandboy.confine.loosened import beyond_bound as links_beyond_bound

            self.links_cut = links_beyond_bound(*self.modes.cut)
            self.beyond_bound = self.modes.cut[1]  # (a plan-cache hit returns at it: the build refuses)

    @property
    def after(self):
        """Where every git directory in reach was once `verify` ran (`gitcheck_hook.GitDirs`: what
        the next step of a gate takes as its launch record), or None: not verified, or its walk
        was cut short (the next launch walks again). Made when asked: a plan-cache hit never
        asks, and reads none of the hook's code."""
        if self._after is None:
            return None
        from sandboy.confine.gitcheck_hook import GitDirs

        return GitDirs(*self._after)

    def _launch_configs_follow_nothing(self) -> bool:
        """Whether every config of the repositories read at launch was absent then, or read and
        parsed, with no include nor core.hooksPath."""
        for gitdir, configs in self.known.items():
            for data, entries in configs.values() if gitdir != GLOBAL else ():
                if data is not None and (entries is None or any(value and followed(name) for name, value in entries)):
                    return False
        return True

    def _census(self, carried):
        """(st_dev, st_ino) -> path of every git directory the walk reaches now (and of the top
        holding each `.git`: `_Walk.gitdir`). `carried`: the
        record the previous check of the same gate took after ITS run (`GitDirs`, nothing but
        Sandboy runs between two steps): only the roots it did not cover are walked now."""
        roots, files, paths = self.roots, self.files, {}
        # the write root whose walk reached WALK_BUDGET now: the check after the run would too
        # (it walks the same way, counting the same entries), so the run is refused before it
        # starts (GitCheck.start) instead of failing closed after the work was done
        self.beyond_bound = None
        if carried is not None:
            roots = [root for root in roots if not carried.covers(root)]
            files = [path for path in files if path not in carried.files and not carried.covers(path)]
            paths.update(carried.paths)
            if not roots and not files:
                return paths
        census = _Walk(self, census=True)
        if not census.survey(roots, files, WALK_BUDGET):
            self.beyond_bound = census.cut_at
        paths.update(census.dirs)
        return paths

    @classmethod
    def at_launch(cls, scope: Scope, carried=None, managers=None, load_judgement=False, mount_table=None):
        """THE snapshot (the hook's `start` and `snapshot()` both take it here): the coarse
        realtime clock reading file timestamps are taken from, just before the child starts, the
        launch configs and where each git directory is (walked now, or `carried` from the
        previous step's check: `GitDirs`); None when `scope` holds nothing to check. `managers`:
        the hook-manager discoveries the cage's build (or reuse check) made just before
        (`Cage.take_launch_managers`), taken instead of looking again where the same was looked at.
        `load_judgement`: True where a thread of this process may take every file descriptor
        while the command runs (the egress proxy: GitCheck), or the caller cannot tell
        (`snapshot()`): the judgement is loaded now wherever a repository is in reach. Else it is
        loaded after the run, and only where the stats cannot decide (`by_stats`). `mount_table`:
        the mount table's text the caller read just before for its own question
        (`kernel_mounts.read_table`: a plan-cache hit's kernel mounts), where the file systems
        mounted below the roots are looked for — else read again."""
        if not scope:
            return None
        return cls(scope, time.clock_gettime_ns(CLOCK_REALTIME_COARSE), carried, managers, load_judgement, mount_table)

    def moved(self, gitdir: str, identity) -> bool:
        """Whether git directory `gitdir` (`identity`: its st_dev, st_ino) — or the worktree top
        holding a `.git` — was elsewhere at launch, or was none: then the repository is judged
        whole, whatever its files' ctimes (what in it the command could not write stays
        unjudged: `gitjudge._Check.config` and `hooks` say so)."""
        return identity is None or self.launch_dirs.get(identity) != gitdir

    def _new(self, st) -> bool:
        return st.st_ctime_ns >= self.since_ns

    def _to_judge(self) -> bool:
        """Whether the check has something to judge before its walk finds anything: a repository
        at launch, a global config inside a write root or one whose includes or core.hooksPath
        it follows (`followed`), a PATH directory to look through."""
        return (any(gitdir != GLOBAL for gitdir in self.known) or bool(self.global_inside) or bool(self.path_dirs)
                or any(value and followed(name) for _path, entries in self.global_entries for name, value in entries))

    def verify(self, budget: int | None = None) -> list:
        """Findings, in the order found (empty: nothing planted). Call only once the command
        and all its processes have ended. `budget`: entries to walk, WALK_BUDGET (as the
        launch's census) unless given."""
        budget = WALK_BUDGET if budget is None else budget
        if self.modes is None:
            return [] if self.links_only else self._judge(budget)
        # first, so the window in which another user could use a loosened directory ends at once
        put_back = self.modes.put_back()
        loosened = [Finding(None, f"{path}: {why}") for path, why in put_back]
        # what another user could have replaced through a loosened directory while the run ran is
        # moved to the quarantine like a plant (the git check judges git's files by their ctime;
        # a start-up file it does not look at)
        replaced = self.modes.replaced_below([path for path, _why in put_back])
        loosened += [Finding(path, "a protected path replaced or written while a directory above it was "
                                   "writable by other users: not the operator's (moved; check it before use)")
                     for path in replaced]
        # what a protected path reaches by another name in a write root — a hard link, a file a
        # symlink inside a protected directory leads to — written during the run (the mount
        # guards the path, not the inode): moved, the launch bytes put back in its place
        loosened += [Finding(path, why, restore=data)
                     for path, data, why in self.modes.written_through_links() if path not in replaced]
        return loosened + ([] if self.links_only else self._judge(budget))

    def _judge(self, budget: int) -> list:
        if not self._to_judge() or self.by_stats:
            # No repository at launch, no global config leading anywhere, no PATH directory to
            # look through: walk only, and load the judgement (gitjudge) only once the walk
            # reaches a git directory to judge — the command made one — going on with it from
            # there (`_Walk.judge`: the same findings in the same order). Where nothing at launch
            # leads the check elsewhere (`by_stats`), a git directory the walk reaches whose stats
            # show that judging it could find nothing (`_Walk.unchanged`: the run did not touch
            # its configs or hooks) needs no judgement either.
            walk = _Walk(self)
            try:
                complete = walk.survey(self.roots, self.files, budget)
            except _Judged:
                pass
            else:
                self._after = (self.roots, self.files, walk.dirs) if complete else None
                if complete and not walk.findings and walk.gathered:
                    self._save_index(walk)
                return walk.findings
        try:
            from sandboy.confine.gitjudge import _Check
        except (ImportError, OSError) as exc:  # e.g. no file descriptor left: fail closed
            return [Finding(None, f"a git directory made during the run could not be judged: the check's "
                                  f"judgement did not load ({exc}): not checked")]
        check = _Check(self)
        for path in self.global_inside:
            check.config(path, False, None, GLOBAL)
        # The operator's global `core.hooksPath` and includes, where absolute or `~/`: every
        # repository of theirs runs them, whether or not a write root holds one (a write root
        # of `~/tools` with `hooksPath = ~/tools/githooks`: a planted pre-commit ran on their
        # next commit anywhere). Relative ones are resolved per repository below.
        for path, entries in self.global_entries:
            check._follow(path, real_path(path), False, None, None, 0, entries)
        complete = check.survey(self.roots, self.files, budget)
        for directory, launch in self.path_dirs.items():
            check.path_programs(directory, launch)
        # what the next step of a gate takes as its launch record (nothing runs between two
        # steps but Sandboy); a walk cut short leaves none: the next launch walks again
        self._after = (self.roots, self.files, check.dirs) if complete else None
        if complete and not check.findings and check.gathered:
            self._save_index(check)
        return check.findings


def _leaf_has(path: str) -> bool:
    """Whether `path` (a name in a leaf directory) exists, not followed; OSError for any answer
    but "no such file" (the C walk's `leaf_lookup`)."""
    try:
        os.lstat(path)
        return True
    except (FileNotFoundError, NotADirectoryError):
        return False


_NATIVE_SCAN: list = []  # [the C walk, or None], once asked (`_native_scan`)


def _native_scan():
    """The C walk (`_native.walk_scan`, `_native_walk.c`), or None: with SANDBOY_NATIVE=0 (the
    executor's own switch: `_libc`), where it was not built, or where its build is older than the
    source beside it (`WALK_SOURCE_SIZE`, as `_libc` asks of the executor) — the walk is then
    `_Walk._scan_python`, which makes the same decisions. Asked once per process."""
    if not _NATIVE_SCAN:
        from sandboy.confine import _libc  # (the hit's and every cage's: loaded already)

        native, scan = _libc._native, None
        if native is not None and hasattr(native, "walk_scan"):
            try:
                size = os.stat(os.path.join(os.path.dirname(native.__file__), "_native_walk.c")).st_size
            except (OSError, TypeError):
                size = native.WALK_SOURCE_SIZE  # (an installation without its sources)
            if size == native.WALK_SOURCE_SIZE:
                scan = native.walk_scan
        _NATIVE_SCAN.append(scan)
    return _NATIVE_SCAN[0]


_NATIVE_REAL_PATH: list = []  # [the C walk's realpath(3), or None], once asked (`real_path`)


def real_path(path: str) -> str:
    """`os.path.realpath(path)`, the same answer for less: realpath(3) in C (`_native.real_path`)
    where it resolves the path, else Python's own (a missing component, a loop, a path longer
    than PATH_MAX, no C walk: `_native_scan`). Python's takes an lstat and a few hundred
    instructions per component: ≈ 20 µs a path, seven of them in a README-example hit's Scope
    (session 14)."""
    if not _NATIVE_REAL_PATH:  # (the C walk's module, where the walk may be used: `_native_scan`)
        from sandboy.confine import _libc

        _NATIVE_REAL_PATH.append(getattr(_libc._native, "real_path", None) if _native_scan() else None)
    native = _NATIVE_REAL_PATH[0]
    if native is None or type(path) is not str:
        return os.path.realpath(path)
    try:
        return native(path)
    except ValueError:
        return os.path.realpath(path)
    except OSError as exc:
        if exc.errno not in (ENOENT, ENOTDIR):
            return os.path.realpath(path)
    # A name missing at the end (`~/.config/git/config` where the operator has none): Python's
    # resolution of `head/name` is its resolution of `head` with `name` put after it, where
    # nothing (or no symlink) is at that name — an lstat that fails says so; else (a dangling
    # symlink, something made meanwhile) Python's own answer.
    head, _, name = path.rpartition("/")
    if not head or name in ("", ".", ".."):
        return os.path.realpath(path)
    parent = real_path(head)
    candidate = parent + "/" + name if parent != "/" else "/" + name
    try:
        os.lstat(candidate)
    except OSError:
        return candidate
    return os.path.realpath(path)


def _index_entry_valid(entry, ctime: int) -> bool:
    """Whether `entry` (of the walk index, or None) is well formed and was taken at `ctime`:
    (ctime, entries or -1 for a leaf, `.git` there, `HEAD` there, subdirectories' names or None)."""
    return (type(entry) is tuple and len(entry) == 5 and entry[0] == ctime and type(entry[1]) is int
            and (entry[1] < 0 or type(entry[4]) is list))


class _Judged(Exception):
    """The walk reached a git directory to judge: the check needs gitjudge (see verify)."""


class _Walk:
    """One look through the write roots for git directories. `census`: at launch, only where
    each git directory is (`dirs`), nothing judged; else the check after the run, which records
    the same and judges each one it reaches (`judge`: gitjudge._Check, the subclass loaded only
    then)."""

    def __init__(self, snap: GitSnapshot, census: bool = False):
        self.snap = snap
        self.census = census
        self.dirs: dict = {}  # (st_dev, st_ino) -> path of each git directory reached
        self.findings: list = []
        self.found: set = set()  # the findings again, for a constant-time "already found"
        self.seen: set = set()
        self.included: set = set()
        self.hook_dirs: set = set()  # (realpath, full) looked through: each once, however often named
        self.hooks_by_top: dict = {}  # worktree top -> {core.hooksPath directory its configs name: None}
        self.parse_left = CONFIG_PARSE_BUDGET
        self.cut_at = None  # the root being walked when the walk reached its budget
        # After the run, where the walk index applies (`GitSnapshot.index_where`): per root, the
        # entries for the next run's index (`walk_index`), each a directory whose ctime lies before
        # `cut`, from the clock read now — before this walk lists anything
        self.gathered: dict = {}
        self.cut = None
        if not census and snap.index_where is not None:
            from sandboy.confine.walk_index import cut_now

            self.cut = cut_now()

    def add(self, path, why: str, restore=None) -> None:
        # a set, not `in self.findings`: 20,000 files made in a hooks directory (a tenth of a
        # second for the command) took the list scan 43 s — cost amplification after the run
        finding = Finding(path, why, restore)
        if finding not in self.found:
            self.found.add(finding)
            self.findings.append(finding)

    def writable(self, path: str) -> bool:
        return is_within_any(path, self.snap.writable)

    def new(self, path: str):
        """The lstat of `path` when it was made or changed during the run, else None."""
        try:
            st = os.lstat(path)
        except OSError:
            return None
        return st if self.snap._new(st) else None


    def survey(self, roots, files, budget: int) -> bool:
        """Reach every git directory of `roots` and `files` (see GitSnapshot.verify); False when
        the walk was cut short by `budget` (a finding then says so)."""
        for gitdir in self.snap.known:
            if gitdir != GLOBAL:
                self.gitdir(gitdir, full=False, top=os.path.dirname(gitdir))
        for path in files:  # the repository a file granted for writing lies in
            parent = os.path.dirname(path)
            for gitdir in (parent, os.path.dirname(parent)):
                if _is_git_directory(gitdir):
                    self.gitdir(gitdir, full=False, top=None)
            dot_git = _enclosing_git(path)
            if dot_git is not None:
                self.dot_git(dot_git)
        left = budget
        for root in roots:
            left = self.walk(root, left)
            if left < 0:
                self.cut_at = root
                self.add(None, f"{root}: more than {budget:,} entries to look through for repositories; "
                         "not checked to the end, so the run fails closed: grant a narrower fs.write (the "
                         "project, not a whole home or tree), or fs.protect_defaults = false to go without "
                         "the check")
                return False
        return True

    def walk(self, root: str, left: int) -> int:
        """Find every `.git` below `root` (not inside one) and check the repository it leads to.

        A directory whose link count is 2 has no subdirectory (the file systems that count them —
        ext4, xfs, tmpfs — keep it exact, and the command cannot forge it; those that do not count
        report 1): it is not listed, one lookup of its `.git` is enough. Most directories of a
        source tree are such leaves, which makes the walk cost per directory, not per file.

        After the run, a directory the census listed whose ctime is before the snapshot's clock
        reading is not listed again: creating, removing, renaming or linking an entry updates the
        directory's ctime (and the command cannot set one back), and the census listed it after
        that reading, so its names are the census's (`GitSnapshot.listings`, by (st_dev, st_ino):
        a directory moved keeps its entries; ADR 0019 "Session 10"). Each subdirectory is still
        looked at (its own ctime and link count) and descended into.

        At launch, likewise, a directory whose ctime is the one the last complete check's walk saw
        is not listed: its listing is that walk's, kept in the cache directory (`walk_index`, ADR
        0019 "Session 12"); after the run a leaf's `.git` and `HEAD` are taken from it the same way."""
        # The walk goes through the tree (`scan`: in C where the executor is, else `_scan_python`,
        # the same decisions) and returns what it met that needs more than a listing — a `.git`,
        # a `HEAD`, a directory it could not list — in the order met; it is done here, in that
        # order (ADR 0019 "Session 13"). Nothing that follows changes what the scan decided: the
        # run's processes have all ended (or not started), and the scan writes only `listings`
        # and `gathered`, which nothing here reads.
        snap = self.snap
        gathered = self.gathered.setdefault(root, {}) if self.cut is not None else None
        prior = snap.prior if snap.index_where is not None else None
        scan = _native_scan() or self._scan_python
        left, events = scan(root, left, self.census, prior, snap.listings, snap.since_ns, snap.times_tracked, self.cut,
                            gathered, snap.exclude)
        for event in events:
            directory = event[1]
            if event[0] < 2 and len(directory) > DEEPEST_REPOSITORY // 4 and len(os.fsencode(directory)) > DEEPEST_REPOSITORY:
                self.add(None, f"{directory}: a repository too deep to check (its path is beyond "
                         f"{DEEPEST_REPOSITORY} bytes): not checked")
            elif event[0] == 0:
                self.dot_git(directory + "/.git")
            elif event[0] == 1:
                # no `.git` names it, but git run here reads its config and hooks (a leaf too:
                # `objects` a symlink or a file, or a commondir)
                if _is_git_directory(directory):
                    self.gitdir(directory, full=False, top=directory)
            else:
                self._unlistable(directory, OSError(event[2], os.strerror(event[2])))
        return left

    def _unlistable(self, directory: str, exc: OSError) -> None:
        """A directory the walk could not list (`exc`)."""
        if not self.census and os.path.lexists(directory + "/.git"):
            self.dot_git(directory + "/.git")  # (what can be found without a listing)
        if not self.unlistable_matters(directory, exc):
            return
        # Fail closed: a directory the parent cannot list (mode 0311 set by the command,
        # which a parent without CAP_DAC_READ_SEARCH obeys, while the operator's git
        # still walks through it; or no fd left) may hold a planted repository.
        self.add(None, f"{directory}: cannot be looked through for repositories "
                 f"({exc.strerror or exc}): not checked")

    def _scan_python(self, root: str, left: int, census: bool, prior, listings: dict, since: int, tracked: bool, cut,
                     gathered, exclude) -> tuple:
        """(`left` less the entries met, [(0, directory): a `.git` there | (1, directory): a `HEAD`
        there | (2, directory, errno): not listed], in the order met) of the walk of `root` —
        recording the census's listings in `listings` (at launch) and the walk index's next
        entries in `gathered` (after the run, those before `cut`). The stand-in for the C walk
        (`_native.walk_scan`, `_native_walk.c`): with SANDBOY_NATIVE=0, or where it was not built;
        tests/cage/test_gitcheck_native_walk.py holds the two to the same answers."""

        # the walk index (ADR 0019 "Session 12"): what the last complete walk found in each
        # directory, by (st_dev, st_ino), taken where the directory's ctime is still the one it had
        # then — at launch for the listings, after the run for the leaves' `.git` and `HEAD`; and,
        # after the run, what this walk finds, for the next run (`gathered`, before `cut` only)
        valid = _index_entry_valid
        events = []
        try:
            pending = [(root, os.lstat(root))]
        except (OSError, ValueError):
            return left, events
        while pending:
            directory, st = pending.pop()
            left -= 1
            if st.st_nlink == 2:
                if census:
                    # At launch a leaf is not looked into: its `.git` can only be a file or symlink
                    # (a `.git` directory would be a subdirectory), leading to a git directory the
                    # census reaches another way (`modules/`, `worktrees/`, a bare layout in a
                    # directory with subdirectories, or outside every write root, where nothing can
                    # move); a leaf that is itself a git directory (HEAD + `objects` as a file or
                    # symlink, or a `commondir`: no layout git makes) is left out — found after the
                    # run, it is judged whole. Two lookups fewer per leaf, most of a tree's directories.
                    continue
                known = prior.get((st.st_dev, st.st_ino)) if prior else None
                if known is not None and valid(known, st.st_ctime_ns) and known[1] < 0:
                    # the names are those the last walk looked up (its ctime is theirs); what they
                    # lead to is read again below
                    has_git, has_head = known[2], known[3]
                else:
                    # (an lstat; only "no such file" is an answer: a leaf its own uid — ours —
                    # cannot search (chmod 0077 by the command: other users still can) or a path
                    # too long to look up cannot be looked into, and fails closed as a directory
                    # that cannot be listed does — session 14)
                    try:
                        has_git = _leaf_has(directory + "/.git")
                        has_head = _leaf_has(directory + "/HEAD")
                    except OSError as exc:
                        events.append((2, directory, exc.errno or 5))
                        continue
                if gathered is not None and st.st_ctime_ns < cut:
                    gathered[(st.st_dev, st.st_ino)] = (st.st_ctime_ns, -1, has_git, has_head, None)
                if has_git:
                    events.append((0, directory))
                # a leaf may still be a git directory: `objects` a symlink or a file, or a commondir
                if has_head:
                    events.append((1, directory))
                continue
            listed = None
            if census:
                known = prior.get((st.st_dev, st.st_ino)) if prior else None
                if known is not None and valid(known, st.st_ctime_ns) and known[1] >= 0:
                    listed = self._as_listed(directory, known[1:])
            elif st.st_ctime_ns < since and tracked:
                listed = self._as_listed(directory, listings.get((st.st_dev, st.st_ino)))
            if listed is None:
                try:
                    listed = self._list(directory, exclude)
                except OSError as exc:
                    events.append((2, directory, exc.errno or 5))  # (EIO where it gave none)
                    continue
            if census:
                listings[(st.st_dev, st.st_ino)] = listed[:4]
            elif gathered is not None and st.st_ctime_ns < cut:
                gathered[(st.st_dev, st.st_ino)] = (st.st_ctime_ns, *listed[:4])
            count, has_git, has_head, names, stats = listed
            left -= count
            if has_git:
                events.append((0, directory))
            if has_head:
                events.append((1, directory))
            prefix = directory if directory.endswith("/") else directory + "/"
            pending.extend(zip(map(prefix.__add__, names), stats))
            if left < 0:
                return left, events
        return left, events

    def _list(self, directory: str, exclude=frozenset()) -> tuple:
        """(entries, whether `.git` is one, whether `HEAD` is one, the names and the lstats of
        the subdirectories to walk — not `.git`, not those in `exclude` (the run's {tmp}), not
        followed if symlinks) of `directory`, listed now."""
        count, has_git, has_head, names, stats = 0, False, False, [], []
        with os.scandir(directory) as entries:
            for entry in entries:
                count += 1
                name = entry.name
                if name == ".git":
                    has_git = True
                    continue
                if name == "HEAD":
                    has_head = True
                # (the quarantine is walked too: nothing moved there is named `.git`, and
                # skipping it would hide a repository the command put there)
                if entry.is_dir(follow_symlinks=False) and not (exclude and entry.path in exclude):  # {tmp}
                    names.append(name)
                    stats.append(entry.stat(follow_symlinks=False))
        return count, has_git, has_head, names, stats

    def _as_listed(self, directory: str, known):
        """`known` (the census's listing of `directory`, or None) as `_list` gives it, with each
        subdirectory looked at now; None where one is not a directory now or gone (only another
        process of the host could do that meanwhile: then `directory` is listed again)."""
        if known is None:
            return None
        count, has_git, has_head, names = known
        prefix = directory if directory.endswith("/") else directory + "/"
        stats = []
        for name in names:
            try:
                sub = os.lstat(prefix + name)
            except (OSError, TypeError, ValueError):  # (a name of the walk index that is no name)
                return None
            if not stat.S_ISDIR(sub.st_mode):
                return None
            stats.append(sub)
        return count, has_git, has_head, names, stats

    def unlistable_matters(self, directory: str, exc: OSError) -> bool:
        """Whether a directory the walk could not list fails the run. Always, but for another
        user's directory refused to us (EACCES), unchanged since launch and that we cannot even
        search: the command, of our uid with fewer rights, could neither make it unlistable
        (chmod sets its ctime) nor reach anything below it — a write root shared with other
        users (`/tmp`) holds such directories (mode 0700), and failing every run over them would
        make the check unusable there. One we may search (mode 0711) is no such wall: a
        directory below it writable at launch (`theirs/open`, mode 0777) took a planted
        repository while `theirs` kept its ctime. Nor is one holding another write root."""
        if exc.errno not in (EACCES, EPERM):
            return True  # no fd left, I/O error: nothing known
        try:
            st = os.lstat(directory)
        except OSError:
            return True
        if self.snap._new(st) or st.st_uid == os.geteuid():
            return True
        # (all of the run's processes have ended: nothing swaps `directory` meanwhile)
        return (os.access(directory, os.X_OK, effective_ids=True, follow_symlinks=False)
                or any(is_within(w, directory) for w in self.snap.writable))

    def dot_git(self, path: str) -> None:
        gitdir = _gitdir_of(path, parent_real=True)  # (the walk's paths and a root's ancestors: real)
        if gitdir is None:
            return
        st = self.new(path)
        # a `.git` file or symlink made during the run: where it leads is judged as new
        # (unless it is a repository checked from launch on)
        pointer_new = st is not None and not stat.S_ISDIR(st.st_mode)
        self.gitdir(gitdir, full=pointer_new and gitdir not in self.snap.known, top=os.path.dirname(path))

    def gitdir(self, gitdir: str, full: bool, top, depth: int = 0) -> None:
        if gitdir in self.seen:
            return
        if len(self.seen) >= MAX_GITDIRS or depth > MAX_NESTING:
            self.add(None, f"{gitdir}: beyond the check's bounds ({MAX_GITDIRS} git directories, "
                     f"{MAX_NESTING} levels of nesting): not checked")
            return
        self.seen.add(gitdir)
        identity = _identity(gitdir)
        if identity is not None:
            self.dirs[identity] = gitdir
        # A worktree's `.git`: where its top was too. A top swapped around a `.git` that kept its
        # path (`mv repo old && mv old/tests/fx repo && mv old/.git repo/`) makes the project's
        # tracked files, all older than the launch, what the repository runs from its worktree
        # (a relative core.hooksPath, husky's and the hook managers' files).
        top_dir = os.path.dirname(gitdir) if os.path.basename(gitdir) == ".git" else None
        top_identity = _identity(top_dir) if top_dir is not None else None
        if top_identity is not None:
            self.dirs[top_identity] = top_dir
        if self.census:
            self.census_below(gitdir, depth)
            return
        self.judge(gitdir, full, top, depth, identity, top_dir, top_identity)

    def judge(self, gitdir: str, full: bool, top, depth: int, identity, top_dir, top_identity) -> None:
        """Without the judgement: nothing to do where the stats show that judging `gitdir` could
        find nothing (`unchanged`). Else the walk goes on as the judgement (`gitjudge._Check`, a
        subclass that adds methods only) from this git directory on: what it passed over would
        have added no finding and led nowhere, and nothing else comes before the walk where
        `GitSnapshot._judge` takes this path, so the findings and their order are the
        judgement's from the start. Where the judgement cannot be loaded, _Judged: `_judge`
        fails the check closed."""
        if self.snap.by_stats and self.unchanged(gitdir):
            return
        try:
            from sandboy.confine.gitjudge import _Check
        except (ImportError, OSError):  # e.g. no file descriptor left
            raise _Judged() from None
        self.__class__ = _Check
        self.judge(gitdir, full, top, depth, identity, top_dir, top_identity)

    def unchanged(self, gitdir: str) -> bool:
        """Whether `gitjudge._Check.judge(gitdir, ...)` would find nothing and lead to no other git
        directory, shown by stats and one listing instead of reading and parsing its configs again
        (ADR 0019, "Session 10"): no `commondir`, and no `modules` or `worktrees` directory; each
        config absent, or the regular file read at launch — a ctime before the snapshot (the
        launch read came after the clock reading: no byte of it written since) and the same
        (st_dev, st_ino, st_size) — whose launch parse includes nothing and names no hooks
        directory (`GitSnapshot.by_stats`); the hooks directory absent or a directory holding
        only `*.sample` files (all the check skips; then no hook manager's stub either). A git
        directory found elsewhere than at launch, or none then, and judged whole by the check
        (`GitSnapshot.moved`) is no exception: judged whole, such a directory holds nothing
        either — a config it holds is none the launch read, and fails here."""
        snap = self.snap
        for name in ("commondir", "modules", "worktrees"):
            try:
                st = os.lstat(gitdir + "/" + name)
            except FileNotFoundError:
                continue
            except OSError:
                return False
            # (a `modules` or `worktrees` that is no directory, or a symlink, leads the check nowhere)
            if name == "commondir" or stat.S_ISDIR(st.st_mode):
                return False
        charge = 0  # the config bytes the judgement would read (and charge to its parse budget)
        for name in ("config", "config.worktree"):
            path = gitdir + "/" + name
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            except OSError:
                return False
            if snap._new(st) or snap.config_stats.get(path) != (st.st_dev, st.st_ino, st.st_size):
                return False  # (and one absent at launch, or another file then: no stats kept)
            charge += len(snap.known[gitdir][path][0])
        if charge > self.parse_left:
            return False  # beyond the budget: the judgement reads them and says so
        try:
            st = os.lstat(gitdir + "/hooks")
        except FileNotFoundError:
            self.parse_left -= charge
            return True
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode):
            return False
        try:
            if not all(name.endswith(".sample") for name in os.listdir(gitdir + "/hooks")):
                return False
        except OSError:
            return False
        self.parse_left -= charge
        return True

    def nested(self, gitdir: str, full: bool, depth: int) -> None:
        """The git directories under `gitdir`'s `modules/**` and `worktrees/*`."""
        for kind in ("modules", "worktrees"):
            below = os.path.join(gitdir, kind)
            if os.path.isdir(below) and not os.path.islink(below):
                for sub in self._gitdirs_under(below, kind == "worktrees"):
                    self.gitdir(sub, full=full, top=None, depth=depth + 1)

    def census_below(self, gitdir: str, depth: int) -> None:
        """At launch: the git directories this one leads to (the one its `commondir` names, its
        `modules/**` and `worktrees/*`), as `gitdir` reaches them after the run."""
        _text, target = _commondir_of(gitdir, os.path.join(gitdir, "commondir"))
        if target is not None:
            self.gitdir(target, full=False, top=None, depth=depth + 1)
        self.nested(gitdir, False, depth)

    def _gitdirs_under(self, base: str, one_level: bool) -> list:
        """Git directories under `.git/modules` (names may hold slashes: nested) or
        `.git/worktrees` (one level)."""
        found, pending = [], [(base, 0)]
        while pending and len(found) < MAX_GITDIRS:
            directory, level = pending.pop()
            try:
                names = os.listdir(directory)
            except OSError:
                continue
            for name in names:
                sub = os.path.join(directory, name)
                if not os.path.isdir(sub) or os.path.islink(sub):
                    continue
                if one_level or any(os.path.lexists(os.path.join(sub, f)) for f in ("HEAD", "config", "hooks")):
                    found.append(sub)
                elif level < MAX_NESTING:
                    pending.append((sub, level + 1))
                else:
                    self.add(None, f"{sub}: nested deeper than {MAX_NESTING} levels: not checked")
        return found


def after_run(snap) -> str:
    """The post-run check end to end: '' when nothing was planted, else the message for the
    run's error (what was moved where, what could not be), the run then failing closed."""
    if snap is None:
        return ""
    findings = snap.verify()
    if not findings:
        return ""
    moved, failed = [], []
    if any(finding.path is not None for finding in findings):  # (only the judgement names paths: loaded)
        from sandboy.confine.gitjudge import quarantine

        moved, failed = quarantine(findings, snap.writable)
    moved_to = {was: now for was, now in moved}
    failures: dict = {}
    for was, why in failed:
        failures.setdefault(was, []).append(why)
    parts = []
    for finding in findings[:MESSAGE_FINDINGS]:
        notes = [f"moved to {moved_to[finding.path]}"] if finding.path in moved_to else []
        if finding.path in moved_to and finding.restore is not None and finding.path not in failures:
            notes.append("launch content put back")
        notes += [why if why.startswith("moved") else f"NOT moved: {why}" for why in failures.get(finding.path, ())]
        parts.append(f"{finding.path or '(run)'}: {finding.why}" + (f" ({'; '.join(notes)})" if notes else ""))
    if len(findings) > MESSAGE_FINDINGS:
        # every one is in the quarantine's MANIFEST; a message of megabytes helps no one
        parts.append(f"and {len(findings) - MESSAGE_FINDINGS} more ({len(moved)} moved in all, "
                     f"{len(failed)} not; each listed in the quarantine's MANIFEST)")
    return ("the command left code for the host's next git command; failing the run "
            "(ADR 0019): " + "; ".join(parts))


# The post-run judgement lives in gitjudge (loaded only when there is something to judge), the
# check around runs — its hook, a cage's Scope, the gate's launch record — in gitcheck_hook (what a
# plan-cache hit never runs: session 11); their names stay reachable from here.
_FROM_JUDGE = ("SAFE_KEYS", "SAFE_SECTIONS", "is_safe", "_Check", "quarantine", "_open_below", "_quarantine_box",
               "_put_back")
_FROM_HOOK = ("GitCheck", "GitDirs", "LaunchRecord", "beyond_bound", "scope_args", "_cage_scope")


def __getattr__(name: str):
    if name in _FROM_JUDGE:
        from sandboy.confine import gitjudge

        return getattr(gitjudge, name)
    if name in _FROM_HOOK:
        from sandboy.confine import gitcheck_hook

        return getattr(gitcheck_hook, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
