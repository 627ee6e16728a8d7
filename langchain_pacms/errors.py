"""The base class of every exception the package defines.

Each error also derives from the matching built-in exception (``ValueError``, ``KeyError``, ...).

Example:
    >>> from langchain_pacms.errors import PACMSError
    >>> from langchain_pacms.lifecycle import SidecarNotFoundError
    >>> issubclass(SidecarNotFoundError, PACMSError)
    True
"""

from __future__ import annotations

__all__ = ["PACMSError"]


class PACMSError(Exception):
    """Base class of the errors raised by ``langchain_pacms``."""
