"""Audit adapters: static-analysis output -> SARIF 2.1.0 through sandboxed WebAssembly components.

Nothing heavy is imported here: `wasmtime` and `jsonschema_rs` load only in
`sandboy.audit.host` / `sandboy.audit.sarif`, on the audit code paths.
Entry points: `sandboy.audit.convert.convert()` (Python API), `sandboy.audit.cli`.
"""
