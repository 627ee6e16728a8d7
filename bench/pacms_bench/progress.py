"""The evaluation harnesses' progress bar: tqdm on a terminal, nothing elsewhere."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress_bar"]


def progress_bar(total: int, enabled: bool, *, desc: str, unit: str) -> Any:
    """A tqdm bar on stderr, or ``None`` when disabled, piped, or tqdm is not installed.

    Args:
        total: Number of steps.
        enabled: False to show nothing (``--quiet``).
        desc: The bar's label.
        unit: What one step is.

    Example:
        >>> progress_bar(10, False, desc="recall", unit="q") is None
        True
    """
    if not enabled or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency of pacms-bench
        return None
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True)
