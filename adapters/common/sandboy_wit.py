"""Glue between the WIT export `to-sarif` and a pure adapter (guest side only).

Kept apart from sandboy_guest.py because `wit_world` exists only inside a
componentize-py build; the adapters themselves stay runnable natively.
"""

from __future__ import annotations

from typing import Any, Callable

import wit_world
from componentize_py_types import Err

from sandboy_guest import AdapterError, GuestInput, convert_entry, decode_text


def _text(value: Any, name: str) -> str:
    return decode_text(value.encoding.name.lower(), value.data, name)


def to_guest_input(raw: wit_world.RawInput) -> GuestInput:
    return GuestInput(
        tool=raw.tool,
        artifacts={a.name: _text(a.content, a.name) for a in raw.artifacts},
        stdout=_text(raw.stdout, "stdout") if raw.stdout is not None else None,
        stderr=_text(raw.stderr, "stderr") if raw.stderr is not None else None,
        options=dict(raw.options),
    )


def make_world(convert: Callable[[GuestInput], dict[str, Any]]) -> type:
    class WitWorld(wit_world.WitWorld):
        def to_sarif(self, input: wit_world.RawInput) -> str:
            try:
                return convert_entry(convert, to_guest_input(input))
            except AdapterError as exc:
                # `result<string, string>`: componentize-py maps a raised Err to `err`.
                raise Err(str(exc)) from None

    return WitWorld
