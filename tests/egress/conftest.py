import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from egresskit import Origin  # noqa: E402


@pytest.fixture(scope="module")
def origin():
    """A loopback HTTP origin (egresskit.Origin), one per test module."""
    server = Origin()
    yield server
    server.close()
