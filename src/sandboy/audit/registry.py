"""Adapter names -> guest sources, and where those sources live.

Guest sources are not host code (they run inside a component), they live in the
repository's `adapters/` directory. A wheel carries a copy as package data,
`sandboy/audit/guest_sources/` (setup.py; docs/adr/0014-an-install-that-converts.md), and
builds components from it on first use; an editable install reads `adapters/` in the checkout.
SANDBOY_ADAPTERS_DIR overrides both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sandboy.audit.errors import UsageError

WORLD = "ownaudit:adapter@0.2.0"
WIT_WORLD_NAME = "adapter"


@dataclass(frozen=True)
class AdapterSpec:
    name: str
    version: str
    summary: str
    tools: tuple[str, ...]  # `--tool` values served by this adapter


ADAPTERS: dict[str, AdapterSpec] = {
    spec.name: spec
    for spec in (
        AdapterSpec("infer", "1.0.0", "Infer and Infer# report.json", ("infer", "infersharp")),
        AdapterSpec(
            "passthrough",
            "1.0.0",
            "SARIF 2.1.x re-emitted canonical; SARIF 1.0.0 (Roslyn /errorlog) upgraded",
            ("passthrough", "sarif", "roslyn", "codeql"),
        ),
        AdapterSpec("bandit", "1.0.0", "Bandit JSON (-f json)", ("bandit",)),
        AdapterSpec("semgrep", "1.0.0", "Semgrep JSON (--json)", ("semgrep",)),
    )
}

TOOLS: dict[str, str] = {tool: spec.name for spec in ADAPTERS.values() for tool in spec.tools}


def adapter_for_tool(tool: str) -> AdapterSpec:
    try:
        return ADAPTERS[TOOLS[tool]]
    except KeyError:
        known = ", ".join(sorted(TOOLS))
        raise UsageError(
            f"unknown tool {tool!r}; known tools: {known} (or run your own component with --component PATH)"
        ) from None


def adapters_root() -> Path:
    """The directory holding `wit/adapter.wit`, `common/` and one directory per adapter."""
    override = os.environ.get("SANDBOY_ADAPTERS_DIR")
    if override:
        candidates = [Path(override)]
    else:
        here = Path(__file__).resolve()
        candidates = [here.parent / "guest_sources", here.parents[3] / "adapters"]  # wheel, checkout
    for root in candidates:
        if (root / "wit" / "adapter.wit").is_file():
            return root
    raise UsageError(
        f"adapter sources not found (no wit/adapter.wit in {' or '.join(map(str, candidates))}): "
        "this install is incomplete; reinstall Sandboy (pip install --force-reinstall sandboy), "
        "or set SANDBOY_ADAPTERS_DIR to a source checkout's adapters/ directory"
    )


def source_files(spec: AdapterSpec) -> list[Path]:
    """Every file that goes into the component: the WIT, shared helpers, the adapter."""
    root = adapters_root()
    adapter_dir = root / spec.name
    if not (adapter_dir / "app.py").is_file():
        raise UsageError(f"adapter {spec.name!r}: {adapter_dir / 'app.py'} is missing")
    files = [root / "wit" / "adapter.wit"]
    files += sorted((root / "common").glob("*.py"))
    files += sorted(adapter_dir.glob("*.py"))
    return files
