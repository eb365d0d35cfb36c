"""Limits that must hold OUTSIDE the guest too: the host's own work on what a guest returned,
and resources a hand-written third-party component declares (findings of the security review)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import wasmtime

from sandboy.audit import sarif
from sandboy.audit.convert import ConvertRequest, convert
from sandboy.audit.errors import AuditError, InvalidOutput

QUIET = {"progress": lambda m: None}
SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")

# A minimal component of the ownaudit:adapter@0.2.0 world, in WAT: `to-sarif` returns the first
# artifact's text unchanged. EXTRA declares more core items; BODY runs first in `to-sarif`.
ECHO_COMPONENT = r'''
(component
  (type $enc' (enum "utf8" "latin1"))
  (export $enc "encoding" (type $enc'))
  (type $text' (record (field "encoding" $enc) (field "data" string)))
  (export $text "text" (type $text'))
  (type $art' (record (field "name" string) (field "content" $text)))
  (export $art "artifact" (type $art'))
  (type $raw' (record (field "tool" string) (field "stdout" (option $text)) (field "stderr" (option $text))
                      (field "artifacts" (list $art)) (field "options" (list (tuple string string)))))
  (export $raw "raw-input" (type $raw'))
  (core module $m
    (memory (export "memory") 1)
    EXTRA
    (global $bump (mut i32) (i32.const 1024))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32) (local $need i32)
      (local.set $p (i32.and (i32.add (global.get $bump) (i32.const 15)) (i32.const -16)))
      (global.set $bump (i32.add (local.get $p) (local.get 3)))
      (local.set $need (i32.sub (i32.shr_u (i32.add (global.get $bump) (i32.const 65535)) (i32.const 16)) (memory.size)))
      (if (i32.gt_s (local.get $need) (i32.const 0))
        (then (if (i32.eq (memory.grow (local.get $need)) (i32.const -1)) (then unreachable))))
      (local.get $p))
    (func (export "to-sarif") (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
      BODY
      (i32.store (i32.const 0) (i32.const 0))
      (i32.store (i32.const 4) (i32.load offset=12 (local.get 10)))
      (i32.store (i32.const 8) (i32.load offset=16 (local.get 10)))
      (i32.const 0)))
  (core instance $i (instantiate $m))
  (func $f (param "input" $raw) (result (result string (error string)))
    (canon lift (core func $i "to-sarif") (memory (core memory $i "memory")) (realloc (core func $i "realloc"))))
  (export "to-sarif" (func $f))
)
'''
VALID = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "t"}}, "results": []}]}


def component(tmp_path: Path, name: str, extra: str = "", body: str = "") -> Path:
    path = tmp_path / name
    path.write_bytes(wasmtime.wat2wasm(ECHO_COMPONENT.replace("EXTRA", extra).replace("BODY", body)))
    return path


def echo(comp: Path, tmp_path: Path, text: str, **kw):
    art = tmp_path / "in.sarif"
    art.write_text(text)
    return convert(ConvertRequest(tool="echo", component=comp, artifacts=[("in.sarif", art)], **kw), **QUIET)


def test_the_echo_component_works(tmp_path):
    """The twin of the attacks below: the same component, well behaved, converts."""
    assert echo(component(tmp_path, "echo.wasm"), tmp_path, json.dumps(VALID)).results == 0


def test_many_memories_are_refused(tmp_path):
    """memory_size caps each memory; sixteen of them would each get the full cap."""
    decls = " ".join(f"(memory $x{i} 0)" for i in range(16))
    body = "".join(f"(drop (memory.grow $x{i} (i32.const 16)))" for i in range(16))
    with pytest.raises(AuditError) as err:
        echo(component(tmp_path, "mems.wasm", decls, body), tmp_path, json.dumps(VALID), memory_mib=64)
    assert err.value.exit_code in (13, 14, 17)


def test_a_table_cannot_grow_into_host_memory(tmp_path):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    body = "(drop (table.grow $t (ref.null func) (i32.const 268435456)))"  # 2 GiB of table if granted
    result = echo(component(tmp_path, "table.wasm", "(table $t 0 funcref)", body), tmp_path, json.dumps(VALID))
    assert result.results == 0  # table.grow returned -1; nothing was allocated
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024


def test_numbers_that_are_not_finite_are_refused(tmp_path):
    """json.loads reads 1e400 as inf; written back it would be the non-JSON `Infinity`."""
    doc = json.dumps(VALID)[:-1] + ', "properties": {"n": 1e400}}'
    with pytest.raises(InvalidOutput, match="finite"):
        echo(component(tmp_path, "echo.wasm"), tmp_path, doc)
    with pytest.raises(sarif.JsonProblem, match="finite"):
        sarif.parse_json('{"n": -1e999}')


def test_huge_integers_are_a_json_problem_not_a_crash():
    with pytest.raises(sarif.JsonProblem):
        sarif.parse_json('{"n": ' + "9" * 5000 + "}")


def test_schema_errors_of_a_huge_invalid_document_stay_cheap():
    """jsonschema-rs gathers every error first: a million invalid rules cost 3.5 GB and 27 s."""
    doc = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "t", "rules": [{}] * 1_000_000}}}]}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    found = sarif.schema_problems(doc)
    assert time.monotonic() - started < 120  # a hang guard only (27 s and 3.5 GB before the fix); memory below
    assert len(found) == 1 and "first error" in found[0].message
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 300 * 1024
    small = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "t", "rules": [{}] * 3}}}]}
    assert len(sarif.schema_problems(small)) == 4  # small documents list every error (3 ids + uniqueness)


def test_a_fifo_as_component_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "comp.fifo"
    os.mkfifo(fifo)
    art = tmp_path / "in.sarif"
    art.write_text(json.dumps(VALID))
    proc = subprocess.run([SANDBOY, "audit", "convert", "--component", str(fifo), "--artifact", f"a={art}",
                           "-o", str(tmp_path / "out.sarif")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr, proc.stderr


def test_escape_sequences_from_a_file_never_reach_the_terminal(tmp_path):
    doc = dict(VALID)
    doc["runs"] = [{"tool": {"driver": {"name": "t"}}, "results": [],
                    "properties": {"\x1b]0;PWNED\x07\x1b[2J": {"region": {"startLine": 0}}}}]
    bad = tmp_path / "esc.sarif"
    bad.write_text(json.dumps(doc))
    proc = subprocess.run([SANDBOY, "audit", "validate", str(bad)], capture_output=True, text=True)
    assert "\x1b" not in proc.stdout + proc.stderr and "\x07" not in proc.stdout


def _converted_once(tmp_path):
    """(argv, env, the .cwasm it left): `audit convert` of a small component run once, its own cache."""
    comp = component(tmp_path, "echo.wasm")
    art = tmp_path / "in.sarif"
    art.write_text(json.dumps(VALID))
    env = dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
    argv = [SANDBOY, "audit", "convert", "--component", str(comp), "--artifact", f"a={art}", "-o", str(tmp_path / "o")]
    assert subprocess.run(argv, env=env, capture_output=True, timeout=120).returncode == 0
    (cwasm,) = (tmp_path / "cache" / "cwasm").glob("*.cwasm")
    return argv, env, cwasm


def _int3_over_the_middle(data: bytes) -> bytes:
    data = bytearray(data)
    data[len(data) // 4 : len(data) // 4 * 3] = b"\xcc" * (len(data) // 4 * 3 - len(data) // 4)  # int3
    return bytes(data)


def test_a_tampered_cache_entry_is_not_run(tmp_path):
    """A .cwasm is native code wasmtime runs unchecked: one that others could write is
    recompiled from the component, never loaded."""
    argv, env, cwasm = _converted_once(tmp_path)
    cwasm.write_bytes(_int3_over_the_middle(cwasm.read_bytes()))
    cwasm.chmod(0o666)  # as if another user (or a step) had written it
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)  # recompiled, not trapped (133)


def test_a_cwasm_of_our_own_that_sandboy_did_not_seal_is_never_deserialized(tmp_path):
    """Owner and mode are not enough (ADR 0030): a `.cwasm` a checkout shipped in a cache kept in
    the working copy is the operator's, 0644 — here the compiled code with int3 over its middle,
    0600, the seal gone. It is recompiled, never run (the trap would end the run 133); from the
    host side the file was replaced by a sealed one. Twin: the sealed file is taken (same inode)."""
    from cachekit import unsealed

    argv, env, cwasm = _converted_once(tmp_path)
    sealed_inode = cwasm.stat().st_ino
    assert subprocess.run(argv, env=env, capture_output=True, timeout=120).returncode == 0
    assert cwasm.stat().st_ino == sealed_inode  # the twin: taken, not rewritten
    data = _int3_over_the_middle(unsealed(cwasm))  # what wasmtime made, without the seal: a checkout's copy
    cwasm.write_bytes(data)
    cwasm.chmod(0o600)
    forged_inode = cwasm.stat().st_ino
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)  # recompiled, not trapped (133)
    assert cwasm.stat().st_ino != forged_inode and unsealed(cwasm) != data  # compiled again, sealed
