"""How many threads BLAS may use, set from Python (OpenBLAS's own setter, or ``threadpoolctl``).

:class:`~langchain_pacms.ContextSelector` runs its small products under :func:`blas_threads`
(measured: docs/benchmarks.md). The limit is process-wide: concurrent and nested blocks share
the first block's limit, and the last one out restores the previous setting.

Example:
    >>> with blas_threads(1):
    ...     inside = blas_setup()
    >>> inside is None or inside.endswith("x1")
    True
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

from threadpoolctl import ThreadpoolController

__all__ = ["blas_setup", "blas_threads", "set_blas_threads"]

_SET_NAMES = (
    "openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
)


@functools.lru_cache(maxsize=1)
def _blas() -> tuple[tuple[tuple[Any, Any], ...], str | None]:
    """``(set, get)`` thread functions of the loaded BLAS libraries and OpenBLAS's kernel, once."""
    handles: list[tuple[Any, Any]] = []
    kernel: str | None = None
    for lib in ThreadpoolController().select(user_api="blas").lib_controllers:
        if lib.internal_api == "openblas":
            kernel = kernel or getattr(lib, "architecture", None)
            with contextlib.suppress(OSError):
                handles.extend(_setter_pair(ctypes.CDLL(lib.filepath)))
        else:  # MKL, BLIS, FlexiBLAS: their controllers set the library directly
            handles.append((lib.set_num_threads, lib.get_num_threads))
    return tuple(handles), kernel


def _setter_pair(lib: Any) -> list[tuple[Any, Any]]:
    for set_name in _SET_NAMES:
        setter = getattr(lib, set_name, None)
        getter = getattr(lib, set_name.replace("_set_", "_get_"), None)
        if setter is not None and getter is not None:
            return [(setter, getter)]
    return []


def blas_setup() -> str | None:
    """The OpenBLAS kernel and thread count in effect, e.g. ``"Haswell x1"``.

    None without a BLAS whose threads can be set; ``"? x1"`` when it names no kernel (not OpenBLAS).

    Example:
        >>> blas_setup() is None or " x" in blas_setup()
        True
    """
    handles, kernel = _blas()
    if not handles:
        return None
    return f"{kernel or '?'} x{int(handles[0][1]())}"


def _limit(threads: int) -> Callable[[], None]:
    """Set BLAS to ``threads`` threads; return the call that restores the previous setting."""
    handles = _blas()[0]
    before = [int(get()) for _, get in handles]
    for setter, _ in handles:
        setter(threads)

    def restore() -> None:
        for (setter, _), n in zip(handles, before):
            setter(n)

    return restore


def set_blas_threads(threads: int) -> None:
    """Set BLAS to ``threads`` threads for the rest of the process (a worker's setting).

    Example:
        >>> set_blas_threads(1)  # best effort: a no-op without a BLAS it can reach
    """
    _check(threads)
    _limit(threads)


def _check(threads: Any) -> None:
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"blas_threads must be an int >= 1 or None, got {threads!r}")


_lock = threading.Lock()
_depth = 0
_restore: Callable[[], None] | None = None


@contextlib.contextmanager
def blas_threads(limit: int | None) -> Iterator[None]:
    """Limit BLAS threads inside the block (best effort; no-op when ``limit`` is None).

    The previous thread counts are restored when the last concurrent or nested block ends.

    Args:
        limit: Most BLAS threads, or ``None`` to leave BLAS as it is.

    Raises:
        ValueError: If ``limit`` is not ``None`` or an int >= 1.
    """
    global _depth, _restore
    if limit is None:
        yield
        return
    _check(limit)
    with _lock:
        if _depth == 0:
            _restore = _limit(limit)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _restore is not None:
                _restore()
                _restore = None
