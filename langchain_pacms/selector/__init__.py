"""Selectors: candidates + query + budget -> :class:`Selection`.

Text becomes vectors (a cached LangChain ``Embeddings``) and token counts here; the numeric
work is :mod:`langchain_pacms.core`'s. :class:`ContextSelector` selects in process;
:class:`Selector` is the protocol the integrations call.

Example:
    >>> from langchain_pacms import ContextSelector
    >>> pool = ["The staging DB listens on port 6543.", "Lunch was great.", "CI is flaky."]
    >>> ContextSelector().select(pool, "Which port does the staging DB use?", 12).kept_ids
    ('0',)
"""

from langchain_pacms.embeddings.profile import DENSE_SIMILARITY_THRESHOLD, EmbedderProfile
from langchain_pacms.selector.caches import (
    DEFAULT_MEMORY_CEILING,
    EMBEDDING_SHARE,
    SPARSE_ROWS_SHARE,
)
from langchain_pacms.selector.context import ContextSelector
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
    "relevant_mask",
]
