"""Selectors: candidates + query + budget -> :class:`Selection` (in process, or the protocol)."""

from langchain_pacms.embeddings.profile import DENSE_SIMILARITY_THRESHOLD, EmbedderProfile
from langchain_pacms.selector.caches import (
    DEFAULT_MEMORY_CEILING,
    EMBEDDING_SHARE,
    SPARSE_ROWS_SHARE,
)
from langchain_pacms.selector.context import ContextSelector
from langchain_pacms.selector.fallback import recency_selection
from langchain_pacms.selector.inputs import relevant_mask
from langchain_pacms.selector.protocol import Selector
from langchain_pacms.selector.selection import (
    Candidate,
    CandidateInput,
    EmbeddingError,
    Selection,
    Verdict,
)

__all__ = [
    "DEFAULT_MEMORY_CEILING",
    "DENSE_SIMILARITY_THRESHOLD",
    "EMBEDDING_SHARE",
    "SPARSE_ROWS_SHARE",
    "Candidate",
    "CandidateInput",
    "ContextSelector",
    "EmbedderProfile",
    "EmbeddingError",
    "Selection",
    "Selector",
    "Verdict",
    "recency_selection",
    "relevant_mask",
]
