"""Modes no mount can keep: a directory on the way to what the host's git or shell runs, made
writable by other users during the run, is put back after it (ADR 0019, "Session 9").

Under the namespace tier a protected path (`.git/config`, `.git/hooks`, start-up files: ADR
0013) is a read-only mount, and each directory between it and its write root is pinned in place
(`namespaces.pinned_ancestors`) — but pinned READ-WRITE: git makes `.git/index.lock` there. Landlock
does not mediate chmod, chown or setxattr. So the command could `chmod 0777 .git` (or give it an
ACL entry for another user); any local user could then, after the run, rename a config of their own
over `.git/config`, and the operator's next `git status` ran its `core.fsmonitor`. Without the tier
even the protected file itself could be loosened.

No seccomp rule can refuse just this: chmod takes an absolute mode, so "adds group write to
`.git`" looks like the 0775 a build sets on its output, and the ACL's target is a string the filter
cannot read. The parent therefore takes the mode, owner and ACLs of each such path at launch and,
once the run has ended, puts back whatever now lets group or others write, and the run fails
closed like any other plant (`gitcheck.after_run`). What another user planted WHILE the command
ran is new by its ctime, which the git check judges as it judges the command's own changes.

Not covered (docs/threat-model.md): other directories inside a write root. A build's chmod there is
its own business (`mkdir -m 0777 out`); a loosened directory lets other local users put files in
it, as any directory the operator made so does.
"""

import os
import stat
import time

from sandboy.paths import is_within

# the bits that let a user other than the owner add, remove or rename entries (a directory) or
# change the bytes (a file)
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
ACLS = ("system.posix_acl_access", "system.posix_acl_default")


def _settled(ctime_ns: int, now_ns: int) -> bool:
    """Whether any later change of the inode must show in its ctime: the rule of
    `fingerprint.ctime_settled` (file timestamps come from a coarse clock, or whole seconds), kept
    here so that the git check's guard needs no module of the plan cache."""
    margin = 2_000_000_000 if ctime_ns % 1_000_000_000 == 0 else 50_000_000
    return ctime_ns < now_ns - margin


def guarded_paths(write_roots, targets) -> list:
    """Each of `targets` (protected paths, git directories) inside a write root, every directory
    between it and that root, and the root itself, shallowest first: whoever may write one of
    them may replace what lies below it."""
    roots = sorted(write_roots, key=len, reverse=True)  # the innermost root holding a target
    guarded: set = set()
    for target in targets:
        if target in guarded:
            continue
        root = next((r for r in roots if is_within(target, r)), None)
        if root is None:
            continue
        path = target
        # (a path already taken has its chain up to the same root taken: the innermost root
        # holding a path below it is the innermost holding it — 240 stowed links in one
        # directory walk it once, not 240 times)
        while path not in guarded:
            guarded.add(path)
            if path == root or path == os.path.dirname(path):
                break
            path = os.path.dirname(path)
    return sorted(guarded, key=lambda p: (p.count("/"), p))


def _acls(path: str, follow: bool = False) -> tuple:
    found = []
    for name in ACLS:
        try:
            found.append(os.getxattr(path, name, follow_symlinks=follow))
        except OSError:  # ENODATA: none; EOPNOTSUPP: a file system without ACLs
            found.append(None)
    return tuple(found)


class ModeGuard:
    """The launch state of the guarded paths, and `put_back` after the run."""

    __slots__ = ("launch", "links", "targets", "linked", "cut")

    def __init__(self, paths, protected=(), roots=(), installed=()):
        # path -> (st_dev, st_ino, mode, gid, ACLs, ctime or None) at launch: the ctime where it
        # was settled then (`_settled`), so that `put_back` may trust an unchanged one
        self.launch = {}
        now = time.time_ns()  # (before any stat: a ctime settled at `now` is older than every one)
        # path -> (its target, the (st_dev, st_ino) it led to) at launch, for a guarded path that
        # was a symlink
        self.links = {}
        # protected path -> (st_dev, st_ino, st_ctime_ns) at launch: see `replaced_below`
        self.targets = dict.fromkeys(protected)
        # what a protected path reaches by another name in a write root (`roots`): see
        # `written_through_links`; `seen`: path -> its lstat (and a symlink's: -> what it reached,
        # or None) as the scan took it just now, not taken again below
        seen: dict = {}
        # (a protected start-up path, its write root) whose scan stopped at MAX_LINKED_SCAN, or
        # None: the run is refused before it starts (`gitcheck_hook.GitCheck.start`, `beyond_bound`);
        # `installed` (installations' code, ADR 0024) are looked at best-effort
        self.cut = None
        self.linked = _reached_elsewhere(protected, roots, now, seen, installed, self)
        # and their modes guarded like the protected paths' (a `chmod 0666` through the link, or
        # of a directory on the way to its target, left it to other users after the run)
        for path in dict.fromkeys((*paths, *guarded_paths(roots, self.linked))):
            taken = seen.get(path)
            try:
                st = os.lstat(path) if taken is None else taken[0]
            except OSError:
                continue  # absent at launch: whatever is made there is the git check's to judge
            if stat.S_ISLNK(st.st_mode):  # no mode of its own; what is below it is reached through it
                try:
                    reached = os.stat(path) if taken is None else taken[1]
                    # (kept only where it leads to a directory: `put_back` opens what lies below
                    # it through it; a link to a file has nothing below it — a stowed dotfile's)
                    if reached is not None and stat.S_ISDIR(reached.st_mode):
                        self.links[path] = (os.readlink(path), reached.st_dev, reached.st_ino)
                except OSError:
                    pass  # dangling: nothing below it was there to record either
                continue
            self.launch[path] = (st.st_dev, st.st_ino, stat.S_IMODE(st.st_mode), st.st_gid, _acls(path),
                                 st.st_ctime_ns if _settled(st.st_ctime_ns, now) else None)
            if path in self.targets:
                self.targets[path] = (st.st_dev, st.st_ino, st.st_ctime_ns)

    def put_back(self) -> list:
        """(path, what was loosened and what was done) for each guarded path that now lets group or
        others write where it did not at launch (mode bits, group, ACLs); each is put back to its
        launch state (the same inode) or, another one there, gets the launch group and ACLs and
        has the added mode bits taken away."""
        loosened = []
        # A guarded path gone or a symlink now is skipped, and so is everything below it: a path
        # below resolves through the symlink the command put there, to a directory of the host's
        # that is not the run's to change (no tier: `.git` -> another user's repository, whose
        # `config` would have been given the launch group and ACLs). Shallowest first, so an
        # ancestor is judged before what lies below it.
        # A symlink of launch pointed elsewhere now (or replaced) is skipped the same way.
        # Each path is opened relative to the fd of its parent as judged, never through the path
        # again: judged by path and then opened by path, an ancestor swapped for a symlink in
        # between (a second run sharing the write root; session 10) had the chmod, chown and ACLs
        # land on the directory the link pointed at.
        skipped: list = []
        opened: dict = {}  # guarded path -> O_PATH fd of the inode judged there
        try:
            for path in sorted((*self.launch, *self.links), key=lambda p: p.count("/")):
                if any(is_within(path, gone) for gone in skipped):
                    continue
                parent = opened.get(os.path.dirname(path))
                name = os.path.basename(path) if parent is not None else path  # (the root: by path)
                if path in self.links:
                    fd = _same_link(name, parent, self.links[path])
                else:
                    try:
                        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
                    except OSError:
                        fd = None  # gone: the git check judges what took its place
                if fd is None:
                    skipped.append(path)
                    continue
                opened[path] = fd
                if path in self.links:
                    continue
                try:
                    why = self._put_back_one(fd, self.launch[path])
                except OSError as exc:
                    why = (f"made writable by other users during the run and could not be put back "
                           f"({exc.strerror}): fix its mode before running git there")
                if why is None:
                    skipped.append(path)  # a symlink now: as gone
                elif why:
                    loosened.append((path, why))
        finally:
            for fd in opened.values():
                os.close(fd)
        return loosened

    @staticmethod
    def _put_back_one(fd: int, launch: tuple):
        """Put back the inode `fd` (O_PATH) as `launch` says: what was done ("" for nothing), or
        None where it is a symlink now."""
        dev, ino, mode, gid, acls, ctime = launch
        st = os.fstat(fd)
        if stat.S_ISLNK(st.st_mode):
            return None
        if ctime is not None and (st.st_dev, st.st_ino, st.st_ctime_ns) == (dev, ino, ctime):
            # the same inode, its ctime as at launch, settled then: no chmod, chown or ACL change
            # since (each sets the ctime, which no process sets back) — nothing to read again
            # (its ACLs: two getxattr through /proc/self/fd a path; session 10)
            return ""
        via = f"/proc/self/fd/{fd}"  # the inode opened, whatever its name becomes meanwhile
        same = (st.st_dev, st.st_ino) == (dev, ino)
        now, changes = stat.S_IMODE(st.st_mode), []
        added = now & OTHERS_WRITE & ~mode
        # group and ACLs as at launch even on another inode: a copy swapped in (`mv .git
        # .old; mkdir .git; cp -a .old/. .git`, no tier) with the launch mode but an ACL
        # for another user, or another group, added no mode bit where the launch mode had
        # group write (umask 002) and stayed writable by that user after the run
        if st.st_gid != gid and now & stat.S_IWGRP:
            changes.append(f"group {gid} -> {st.st_gid}")
            os.chown(via, -1, gid)
        if _acls(via, follow=True) != acls:  # (the magic link is followed)
            changes.append("ACLs changed")
            for name, value in zip(ACLS, acls):
                _set_acl(via, name, value)
        if added:
            changes.append(f"mode {mode:04o} -> {now:04o}" if same else f"mode {now:04o} (a new one)")
            os.chmod(via, (mode if same else now & ~added) & 0o7777)
        if not changes:
            return ""
        return ("made writable by other users during the run (" + ", ".join(changes) + "): any local user "
                "could then have replaced what the host's git or shell reads below it; put back as at launch")


    def replaced_below(self, loosened) -> list:
        """The protected paths at or below a path of `loosened` (what `put_back` found) that are
        another file now, or were written: while the run ran any local user could have done it
        (redcage9: `chmod 0777 ~`, then another uid renamed a `.bashrc` of theirs over the
        operator's). Under the namespace tier the command itself cannot (a read-only mount, its
        directory pinned); the run's own check is then the only one that sees it, and only here,
        after a loosening, is a change of them not the operator's own editing."""
        replaced = []
        for path, launch in self.targets.items():
            if launch is None:
                continue
            below = any(is_within(path, where) and path != where for where in loosened)
            if not below and path not in loosened:
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue  # gone: nothing of anyone's is run from there
            # a loosened path itself: its ctime moved with the chmod (the command's, and ours putting
            # it back), so only another file there counts; below one, a write counts too
            if (st.st_dev, st.st_ino) != launch[:2] or (below and st.st_ctime_ns != launch[2]):
                replaced.append(path)
        return replaced


    def written_through_links(self) -> list:
        """(path, launch bytes or None, why) for what a protected path leads to by another name
        and the run changed: the read-only bind guards a PATH, not what else reaches the same
        bytes (redcage10), so under the tier
        - a protected file with other hard links (`~/.bashrc` kept as a hard link of
          `~/dotfiles/bashrc`) was rewritten through its other name, and
        - a file a symlink INSIDE a protected directory leads to in a write root (`~/.ssh/config
          -> ../dotfiles/ssh/config`, per-file links as stow makes them) was written through the
          link itself (`echo ... >> ~/.ssh/config`), replaced, or a file added to a directory so
          linked (`~/.config/fish/conf.d -> ../../dotfiles/conf.d`: fish sources each file), or
          the link made to lead elsewhere by a link or directory on its way replaced;
        and the operator's next shell or `ssh` ran it. The command can make no such link to a
        bound path itself (a hard link crosses mounts: EXDEV; the directory is read-only), so
        each met is the operator's, and nothing is flagged in a home without them."""
        written = []
        for path, record in self.linked.items():
            try:
                st = os.lstat(path)
            except OSError:
                continue  # gone: nothing is run from there
            if record[0] == "link":
                _kind, target, reached, why = record
                try:
                    now_st = os.stat(path)
                except OSError:
                    now_st = None
                if (reached is not None and now_st is not None and (now_st.st_dev, now_st.st_ino) == reached
                        and _unchanged_since_launch(now_st, self.linked.get(target))
                        and _identity_at(target) == reached):
                    # the inode it reached at launch, unchanged since (its settled ctime), still at
                    # the path it reached it by (`target`, whose record judges it) — one stat each,
                    # not the kernel's name for it. Reached by ANOTHER way only (that file moved, a
                    # link on its way repointed after it), its record's path holds nothing of it:
                    # the inode was judged by no one and the command wrote it (redcage11). Changed,
                    # and reached by another way too (a second hard link of it where the link on the
                    # way was repointed to, written through that name: rvsec11), the record moves
                    # the file at `target` and the link still reached what the command wrote —
                    # resolved below: it leads elsewhere, moved
                    continue
                now, identity, _st = _resolved(path)
                # where it leads by name (a link or directory on its way repointed: `ln -sfn evil
                # dotfiles`), or, dangling at launch, that it leads to something now: a file made
                # where it pointed (`~/.ssh/config -> ../dotfiles/ssh/config` whose target the
                # operator had not made, or removed) is read by the next `ssh` all the same
                if now != target or (reached is None and identity is not None):
                    written.append((path, None, why if reached is not None or now != target else DANGLED))
                continue
            if record[0] == "file":
                _kind, dev, ino, size, mtime, ctime, settled, data, why = record
                stats = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                if settled and stats == (dev, ino, size, mtime) and st.st_ctime_ns == ctime:
                    # its ctime as at launch, and settled then: no write, rename over or truncate
                    # since (each sets the ctime, which no process sets back; a write through
                    # another hard link sets this inode's) — the bytes need no second read
                    continue
                # without its launch bytes (past MAX_LINKED_BYTES) the ctime decides, not the mtime:
                # the file's owner sets an mtime back at will (`touch -r`), no process a ctime (rvsec10)
                if (stats != (dev, ino, size, mtime)
                        or (st.st_ctime_ns != ctime if data is None else _read(path, st.st_size) != data)):
                    written.append((path, data, why + (" (moved; its launch content put back" if data is not None
                                                       else " (moved") + (
                        "; its other names keep what the run wrote)" if why == HARD_LINKED else ")")))
                continue
            _kind, dev, ino, ctime, names, why = record
            if (st.st_dev, st.st_ino) != (dev, ino):
                written.append((path, None, why + ": the directory replaced (moved)"))
                continue
            if ctime is not None and st.st_ctime_ns == ctime:
                continue  # no entry made, removed or renamed there since (each sets its ctime): not listed again
            try:
                added = sorted(set(os.listdir(path)) - names)
            except OSError:
                added = []
            if len(added) > MAX_LINKED_FILES:  # (a run making 100,000 files there asks for no 100,000 moves)
                written.append((path, None, why + f": {len(added)} entries made there during the run (the directory "
                                                  "moved)"))
            else:
                written += [(os.path.join(path, name), None, why + ": made there during the run (moved)") for name in added]
        return written


# what is kept at launch of the files a protected path reaches by another name (`_reached_elsewhere`):
# a start-up file is a few kB; past the byte bound, or past MAX_LINKED_FILES files kept, the stats alone
# (size, mtime and the ctime) tell a change
MAX_LINKED_FILES = 64
MAX_LINKED_BYTES = 1 << 20
# entries looked at below the protected directories (`.ssh`, `.config/fish`...) for them: per
# protected path, and all those of one write root together
PER_PATH_SCAN = 256
MAX_LINKED_SCAN = 2000
HARD_LINKED = "a protected file written through another hard link to it in a write root"
LINKED_FROM = "a file a protected directory links to (a symlink into a write root), written during the run"
LEADS_ELSEWHERE = ("a symlink in a protected directory leads elsewhere since the run (a link or directory on its "
                   "way in a write root was replaced): moved, make the link again")
DANGLED = ("a symlink in a protected directory that led nowhere at launch leads to something made during the run "
           "(its target, or a link or directory on its way, made in a write root): moved, make the link again")


def beyond_bound(path: str, root: str) -> str:
    """Why a run is refused at launch: a protected start-up path holds more than the link scan
    looks at (ADR 0013, "Session 11": refused, not run half-checked)."""
    return (f"fs.write: {path} (protected) holds more than {MAX_LINKED_SCAN:,} entries, with the other protected "
            f"paths of {root}, to look through for symlinks and hard links into the write root; past that bound "
            "a start-up file it reaches by another name could be written unseen, so the run is refused before it "
            f"starts (ADR 0013): grant a narrower directory than {root} (the project's, not a whole home), or take "
            f"{path} out of the protected set (fs.protect_defaults = false for a default path, or drop it from "
            "fs.protect)")


def _reached_elsewhere(protected, roots, now: int, seen: dict, installed=(), guard=None) -> dict:
    """{path: record} of what `protected` reaches by another name: each protected regular file
    with more than one link, and below the protected directories (but a protected directory
    named `hooks`: the git check judges every file there, and what a link there leads to, by its
    ctime; a directory reached through a link is looked through whatever its name) each file or
    directory a symlink leads to inside one of `roots` (the write roots), with what lies below
    it. A file's record: ("file", st_dev, st_ino, size, mtime_ns, ctime_ns, settled, bytes or None,
    why); a linked directory's: ("dir", st_dev, st_ino, ctime_ns if settled else None, its names,
    why); each such symlink's: ("link", where it leads, (st_dev, st_ino) of what it reached or
    None, why) — `settled`: the ctime was before `now` (taken before any of this) by the margin
    `_settled` asks, so an unchanged one after the run means an unchanged inode. `seen` gets
    path -> (its lstat, and for a symlink what it reached or None) of each entry looked at.
    Usually empty: one lstat per protected path (the guard's own), a listing of the few
    protected directories. Each symlink is resolved by the kernel (one `open(O_PATH)`, its
    `/proc/self/fd` link read: the realpath of what it reaches, and its stat), not by
    `os.path.realpath`'s lstat per component (session 11: 120 stowed links cost ≈ 10 ms so).
    Bounds (session 11): a start-up path (not `installed`) may use its write root's whole
    MAX_LINKED_SCAN, and one that holds more sets `guard.cut` (the scan stops: the run will be
    refused); an installation's code (`installed`: a version manager's root, thousands of files)
    looks at PER_PATH_SCAN entries, best-effort, past them nothing (ADR 0013 says why)."""
    found: dict = {}
    kept = 0  # files whose bytes are kept (MAX_LINKED_FILES): past it the stats, the ctime among them, decide
    # MAX_LINKED_SCAN for the protected paths of each write root (the innermost holding them): one
    # bound for all let a cloned repository, a write root listed before the home, crowd its own
    # protected names (`.ssh`, `.config/fish`... 256 files each) and leave `~/.ssh`'s links
    # unlooked-at (rvsec10)
    totals: dict = {}
    innermost = sorted(roots, key=len, reverse=True)
    bound = set(protected)  # (a symlink on the way to a protected path is protected itself, its target too)
    best_effort = set(installed)
    for start in protected:
        # an installation's code looks at PER_PATH_SCAN entries at most (a version manager's root
        # or an installation bound whole holds thousands of files: ≈ 7 µs each); the protected
        # paths of one write root at most MAX_LINKED_SCAN together
        root = next((r for r in innermost if is_within(start, r)), None)
        total = totals.get(root, MAX_LINKED_SCAN)
        left = budget = min(PER_PATH_SCAN, total) if start in best_effort else total
        strict = start not in best_effort and guard is not None
        pending = [(start, False, None)]  # (path, reached through a symlink below a protected directory, its lstat)
        # (bounded by the entries listed, not by what was found: one bound on the records, for all
        # protected paths, let a stowed `~/.config/nvim` of 40 links fill it before `~/.ssh` was
        # looked at — its linked config then written through, rc 0; rvsec10)
        while pending:
            path, via, st = pending.pop()
            if path in seen:
                continue
            try:
                st = os.lstat(path) if st is None else st
            except OSError:
                continue
            seen[path] = (st, None)
            if stat.S_ISREG(st.st_mode):
                if via or st.st_nlink > 1:
                    data = (_read(path, st.st_size) if st.st_size <= MAX_LINKED_BYTES and kept < MAX_LINKED_FILES
                            else None)
                    kept += data is not None
                    found[path] = ("file", st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                   _settled(st.st_ctime_ns, now), data, LINKED_FROM if via else HARD_LINKED)
            elif stat.S_ISDIR(st.st_mode) and (via or os.path.basename(path) != "hooks") and (left > 0 or strict):
                try:
                    # (one name more than looked at: whether a start-up path holds more)
                    names = os.listdir(path) if via else _first_names(path, left + 1)
                except OSError:
                    continue
                if strict and len(names) > left:
                    guard.cut = (start, root)
                    return found  # refused before it starts: nothing more to look at
                if via:  # (its every name: one added during the run is a finding)
                    found[path] = ("dir", st.st_dev, st.st_ino,
                                   st.st_ctime_ns if _settled(st.st_ctime_ns, now) else None, frozenset(names),
                                   LINKED_FROM)
                names = names[:left]
                left -= len(names)
                pending.extend((os.path.join(path, name), via, None) for name in names)
            elif stat.S_ISLNK(st.st_mode) and path not in bound:
                target, identity, reached = _resolved(path)
                seen[path] = (st, reached)
                # where it leads, whatever it leads to: a link ON ITS WAY in a write root (`dotfiles ->
                # dotfiles-v2`, or a real directory there) may be repointed for it (`written_through_links`);
                # and whether it reached anything: one dangling at launch may be given a target
                found[path] = ("link", target, identity, LEADS_ELSEWHERE)
                if any(is_within(target, root) for root in roots):
                    # (what it reached, its stat: the kernel's walk ended on it, a non-link, so
                    # it is that path's lstat too)
                    pending.append((target, True, reached))
        totals[root] = totals.get(root, MAX_LINKED_SCAN) - (budget - left)
    return found


def _unchanged_since_launch(st, record) -> bool:
    """Whether `st` (a stat taken now) is the inode `record` (a file's or directory's from
    `_reached_elsewhere`) holds, with the ctime it had at launch, settled then: nothing changed
    it since (a write, a new name, an entry made — each sets the ctime, which no process sets back)."""
    if record is None or record[0] == "link":
        return False
    if record[0] == "file":
        _kind, dev, ino, _size, _mtime, ctime, settled = record[:7]
    else:
        _kind, dev, ino, ctime = record[:4]
        settled = ctime is not None
    return settled and st.st_ctime_ns == ctime and (st.st_dev, st.st_ino) == (dev, ino)


def _identity_at(path: str):
    """(st_dev, st_ino) of what `path` reaches (symlinks followed), or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _resolved(path: str) -> tuple:
    """(the realpath of what `path` leads to, its (st_dev, st_ino) or None where it reaches
    nothing, its stat or None), by the kernel's own walk: one open(O_PATH) followed to the end,
    the fd's `/proc/self/fd` link read for the path the walk ended on — three system calls where
    `os.path.realpath` takes an lstat (and a readlink) per component. A path that reaches
    nothing (dangling, a loop, no search permission) is resolved as far as it goes by
    `os.path.realpath`, as before."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return os.path.realpath(path), None, None
    try:
        st = os.fstat(fd)
        try:
            where = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # no /proc
            where = None
        if where is None or not where.startswith("/") or where.endswith(" (deleted)"):
            where = os.path.realpath(path)
        return where, (st.st_dev, st.st_ino), st
    finally:
        os.close(fd)


def _first_names(path: str, count: int) -> list:
    """At most `count` names of directory `path` (a protected directory of thousands of entries
    is not listed whole for the few looked at)."""
    names = []
    with os.scandir(path) as entries:
        for entry in entries:
            if len(names) >= count:
                break
            names.append(entry.name)
    return names


def _read(path: str, size: int = 1 << 16):
    """The bytes of `path` (not following a symlink there), at most MAX_LINKED_BYTES + 1 of
    them, or None. `size`: what its lstat said; each read asks for that much and one more
    (64 KiB reads of 300-byte dotfiles cost a fresh process ≈ 0.2 ms each in page faults of
    the buffers: 13 ms for 64 files; session 11). Read without touching its atime where the
    kernel lets us (the owner, or root): the first read of a dotfile written since made a
    journal write of its atime, ≈ 6 ms each on this machine's loaded disk."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        try:
            fd = os.open(path, flags | os.O_NOATIME)
        except PermissionError:  # EPERM: another user's file
            fd = os.open(path, flags)
    except OSError:
        return None
    try:
        chunks, left = [], MAX_LINKED_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, size + 1, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _set_acl(path: str, name: str, value) -> None:
    if value is None:
        try:
            os.removexattr(path, name)
        except OSError as exc:
            import errno

            if exc.errno != errno.ENODATA:
                raise
    else:
        os.setxattr(path, name, value)


def _same_link(name: str, parent, launch: tuple):
    """An O_PATH fd of what the guarded symlink `name` (below the fd `parent`, or a path) leads to,
    where it still reads as at launch and reaches the same inode; else None. The inode decides,
    not the text: a relative target resolves anew each time (its own directories may be swapped)."""
    target, dev, ino = launch
    try:
        if os.readlink(name, dir_fd=parent) != target:
            return None
        fd = os.open(name, os.O_PATH | os.O_CLOEXEC, dir_fd=parent)  # followed, once
    except OSError:
        return None
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (dev, ino):
        os.close(fd)
        return None
    return fd
