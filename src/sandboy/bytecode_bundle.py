"""The run path's byte code in one file, served by a finder that validates each module (ADR 0023).

`sandboy run` spends more of its start-up finding and loading its modules than running their
bodies: importlib's path finder and source loader are Python code that costs ≈ 75 k instructions
and ≈ 11 system calls per module whatever its size (docs/performance.md, session 5). `make compile` and a wheel build
therefore write the code of the modules `sandboy run` imports into ONE file beside the package's
byte code, `sandboy/__pycache__/run-path.<cache tag>.bundle`; `sandboy/__init__.py` reads its index
and puts `BundleFinder` first on `sys.meta_path`, which reads a group of code when the first of its
modules is imported. The file is never written at run time.

It keeps Python's own trust and invalidation model for byte code (PEP 3147, PEP 552): a module is
served only when its source is the one the code was compiled from, checked when the module is
imported — (size, mtime_ns) equal, or size equal and `_imp.source_hash` equal (an installed wheel:
pip gives the files new mtimes); otherwise the finder answers None and importlib imports that
module the usual way. A missing, short, corrupt or foreign (other interpreter) bundle is ignored
as a whole. Served modules get their real source path (`__file__`, `co_filename`), so tracebacks,
`linecache` and `inspect` read the real source.

Modules are kept in groups of modules imported together (RUN_PATH_GROUPS), each group one
marshalled tuple of code objects, read and unmarshalled when the first of its modules is imported: one
marshal.loads shares the names and constants the modules have in common, which separate ones
create and intern again (callgrind, exec mode's 16: 0.66 M instructions fewer).

File layout: the interpreter's MAGIC_NUMBER (4 bytes), FORMAT (4 bytes), the index's length
(4 bytes, little-endian), the index (marshal: one tuple per module, see INDEX_FIELDS), then the
groups; an entry's offset and length are its group's, counted from the end of the index, and
its position is its place in the group's tuple. An extension module has length 0.

    python -c 'import sandboy.bytecode_bundle as b; b.build("src/sandboy")'   # what `make compile` runs
"""

import marshal
import os
import sys

import _frozen_importlib as _bootstrap
import _frozen_importlib_external as _external
import _imp

# What `sandboy run` imports, besides `sandboy` itself (which installs the finder) and this module,
# in groups of modules imported together. tests/test_bytecode_bundle.py fails if exec mode imports
# anything but "cli" + "cage", if any run imports a module not listed, or if a listed module is
# imported by none, so the list cannot drift. The C executor is an extension module: no code of it
# is kept, the bundle only remembers its file, which saves importlib listing the directory.
RUN_PATH_GROUPS = {
    # every `sandboy` command
    "cli": ("sandboy.errors", "sandboy.cli"),
    # the cage and exec mode: imported together by `sandboy run`, the gate, doctor and the API
    "cage": ("sandboy.confine", "sandboy.confine._libc", "sandboy.confine.hygiene", "sandboy.policy",
             "sandboy.policy.resolve", "sandboy.confine.landlock", "sandboy.confine.namespaces",
             "sandboy.confine.seccomp", "sandboy.confine.protections", "sandboy.confine.cage",
             "sandboy.confine.exec_mode", "sandboy.confine.terminal", "sandboy.policy.load", "sandboy.policy.model",
             "sandboy.confine._native"),
    # a supervised run: --tty, a terminal on fd 0-2, a post-run check, net.domains
    "supervised": ("sandboy.confine.result", "sandboy.confine.reaping", "sandboy.confine.supervision",
                   "sandboy.confine.supervisor", "sandboy.confine.relay"),
    # a policy with write roots: protected paths and the post-run git check
    "write roots": ("sandboy.confine.protected", "sandboy.confine.own_install", "sandboy.confine.gitcheck"),
    # net.domains (Layer 3): its rules and the proxy's session
    "egress": ("sandboy.egress", "sandboy.egress.rules", "sandboy.egress.enforcement", "sandboy.egress.session"),
}
RUN_PATH_MODULES = tuple(name for group in RUN_PATH_GROUPS.values() for name in group)

FORMAT = b"SBB2"
INDEX_FIELDS = ("name", "is_package", "relative_path", "source_size", "source_mtime_ns", "source_hash", "offset",
                "length", "position")
_HEADER = 12  # MAGIC_NUMBER, FORMAT, the index's length
_FIRST_READ = 8192  # the header and the index in one read (the index of 35 modules: ≈ 2.6 kB)


def bundle_path(package_dir: str) -> str | None:
    """Where the bundle of the package in `package_dir` lives for this interpreter (None: this
    interpreter has no byte-code cache, or runs with -O, whose byte code differs)."""
    tag = sys.implementation.cache_tag
    if tag is None or sys.flags.optimize:
        return None
    return f"{package_dir}/__pycache__/run-path.{tag}.bundle"


class BundledSourceLoader(_external.SourceFileLoader):
    """A source file loader whose code comes from the bundle (validated by the finder); everything
    else — get_source, get_filename, resource readers — is the source loader's own."""

    def __init__(self, fullname: str, path: str, code):
        super().__init__(fullname, path)
        self.code = code

    def get_code(self, fullname):
        return self.code


class BundledExtensionLoader(_external.ExtensionFileLoader):
    """importlib's own extension loader; a class of its own only so that `python -v` and the
    tests can tell that the bundle's index found the file."""


class BundleFinder:
    """Serves the bundle's modules whose source still matches; None for everything else."""

    def __init__(self, package_dir: str, identity: tuple, index: dict):
        self.package_dir = package_dir
        self.identity = identity  # the bundle file the index was read from: (st_dev, st_ino, size, mtime_ns)
        self.index = index
        self.groups = {}  # offset -> the group's code objects, once one of its modules was imported

    def source_matches(self, fullname: str) -> bool:
        """Whether the module's file is still the one its code was compiled from (for an
        extension module: whether its file is still there)."""
        is_package, relative_path, size, mtime_ns, source_hash, offset, length, position = self.index[fullname]
        try:
            st = os.stat(f"{self.package_dir}/{relative_path}")
            if not length or (st.st_size, st.st_mtime_ns) == (size, mtime_ns):
                return True
            if st.st_size != size:
                return False
            source = _read(f"{self.package_dir}/{relative_path}", size + 1)  # + 1: a file that grew since
            return len(source) == size and _imp.source_hash(_external._RAW_MAGIC_NUMBER, source) == source_hash
        except OSError:
            return False

    def stale(self) -> list[str]:
        """The modules whose source changed since the bundle was written (imported the usual way)."""
        return [name for name in self.index if not self.source_matches(name)]

    def group(self, offset: int, length: int) -> tuple:
        """The code objects of the group at `offset`, read from the bundle when the first of its
        modules is imported. Only the groups a process imports are read: the whole file (≈ 480 kB
        with the supervised, write-root and egress groups) cost exec mode ≈ 0.13 ms of page faults
        for a fresh buffer it mostly never used (docs/performance.md, session 6). The file is
        opened again for it and must still be the one the index came from (same device, inode,
        size and mtime_ns: `make compile` replaces it by a rename), else ValueError."""
        fd = os.open(bundle_path(self.package_dir), os.O_RDONLY | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != self.identity:
                raise ValueError("the bundle was replaced since its index was read")
            blob = os.pread(fd, length, offset)
        finally:
            os.close(fd)
        if len(blob) != length:
            raise ValueError("short read")
        return marshal.loads(blob)

    def find_spec(self, fullname, path=None, target=None):
        entry = self.index.get(fullname)
        if entry is None or not self.source_matches(fullname):
            return None
        is_package, relative_path, size, mtime_ns, source_hash, offset, length, position = entry
        origin = f"{self.package_dir}/{relative_path}"
        if not length:  # an extension module, loaded from its own file as importlib would
            spec = _bootstrap.ModuleSpec(fullname, BundledExtensionLoader(fullname, origin), origin=origin)
            spec.has_location = True
            return spec
        try:
            group = self.groups.get(offset)
            if group is None:
                group = self.groups[offset] = self.group(offset, length)
            code = group[position]
        except Exception:  # unreadable, replaced or corrupt: importlib finds the source and reports any error itself
            return None
        if type(code) is not _CODE:
            return None
        _imp._fix_co_filename(code, origin)
        spec = _bootstrap.ModuleSpec(fullname, BundledSourceLoader(fullname, origin, code), origin=origin,
                                     is_package=is_package)
        spec.has_location = True
        head, _, tail = origin.rpartition("/")
        spec.cached = f"{head}/__pycache__/{tail[:-3]}.{sys.implementation.cache_tag}.pyc"
        if is_package:
            spec.submodule_search_locations = [head]
        return spec


_CODE = type(bundle_path.__code__)


def _read(path: str, size: int) -> bytes:
    """Up to `size` bytes of a file in one read(2): io.open's buffered file object costs five
    more system calls (fstat, isatty's ioctl, two lseeks, the read that finds the end), which the
    hash check of an installed wheel would pay for every module."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, size)
    finally:
        os.close(fd)


def installed() -> BundleFinder | None:
    """The bundle finder this process uses, if any (`sandboy doctor` reports it)."""
    return next((finder for finder in sys.meta_path if isinstance(finder, BundleFinder)), None)


def install(package_dir: str) -> BundleFinder | None:
    """Put the bundle's finder first on sys.meta_path; None (and nothing changed) when there is
    no usable bundle: missing, short, corrupt, or written by another interpreter."""
    path = bundle_path(package_dir)
    if path is None:
        return None
    finder = installed()
    if finder is not None and finder.package_dir == package_dir:
        return finder  # `sandboy` reloaded: one finder is enough
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            head = os.read(fd, _FIRST_READ)  # the header and the index; the groups when they are imported
            if head[:4] != _external.MAGIC_NUMBER or head[4:8] != FORMAT:
                return None
            end = _HEADER + int.from_bytes(head[8:_HEADER], "little")
            if end > len(head):
                head += os.pread(fd, end - len(head), len(head))
        finally:
            os.close(fd)
        entries = marshal.loads(memoryview(head)[_HEADER:end])
        index = {}
        for name, is_package, relative_path, size, mtime_ns, source_hash, offset, length, position in entries:
            if not (type(name) is type(relative_path) is str and type(source_hash) is bytes
                    and type(size) is type(mtime_ns) is type(offset) is type(length) is type(position) is int
                    and 0 <= offset and 0 <= length and end + offset + length <= st.st_size):
                return None
            index[name] = (bool(is_package), relative_path, size, mtime_ns, source_hash, end + offset, length,
                           position)
    except Exception:  # missing, short or corrupt, whatever marshal made of it: plain imports
        return None
    finder = BundleFinder(package_dir, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns), index)
    sys.meta_path.insert(0, finder)
    return finder


def file_of(package_dir: str, name: str) -> tuple[str, bool] | None:
    """The file importlib would load for module `name`, relative to the top package's directory,
    and whether it is a package; None for a module that is not there (an extension module that
    was not built)."""
    relative = "/".join(name.split(".")[1:])
    if os.path.isfile(f"{package_dir}/{relative}/__init__.py"):
        return f"{relative}/__init__.py", True
    for suffix in (*_imp.extension_suffixes(), ".py"):  # importlib's own order: extensions first
        if os.path.isfile(f"{package_dir}/{relative}{suffix}"):
            return relative + suffix, False
    return None


def build(package_dir: str, groups=RUN_PATH_GROUPS) -> str:
    """Compile the modules of `groups` from the sources under `package_dir` (the `sandboy`
    directory) into its bundle; return the bundle's path. Written to a temporary file and
    renamed, so a reader never sees half a bundle."""
    package_dir = os.path.abspath(package_dir)
    path = bundle_path(package_dir)
    if path is None:
        raise SystemExit("this interpreter keeps no byte code (or runs with -O): no bundle written")
    entries, blobs, offset = [], [], 0
    for names in groups.values():
        members, codes = [], []
        for name in names:
            found = file_of(package_dir, name)
            if found is None:
                continue  # e.g. the C executor where no compiler built it: importlib looks for it
            relative_path, is_package = found
            source_path = f"{package_dir}/{relative_path}"
            with open(source_path, "rb") as fh:
                # stat BEFORE reading, as importlib's source loader does: a file rewritten in
                # place after the stat gets a newer mtime, so the bundle's code is then checked
                # by hash; stat after the read recorded the new mtime beside the old code
                st = os.fstat(fh.fileno())
                source = fh.read()
            if not relative_path.endswith(".py"):
                entries.append((name, False, relative_path, st.st_size, st.st_mtime_ns, b"", 0, 0, -1))
                continue
            members.append((name, is_package, relative_path, st.st_size, st.st_mtime_ns,
                            _imp.source_hash(_external._RAW_MAGIC_NUMBER, source)))
            codes.append(compile(source, source_path, "exec", dont_inherit=True))
        blob = marshal.dumps(tuple(codes))
        entries.extend((*member, offset, len(blob), position) for position, member in enumerate(members))
        blobs.append(blob)
        offset += len(blob)
    index = marshal.dumps(tuple(entries))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f"{path}.{os.getpid()}.tmp"
    with open(partial, "wb") as fh:
        fh.write(_external.MAGIC_NUMBER + FORMAT + len(index).to_bytes(4, "little") + index)
        for blob in blobs:
            fh.write(blob)
    os.replace(partial, path)
    return path

