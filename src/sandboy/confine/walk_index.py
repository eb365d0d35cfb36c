"""What the git check's last walk of a write root found in each directory, kept for the next run
(ADR 0019 "Session 12"): the census at launch lists a directory again only where it changed.

An entry is one directory's listing as the walk takes it — (entries, `.git` among them, `HEAD`
among them, the names of its subdirectories), or for a leaf (link count 2) just whether `.git`
and `HEAD` are there — keyed by the directory's (st_dev, st_ino), with the ctime its lstat gave
just before it was listed. Everything the walk looks for in a directory is a name in it (a new
entry, a rename in or out, a removal, a directory swapped for a symlink), and each of those sets
the directory's ctime, which no process sets back (ADR 0019: utimensat sets atime and mtime
only; the clock needs CAP_SYS_TIME). So a directory whose ctime is still the entry's holds the
same names, provided that any change made after the listing got another ctime: an entry is
written only where its ctime lies `MARGIN_NS` before a clock reading taken BEFORE the walk
began (`save`), so a change made after the listing — whose ctime is at least that reading,
less one second where a file system keeps whole seconds — cannot carry it. What a name leads to
(a `.git` file's target, HEAD's bytes, a config) is read again every run: only names are kept.

Fail closed: anything not proven the same is listed again. No entry at all (a miss: the walk is
the full walk of before) where the file is not a regular file this euid owns that no one else
may write, in a directory of ours no one else may write (as the plan cache's entries: ADR 0028),
larger than `MAX_BYTES`, of another format, euid or write root, whose checksum does not match
(a torn or corrupt file), written under another boot, another mount table (a file system
mounted, unmounted or replaced anywhere: its inode numbers and ctimes are not this one's), or
before the realtime clock was stepped back by more than a second. Nor is any read or written
where a file system of the roots is not known to move a directory's ctime with its entries (a
FUSE or network one: `kernel_mounts.directory_times_tracked`, asked by the git check). The index of a root the run's
`{tmp}` lies in is neither read nor written (the walk leaves `{tmp}` out of its listings).

A cache that cannot be read or written only costs speed. `SANDBOY_PLAN_CACHE=0` turns it off
with the plan cache (`cache_places.keeps_between_runs`: one switch for what Sandboy keeps
between runs).
"""

import _imp
import marshal
import os
import time

from sandboy.confine._libc import read_file, read_private
from sandboy.cache_places import cache_dir, keeps_between_runs  # (not the resolver: a write-root hit reads none, session 12)

FORMAT = "sandboy walk index 1"
MAX_BYTES = 32 << 20  # ≈ 45 bytes a directory: far more than MAX_DIRS holds
MAX_DIRS = 200_000    # directories a root's index keeps; a larger tree is walked in full each run
# An entry's ctime lies this far before the clock reading taken before the walk: a change made
# after the listing then has a later ctime even on a file system keeping whole seconds (its ctime
# cut to the second: at most 1 s earlier) and with the clock stepped back by up to 1 s (beyond
# that, `load` misses)
MARGIN_NS = 2_000_000_000
CLOCK_REALTIME_COARSE = 5  # (as gitcheck's: what file timestamps are taken from)
_NAME_KEY = 0x53424F5957414C4B  # the SipHash key of the files' names ("SBOYWALK")
_SUM_KEY = 0x53424F5953554D31   # and of their checksum ("SBOYSUM1")


enabled = keeps_between_runs  # (the one "keep nothing between runs" switch: cache_places)


def _where(root: str) -> tuple:
    """(folder, file name) of `root`'s index for this euid."""
    name = f"{os.geteuid()}\0{root}".encode("utf-8", "surrogateescape")
    return os.path.join(cache_dir(), "walks"), _imp.source_hash(_NAME_KEY, name).hex() + ".walk"


def _clock_offset() -> int:
    """The realtime clock less the time since boot: steps back when the clock is set back."""
    return time.clock_gettime_ns(time.CLOCK_REALTIME) - time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def machine(mount_table) -> tuple:
    """What an index is valid for besides its root: this boot, and this mount table (its text's
    checksum; None where it could not be read: nothing is then read or written)."""
    if mount_table is None:
        return None
    try:
        boot = read_file("/proc/sys/kernel/random/boot_id")
    except OSError:
        return None
    return boot, _imp.source_hash(_SUM_KEY, mount_table.encode("utf-8", "surrogateescape")).hex()


def load(root: str, where) -> dict:
    """{(st_dev, st_ino): entry} of `root`'s index, or {} (a miss: see the module's doc).
    `where`: `machine(...)` of this run. Entries are checked where they are used (`gitcheck._index_entry_valid`)."""
    if where is None:
        return {}
    data = read_private(os.path.join(*_where(root)), MAX_BYTES)
    if data is None:
        return {}
    try:
        form, euid, kept_root, kept_where, offset, checksum, payload = marshal.loads(data)
        if (form != FORMAT or euid != os.geteuid() or kept_root != root or kept_where != where
                or type(offset) is not int or _clock_offset() < offset - 1_000_000_000
                or type(payload) is not bytes or checksum != _imp.source_hash(_SUM_KEY, payload)):
            return {}
        entries = marshal.loads(payload)
    except Exception:  # garbage, another shape: a miss, never an error
        return {}
    return entries if type(entries) is dict else {}


def save(root: str, where, entries: dict, kept: dict) -> None:
    """`entries` (those the walk gathered under `root`: each already before its cut) as `root`'s
    index, unless they are what `kept` (the index read at launch) holds already, or too many."""
    if where is None or entries == kept or len(entries) > MAX_DIRS:
        return
    try:
        payload = marshal.dumps(entries, 2)  # (version 2: no back-references)
        data = marshal.dumps((FORMAT, os.geteuid(), root, where, _clock_offset(),
                              _imp.source_hash(_SUM_KEY, payload), payload), 2)
    except ValueError:
        return
    if len(data) > MAX_BYTES:
        return
    from sandboy.confine.cache_files import write_file

    write_file(*_where(root), data)


def cut_now() -> int:
    """The ctime an entry must lie before, from the clock read now — before the walk begins."""
    return time.clock_gettime_ns(CLOCK_REALTIME_COARSE) - MARGIN_NS

