"""Selectors: candidates + query + budget -> :class:`Selection`.

This is the one place where text becomes vectors (through a cached LangChain ``Embeddings``) and
token counts (through one :class:`~langchain_pacms.tokens.TokenCounter`); the numeric work is
done by :mod:`langchain_pacms.core`. Every strategy sees the same vectors and the same counts, so
differences between strategies are policy, not plumbing.

* :mod:`.selection`: the data a selection takes and gives (:class:`Candidate`,
  :class:`Selection`, :class:`Verdict`) and :class:`EmbeddingError`.
* :mod:`.protocol`: :class:`Selector`, what the integrations call on a selector.
* :mod:`.context`: :class:`ContextSelector`, the in-process selector.
* :mod:`.inputs`: candidates normalised, token costs and the budget, for every selector.
* :mod:`.options`: a selector's strategy defaults merged with a call's options.
* :mod:`.pool`: pools embedded under a deadline, checked and reused from the last pool.
* :mod:`.fallback`: the recency selection a selector falls back to, one warning per outage.
* :mod:`.caches`: how a selector spends its memory ceiling.

Example:
    >>> from langchain_pacms import ContextSelector
    >>> selector = ContextSelector()              # offline defaults
    >>> sel = selector.select(
    ...     ["The staging DB listens on port 6543.", "Lunch was great.", "CI is flaky again."],
    ...     query="Which port does the staging DB use?",
    ...     budget=12,
    ... )
    >>> sel.kept_ids
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
