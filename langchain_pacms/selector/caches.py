"""How a selector spends its memory ceiling: the embedding cache, sparse rows, the token memo.

A :class:`~langchain_pacms.selector.ContextSelector` keeps its vectors and token counts for its
whole life, within ``memory_ceiling_bytes``: a share :data:`EMBEDDING_SHARE` for the in-memory
vectors, a share :data:`SPARSE_ROWS_SHARE` for the sparse rows of the built-in embedder when the
selector builds it, and the rest for the token memo (:func:`token_memo_bytes`).

Example:
    >>> model, cache, counter = selector_caches(None, ceiling=2**20)
    >>> type(model).__name__, cache.embeddings is model, counter.max_bytes
    ('HashedTfidfEmbeddings', True, 131072)
"""

from __future__ import annotations

from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.stores import ByteStore

from langchain_pacms.embeddings import CachedEmbeddings, HashedTfidfEmbeddings
from langchain_pacms.selector.inputs import as_int
from langchain_pacms.tokens import TokenCounter, resolve_token_counter

__all__ = [
    "DEFAULT_MEMORY_CEILING",
    "EMBEDDING_SHARE",
    "SPARSE_ROWS_SHARE",
    "cache_ceiling",
    "selector_caches",
    "token_memo_bytes",
]

DEFAULT_MEMORY_CEILING = 256 * 2**20
"""Default ``memory_ceiling_bytes`` of a selector: 256 MiB for its vectors and token counts."""

EMBEDDING_SHARE = 0.75
"""Share of ``memory_ceiling_bytes`` for the embedding cache; the token memo gets the rest."""

SPARSE_ROWS_SHARE = 0.125
"""Share of ``memory_ceiling_bytes`` for the sparse rows of the built-in embedder a selector
builds itself (taken from the token memo's share)."""


def cache_ceiling(value: object) -> int:
    """``value`` as a ``memory_ceiling_bytes``: a positive int (Python's or numpy's).

    Raises:
        ValueError: For anything else.

    Example:
        >>> cache_ceiling(0)
        Traceback (most recent call last):
        ...
        ValueError: memory_ceiling_bytes must be a positive int, got 0
    """
    ceiling = as_int(value)
    if ceiling is None or ceiling <= 0:
        raise ValueError(f"memory_ceiling_bytes must be a positive int, got {value!r}")
    return ceiling


def token_memo_bytes(ceiling: int = DEFAULT_MEMORY_CEILING, *, sparse_rows: bool = True) -> int:
    """The bytes of a memory ceiling left for the token memo.

    Args:
        ceiling: The selector's ``memory_ceiling_bytes``.
        sparse_rows: Whether the selector builds the built-in embedder, whose sparse rows take
            :data:`SPARSE_ROWS_SHARE`.

    Example:
        >>> token_memo_bytes() // 2**20, token_memo_bytes(sparse_rows=False) // 2**20
        (32, 64)
    """
    vector_bytes = max(1, int(ceiling * EMBEDDING_SHARE))
    row_bytes = int(ceiling * SPARSE_ROWS_SHARE) if sparse_rows else 0
    return max(1, ceiling - vector_bytes - row_bytes)


def selector_caches(
    embeddings: Embeddings | None,
    *,
    ceiling: int = DEFAULT_MEMORY_CEILING,
    cache_store: ByteStore | None = None,
    token_counter: TokenCounter | Any = None,
) -> tuple[Embeddings, CachedEmbeddings, TokenCounter]:
    """The model, its embedding cache and the token counter of a selector.

    The caches built here share ``ceiling``; an embedder, ``CachedEmbeddings`` or
    ``TokenCounter`` passed in keeps its own caps.

    Args:
        embeddings: The model (``None``: the built-in embedder, with its sparse rows' share).
        ceiling: The selector's ``memory_ceiling_bytes`` (see :func:`cache_ceiling`).
        cache_store: A ``ByteStore`` that backs the embedding cache.
        token_counter: A counter, a callable, an encoding name, or ``None`` for the default.

    Returns:
        ``(model, cache, counter)``: ``cache`` is ``model`` when it is a ``CachedEmbeddings``
        and no store is given.
    """
    row_bytes = 0 if embeddings is not None else int(ceiling * SPARSE_ROWS_SHARE)
    model = embeddings if embeddings is not None else HashedTfidfEmbeddings(rows_bytes=row_bytes)
    cache = (
        model
        if isinstance(model, CachedEmbeddings) and cache_store is None
        else CachedEmbeddings(
            model, store=cache_store, max_bytes=max(1, int(ceiling * EMBEDDING_SHARE))
        )
    )
    counter = resolve_token_counter(
        token_counter, max_bytes=token_memo_bytes(ceiling, sparse_rows=embeddings is None)
    )
    return model, cache, counter
