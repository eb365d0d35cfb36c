"""The WebAssembly adapter host: run an untrusted component under hard limits.

Threat model (docs/audit.md): the component and its input are hostile. So
* the component may import nothing (empty linker; refused before it runs);
* each call gets a fresh Store: no state survives between conversions;
* fuel bounds the work, scaled to the input size; an epoch deadline bounds
  wall time even if fuel accounting were wrong; a store limiter caps memory;
* every failure is classified into one AuditError with its own exit code.

wasmtime is imported here only (never at `import sandboy`): it costs ~100 ms.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import stat
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import wasmtime
from wasmtime import component as wc

from sandboy.audit.build import cache_dir
from sandboy.confine._libc import read_private
from sandboy.confine.cache_files import write_file
from sandboy.audit.errors import (
    AdapterFailed,
    AuditError,
    ComponentRefused,
    DeadlineExceeded,
    GuestCrash,
    MemoryExhausted,
    OutOfFuel,
    OutputTooLarge,
    UsageError,
)
from sandboy.audit.registry import WORLD
from sandboy.escape import clean  # guest text reaches terminals and CI logs

EXPORT = "to-sarif"
INPUT_FIELDS = ["tool", "stdout", "stderr", "artifacts", "options"]
MEMORY_EXHAUSTED = "sandboy:memory-exhausted:"  # mirrors adapters/common/sandboy_guest.py

DEFAULT_MEMORY_MIB = 256
DEFAULT_DEADLINE_SECONDS = 120.0
# docs/findings.md (adapter host): ≈ 0.7 M fuel for a 1 KB call, ≈ 970 fuel per input byte for Infer,
# ≈ 4e9 fuel per second. A fixed base plus 4,000 per byte leaves room for
# heavier adapters and still stops a 64 MiB input after ~a minute of work.
FUEL_BASE = 2_000_000_000
FUEL_PER_BYTE = 4_000
EPOCH_TICK_SECONDS = 0.05

# wasmtime's budget for what one call copies between host and guest ("fuel allocated for
# hostcalls"): a returned string over it fails the call whatever --max-output-bytes says.
WASMTIME_COPY_BYTES = 128 << 20

# The engine settings that change compiled code: part of the .cwasm key.
ENGINE_SETTINGS = "fuel=1,epoch=1,opt=speed"


@functools.cache
def wasmtime_version() -> str:
    """The installed wasmtime-py version: part of the .cwasm key and of provenance."""
    return importlib.metadata.version("wasmtime")


def default_fuel(input_bytes: int) -> int:
    return FUEL_BASE + FUEL_PER_BYTE * input_bytes


@dataclass(frozen=True)
class Limits:
    fuel: int
    deadline_seconds: float = DEFAULT_DEADLINE_SECONDS
    memory_bytes: int = DEFAULT_MEMORY_MIB << 20


@dataclass(frozen=True)
class Text:
    """One payload under the WIT byte convention (encoding 'utf8' or 'latin1')."""

    encoding: str
    data: str

    @classmethod
    def from_bytes(cls, raw: bytes) -> "Text":
        # Valid UTF-8 passes unchanged; anything else maps byte b -> U+00b, so
        # the guest can recover the exact bytes (data.encode("latin-1")).
        try:
            return cls("utf8", raw.decode("utf-8"))
        except UnicodeDecodeError:
            return cls("latin1", raw.decode("latin-1"))


@dataclass(frozen=True)
class RawInput:
    tool: str
    artifacts: list[tuple[str, Text]]
    stdout: Text | None = None
    stderr: Text | None = None
    options: list[tuple[str, str]] | None = None

    def to_wit(self) -> wc.Record:
        def text(t: Text | None) -> wc.Record | None:
            if t is None:
                return None
            rec = wc.Record()
            rec.encoding, rec.data = t.encoding, t.data
            return rec

        def artifact(name: str, content: Text) -> wc.Record:
            rec = wc.Record()
            rec.name, rec.content = name, text(content)
            return rec

        rec = wc.Record()
        rec.tool = self.tool
        rec.stdout, rec.stderr = text(self.stdout), text(self.stderr)
        rec.artifacts = [artifact(n, c) for n, c in self.artifacts]
        rec.options = list(self.options or [])
        return rec


@dataclass(frozen=True)
class Loaded:
    component: wc.Component
    sha256: str
    path: Path


@dataclass(frozen=True)
class Outcome:
    sarif: str
    fuel_used: int
    seconds: float


# --- engine ------------------------------------------------------------------

_engine: wasmtime.Engine | None = None
_engine_lock = threading.Lock()
_loaded: dict[tuple[str, int, int, int], Loaded] = {}


def engine() -> wasmtime.Engine:
    global _engine
    with _engine_lock:
        if _engine is None:
            config = wasmtime.Config()
            config.consume_fuel = True
            config.epoch_interruption = True
            config.cranelift_opt_level = "speed"
            _engine = wasmtime.Engine(config)
            # One daemon ticker drives every deadline: a call's deadline is a
            # number of ticks, so concurrent calls never cut each other short.
            threading.Thread(target=_tick, args=(_engine,), name="sandboy-epoch", daemon=True).start()
        return _engine


def _tick(eng: wasmtime.Engine) -> None:
    while True:
        time.sleep(EPOCH_TICK_SECONDS)
        eng.increment_epoch()


# --- loading -------------------------------------------------------------------


MAX_COMPONENT_BYTES = 256 << 20
MAX_CWASM_BYTES = 1 << 30


def _read_bounded(path: Path, limit: int) -> bytes:
    """One bounded read of a regular file, through one fd (no check-then-read race: what is
    hashed is what is compiled). (A `.cwasm` of the cache is read by `_libc.read_private`.)"""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path}: not a regular file")
        chunks, total = [], 0
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > limit:
                raise OSError(f"{path}: larger than {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _cwasm_path(sha256: str) -> Path:
    settings = hashlib.sha256(ENGINE_SETTINGS.encode()).hexdigest()[:12]
    return cache_dir("cwasm") / f"{sha256}-wasmtime{wasmtime_version()}-{settings}.cwasm"


def _refuse_imports(component: wc.Component, path: Path) -> None:
    imports = sorted(component.type.imports(engine()))
    if imports:
        shown = ", ".join(imports[:8]) + (f" and {len(imports) - 8} more" if len(imports) > 8 else "")
        raise ComponentRefused(
            f"{path}: component imports {len(imports)} item(s) ({shown}); adapters must import nothing. "
            "Rebuild it with `componentize-py ... componentize --stub-wasi`"
        )
    exports = component.type.exports(engine())
    if EXPORT not in exports:
        raise ComponentRefused(
            f"{path}: component does not export `{EXPORT}` (world {WORLD}); exports: {', '.join(sorted(exports)) or 'none'}"
        )


def load(path: Path, progress: Callable[[str], None] | None = None) -> Loaded:
    """Load a component, compiling it once and caching the native code (.cwasm)."""
    try:
        info = path.stat()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read component ({exc.strerror})") from None
    key = (str(path.resolve()), info.st_size, info.st_mtime_ns, info.st_ino)
    if key in _loaded:
        return _loaded[key]
    try:
        wasm = _read_bounded(path, MAX_COMPONENT_BYTES)
    except OSError as exc:
        raise UsageError(f"cannot read component: {exc.strerror or exc}") from None
    sha256 = hashlib.sha256(wasm).hexdigest()
    cwasm = _cwasm_path(sha256)
    eng = engine()
    component = None
    # Native code wasmtime runs in this process without checking it: only bytes sealed by this
    # user's key under this very name (`_libc.read_private`, ADR 0030) — owner and mode alone a
    # checkout's files have (a cache in the working copy shipped a `.cwasm`: redcage13)
    # (by its real path: the suite shares `cwasm/` by a symlink, which read_private's directory open
    # does not follow; the seal, not the way there, is what is trusted)
    cwasm = Path(os.path.realpath(cwasm))
    native = read_private(str(cwasm), MAX_CWASM_BYTES)
    if native is not None:
        try:
            component = wc.Component.deserialize(eng, native)
        except wasmtime.WasmtimeError:
            component = None  # stale or another wasmtime's: recompile below
    if component is None:
        if progress:
            from sandboy.audit.build import estimate

            progress(f"compiling component {path.name} to native code ({estimate('compile')})…")
        started = time.monotonic()
        try:
            component = wc.Component(eng, wasm)
        except wasmtime.WasmtimeError as exc:
            raise ComponentRefused(f"{path}: not a valid WebAssembly component: {_first_line(str(exc))}") from None
        _refuse_imports(component, path)
        write_file(str(cwasm.parent), cwasm.name, component.serialize())  # (sealed; not written without a key)
        from sandboy.audit.build import record

        elapsed = time.monotonic() - started
        record("compile", elapsed)
        if progress:
            progress(f"compiled component {path.name} in {elapsed:.1f} s")
    _refuse_imports(component, path)
    loaded = _loaded[key] = Loaded(component, sha256, path)
    return loaded


# --- running -------------------------------------------------------------------


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "(no message)"




def classify(exc: Exception, limits: Limits) -> AuditError:
    """Map wasmtime's error text (all limits surface as WasmtimeError) to one class."""
    text = str(exc)
    mib = limits.memory_bytes >> 20
    if "all fuel consumed" in text:
        return OutOfFuel(
            f"the adapter used its whole fuel budget ({limits.fuel:,}) and was stopped; "
            "if the input is legitimately large, raise --fuel"
        )
    if "wasm trap: interrupt" in text:
        return DeadlineExceeded(
            f"the adapter ran past its {limits.deadline_seconds:g} s deadline and was stopped; raise --deadline-seconds if needed"
        )
    if "memory" in text and ("limit" in text or "exceeds" in text) and "unreachable" not in text:
        return MemoryExhausted(f"the adapter needs more than its {mib} MiB memory cap ({_first_line(text)}); raise --memory-mib")
    if "too much data is being copied between the host and the guest" in text:
        # wasmtime's own bound on what one call hands the host (128 MiB of a string, docs/findings.md):
        # an answer over it was "the adapter crashed" (exit 14) even with --max-output-bytes
        # raised past it, naming neither the size nor what to do (redinput14)
        return OutputTooLarge(
            f"the adapter's answer is over the {WASMTIME_COPY_BYTES >> 20} MiB that wasmtime lets one call hand "
            "the host; --max-output-bytes cannot raise that: split the input (one conversion per report file)"
        )
    if "call stack exhausted" in text or "stack overflow" in text:
        return GuestCrash("the adapter exhausted its stack (input nested too deeply?) and was stopped")
    if "unreachable" in text:
        return GuestCrash(
            "the adapter crashed (wasm trap: unreachable — an uncaught exception in the guest, "
            f"or memory exhausted at the {mib} MiB cap); the input was not converted"
        )
    last = text.strip().splitlines()[-1] if text.strip() else type(exc).__name__
    return GuestCrash(f"the adapter crashed: {clean(last.strip(), 300)}")


def call(loaded: Loaded, raw: RawInput, limits: Limits) -> Outcome:
    """One conversion in a fresh Store. Raises a classified AuditError on any failure."""
    eng = engine()
    store = wasmtime.Store(eng)
    # memory_size caps each linear memory; a third-party component could otherwise declare
    # sixteen of them, or grow a table to 2**32 elements (host memory, ~1 fuel per element).
    store.set_limits(memory_size=limits.memory_bytes, memories=1, tables=4, table_elements=100_000,
                     instances=50)
    store.set_fuel(limits.fuel)
    store.set_epoch_deadline(max(1, int(limits.deadline_seconds / EPOCH_TICK_SECONDS + 0.999)) + 1)
    started = time.perf_counter()
    try:
        # An empty linker: the component was checked to import nothing, and even
        # if that check were bypassed instantiation would fail here.
        instance = wc.Linker(eng).instantiate(store, loaded.component)
        func = instance.get_func(store, EXPORT)
        if func is None:
            raise ComponentRefused(f"{loaded.path}: no `{EXPORT}` function export (world {WORLD})")
        _check_signature(func, store, loaded.path)
        result = func(store, raw.to_wit())
        func.post_return(store)
    except AuditError:
        raise
    except (wasmtime.WasmtimeError, wasmtime.Trap) as exc:
        raise classify(exc, limits) from None
    except (TypeError, ValueError, AttributeError) as exc:
        # The lifted value did not match the world: a component of another shape.
        raise ComponentRefused(f"{loaded.path}: does not implement {WORLD}: {exc}") from None
    seconds = time.perf_counter() - started
    fuel_used = limits.fuel - store.get_fuel()
    tag, payload = getattr(result, "tag", None), getattr(result, "payload", None)
    if tag == "err" and isinstance(payload, str):
        if payload.startswith(MEMORY_EXHAUSTED):
            raise MemoryExhausted(
                f"the adapter ran out of memory at the {limits.memory_bytes >> 20} MiB cap; raise --memory-mib"
            )
        raise AdapterFailed(f"the adapter rejected the input: {clean(payload, 2000)}")
    if tag != "ok" or not isinstance(payload, str):
        raise ComponentRefused(f"{loaded.path}: `{EXPORT}` returned {type(result).__name__}, not result<string, string>")
    return Outcome(payload, fuel_used, seconds)


def _check_signature(func: wc.Func, store: wasmtime.Store, path: Path) -> None:
    ty = func.type(store)
    params = ty.params
    fields = [name for name, _ in getattr(params[0][1], "fields", [])] if len(params) == 1 else []
    result = ty.result
    ok = isinstance(result, wc.ResultType) and isinstance(result.ok, wc.String) and isinstance(result.err, wc.String)
    if fields != INPUT_FIELDS or not ok:
        raise ComponentRefused(
            f"{path}: `{EXPORT}` has the wrong signature for {WORLD} "
            "(expected func(input: raw-input) -> result<string, string>)"
        )


def describe_engine() -> dict[str, Any]:
    return {"wasmtime": wasmtime_version(), "engineSettings": ENGINE_SETTINGS, "python": sys.version.split()[0]}
