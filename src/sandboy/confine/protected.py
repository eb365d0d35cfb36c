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
# The hook managers' discovery and the hooks directories' names live in `hook_managers` (what a
# plan-cache hit in a repository runs of them, without this module: session 11); reachable here.
from sandboy.confine.hook_managers import (  # noqa: F401
    GIT_HOOK_NAMES, LEFTHOOK_CONFIGS, LEFTHOOK_SCRIPT_DIRS, LEFTHOOK_STUB, PRE_COMMIT_STUB, _hook_stub,
    _pre_commit_config, discover_managers, discovery_key, hook_manager_configs, hooks_directory, husky_scripts)

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
    # Session 12 (redcage12): more that a host program runs by itself, each shown running a plant
    # on the host (tests/cage/test_redteam_cage12.py). Files other start-up code sources by
    # default: Debian's .bashrc (.bash_aliases), bash-completion (~/.bash_completion and the
    # per-command completions it loads at the next TAB), Debian's Xsession (.xsessionrc), the
    # session's environment (systemd's environment.d, KDE's env scripts)
    ".bash_aliases", ".bash_completion", ".local/share/bash-completion", ".xsessionrc",
    ".config/environment.d", ".config/plasma-workspace/env",
    # editors and debuggers: what vim runs from its runtime directory at every start (vimrc,
    # plugin/, ftdetect/, ftplugin/, after/ — not ~/.vim whole: a plugin manager's pack/ or plugged/
    # of thousands of files passed the link scan's bound and refused a home's run), emacs' other
    # init files, tmux (run-shell), gdb (shell), pdb (Python statements), IPython's startup
    # scripts and its Python config, direnv's own rc and lib/ (sourced for every .envrc). Files,
    # not their directories, where a plugin manager fills the directory (tmux's TPM in
    # ~/.config/tmux/plugins): the link scan's bound
    ".vim/vimrc", ".vim/gvimrc", ".vim/plugin", ".vim/ftdetect", ".vim/ftplugin", ".vim/after", ".emacs.el", ".emacs.d/init.el", ".emacs.d/early-init.el", ".config/emacs/init.el",
    ".config/emacs/early-init.el", ".tmux.conf", ".config/tmux/tmux.conf", ".gdbinit", ".config/gdb/gdbinit",
    ".pdbrc",
    ".ipython/profile_default/startup", ".ipython/profile_default/ipython_config.py", ".config/direnv/direnvrc",
    ".config/direnv/lib",
    # programs a tool looks up in the home before its own (docker's CLI plugins: `docker build`
    # runs ~/.docker/cli-plugins/docker-buildx), build tools' init scripts and JVM options
    # (Gradle runs ~/.gradle/init.d/* in every build), and more package indexes
    ".docker/cli-plugins", ".gradle/init.d", ".gradle/init.gradle", ".gradle/gradle.properties",
    ".m2/settings.xml", ".config/uv/uv.toml", ".condarc", ".gemrc",
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


def _read_head(path: str, limit: int) -> bytes:
    """The first `limit` bytes of `path`, opened as `open(path, "rb")` opens it (a FIFO waits for
    its writer, as git's own read of it would). In pieces (`load.read_fd_head`): `read(limit)` of a
    1 MiB bound allocated 1 MiB for a config of 100 bytes — ≈ 20 µs of each of the ≈ 10 config
    reads of a build in a repository (session 14)."""
    from sandboy.policy.load import read_fd_head  # (loaded with the policy: no module more)

    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return read_fd_head(fd, limit)
    finally:
        os.close(fd)


def _config_values(config_file: str, wanted_sections: tuple, wanted_key: str) -> list:
    """Every value of `wanted_key` in sections named in `wanted_sections` (`includeif` matches
    any `[includeIf "..."]`) of one git config file, in file order. A small reader of the plain `[section]` /
    `key = value` form (case-insensitive names, optional quotes, `;`/`#` comments); includes
    are not followed here."""
    try:
        text = _read_head(config_file, 1 << 20).decode("utf-8", "replace")
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
    (≈ 0.3 ms of lstats; session 10).

    Asked of the kernel first (`landlock.existing_realpath`: an open(O_PATH) and its /proc/self/fd
    link, ≈ 5 µs where the walk lstats each component in Python, ≈ 20 µs — session 14): where the
    path has no `..` and the kernel's answer is the path itself, no symlink is on the way (one
    would have replaced its part of the path: a link leading to its own path is a loop), so there
    is nothing to walk. Anything else — a link on the way, a missing path, `..` (a link before it
    can lead back to the same spelling: `/a/l/../b` with `l -> /a/x`) — walks as before."""
    lexical = os.path.normpath(path if path.startswith("/") else os.path.abspath(path))
    if not lexical.startswith("//") and ".." not in path.split("/"):
        from sandboy.confine.landlock import existing_realpath  # (the build's: loaded already)

        if existing_realpath(lexical) == lexical:
            return lexical, []
    links = symlinks_on_the_way(path)
    if links:
        return os.path.realpath(path), links
    return (os.path.realpath(path) if lexical.startswith("//") else lexical), links


def resolve_protected(write_roots, explicit, defaults: bool, managers=None, lookups=None) -> tuple:
    """(from_defaults, from_policy): realpaths of the protected paths that exist now and lie
    inside some write root (elsewhere nothing can write them anyway). `write_roots` and
    `explicit` are resolved policy paths. `managers`: a dict that gets each hook-manager
    discovery made here (`discovery_key(top, hooks_dirs)` -> (hook_manager_configs' answer,
    its interpreters)), for the launch that follows to take instead of discovering again
    (`hook_python.launch_warnings`, gitcheck's snapshot). `lookups`: the build's
    `resolve.BuildLookups` (the write roots' realpaths, asked once per build), None to ask anew."""
    roots = _real_dirs(write_roots, lookups)
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


def _real_dirs(write_roots, lookups=None) -> list:
    """The realpaths of those of `write_roots` that are directories now (by the build's `lookups`
    where given: one question per root and build), in order, each once."""
    if lookups is None:
        return list(dict.fromkeys(os.path.realpath(r) for r in write_roots if os.path.isdir(r)))
    return list(dict.fromkeys(lookups.realpath(r) for r in write_roots if lookups.isdir(r)))


def launch_reads(write_roots, explicit, defaults: bool, lookups=None):
    """What decides `resolve_protected(write_roots, explicit, defaults)`, as two lists of paths:
    (looked up, read) — each path it looks up (lstat: what is there, which inode; a directory's
    ctime says whether an entry was added, removed or renamed in it) and each file it reads only
    for its bytes (stat, symlinks followed). While every one of them shows the same inode, mode,
    size, mtime and ctime, its answer is the same: `fingerprint.Fingerprint` checks these stats for a
    compiled cage run again, instead of the whole resolution (a gate step's reuse check).

    None where more decides it — fs.protect entries, a core.hooksPath or an include named by a
    config, a symlink on the way to a default path (resolve_protected then follows them): the
    caller resolves anew. Kept beside resolve_protected on purpose: a lookup added there must be
    listed here (tests/cage/test_reuse_protected.py compares the two on changed trees).
    `lookups`: as resolve_protected's (a build's watch and its resolution see the same roots)."""
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

    for root in _real_dirs(write_roots, lookups):
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
        # wherever they lead (which files those are: the environment, `fingerprint.protected_environment`)
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
