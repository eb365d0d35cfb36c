"""A deliberately hostile adapter used by the audit tests.

`input.tool` selects the misbehaviour — or, where a caller names no mode (`sandboy audit run`
passes the adapter's name), an input that begins `hostile:MODE`. Built with componentize-py --stub-wasi
like a real adapter, so the host's limits are tested against real guest CPython.
"""

import hashlib
import json

import wit_world
from componentize_py_types import Err

from sandboy_guest import GuestInput, convert_entry, decode_text

VALID = {
    "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
    "version": "2.1.0",
    "runs": [{"tool": {"driver": {"name": "hostile"}}, "results": []}],
}


def _alloc_forever(_inp: GuestInput) -> dict:
    hoard = []
    while True:
        hoard.append(bytearray(1 << 20))


class WitWorld(wit_world.WitWorld):
    def to_sarif(self, input):
        mode = input.tool
        if input.artifacts and input.artifacts[0].content.data.startswith("hostile:"):
            mode = input.artifacts[0].content.data[len("hostile:"):].split("\n", 1)[0].strip()
        if mode == "loop":
            n = 0
            while True:
                n += 1
        if mode == "alloc":  # raw: MemoryError escapes, the guest traps
            hoard = []
            while True:
                hoard.append(bytearray(1 << 20))
        if mode == "alloc-wrapped":  # like a real adapter: the shared wrapper reports memory exhaustion
            try:
                return convert_entry(_alloc_forever, GuestInput(mode))
            except Exception as exc:
                raise Err(str(exc))
        if mode == "crash":
            raise ValueError("hostile guest crashed on purpose")
        if mode == "recurse":
            def down(n):
                return down(n + 1) + 1
            return str(down(0))
        if mode == "not-json":
            return "this is not JSON {"
        if mode == "bad-sarif":
            log = json.loads(json.dumps(VALID))
            log["runs"][0]["results"] = [{"message": {"text": "x"}, "ruleIndex": 3, "level": "fatal"}]
            return json.dumps(log)
        if mode == "oversized":
            log = json.loads(json.dumps(VALID))
            log["runs"][0]["properties"] = {"padding": "x" * (8 << 20)}
            return json.dumps(log)
        if mode == "many-results":
            log = json.loads(json.dumps(VALID))
            log["runs"][0]["results"] = [{"message": {"text": str(i)}} for i in range(2000)]
            return json.dumps(log)
        if mode == "forge-provenance":
            log = json.loads(json.dumps(VALID))
            log["runs"][0]["properties"] = {"sandboy": {"componentSha256": "0" * 64}}
            log["runs"][0]["conversion"] = {"tool": {"driver": {"name": "trust me"}}}
            return json.dumps(log)
        if mode == "escape":
            raise Err("evil \x1b[2J\x1b]0;pwned\x07 message")
        if mode == "echo-bytes":
            # Report what the guest received, so the test can check the byte convention.
            art = input.artifacts[0].content
            raw = art.data.encode("latin-1") if art.encoding.name == "LATIN1" else art.data.encode("utf-8")
            log = json.loads(json.dumps(VALID))
            log["runs"][0]["properties"] = {
                "encoding": art.encoding.name.lower(),
                "sha256": hashlib.sha256(raw).hexdigest(),
                "decoded": decode_text(art.encoding.name.lower(), art.data) if art.encoding.name == "UTF8" else None,
                "options": dict(input.options),
            }
            return json.dumps(log)
        return json.dumps(VALID)
