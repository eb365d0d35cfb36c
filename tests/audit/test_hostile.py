"""Hostile inputs and hostile guests: every failure is classified, bounded and clear."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
import wasmtime

from sandboy.audit import host
from sandboy.audit.convert import ConvertRequest, convert
from sandboy.audit.errors import (
    AdapterFailed,
    ComponentRefused,
    DeadlineExceeded,
    GuestCrash,
    InputTooLarge,
    InvalidOutput,
    MemoryExhausted,
    OutOfFuel,
    OutputTooLarge,
)

QUIET = {"progress": lambda m: None}


def infer(path: Path, **kw):
    return convert(ConvertRequest(tool="infer", artifacts=[("report.json", path)], **kw), **QUIET)


def guest(component: Path, mode: str, tmp_path: Path, payload: bytes = b"{}", **kw):
    art = tmp_path / "in.json"
    art.write_bytes(payload)
    return convert(ConvertRequest(tool=mode, component=component, artifacts=[("in.json", art)], **kw), **QUIET)


# --- hostile input through the real infer adapter ---------------------------------------


def test_malformed_json(built, tmp_path):
    bad = tmp_path / "r.json"
    bad.write_text('[{"bug_type": "X", ')
    with pytest.raises(AdapterFailed, match=r"not valid JSON at line 1"):
        infer(bad)


def test_100_mb_input_is_capped_without_reading_it_all(built, tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(100 * 1024 * 1024)  # sparse: 100 MB that costs no disk
    started = time.perf_counter()
    with pytest.raises(InputTooLarge, match="big.json") as err:
        infer(big)
    # a hang guard, not a measurement (bench/ measures): reading all 100 MB would not hang either,
    # so what proves the cap is InputTooLarge itself, raised by one bounded read
    assert err.value.exit_code == 3 and time.perf_counter() - started < 60
    with pytest.raises(InputTooLarge):
        infer(big, max_input_bytes=1 << 20)


def test_a_million_nested_brackets(built, tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 1_000_000 + "]" * 1_000_000)
    with pytest.raises((AdapterFailed, GuestCrash)) as err:
        infer(deep)
    assert "nested too deeply" in str(err.value) or "stack" in str(err.value)


def test_ten_mb_single_string(built, tmp_path):
    report = [{"bug_type": "BIG", "qualifier": "q" * (10 << 20), "severity": "ERROR", "line": 1, "column": -1,
               "file": "a.java", "hash": "h1", "bug_trace": []}]
    path = tmp_path / "big-string.json"
    path.write_text(json.dumps(report))
    result = infer(path)
    assert len(result.doc["runs"][0]["results"][0]["message"]["text"]) == 10 << 20


def test_invalid_utf8_is_refused_with_its_offset(built, tmp_path):
    path = tmp_path / "latin.json"
    path.write_bytes(b'[{"bug_type": "X", "qualifier": "caf\xe9"}]')
    with pytest.raises(AdapterFailed, match=r"report.json: not valid UTF-8 \(byte 0xe9 at offset 36\)"):
        infer(path)


def test_byte_convention_loses_nothing(hostile, tmp_path):
    raw = bytes(range(256)) * 4  # every byte value, invalid UTF-8
    doc = guest(hostile, "echo-bytes", tmp_path, raw, options=[("k", "v=w")]).doc
    props = doc["runs"][0]["properties"]
    assert props["encoding"] == "latin1" and props["sha256"] == hashlib.sha256(raw).hexdigest()
    assert props["options"] == {"k": "v=w"}
    text = "naïve ✓ 𝄞".encode()
    props = guest(hostile, "echo-bytes", tmp_path, text).doc["runs"][0]["properties"]
    assert props["encoding"] == "utf8" and props["decoded"] == "naïve ✓ 𝄞"


# --- hostile guests ------------------------------------------------------------------


def test_endless_loop_runs_out_of_fuel(hostile, tmp_path):
    started = time.perf_counter()
    with pytest.raises(OutOfFuel) as err:
        guest(hostile, "loop", tmp_path, fuel=500_000_000)
    assert err.value.exit_code == 11 and time.perf_counter() - started < 120  # a hang guard only


def test_endless_loop_hits_the_deadline(hostile, tmp_path):
    started = time.perf_counter()
    with pytest.raises(DeadlineExceeded) as err:
        guest(hostile, "loop", tmp_path, fuel=10**15, deadline_seconds=0.5)
    elapsed = time.perf_counter() - started
    # not early; and ended by the deadline, not by the 10**15 fuel (hours): a generous hang guard,
    # not a measurement, so a loaded machine cannot make it flaky
    assert err.value.exit_code == 12 and 0.4 < elapsed < 120


def test_endless_allocation_hits_the_memory_cap(hostile, tmp_path):
    with pytest.raises(MemoryExhausted) as err:
        guest(hostile, "alloc-wrapped", tmp_path, memory_mib=64)
    assert err.value.exit_code == 13 and "64 MiB" in str(err.value)


def test_raw_allocation_trap_is_a_crash_naming_the_cap(hostile, tmp_path):
    # A guest that lets MemoryError escape traps with `unreachable`; the host cannot
    # tell that apart from any other uncaught exception, and says so.
    with pytest.raises(GuestCrash, match="memory exhausted at the 64 MiB cap"):
        guest(hostile, "alloc", tmp_path, memory_mib=64)


def test_guest_crash(hostile, tmp_path):
    with pytest.raises(GuestCrash) as err:
        guest(hostile, "crash", tmp_path)
    assert err.value.exit_code == 14


def test_unbounded_recursion(hostile, tmp_path):
    with pytest.raises(GuestCrash):
        guest(hostile, "recurse", tmp_path)


def test_output_that_is_not_json(hostile, tmp_path):
    with pytest.raises(InvalidOutput, match="not JSON"):
        guest(hostile, "not-json", tmp_path)


def test_output_that_is_not_valid_sarif(hostile, tmp_path):
    with pytest.raises(InvalidOutput) as err:
        guest(hostile, "bad-sarif", tmp_path)
    text = str(err.value)
    assert "/runs/0/results/0/level" in text  # schema: "fatal" is not a level
    assert "/runs/0/results/0/ruleIndex" in text  # semantic: out of range
    assert err.value.exit_code == 15


def test_oversized_output(hostile, tmp_path):
    with pytest.raises(OutputTooLarge, match="max-output-bytes"):
        guest(hostile, "oversized", tmp_path, max_output_bytes=1 << 20)
    assert guest(hostile, "oversized", tmp_path).results == 0  # fine under the default cap


def test_too_many_results(hostile, tmp_path):
    with pytest.raises(OutputTooLarge, match="max-results"):
        guest(hostile, "many-results", tmp_path, max_results=1000)


def test_forged_provenance_is_overwritten(hostile, tmp_path):
    doc = guest(hostile, "forge-provenance", tmp_path).doc
    run = doc["runs"][0]
    assert run["properties"]["sandboy"]["componentSha256"] == hashlib.sha256(hostile.read_bytes()).hexdigest()
    assert run["conversion"]["tool"]["driver"]["name"] == "sandboy audit"


def test_guest_text_cannot_drive_the_terminal(hostile, tmp_path):
    with pytest.raises(AdapterFailed) as err:
        guest(hostile, "escape", tmp_path)
    assert "\x1b" not in str(err.value) and "\x07" not in str(err.value)


def test_a_fresh_store_per_call(hostile, tmp_path):
    # a failed call leaves nothing behind: the next call on the same component works
    with pytest.raises(OutOfFuel):
        guest(hostile, "loop", tmp_path, fuel=200_000_000)
    assert guest(hostile, "ok", tmp_path).results == 0


# --- components that must be refused --------------------------------------------------

WITH_IMPORTS = """
(component
  (import "wasi:sockets/tcp@0.2.0" (instance (export "connect" (func (param "addr" string)))))
)
"""

WRONG_SHAPE = """
(component
  (core module $m (func (export "f") (result i32) i32.const 7))
  (core instance $i (instantiate $m))
  (func $f (result u32) (canon lift (core func $i "f")))
  (export "to-sarif" (func $f))
)
"""


def _component(tmp_path: Path, wat: str, name: str) -> Path:
    path = tmp_path / name
    path.write_bytes(wasmtime.wat2wasm(wat))
    return path


def test_component_with_imports_is_refused(tmp_path):
    path = _component(tmp_path, WITH_IMPORTS, "evil.wasm")
    with pytest.raises(ComponentRefused, match=r"imports 1 item\(s\) \(wasi:sockets/tcp@0.2.0\)") as err:
        guest(path, "x", tmp_path)
    assert err.value.exit_code == 17


def test_wasi_importing_python_component_is_refused(built, tmp_path):
    # The real-world case: a componentize-py build WITHOUT --stub-wasi imports WASI.
    # Checked on the component type alone, so no 10 s build is needed: we graft an import.
    path = _component(tmp_path, WITH_IMPORTS.replace("wasi:sockets/tcp", "wasi:filesystem/preopens"), "wasi.wasm")
    with pytest.raises(ComponentRefused, match="--stub-wasi"):
        guest(path, "x", tmp_path)


def test_component_with_wrong_signature_is_refused(tmp_path):
    path = _component(tmp_path, WRONG_SHAPE, "shape.wasm")
    with pytest.raises(ComponentRefused, match="wrong signature"):
        guest(path, "x", tmp_path)


def test_garbage_is_not_a_component(tmp_path):
    path = tmp_path / "junk.wasm"
    path.write_bytes(b"\x00asm\x01\x00\x00\x00garbage")
    with pytest.raises(ComponentRefused, match="not a valid WebAssembly component"):
        guest(path, "x", tmp_path)


def test_warm_load_uses_the_cwasm_cache(built):
    host._loaded.clear()
    said = []
    loaded = host.load(built["infer"], progress=said.append)
    assert not any("compiling" in m for m in said), said  # deserialised from the .cwasm, not compiled
    assert host._cwasm_path(loaded.sha256).is_file()
