"""Component entry point of the `passthrough` adapter (see passthrough_adapter.py)."""

from passthrough_adapter import convert
from sandboy_wit import make_world

WitWorld = make_world(convert)
