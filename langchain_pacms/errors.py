"""The base class of every exception the package defines.

Each error also derives from the matching built-in exception (``ValueError``, ``KeyError``, ...).

Example:
    >>> from langchain_pacms.errors import PACMSError
    >>> from langchain_pacms.lifecycle import SidecarNotFoundError
    >>> issubclass(SidecarNotFoundError, PACMSError)
    True
"""

from __future__ import annotations

__all__ = ["PACMSError", "missing_extra"]


class PACMSError(Exception):
    """Base class of the errors raised by ``langchain_pacms``."""


def missing_extra(user: str, needs: str, extra: str) -> ImportError:
    """The error for ``user`` when the optional extra it ``needs`` is not installed.

    Args:
        user: What cannot be imported without the extra.
        needs: What it needs, as a user reads it.
        extra: The extra to install.

    Returns:
        The ``ImportError`` to raise (from the original one), ending with the install line.

    Example:
        >>> print(missing_extra("Store", "redis", "redis"))
        Store needs redis. Install it with: pip install "langchain-pacms[redis]"
    """
    return ImportError(
        f'{user} needs {needs}. Install it with: pip install "langchain-pacms[{extra}]"'
    )
