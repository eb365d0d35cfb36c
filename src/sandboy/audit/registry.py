"""Adapter names -> guest sources, and where those sources live.

Guest sources are not part of the importable package (they run inside a
component, not in the host), they live beside it in the repository's
`adapters/` directory. The install is editable, so they are found relative
to this file; SANDBOY_ADAPTERS_DIR overrides that (e.g. for a wheel install).
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
    root = Path(override) if override else Path(__file__).resolve().parents[3] / "adapters"
    if not (root / "wit" / "adapter.wit").is_file():
        raise UsageError(
            f"adapter sources not found at {root} (no wit/adapter.wit): install Sandboy from a "
            "source checkout (pip install -e .) or set SANDBOY_ADAPTERS_DIR to its adapters/ directory"
        )
    return root


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
