"""How a selector spends its memory ceiling: the embedding cache, sparse rows, the token memo."""

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
"""Default ``memory_ceiling_bytes`` of a selector (256 MiB)."""

EMBEDDING_SHARE = 0.75
"""Share of ``memory_ceiling_bytes`` for the embedding cache."""

SPARSE_ROWS_SHARE = 0.125
"""Share of ``memory_ceiling_bytes`` for the built-in embedder's sparse rows, if built here."""


def cache_ceiling(value: object) -> int:
    """``value`` as a ``memory_ceiling_bytes`` (a positive int), else ``ValueError``."""
    ceiling = as_int(value)
    if ceiling is None or ceiling <= 0:
        raise ValueError(f"memory_ceiling_bytes must be a positive int, got {value!r}")
    return ceiling


def token_memo_bytes(ceiling: int = DEFAULT_MEMORY_CEILING, *, sparse_rows: bool = True) -> int:
    """The bytes of a memory ceiling left for the token memo (less with ``sparse_rows``)."""
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
    """A selector's ``(model, cache, counter)``; components passed in keep their own caps."""
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
