"""Build guest adapters with componentize-py, cached by source hash.

Builds are slow (tens of seconds, ~415 MB peak; the progress line says how long the last one
took here) and not byte-identical, so:

* a build is keyed on the sha256 of its sources + the componentize-py version
  and reused until a source changes;
* everything downstream (the `.cwasm` cache, provenance) is keyed on the hash
  of the built file, i.e. of what actually runs.

The cache directory holds native code (`.cwasm`), so it must be private to the
user: we create it 0700 and refuse one that others can write to.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from sandboy.audit.errors import BuildFailed, DeadlineExceeded, UsageError
from sandboy.audit.registry import WIT_WORLD_NAME, AdapterSpec, adapters_root, source_files

Progress = Callable[[str], None]
COMPONENTIZE_PY_VERSION = "0.25.1"  # pinned in pyproject.toml; part of the build key


def _stderr(message: str) -> None:
    from sandboy.escape import block  # progress names paths and components

    print(block(message), file=sys.stderr, flush=True)


def cache_dir(*parts: str) -> Path:
    """`parts` under Sandboy's cache directory (made 0700). Where that is — $SANDBOY_CACHE_DIR,
    else $XDG_CACHE_HOME/sandboy, else ~/.cache/sandboy — is decided in one place,
    `sandboy.cache_places.cache_dir`, which the cage also uses to keep every command out of it
    (ADR 0006): two copies of the rule could disagree and leave the components reachable. What a
    private cache directory is — made without following a symlink another user could have placed,
    this euid's, writable by no one else — is decided in one place too, `cache_files.open_private_dir`,
    which every other writer of the cache uses (a cache others can write is a way to plant native
    code in our process)."""
    from sandboy.cache_places import cache_dir as cache_root  # (not via policy.load: no resolver)
    from sandboy.confine.cache_files import open_private_dir

    root = cache_root()
    path = Path(root).joinpath(*parts)
    for place in (root, str(path)):  # the root first: it is what the operator can fix
        fd = open_private_dir(place)
        if fd is None:
            raise UsageError(
                f"cache directory {root} cannot be made, is writable by others or is not owned by you; "
                f"run `chmod 700 {root}` or set SANDBOY_CACHE_DIR to a private directory"
            )
        os.close(fd)
    return path


def files_hash(files: list[Path], root: Path) -> str:
    digest = hashlib.sha256(f"componentize-py {COMPONENTIZE_PY_VERSION}\n".encode())
    for path in files:
        name = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def source_hash(spec: AdapterSpec) -> str:
    return files_hash(source_files(spec), adapters_root())


def component_path(spec: AdapterSpec) -> Path:
    return cache_dir("components") / f"{spec.name}-{source_hash(spec)[:32]}.wasm"


def _componentize_py() -> str:
    beside = Path(sys.executable).with_name("componentize-py")
    found = str(beside) if beside.is_file() else shutil.which("componentize-py")
    if not found:
        raise BuildFailed(
            "componentize-py is not installed, so adapters cannot be built: "
            "pip install 'sandboy[build]' (componentize-py==0.25.1), or pre-build with `sandboy audit build --all`"
        )
    return found


@contextmanager
def _locked(path: Path, deadline_at: float | None = None) -> Iterator[None]:
    # Two processes (pytest workers, parallel CI jobs) must not build the same adapter twice.
    # With a deadline, waiting for the other one's build ends at it too.
    with open(path.with_suffix(".lock"), "w") as lock:
        if deadline_at is None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        else:
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline_at:
                        raise DeadlineExceeded("the deadline passed while another process built the adapter",
                                               step="the adapter's build", started=False) from None
                    time.sleep(0.05)
        yield


def estimate(kind: str) -> str:
    """How long a first-use `kind` ("build" or "compile") took last time on this machine, for the
    progress line: a fixed guess was wrong by 6x on a loaded 2-core machine (~10 s said, 64 s taken)."""
    try:
        seconds = float((cache_dir("timings") / kind).read_text())
    except (OSError, ValueError, UsageError):
        return "first use; the first one on a machine can take minutes"
    return f"first use; {seconds:.0f} s last time here"


def record(kind: str, seconds: float) -> None:
    try:
        (cache_dir("timings") / kind).write_text(f"{seconds:.1f}\n")
    except (OSError, UsageError):
        pass  # only the next estimate is lost


# A component of the cache is taken only where the sealed note beside it (`<name>.wasm.sum`, written
# and read as every cache file: `cache_files.write_file`, `_libc.read_private`, ADR 0030) holds its
# SHA-256: a `.wasm` a checkout shipped in a cache kept in the working copy is built anew, never run
# (it chose the audit's findings: redcage13).
def _component_sum(target: Path) -> bytes | None:
    try:
        return hashlib.sha256(target.read_bytes()).hexdigest().encode()
    except OSError:
        return None


def sealed_component(target: Path) -> bool:
    from sandboy.confine._libc import read_private

    kept = read_private(f"{os.path.realpath(target)}.sum", 64)  # (real path: as host.load reads a .cwasm)
    return kept is not None and kept == _component_sum(target)


def seal_component(target: Path) -> None:
    from sandboy.confine.cache_files import write_file

    digest = _component_sum(target)
    if digest is not None:
        write_file(os.path.dirname(os.path.realpath(target)), f"{target.name}.sum", digest)


def build(spec: AdapterSpec, progress: Progress = _stderr, force: bool = False,
          deadline_at: float | None = None) -> Path:
    """Return the built component for `spec`, building it on first use."""
    return build_sources(spec.name, source_files(spec), progress, force, deadline_at)


def build_sources(name: str, files: list[Path], progress: Progress = _stderr, force: bool = False,
                  deadline_at: float | None = None) -> Path:
    """Build `app.py` + helper modules (files[0] is the WIT) into a zero-import component, cached.
    `deadline_at` (time.monotonic()): a build still running then is killed (DeadlineExceeded)."""
    root = adapters_root()
    target = cache_dir("components") / f"{name}-{files_hash(files, root)[:32]}.wasm"
    if not force and sealed_component(target):
        return target
    with _locked(target, deadline_at):
        if not force and sealed_component(target):
            return target  # another process built it while we waited
        progress(f"building adapter {name} with componentize-py ({estimate('build')})…")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"sandboy-build-{name}-") as tmp:
            # Build from a copy: componentize-py imports the app at build time and
            # would leave __pycache__ in the source tree.
            src = Path(tmp) / "src"
            src.mkdir()
            for path in files[1:]:
                shutil.copy2(path, src / path.name)
            out = target.with_name(target.name + ".tmp")  # same filesystem: os.replace is atomic
            cmd = [
                _componentize_py(), "-d", str(files[0].parent), "-w", WIT_WORLD_NAME,
                "componentize", "--stub-wasi", "-p", str(src), "-o", str(out), "app",
            ]
            # Without VIRTUAL_ENV/PYTHONPATH componentize-py does not bundle the host's site-packages.
            env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
            timeout = None if deadline_at is None else max(deadline_at - time.monotonic(), 0.001)
            try:
                proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:  # (run() has killed componentize-py and reaped it)
                raise DeadlineExceeded(f"the deadline ended building adapter {name} (componentize-py was killed)",
                                       step="the adapter's build") from None
            if proc.returncode != 0 or not out.is_file():
                tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
                raise BuildFailed(f"building adapter {name} failed (componentize-py exit {proc.returncode}):\n{tail}")
            os.replace(out, target)
            seal_component(target)
        elapsed = time.monotonic() - started
        record("build", elapsed)
        progress(f"built adapter {name} in {elapsed:.1f} s: {target} ({target.stat().st_size / 1e6:.1f} MB)")
    return target
