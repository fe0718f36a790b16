"""The alerts' tests' receiver: a local HTTP server playing every sink (tests/harness/receiver.py)."""

from __future__ import annotations

import pytest

from tests.harness.receiver import Receiver


@pytest.fixture
def receiver():
    r = Receiver()
    try:
        yield r
    finally:
        r.close()
