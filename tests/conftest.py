"""Shared by the unit and the integration tests.

The integration tests import their helpers from ``integration_tests/pacms_fakes.py`` (pytest puts
each test file's folder on ``sys.path``). This puts that folder on the path for the unit tests
too, so both use one copy of helpers such as ``assert_provider_valid``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HELPERS = str(Path(__file__).resolve().parent / "integration_tests")
if _HELPERS not in sys.path:
    sys.path.insert(0, _HELPERS)
