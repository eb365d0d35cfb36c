"""Protected paths: readable, never writable, even inside a write root (issue #7, ADR 0013).

A step that may write the repository could otherwise plant code for the host's next command:
`core.fsmonitor` appended to `.git/config` ran as root on the operator's next `git status`, and
a `.git/hooks/pre-commit` runs on their next commit. The same holds for the start-up files of a
home directory granted for writing. `fs.protect` names more paths; `fs.protect_defaults = true`
(the default) adds `DEFAULT_PROTECTED` in every write root where the path exists at launch.

This module only decides WHICH paths are protected (realpaths, resolved at launch). How they are
enforced is the cage's business: a read-only bind in the cage's mount namespace where there is
one; otherwise Landlock read-only rules for `fs.protect` entries (their directories are split,
as for `fs.deny`), while the defaults are reported degraded rather than split (splitting `.git`
would stop git writing `index.lock`; see ADR 0013).
"""

import os
import stat

from sandboy.policy.resolve import PathSet, is_within

# Relative to each write root. Each entry is something a host program reads and acts on by
# itself, so a write there is code run outside the cage later. Kept to files/directories that
# tools never need to modify during a build or test run.
DEFAULT_PROTECTED = (
    # git: local config (core.fsmonitor, core.hooksPath, aliases, filters run programs) and hooks
    ".git/config",
    ".git/hooks",
    # shells, readline and editors started by the operator
    ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
    ".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout", ".config/fish",
    ".inputrc", ".vimrc", ".config/nvim", ".emacs",
    # login sessions: autostart entries, user units, X start-up, environment
    ".config/autostart", ".config/systemd/user", ".xprofile", ".xinitrc", ".xsession", ".pam_environment",
    # git and ssh: global config, keys, known_hosts, authorized_keys, ssh config (ProxyCommand)
    ".gitconfig", ".config/git", ".ssh",
    # package managers that fetch or run code by configuration (index URLs, yarnPath, wrappers)
    ".npmrc", ".yarnrc", ".yarnrc.yml", ".pypirc", ".pip", ".config/pip", ".cargo/config", ".cargo/config.toml",
    # credential helpers run as programs (credsStore, exec plugins, credential_process)
    ".docker/config.json", ".kube/config", ".aws/config",
    # GnuPG (gpg.conf, agent config naming programs)
    ".gnupg",
)


def _complete_git_dir(root: str) -> None:
    """A repository whose `.git/hooks` (or `.git/config`) is missing would let the command make
    it, and git runs hooks from there whether or not they existed before. So where `.git` is a
    real git directory, the missing ones are made now (an empty directory, an empty file, owned
    like `.git`), which is what `git init` would have left, and then protected like the rest.

    Everything is done relative to ONE fd of `.git`, opened without following a symlink: checked
    first and then made through the path, a `.git` swapped for a symlink in between (a second
    run sharing the write root) had the parent, as root, make them where the link pointed."""
    try:
        git_fd = os.open(os.path.join(root, ".git"), _DIR_NOFOLLOW)
    except OSError:
        return  # absent, a file, or a symlink: not completed
    try:
        if not stat.S_ISREG(os.stat("HEAD", dir_fd=git_fd).st_mode):
            return
        owner = os.fstat(git_fd)
        for name in ("hooks", "config"):
            try:
                if name == "hooks":
                    os.mkdir(name, 0o755, dir_fd=git_fd)  # mkdirat: never follows a symlink there
                    made = os.open(name, _DIR_NOFOLLOW, dir_fd=git_fd)
                else:
                    made = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                                   0o644, dir_fd=git_fd)
            except FileExistsError:
                continue
            try:
                if os.geteuid() == 0:
                    os.fchown(made, owner.st_uid, owner.st_gid)
            finally:
                os.close(made)
    except OSError:
        pass  # not ours to change: it then stays unprotected, and is absent from the report
    finally:
        os.close(git_fd)


_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _config_hooks_path(config_file: str):
    """The last `core.hooksPath` set in one git config file, or None."""
    found = _config_values(config_file, ("core",), "hookspath")
    return found[-1] if found else None


def _config_values(config_file: str, wanted_sections: tuple, wanted_key: str) -> list:
    """Every value of `wanted_key` in sections named in `wanted_sections` (`includeif` matches
    any `[includeIf "..."]`) of one git config file, in file order. A small reader of the plain `[section]` /
    `key = value` form (case-insensitive names, optional quotes, `;`/`#` comments); includes
    are not followed here."""
    try:
        with open(config_file, "rb") as fh:
            text = fh.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return []
    section, values = "", []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line[1:line.find("]")].strip().split(" ", 1)[0].lower() if "]" in line else ""
            line = line[line.find("]") + 1:].strip() if "]" in line else ""
        if section not in wanted_sections or "=" not in line:
            continue
        key, value = (part.strip() for part in line.split("=", 1))
        if key.lower() != wanted_key:
            continue
        for mark in (" #", " ;", "\t#", "\t;"):
            if not value.startswith('"') and mark in value:
                value = value[:value.index(mark)].strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        if value:
            values.append(value)
    return values


def included_configs(root: str) -> list[str]:
    """Files the repository's `.git/config` includes (`[include] path`, `[includeIf ...] path`):
    git reads them as its own config, so one in the worktree (`git config include.path
    ../tools/gitconfig`, a common way to share settings) took a planted `core.fsmonitor`.
    Relative paths are relative to `.git/`; `~/` is the operator's home."""
    git_dir = os.path.join(root, ".git")
    config = os.path.join(git_dir, "config")
    found = []
    for value in _config_values(config, ("include", "includeif"), "path"):  # one read of the file
        value = os.path.expanduser(value) if value.startswith("~/") else os.path.join(git_dir, value)
        found.append(os.path.normpath(value))
    return found


def hooks_paths(root: str) -> list[str]:
    """Directories git would run hooks from for a repository at `root`, other than
    `.git/hooks`: `core.hooksPath` in its `.git/config` or a config git reads in every
    repository — the operator's global ones and the system's (`gitcheck.global_configs`: the
    after-run check's list; husky and similar tools point it into the worktree, e.g. `.husky/_`,
    where a write root reaches it: a planted `pre-commit` there ran on the operator's next
    commit; the system config's was left writable until session 11). Relative values are
    relative to the worktree's top, `~/` is the operator's home."""
    git_dir = os.path.join(root, ".git")
    if not os.path.isdir(git_dir):
        return []
    home = os.path.expanduser("~")
    found = []
    for config in (os.path.join(git_dir, "config"), *_operator_configs(home)):
        value = _config_hooks_path(config)
        if value:
            found.append(hooks_directory(value, root, home))
    return found


def _operator_configs(home: str) -> list:
    """The config files git reads in every repository besides the repository's own: the one
    list, the after-run check's (`gitcheck.global_configs`; imported here only where a write
    root holds a repository, which the git check then imports anyway)."""
    from sandboy.confine.gitcheck import global_configs

    return global_configs(home)


def hooks_directory(value: str, top, home: str):
    """Where git runs hooks from for `core.hooksPath = value` in a repository whose worktree top
    is `top` (None when unknown: a relative value then names nothing found here), normalised —
    the one resolution (this module's launch protection and gitcheck's judgement)."""
    if value.startswith("~/"):
        hooks = os.path.join(home, value[2:])
    elif os.path.isabs(value) or top is None:
        hooks = value if os.path.isabs(value) else None
    else:
        hooks = os.path.join(top, value)
    return os.path.normpath(hooks) if hooks else None


# githooks(5): the names git runs from a hooks directory. Husky's runner starts the same names
# from the directory above its own (see `husky_scripts`).
GIT_HOOK_NAMES = (
    "applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit", "prepare-commit-msg",
    "commit-msg", "post-commit", "pre-rebase", "post-checkout", "post-merge", "pre-push", "pre-receive", "update",
    "proc-receive", "post-receive", "post-update", "reference-transaction", "push-to-checkout", "pre-auto-gc",
    "post-rewrite", "sendemail-validate", "fsmonitor-watchman", "p4-changelist", "p4-prepare-changelist",
    "p4-post-changelist", "p4-pre-submit", "post-index-change",
)


def husky_scripts(hooks_dir: str) -> list[str]:
    """The scripts git's hooks run where `hooks_dir` is husky's (`core.hooksPath = .husky/_`,
    holding husky's runner `h`): `.husky/pre-commit` and the other hook names beside `_`. Git
    runs `_/pre-commit`, which sources `_/h`, which runs `sh -e .husky/pre-commit` — a tracked
    file of the worktree, of any mode, that is a hook in all but its place (ADR 0019, session
    5). [] for any other directory."""
    if os.path.basename(os.path.normpath(hooks_dir)) != "_" or not os.path.lexists(os.path.join(hooks_dir, "h")):
        return []
    parent = os.path.dirname(os.path.normpath(hooks_dir))
    try:
        present = set(os.listdir(parent))
    except OSError:
        return []
    return [os.path.join(parent, name) for name in GIT_HOOK_NAMES if name in present]


# Hook managers whose stub in a hooks directory runs what a file of the worktree lists (ADR
# 0019, session 6): pre-commit's `.pre-commit-config.yaml` (the name its stub passes as
# `--config=`), lefthook's config under any of its names (and its `-local` override) and the
# script directories it runs from (`.lefthook/<hook>/*`, `.lefthook-local/<hook>/*`).
PRE_COMMIT_STUB = b"# File generated by pre-commit"
LEFTHOOK_STUB = b"call_lefthook run"
LEFTHOOK_CONFIGS = tuple(f"{where}{dot}lefthook{local}.{ext}"
                         for where, dots in (("", ("", ".")), (".config/", ("",)))
                         for dot in dots for local in ("", "-local")
                         for ext in ("yml", "yaml", "toml", "json", "jsonc"))
LEFTHOOK_SCRIPT_DIRS = (".lefthook", ".lefthook-local")
_STUB_READ = 4096  # both stubs name themselves in their first lines (pre-commit's ~1 KiB in all)


def _hook_stub(path: str) -> bytes:
    """The first bytes of a hook file (a regular file, symlinks followed as git does), b"" when
    it is none. Never blocks nor opens a device: the lstat/fstat decide (a FIFO named
    `pre-commit` would stall the parent)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return b""
    try:
        return os.read(fd, _STUB_READ) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return b""
    finally:
        os.close(fd)


def _pre_commit_config(stub: bytes):
    """The config pre-commit's stub passes (`ARGS=(hook-impl --config=.pre-commit-config.yaml
    --hook-type=pre-commit)`; a name with spaces is written shell-quoted: `--config='a b.yaml'`),
    or None."""
    at = stub.find(b"--config=")
    if at < 0:
        return None
    rest = stub[at + len(b"--config="):]
    if rest[:1] in (b"'", b'"'):
        end = rest.find(rest[:1], 1)
        value = rest[1:end] if end > 0 else b""
    else:
        value = rest.split(None, 1)[0].rstrip(b")") if rest.strip() else b""
    return os.fsdecode(value) or None


def hook_manager_configs(top: str, hooks_dirs, interpreters=None) -> list[str]:
    """What a hook manager installed in one of `hooks_dirs` runs from the worktree at `top` on
    the operator's next commit, that exists now: pre-commit's config (its stub names it:
    `--config=.pre-commit-config.yaml`, relative to the top) and lefthook's configs and script
    directories. Where neither manager's stub is installed, nothing: a formatter that rewrites
    every YAML file (`prettier --write .`) still may — the file is then no start-up file of
    the host (ADR 0019, session 6; husky's scripts are decided the same way). One directory
    read per hooks directory where no hook but the samples is there (most repositories).
    `interpreters`: a list that gets (stub, INSTALL_PYTHON) of each pre-commit stub naming one
    (`confine.hook_python`: that interpreter's start-up code is what the next commit runs first)."""
    pre_commit, lefthook = [], False
    for hooks in dict.fromkeys(hooks_dirs):  # each once, however often a config names it
        try:
            names = set(os.listdir(hooks)).intersection(GIT_HOOK_NAMES)
        except OSError:
            continue
        for name in sorted(names):
            head = _hook_stub(os.path.join(hooks, name))
            if PRE_COMMIT_STUB in head:
                config = _pre_commit_config(head)
                if config:
                    pre_commit.append(config)
                if interpreters is not None and b"INSTALL_PYTHON=" in head:
                    from sandboy.confine.hook_python import stub_python

                    python = stub_python(head)
                    if python:
                        interpreters.append((os.path.join(hooks, name), python))
            lefthook = lefthook or LEFTHOOK_STUB in head
    found = []
    for name in dict.fromkeys(pre_commit):
        path = os.path.normpath(os.path.join(top, name))
        if os.path.lexists(path):
            found.append(path)
    if lefthook:
        try:
            present = set(os.listdir(top))
        except OSError:
            present = set()
        for name in LEFTHOOK_CONFIGS + LEFTHOOK_SCRIPT_DIRS:
            if name.split("/", 1)[0] in present and os.path.lexists(os.path.join(top, name)):
                found.append(os.path.join(top, name))
    return found


def discovery_key(top: str, hooks_dirs) -> tuple:
    return top, tuple(dict.fromkeys(hooks_dirs))


def discover_managers(top: str, hooks_dirs, managers=None, interpreters=None) -> list:
    """`hook_manager_configs(top, hooks_dirs, interpreters)`, taken from `managers` where the
    same discovery was made earlier in this launch (see resolve_protected), else made and put
    there: the cage's build and the run's launch look once, not once each."""
    key = discovery_key(top, hooks_dirs)
    known = managers.get(key) if managers is not None else None
    if known is None:
        pythons: list = []
        known = (hook_manager_configs(top, hooks_dirs, pythons), pythons)
        if managers is not None:
            managers[key] = known
    if interpreters is not None:
        interpreters.extend(known[1])
    return list(known[0])


_FIRST_COMPONENTS = frozenset(name.split("/", 1)[0] for name in DEFAULT_PROTECTED)


def _present_defaults(root: str) -> list[str]:
    """The default names that may exist in `root`: those whose first component is there. One
    directory read instead of a lookup per name — this runs again whenever a compiled cage is
    reused (`Cage.still_valid`), where 40 lookups per write root cost more than the rest."""
    try:
        here = _FIRST_COMPONENTS.intersection(os.listdir(root))
    except OSError:
        return []
    return [name for name in DEFAULT_PROTECTED if name.split("/", 1)[0] in here]


def symlinks_on_the_way(path: str, limit: int = 40) -> list[str]:
    """Where each symlink met while resolving `path` lives (its own path, with a real parent),
    in order. Protecting only the target of `~/.bashrc -> .dotfiles/bashrc` (stow, chezmoi,
    yadm) left the link itself in the write root: `rm .bashrc; echo ... > .bashrc` replaced the
    operator's start-up file. Each link found here is bound over itself too (a symlink can be a
    mount point: then `unlink`/`rename` of it get EBUSY)."""
    found: list[str] = []
    # an absolute path as spelled: os.path.abspath collapses `link/..` lexically, where the kernel
    # goes to the parent of the link's target (a PATH entry `~/link/../bin`: path_dirs)
    pending = [part for part in (path if path.startswith("/") else os.path.abspath(path)).split("/") if part]
    current = "/"
    while pending and len(found) <= limit:
        part = pending.pop(0)
        if part == "..":
            current = os.path.dirname(current)
            continue
        if part == ".":
            continue
        candidate = os.path.join(current, part)
        try:
            if not stat.S_ISLNK(os.lstat(candidate).st_mode):
                current = candidate
                continue
            target = os.readlink(candidate)
        except OSError:
            return found
        found.append(candidate)
        if target.startswith("/"):
            current = "/"
        pending = [p for p in target.split("/") if p] + pending
    return found


def realpath_and_links(path: str) -> tuple:
    """(os.path.realpath(path), symlinks_on_the_way(path)) in one walk where no symlink is on the
    way (the usual case: the realpath is then the absolute path with `.` and `..` taken as they
    stand, which `realpath` would have found by lstat-ing every component again): Sandboy's own
    installation rows and the PATH entries are resolved so at every build with write roots
    (≈ 0.3 ms of lstats; session 10)."""
    links = symlinks_on_the_way(path)
    if links:
        return os.path.realpath(path), links
    lexical = os.path.normpath(path if path.startswith("/") else os.path.abspath(path))
    return (os.path.realpath(path) if lexical.startswith("//") else lexical), links


def resolve_protected(write_roots, explicit, defaults: bool, managers=None) -> tuple:
    """(from_defaults, from_policy): realpaths of the protected paths that exist now and lie
    inside some write root (elsewhere nothing can write them anyway). `write_roots` and
    `explicit` are resolved policy paths. `managers`: a dict that gets each hook-manager
    discovery made here (`discovery_key(top, hooks_dirs)` -> (hook_manager_configs' answer,
    its interpreters)), for the launch that follows to take instead of discovering again
    (`hook_python.launch_warnings`, gitcheck's snapshot)."""
    roots = [os.path.realpath(r) for r in write_roots if os.path.isdir(r)]
    within = PathSet(roots)  # a step policy may name thousands of write roots and protected paths

    def inside_a_root(path: str):
        if not os.path.lexists(path):
            return None
        real = os.path.realpath(path)
        return real if within.covers(real) else None

    def default_under(root: str, name: str):
        # `root` is a realpath: walk the name's components with lstat, and pay for realpath
        # only where one is a symlink (rare; realpath costs ~5 lstats of Python each time)
        path = root
        for part in name.split("/"):
            path = f"{path}/{part}"
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                return None
            if stat.S_ISLNK(mode):
                linked.append(os.path.join(root, name))
                return inside_a_root(os.path.join(root, name))
        return path

    from_defaults: list[str] = []
    linked: list[str] = []  # default paths reached through a symlink (inside the root)
    if defaults:
        for root in roots:
            _complete_git_dir(root)
            for name in _present_defaults(root):
                real = default_under(root, name)
                if real and real not in from_defaults:
                    from_defaults.append(real)
            hooks_dirs = hooks_paths(root)
            # husky's scripts beside its hooks directory are hooks too (see husky_scripts), and
            # what an installed pre-commit or lefthook runs from the worktree
            managed = discover_managers(root, [os.path.join(root, ".git", "hooks"), *hooks_dirs], managers)
            for hooks in (hooks_dirs + [s for d in hooks_dirs for s in husky_scripts(d)] + included_configs(root)
                          + managed):
                real = inside_a_root(hooks)
                if real and real not in from_defaults:
                    from_defaults.append(real)
    # Sets beside the ordered lists: a step policy's fs.protect may hold thousands of paths, and
    # `real not in from_policy` made this quadratic (18,000 paths: 5 s, twice per launch).
    from_policy, taken = [], set(from_defaults)
    for path in explicit:
        real = inside_a_root(path)
        if real and real not in taken:
            taken.add(real)
            from_policy.append(real)
    # The links on the way to a protected path, where a write root holds them: bound as
    # themselves under the tier; without it they are named with the defaults (degraded).
    links = {}  # an ordered set
    for path in linked + list(explicit):
        for link in symlinks_on_the_way(path):
            if link not in links and within.covers(link):
                links[link] = None
    from_defaults.extend(link for link in links if link not in taken)
    return from_defaults, from_policy


def launch_reads(write_roots, explicit, defaults: bool):
    """What decides `resolve_protected(write_roots, explicit, defaults)`, as two lists of paths:
    (looked up, read) — each path it looks up (lstat: what is there, which inode; a directory's
    ctime says whether an entry was added, removed or renamed in it) and each file it reads only
    for its bytes (stat, symlinks followed). While every one of them shows the same inode, mode,
    size, mtime and ctime, its answer is the same: `reuse.Fingerprint` checks these stats for a
    compiled cage run again, instead of the whole resolution (a gate step's reuse check).

    None where more decides it — fs.protect entries, a core.hooksPath or an include named by a
    config, a symlink on the way to a default path (resolve_protected then follows them): the
    caller resolves anew. Kept beside resolve_protected on purpose: a lookup added there must be
    listed here (tests/cage/test_reuse_protected.py compares the two on changed trees)."""
    if explicit:
        return None
    looked_up: list[str] = []
    read: list[str] = []
    if not defaults:
        return looked_up, read

    def down_to(root: str, name: str) -> bool:
        # every directory on the way from `root` to root/name and that path itself (a write root
        # "/" too: its entries were never listed — `root + "/"` is "//")
        path = os.path.normpath(os.path.join(root, name))
        if path == root or not is_within(path, root):
            return False
        at = root.rstrip("/")
        for part in path[len(at) + 1:].split("/"):
            at = f"{at}/{part}"
            looked_up.append(at)
        return True

    for root in dict.fromkeys(os.path.realpath(r) for r in write_roots if os.path.isdir(r)):
        looked_up.append(root)  # its entries: the default names present, `.git`, a manager's configs
        for name in _present_defaults(root):
            down_to(root, name)
        git_dir = f"{root}/.git"
        if not os.path.isdir(git_dir) or os.path.islink(git_dir):
            looked_up.append(git_dir)  # (a symlink here is refused below)
            continue
        looked_up += [git_dir, f"{git_dir}/HEAD", f"{git_dir}/config", f"{git_dir}/hooks"]
        if hooks_paths(root) or included_configs(root):
            return None
        # hooks_paths read the operator's global and the system's configs too: their bytes,
        # wherever they lead (which files those are: the environment, `fingerprint._environment`)
        read += _operator_configs(os.path.expanduser("~"))
        hooks = f"{git_dir}/hooks"
        try:
            names = sorted(set(os.listdir(hooks)).intersection(GIT_HOOK_NAMES))
        except OSError:
            names = []
        for name in names:
            read.append(f"{hooks}/{name}")  # a manager's stub: what it names
            head = _hook_stub(f"{hooks}/{name}")
            config = _pre_commit_config(head) if PRE_COMMIT_STUB in head else None
            if config and not down_to(root, config):
                return None
            if LEFTHOOK_STUB in head:  # (at the top or in .config/, which the defaults list already)
                for name in LEFTHOOK_CONFIGS + LEFTHOOK_SCRIPT_DIRS:
                    down_to(root, name)
    return list(dict.fromkeys(looked_up)), list(dict.fromkeys(read))
