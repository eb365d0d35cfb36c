"""Component entry point of the `infer` adapter (see infer_adapter.py)."""

from infer_adapter import convert
from sandboy_wit import make_world

WitWorld = make_world(convert)
