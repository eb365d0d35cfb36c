"""Component entry point of the `bandit` adapter (see bandit_adapter.py)."""

from bandit_adapter import convert
from sandboy_wit import make_world

WitWorld = make_world(convert)
