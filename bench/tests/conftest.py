"""Shared by the evaluation's unit and integration tests.

The library's test helpers (``tests/integration_tests/``: the fake Ollama server, provider-shape
checks) are used here too, from their one copy: this puts that folder on ``sys.path``, as
``tests/conftest.py`` does for the library's unit tests. The library's tests never import the
evaluation.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HELPERS = str(Path(__file__).resolve().parents[2] / "tests" / "integration_tests")
if _HELPERS not in sys.path:
    sys.path.insert(0, _HELPERS)
