"""The post-run git check's judgement (issue #7 item 5, ADR 0019): what in a git directory the
walk found (`gitcheck._Walk`) runs a program for the host's next git command, and moving it out
of git's way.

`gitcheck` holds what the launch records and the walk that finds git directories; this module
is loaded only when there is something to judge — a git directory the walk reached, the
operator's global config leading somewhere, a PATH directory to look through, a finding to
move — so a run whose write roots hold no repository never loads it (`GitSnapshot.verify`).
See gitcheck's docstring for what counts as changed by the run and as executable configuration.
"""

import errno
import os
import stat
import time

from sandboy.confine.gitcheck import (
    CONFIG_PARSE_BUDGET, MAX_INCLUDE_DEPTH, QUARANTINE_DIR, ConfigSyntaxError, _commondir_of, _entries, _identity,
    _read_config, _Walk, followed,
)
from sandboy.confine.hook_managers import hook_manager_configs, hooks_directory, husky_scripts
from sandboy.paths import is_within, is_within_any

# Keys git itself, a clone, `git submodule add`, `git worktree add`, `git config user.*` and
# common porcelain settings write, none of which names a program or a file git executes.
# `section.key` (no subsection) or `section.*.key` (any subsection); a section in SAFE_SECTIONS
# is safe with any key (colors, advice, status and log display settings).
SAFE_KEYS = frozenset("""
core.repositoryformatversion core.filemode core.bare core.logallrefupdates core.ignorecase
core.precomposeunicode core.symlinks core.worktree core.autocrlf core.eol core.safecrlf core.quotepath
core.sparsecheckout core.sparsecheckoutcone core.abbrev core.compression core.loosecompression
core.checkstat core.trustctime core.splitindex core.untrackedcache core.commitgraph core.multipackindex
core.preloadindex core.whitespace core.longpaths core.sharedrepository core.warnambiguousrefs
core.bigfilethreshold core.deltabasecachelimit core.packedgitlimit core.packedgitwindowsize
extensions.objectformat extensions.refstorage extensions.worktreeconfig extensions.partialclone
extensions.preciousobjects extensions.noop
user.name user.email user.signingkey user.useconfigonly author.name author.email committer.name
committer.email init.defaultbranch pull.rebase pull.ff push.default push.autosetupremote push.followtags
fetch.prune fetch.prunetags fetch.recursesubmodules fetch.writecommitgraph fetch.parallel
gc.auto gc.autodetach gc.autopacklimit gc.reflogexpire gc.reflogexpireunreachable gc.pruneexpire
index.version index.threads index.skiphash feature.manyfiles protocol.version
merge.conflictstyle merge.ff merge.renames merge.log rebase.autosquash rebase.autostash rebase.updaterefs
commit.gpgsign commit.verbose commit.cleanup commit.status tag.gpgsign tag.sort transfer.fsckobjects
receive.denycurrentbranch lfs.repositoryformatversion lfs.url lfs.locksverify safe.directory
diff.renames diff.algorithm diff.mnemonicprefix diff.noprefix diff.context diff.interhunkcontext
diff.colormoved diff.indentheuristic diff.submodule diff.ignoresubmodules diff.renamelimit
submodule.active submodule.recurse worktree.guessremote
remote.*.url remote.*.pushurl remote.*.fetch remote.*.push remote.*.tagopt remote.*.prune
remote.*.prunetags remote.*.mirror remote.*.promisor remote.*.partialclonefilter
remote.*.skipdefaultupdate remote.*.skipfetchall
branch.*.remote branch.*.merge branch.*.rebase branch.*.pushremote branch.*.description
submodule.*.url submodule.*.active submodule.*.branch submodule.*.fetchrecursesubmodules
submodule.*.ignore submodule.*.shallow submodule.*.update
url.*.insteadof url.*.pushinsteadof
""".split())
SAFE_SECTIONS = frozenset({"color", "advice", "status", "log", "maintenance", "pack", "i18n", "column"})


def is_safe(name: str, value) -> bool:
    """Whether a config entry is on the list of keys that never name a program (see SAFE_KEYS)."""
    section, _, rest = name.partition(".")
    key = rest.rsplit(".", 1)[-1]
    has_sub = "." in rest
    if section in SAFE_SECTIONS:
        return True
    if (f"{section}.*.{key}" if has_sub else f"{section}.{key}") not in SAFE_KEYS:
        return False
    text = (value or "").strip().lower()
    if key in ("url", "pushurl") and section == "remote":
        return not text.startswith(("ext::", "fd::"))  # ext:: runs a command of the URL's choosing
    if key == "update" and section == "submodule":
        return not text.startswith("!")  # `!command` runs on `git submodule update`
    return True


class _Check(_Walk):
    """The check after the run: the walk (`_Walk`), judging each git directory it reaches."""

    def judge(self, gitdir: str, full: bool, top, depth: int, identity, top_dir, top_identity) -> None:
        """Judge the git directory the walk reached (`_Walk.gitdir`): its commondir, configs,
        hooks, the hook managers of its worktree, and the git directories it leads to."""
        # Found where it was not at launch (renamed here, or an ancestor renamed: every file in it
        # keeps its ctime), or no git directory then, or its top was not: judged whole.
        full = (full or self.snap.moved(gitdir, identity)
                or (top_identity is not None and self.snap.moved(top_dir, top_identity)))
        # A git directory outside every write root was not the command's to write, but its
        # config may include files, or name a hooks directory, inside one: followed below.
        common = gitdir
        path = os.path.join(gitdir, "commondir")
        if os.path.lexists(path):
            common = self.commondir(gitdir, path, full)
        for name in ("config", "config.worktree"):
            self.config(os.path.join(gitdir, name), full, top, gitdir)
        if common != gitdir and common is not None:
            self.gitdir(common, full=False, top=top, depth=depth + 1)
        self.hooks(os.path.join(gitdir, "hooks"), full)
        if top is not None:
            for path, entries in self.snap.global_entries:  # the operator's core.hooksPath and includes
                self._follow(path, os.path.realpath(path), False, top, None, 0, entries)
            self.hook_managers(gitdir, top, full)
        self.nested(gitdir, full, depth)

    def commondir(self, gitdir: str, path: str, full: bool):
        """A `commondir` makes git read config and hooks from another directory. Only a linked
        worktree's admin directory (`<gitdir>/worktrees/<name>`) has one, leading back to its
        repository; anywhere else, or leading elsewhere, one made during the run is planted."""
        text, target = _commondir_of(gitdir, path)
        admin_of = os.path.dirname(os.path.dirname(gitdir)) if os.path.basename(os.path.dirname(gitdir)) == "worktrees" else None
        if target is not None and target == admin_of:
            return target
        if full or self.new(path) is not None:
            self.add(path, f"a commondir sends git to another directory for its config and hooks ({text!r})")
            return None
        return target

    def config(self, path: str, full: bool, top, gitdir, depth: int = 0) -> None:
        """Judge one config file git reads (`path` as git opens it: symlinks followed)."""
        launch_bytes, before = self.snap.known.get(gitdir, {}).get(path, (None, None)) if depth == 0 else (None, None)
        if os.path.islink(path) and self.new(path) is not None and self.writable(os.path.dirname(path)):
            self.add(path, "a git config became a symlink during the run", launch_bytes)
            return
        real = os.path.realpath(path)
        if real != path:
            launch_bytes = before = None  # judged where it leads: the file the run may have changed
        if depth:
            # once each per repository: a file including itself (git refuses it) or included from
            # many places costs one look — but a relative core.hooksPath in it is another directory
            # for each repository's top (`~/.gitconfig` including `.gitconfig.local` with
            # `hooksPath = .githooks`: looked at first for no repository, the repository's own
            # `.githooks` was never judged — a planted pre-commit passed, rc 0; rvsec11)
            if (real, top) in self.included:
                return
            self.included.add((real, top))
        if not self.writable(real):  # not the command's: only where it leads
            entries = self._outside_entries(real)
            if entries:
                self._follow(path, real, False, top, gitdir, depth, entries)
            return
        if not (full or self.new(real) is not None):
            # unchanged: still follow its includes, which may lead to files the run made
            self._follow(path, real, full, top, gitdir, depth)
            return
        try:
            entries = self.entries(real)
        except ConfigSyntaxError as exc:
            self.add(real, f"a git config changed during the run that this check cannot read ({exc})", launch_bytes)
            return
        if entries is None:
            return
        added = list(entries)
        for entry in before or ():
            if entry in added:
                added.remove(entry)
        unsafe = sorted({name for name, value in added if not is_safe(name, value)})
        if unsafe:
            self.add(real, "git config keys that run programs or lead elsewhere: " + ", ".join(unsafe),
                     launch_bytes)
        self._follow(path, real, full, top, gitdir, depth, entries)

    def _follow(self, path, real, full, top, gitdir, depth, entries=None) -> None:
        """Included configs (judged like the file itself; relative to `path`'s directory, as
        git resolves them) and `core.hooksPath` directories of the config `real` holds."""
        if entries is None:
            try:
                entries = self.entries(real)
            except ConfigSyntaxError:
                return  # git refuses it too: nothing in it is used
            if entries is None:
                return
        base = os.path.dirname(path)
        for name, value in entries:
            if not value:
                continue
            kind = followed(name)  # (what GitSnapshot._to_judge looks for in the global configs)
            if kind == "include":
                if depth >= MAX_INCLUDE_DEPTH:
                    continue  # git refuses a config nested deeper (one level of margin here)
                target = os.path.join(self.snap.home, value[2:]) if value.startswith("~/") else os.path.join(base, value)
                self.config(os.path.normpath(target), full, top, gitdir, depth + 1)
            elif kind == "hooks":
                hooks = hooks_directory(value, top, self.snap.home)
                if hooks:
                    if top is not None:  # where a hook manager's stub may live (hook_managers);
                        # a dict: a config naming one directory 20,000 times lists it once there too
                        self.hooks_by_top.setdefault(top, {})[hooks] = None
                    self.hooks(hooks, full)

    def _outside_entries(self, real: str):
        """`entries(real)` of a config no write root holds, parsed once per check (followed once
        per repository top, `config`: one included by the operator's global config is met again
        for each repository, and its bytes are not the command's to change)."""
        cache = self.__dict__.setdefault("outside_parsed", {})
        if real not in cache:
            try:
                cache[real] = self.entries(real)
            except ConfigSyntaxError:
                cache[real] = None  # git refuses it too: nothing in it is used
        return cache[real]

    def entries(self, real: str):
        """`_entries(real)`, charged to the check's parse budget; beyond it None (not read) and
        a finding that fails the run closed."""
        data = _read_config(real)
        if data is None:
            try:
                regular = stat.S_ISREG(os.lstat(real).st_mode)
            except OSError:
                regular = False
            if regular and self.writable(real):
                # there, but not readable by the parent (mode 000 set by the command, for a parent
                # that is not root; no fd left while the proxy's thread still holds the run's
                # connections): what git may read later cannot be judged — fail closed
                self.add(None, f"{real}: a git config in a write root the check cannot read: not checked")
            return None
        self.parse_left -= len(data)
        if self.parse_left < 0:
            self.add(None, f"more than {CONFIG_PARSE_BUDGET >> 20} MiB of git config to read "
                     "(beyond the check's bounds): not checked to the end")
            return None
        return _entries(real, data)

    def hooks(self, directory: str, full: bool, depth: int = 0) -> None:
        """Every file (or symlink) but `*.sample` in a directory git runs hooks from, and in its
        subdirectories (one level): git runs the executable ones by name, and they source their
        neighbours whatever their mode (husky's `_/h`, v8's `_/husky.sh`). Where the directory is husky's
        (`core.hooksPath = .husky/_`, holding husky's runner `h`), the scripts that runner
        starts (`.husky/pre-commit` ...) are hooks too (ADR 0019, session 5)."""
        st = self.new(directory)
        if st is not None and stat.S_ISLNK(st.st_mode) and self.writable(os.path.dirname(directory)):
            self.add(directory, "a hooks directory became a symlink during the run")
            return
        real = os.path.realpath(directory)
        # A hooks directory made, or renamed into place, during the run has every hook in it
        # judged: a rename keeps the ctime of what it moves (`mv fixtures/hooks .git/hooks`, the
        # project's tracked scripts, all older than the launch, passed). Adding or removing a
        # hook changes it too; an added one is judged anyway. So has one that is another
        # directory than at launch (an ancestor swapped: GitSnapshot.hooks_launch).
        launch = self.snap.hooks_launch.get(directory)
        full = full or self.new(real) is not None or (launch is not None and _identity(real) != launch)
        if (real, full) in self.hook_dirs:
            return  # once each: a config can name one large directory thousands of times
        if not self.writable(real) and not any(is_within(w, real) for w in self.snap.writable):
            return  # the command could write nothing in it (a file granted alone may lie in it)
        self.hook_dirs.add((real, full))
        scripts = husky_scripts(real)
        if scripts and not full and self.new(os.path.dirname(real)) is not None:
            # husky's `.husky` renamed into place: `_` and the scripts move with it, keeping their ctime
            full = True
            self.hook_dirs.add((real, full))
        try:
            entries = list(os.scandir(real))
        except OSError:
            return
        for entry in entries:
            if entry.name.endswith(".sample"):
                continue
            try:
                est = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(est.st_mode):
                if depth < 1:  # one level: husky 8's `.husky/_/husky.sh`, sourced by every hook;
                    self.hooks(entry.path, full, depth + 1)  # not a whole tree a hooksPath may name
            else:
                self.hook_file(entry.path, est, full, "a file in a git hooks directory made or changed during the run")
        for path in scripts:
            # husky 9: git runs `.husky/_/pre-commit`, which sources `_/h`, which runs `sh -e
            # .husky/pre-commit` — a tracked file of the worktree, of any mode
            try:
                est = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISDIR(est.st_mode):
                self.hook_file(path, est, full, "a husky script git's hook runs, made or changed during the run")

    def hook_managers(self, gitdir: str, top: str, full: bool) -> None:
        """What an installed pre-commit or lefthook runs from the worktree at `top` on the
        operator's next commit (`hook_managers.hook_manager_configs`: pre-commit's config, lefthook's
        configs and the scripts in `.lefthook*/<hook>/`): hooks one indirection away, judged as
        hooks are — made or changed during the run is a finding (ADR 0019, session 6). Under
        the tier those that existed at launch are bound read-only; this finds the rest."""
        hooks_dirs = [os.path.join(gitdir, "hooks"), *self.hooks_by_top.get(top, ())]  # (configs followed first)
        pythons: list = []
        for path in hook_manager_configs(top, hooks_dirs, pythons):
            try:
                st = os.lstat(path)
            except OSError:
                continue
            # a directory between the top and `path` made, or renamed into place, during the run
            # (`mv tests/fx .lefthook`, `mv tests/cfg .config`: tracked files, all older than the
            # launch, keep their ctime) has what it holds judged, as `hooks` does
            moved_in = full or self._under_new_directory(top, path)
            if not stat.S_ISDIR(st.st_mode):
                launch = self.snap.manager_launch.get(path)
                if (moved_in and not full and not self.snap._new(st) and launch is not None
                        and _read_config(path) == launch):
                    continue  # its launch bytes: other files of the directory changed (`.config/tool.toml`)
                self.hook_file(path, st, moved_in, "a file an installed hook manager (pre-commit, lefthook) "
                               "runs commands from, made or changed during the run", launch)
                continue
            # lefthook's script directories: `.lefthook/pre-commit/lint.sh` runs on a commit
            moved_in = moved_in or self.new(path) is not None
            for sub in self._listed(path):
                if sub.is_dir(follow_symlinks=False):
                    sub_full = moved_in or self.new(sub.path) is not None
                    for entry in self._listed(sub.path):
                        try:
                            est = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        self.hook_file(entry.path, est, sub_full,
                                       "a script lefthook's installed hook runs, made or changed during the run")

        for stub, python in pythons:
            self.hook_python(stub, python, full)

    def hook_python(self, stub: str, python: str, full: bool) -> None:
        """pre-commit's stub `stub` execs `python -mpre_commit`: where a write root holds that
        interpreter (the repository's own `.venv`), what it runs at start — `.pth` files,
        sitecustomize, the pre_commit distribution and its requirements — made or changed during
        the run is a finding (`confine.hook_python`, ADR 0019 session 7)."""
        from sandboy.confine.hook_python import WHY_FIX, environment, judge

        writable = self.snap.writable
        found = judge(python, self.snap.python_launch.get(python), self.new, self.writable,
                      lambda p: is_within_any(p, writable) or any(is_within(w, p) for w in writable), full)
        fix = WHY_FIX.replace("<environment>", environment(python))
        for path, why in found:
            self.add(path, f"{why} (its stub: {stub}); {fix}")

    def path_programs(self, directory: str, launch) -> None:
        """A directory of the operator's PATH that no mount kept read-only (confine.path_dirs,
        ADR 0013 session 7): every entry made or changed during the run is a program the
        operator's next command of that name runs (`~/.local/bin/git`) — a finding, as a hook
        is. The directory swapped for a symlink is one itself; swapped for another directory
        (`launch`: its identity then), every entry in it is judged (a rename keeps theirs)."""
        try:
            st = os.lstat(directory)
        except OSError:
            return
        if stat.S_ISLNK(st.st_mode):
            # a symlink on the way to a PATH directory (`~/bin -> dotfiles/bin`, `~/.nix-profile ->
            # /nix/...`: `held`) repointed — a new link renamed over it — or another one moved in
            # its place (`launch`: the link's identity then), or the directory swapped for a link
            if ((self.snap._new(st) or (st.st_dev, st.st_ino) != launch)
                    and self.writable(os.path.dirname(directory))):
                self.add(directory, "a directory on the operator's PATH (or a symlink on the way to one) replaced "
                         "or repointed during the run (fs.protect_defaults = false gives that away; ADR 0013)")
            return
        full = (st.st_dev, st.st_ino) != launch
        for entry in self._listed(directory):
            try:
                est = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if (full or self.snap._new(est)) and self.writable(entry.path):
                self.add(entry.path, "a program on the operator's PATH made or changed during the run: their next "
                         "command of that name would run it (fs.protect_defaults = false gives that away; ADR 0013)")

    def _under_new_directory(self, top: str, path: str) -> bool:
        """Whether a directory between `top` (exclusive) and `path` was made or changed during
        the run."""
        parent = os.path.dirname(path)
        while parent != top and is_within(parent, top):
            if self.new(parent) is not None:
                return True
            parent = os.path.dirname(parent)
        return False

    @staticmethod
    def _listed(directory: str) -> list:
        try:
            with os.scandir(directory) as entries:
                return list(entries)
        except OSError:
            return []

    def hook_file(self, path: str, st, full: bool, why: str, restore=None) -> None:
        if (full or self.snap._new(st)) and self.writable(path):
            if stat.S_ISLNK(st.st_mode) or stat.S_ISREG(st.st_mode):
                self.add(path, why, restore)
        elif stat.S_ISLNK(st.st_mode):
            # an old link (scripts/pre-commit linked in by the project): git runs what it
            # leads to, which may lie in a write root and have been changed by the run
            target = os.path.realpath(path)
            if self.writable(target) and self.new(target) is not None:
                self.add(target, f"the script git hook {os.path.basename(path)} links to, changed during the run")


# --- out of git's way -----------------------------------------------------------------------


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def quarantine(findings, roots, stamp=None) -> tuple:
    """Move each finding's file into `<write root>/.sandboy-quarantine/<stamp>/` (kept, never
    deleted; a MANIFEST there says where each came from and why). Returns (moved, failed):
    moved = [(original, now)], failed = [(original, reason)]. Names are flattened (`/` -> `%`)
    so no `.git` directory is recreated inside the quarantine.

    Every directory on the way, from the write root down, is opened without following a
    symlink and the rename is made between those directory fds: a path component swapped for a
    symlink meanwhile (a second run sharing the write root) fails the move (reported NOT
    moved) instead of moving, or writing, anything outside."""
    from sandboy.escape import clean

    stamp = stamp or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
    moved, failed, boxes = [], [], {}  # boxes: root -> [box fd, box path, manifest lines]
    longest_first = sorted(roots, key=len, reverse=True)
    real_dirs: dict = {}  # many findings share a directory (a hooks directory): one realpath each
    try:
        for finding in findings:
            if finding.path is None or not os.path.lexists(finding.path):
                continue
            directory = os.path.dirname(finding.path)
            if directory not in real_dirs:
                real_dirs[directory] = os.path.realpath(directory)
            source = os.path.join(real_dirs[directory], os.path.basename(finding.path))
            root = next((r for r in longest_first if is_within(source, r) and source != r), None)
            if root is None:
                failed.append((finding.path, "outside every write root"))
                continue
            rel = os.path.relpath(source, root)
            parts = rel.split("/")
            try:
                if root not in boxes:
                    boxes[root] = [*_quarantine_box(root, stamp), []]
                box_fd, box, lines = boxes[root]
                parent_fd = _open_below(root, parts[:-1])
                try:
                    name = rel.replace("%", "%25").replace("/", "%")
                    into_fd, into = box_fd, box
                    try:
                        os.rename(parts[-1], name, src_dir_fd=parent_fd, dst_dir_fd=box_fd)
                    except OSError as exc:
                        if exc.errno != errno.EXDEV:
                            raise
                        # on another file system mounted below the write root (a second disk, a
                        # share): renamed where it is instead, to a name nothing reads (git, a
                        # shell, ssh look at fixed names) — it stayed in place, "NOT moved" and
                        # run by the operator's next git there (redcage10)
                        name = f"{parts[-1]}.sandboy-quarantined-{stamp}"
                        os.rename(parts[-1], name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
                        into_fd, into = parent_fd, os.path.dirname(finding.path)
                    moved.append((finding.path, os.path.join(into, name)))
                    # escaped: the command chose these names (a newline forged whole entries)
                    lines.append(f"{clean(finding.path)}\t{clean(finding.why)}\n")
                    if finding.restore is not None:  # the repository's config as it was at launch
                        why = _put_back(parent_fd, parts[-1], finding.restore, os.lstat(name, dir_fd=into_fd))
                        if why:
                            failed.append((finding.path, f"moved, but its launch content not put back: {why}"))
                finally:
                    os.close(parent_fd)
            except OSError as exc:
                failed.append((finding.path, exc.strerror or str(exc)))
        for box_fd, _box, lines in boxes.values():
            if lines:
                fd = os.open("MANIFEST", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o600, dir_fd=box_fd)
                with open(fd, "a", encoding="utf-8", errors="surrogateescape") as fh:
                    fh.write("# moved here by sandboy after a run: original path <TAB> why (ADR 0019)\n")
                    fh.writelines(lines)
    finally:
        for box_fd, _box, _lines in boxes.values():
            os.close(box_fd)
    return moved, failed


def _open_below(root: str, parts) -> int:
    """An fd of the directory `root/parts...`, no component followed if it is a symlink."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts:
            if part in ("", ".", ".."):
                raise OSError(f"unexpected path component {part!r}")
            below = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = below
        return fd
    except BaseException:
        os.close(fd)
        raise


def _quarantine_box(root: str, stamp: str) -> tuple:
    """(fd, path) of a fresh `<root>/.sandboy-quarantine/<stamp>` directory, made by us: a
    `.sandboy-quarantine` symlink the command left is not followed (ELOOP), and a stamp
    directory it made in advance is not reused."""
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        try:
            os.mkdir(QUARANTINE_DIR, 0o700, dir_fd=root_fd)
        except FileExistsError:
            pass
        top_fd = os.open(QUARANTINE_DIR, _DIR_FLAGS, dir_fd=root_fd)
    finally:
        os.close(root_fd)
    try:
        name = stamp
        while True:
            try:
                os.mkdir(name, 0o700, dir_fd=top_fd)
                break
            except FileExistsError:
                name = f"{stamp}-{os.urandom(3).hex()}"
        return os.open(name, _DIR_FLAGS, dir_fd=top_fd), os.path.join(root, QUARANTINE_DIR, name)
    finally:
        os.close(top_fd)


def _put_back(parent_fd: int, name: str, data: bytes, moved) -> str:
    """Write a config's launch bytes where it was (a new file, owned like the moved one)."""
    try:
        mode = 0o644 if stat.S_ISLNK(moved.st_mode) else stat.S_IMODE(moved.st_mode) & 0o666
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                     dir_fd=parent_fd)
        try:
            os.write(fd, data)
            if os.geteuid() == 0:
                os.fchown(fd, moved.st_uid, moved.st_gid)
        finally:
            os.close(fd)
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""
