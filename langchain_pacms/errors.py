"""The base class of the package's exceptions, and the error for a missing optional extra."""

from __future__ import annotations

__all__ = ["PACMSError", "missing_extra"]


class PACMSError(Exception):
    """Base class of the errors raised by ``langchain_pacms``.

    Each error also derives from the matching built-in exception (``ValueError``, ...).

    Example:
        >>> from langchain_pacms.lifecycle import SidecarNotFoundError
        >>> issubclass(SidecarNotFoundError, PACMSError)
        True
    """


def missing_extra(user: str, needs: str, extra: str) -> ImportError:
    """The ``ImportError`` for ``user`` when the optional ``extra`` it ``needs`` is missing.

    Example:
        >>> print(missing_extra("Store", "redis", "redis"))
        Store needs redis. Install it with: pip install "langchain-pacms[redis]"
    """
    return ImportError(
        f'{user} needs {needs}. Install it with: pip install "langchain-pacms[{extra}]"'
    )
