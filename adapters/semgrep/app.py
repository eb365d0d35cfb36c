"""Component entry point of the `semgrep` adapter (see semgrep_adapter.py)."""

from semgrep_adapter import convert
from sandboy_wit import make_world

WitWorld = make_world(convert)
