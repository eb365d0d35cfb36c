"""Sandboy: contain untrusted commands, parser input and agent capabilities on Linux.

The public Python API is small and imported lazily so that `import sandboy` stays
cheap on the `sandboy run` start-up path:

    from sandboy import Policy, run
    policy = Policy.load("step.toml")
    result = run(["make", "test"], policy, cwd="/src/repo", timeout=600)
"""

__version__ = "0.1.0"

# --- the run path's byte code (ADR 0023, docs/performance.md) --------------------------------
# `make compile` and the wheel build write the code of the modules `sandboy run` imports into one
# file, `__pycache__/run-path.<cache tag>.bundle` (its writer, format and module list:
# bytecode_bundle.py); the finder below serves each of them once its source is checked. It lives
# in this file, not in a module of its own: importing one through importlib's path finder (this
# directory's FileFinder and listing, the .pyc's stat, read and checks) cost every `sandboy run`
# ≈ 0.43 M instructions and 11 system calls (session 6). The writer imports `BUNDLE_FORMAT` and
# `bundle_path` from here.

import _frozen_importlib as _bootstrap
import _frozen_importlib_external as _external
import _imp
import marshal as _marshal
import os as _os
import sys as _sys

BUNDLE_FORMAT = b"SBB2"  # after the interpreter's MAGIC_NUMBER; then the index's length (4 bytes)
_BUNDLE_HEADER = 12
SERVED_FROM_BUNDLE = "run-path bundle"  # the spec's loader_state of a module the finder served
_BUNDLE_FIRST_READ = 8192  # the header and the index in one read (the index of 36 modules: ≈ 2.6 kB)


def bundle_path(package_dir: str) -> str | None:
    """Where the bundle of the package in `package_dir` lives for this interpreter (None: this
    interpreter has no byte-code cache, or runs with -O, whose byte code differs)."""
    tag = _sys.implementation.cache_tag
    if tag is None or _sys.flags.optimize:
        return None
    return f"{package_dir}/__pycache__/run-path.{tag}.bundle"


class BundledSourceLoader(_external.SourceFileLoader):
    """A source file loader whose code comes from the bundle (validated by the finder); everything
    else — get_source, get_filename, resource readers — is the source loader's own."""

    def __init__(self, fullname: str, path: str, code):
        self.name = fullname  # what FileLoader.__init__ sets (without super()'s call: per module served)
        self.path = path
        self.code = code

    def get_code(self, fullname):
        return self.code


class BundleFinder:
    """Serves the bundle's modules whose source still matches; None for everything else."""

    def __init__(self, package_dir: str, identity: tuple, index: dict):
        self.package_dir = package_dir
        self.identity = identity  # the bundle file the index was read from: (st_dev, st_ino, size, mtime_ns, ctime_ns)
        self.index = index
        self.groups = {}  # offset -> the group's code objects, once one of its modules was imported
        # origin -> os.stat of the file of each module served, taken when it was checked: the
        # identity of the code this process runs (plan_cache's code identities, without a stat more)
        self.stats = {}

    def source_matches(self, fullname: str) -> bool:
        """Whether the module's file is still the one its code was compiled from (for an
        extension module: whether its file is still there)."""
        is_package, relative_path, size, mtime_ns, source_hash, offset, length, position = self.index[fullname]
        return _source_matches(f"{self.package_dir}/{relative_path}", size, mtime_ns, source_hash, length) is not None

    def stale(self) -> list[str]:
        """The modules whose source changed since the bundle was written (imported the usual way)."""
        return [name for name in self.index if not self.source_matches(name)]

    def group(self, offset: int, length: int) -> tuple:
        """The code objects of the group at `offset`, read from the bundle when the first of its
        modules is imported. Only the groups a process imports are read: the whole file (≈ 480 kB
        with the supervised, write-root and egress groups) cost exec mode ≈ 0.13 ms of page faults
        for a fresh buffer it mostly never used (docs/performance.md, session 6). The file is
        opened again for it and must still be the one the index came from (same device, inode,
        size, mtime_ns and ctime_ns: `make compile` replaces it by a rename; a write in place
        changes the ctime, which unlike the mtime no one can put back), else ValueError."""
        fd = _os.open(bundle_path(self.package_dir), _os.O_RDONLY | _os.O_CLOEXEC)
        try:
            st = _os.fstat(fd)
            if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) != self.identity:
                raise ValueError("the bundle was replaced or written since its index was read")
            blob = _os.pread(fd, length, offset)
        finally:
            _os.close(fd)
        if len(blob) != length:
            raise ValueError("short read")
        return _marshal.loads(blob)

    def find_spec(self, fullname, path=None, target=None):
        entry = self.index.get(fullname)
        if entry is None:
            return None
        is_package, relative_path, size, mtime_ns, source_hash, offset, length, position = entry
        origin = f"{self.package_dir}/{relative_path}"
        st = _source_matches(origin, size, mtime_ns, source_hash, length)
        if st is None:
            return None
        self.stats[origin] = st
        if not length:  # an extension module, loaded from its own file as importlib would
            spec = _bootstrap.ModuleSpec(fullname, _external.ExtensionFileLoader(fullname, origin), origin=origin,
                                         loader_state=SERVED_FROM_BUNDLE)
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
                                     is_package=is_package, loader_state=SERVED_FROM_BUNDLE)
        spec.has_location = True
        head, _, tail = origin.rpartition("/")
        spec.cached = f"{head}/__pycache__/{tail[:-3]}.{_sys.implementation.cache_tag}.pyc"
        if is_package:
            spec.submodule_search_locations = [head]
        return spec


_CODE = type(bundle_path.__code__)


def _source_matches(path: str, size: int, mtime_ns: int, source_hash: bytes, length: int):
    """The file at `path`'s stat if it is still the source the bundle's code was compiled from
    (the same size and mtime_ns, else the same size and source hash: PEP 552's check; for an
    extension module, `length` 0, if the file is still there), else None."""
    try:
        st = _os.stat(path)
        if not length or (st.st_size, st.st_mtime_ns) == (size, mtime_ns):
            return st
        if st.st_size != size:
            return None
        source = _read(path, size + 1)  # + 1: a file that grew since
        return st if len(source) == size and _imp.source_hash(_external._RAW_MAGIC_NUMBER, source) == source_hash else None
    except OSError:
        return None


def _read(path: str, size: int) -> bytes:
    """Up to `size` bytes of a file in one read(2): io.open's buffered file object costs five
    more system calls (fstat, isatty's ioctl, two lseeks, the read that finds the end), which the
    hash check of an installed wheel would pay for every module."""
    fd = _os.open(path, _os.O_RDONLY | _os.O_CLOEXEC)
    try:
        return _os.read(fd, size)
    finally:
        _os.close(fd)


def bundle_finder() -> BundleFinder | None:
    """The bundle finder this process uses, if any (`sandboy doctor` reports it). Told by its
    class's name, not `isinstance`: `importlib.reload(sandboy)` makes the class anew."""
    return next((finder for finder in _sys.meta_path
                 if type(finder).__name__ == "BundleFinder" and type(finder).__module__ == __name__), None)


def _install_bundle_finder(package_dir: str) -> BundleFinder | None:
    """Put the bundle's finder first on _sys.meta_path; None (and nothing changed) when there is
    no usable bundle: missing, short, corrupt, or written by another interpreter."""
    path = bundle_path(package_dir)
    if path is None:
        return None
    finder = bundle_finder()
    if finder is not None and finder.package_dir == package_dir:
        return finder  # `sandboy` reloaded: one finder is enough
    try:
        fd = _os.open(path, _os.O_RDONLY | _os.O_CLOEXEC)
        try:
            st = _os.fstat(fd)
            head = _os.read(fd, _BUNDLE_FIRST_READ)  # the header and the index; the groups when they are imported
            if head[:4] != _external.MAGIC_NUMBER or head[4:8] != BUNDLE_FORMAT:
                return None
            end = _BUNDLE_HEADER + int.from_bytes(head[8:_BUNDLE_HEADER], "little")
            if end > len(head):
                head += _os.pread(fd, end - len(head), len(head))
        finally:
            _os.close(fd)
        entries = _marshal.loads(memoryview(head)[_BUNDLE_HEADER:end])
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
    finder = BundleFinder(package_dir, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns), index)
    _sys.meta_path.insert(0, finder)
    return finder


_install_bundle_finder(__path__[0])

__all__ = ["Policy", "PolicyError", "CageError", "RunResult", "run", "spawn", "__version__"]


def __getattr__(name: str):
    # PEP 562 lazy exports: `sandboy run` imports only what its path needs.
    if name in ("Policy",):
        from sandboy.policy.model import Policy

        return Policy
    if name in ("PolicyError", "CageError"):
        from sandboy import errors

        return getattr(errors, name)
    if name in ("run", "spawn", "RunResult"):
        from sandboy.confine import launch

        return getattr(launch, name)
    raise AttributeError(f"module 'sandboy' has no attribute {name!r}")
