"""Shared by the unit and the integration tests.

The integration tests import their helpers from ``integration_tests/pacms_fakes.py`` (pytest puts
each test file's folder on ``sys.path``). This puts that folder on the path for the unit tests
too, so both use one copy of helpers such as ``assert_provider_valid``. Fixtures shared by both
are defined here.
"""

from __future__ import annotations

import concurrent.futures
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

_HELPERS = str(Path(__file__).resolve().parent / "integration_tests")
if _HELPERS not in sys.path:
    sys.path.insert(0, _HELPERS)


@pytest.fixture
def waiting(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event set as soon as any thread calls ``concurrent.futures.wait``."""
    event = threading.Event()
    real_wait = concurrent.futures.wait

    def noting_wait(*args: Any, **kwargs: Any) -> Any:
        event.set()
        return real_wait(*args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "wait", noting_wait)
    return event
