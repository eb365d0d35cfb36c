"""Shared fixtures for the audit tests: real samples, real components, one build each.

Builds (componentize-py, ~10 s to minutes) and native compiles (~10 s) are cached in the
operator's Sandboy cache (`components/`, `cwasm/`), keyed on source hash and component hash,
which the suite's private cache directory links to (tests/conftest.py): only the first run on a
machine pays for them, whichever checkout runs it; every test in a session shares one loaded
component per adapter.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Real tool output, with its sources and licences in tests/data/samples/README.md.
SAMPLES = REPO / "tests" / "data" / "samples"
GUESTS = Path(__file__).resolve().parent / "guests"


@pytest.fixture(scope="session")
def samples() -> Path:
    if not (SAMPLES / "README.md").is_file():
        pytest.fail(f"real samples not found at {SAMPLES}: they are part of the repository; is the checkout complete?")
    return SAMPLES


@pytest.fixture(scope="session")
def built() -> dict[str, Path]:
    """Every built-in adapter, built and compiled once per session."""
    from sandboy.audit import host
    from sandboy.audit.build import build
    from sandboy.audit.registry import ADAPTERS

    paths = {}
    for name, spec in ADAPTERS.items():
        paths[name] = build(spec)
        host.load(paths[name])
    return paths


@pytest.fixture(scope="session")
def hostile() -> Path:
    """The hostile guest (tests/audit/guests/hostile/app.py) as a real zero-import component."""
    from sandboy.audit import host
    from sandboy.audit.build import build_sources
    from sandboy.audit.registry import adapters_root

    root = adapters_root()
    files = [root / "wit" / "adapter.wit", *sorted((root / "common").glob("sandboy_guest.py")), GUESTS / "hostile" / "app.py"]
    path = build_sources("test-hostile", files)
    host.load(path)
    return path


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: builds/installs a wheel or runs real analysers (tens of seconds)")
