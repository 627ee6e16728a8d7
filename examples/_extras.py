"""What every example does when an optional dependency is missing: name the extra to install."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def needs_extra(extra: str) -> Iterator[None]:
    """Turn an ImportError inside the block into an exit that prints the one install line."""
    try:
        yield
    except ImportError as err:
        raise SystemExit(
            f'{err}: this example needs the "{extra}" extra:\n'
            f'pip install "langchain-pacms[{extra}]"'
        ) from err
