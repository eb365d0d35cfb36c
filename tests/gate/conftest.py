"""Fixtures for the gate tests (helpers live in gatekit.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gatekit import FAKE_KEY


@pytest.fixture
def fake_home(tmp_path_factory) -> Path:
    """A throwaway HOME with a planted fake SSH key (never the real ~/.ssh)."""
    home = tmp_path_factory.mktemp("home")
    (home / ".ssh").mkdir(mode=0o700)
    key = home / ".ssh" / "id_ed25519"
    key.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{FAKE_KEY}\n-----END OPENSSH PRIVATE KEY-----\n")
    key.chmod(0o600)
    return home
