"""The base class of every exception the package defines.

Each error also derives from the built-in exception a caller would catch without knowing the
package (``ValueError`` for a bad input or answer, ``KeyError`` for a missing payload), so
``except PACMSError`` catches all of them and existing ``except ValueError`` blocks still work.

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
