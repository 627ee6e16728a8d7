"""langchain-pacms: budgeted, query-aware context selection for LangChain and LangGraph agents.

Example:
    >>> from langchain_pacms import ContextSelector
    >>> selection = ContextSelector().select(["a", "b"], "a", budget_ratio=0.5)
    >>> selection.kept_ids
    ('0',)
"""

from importlib import metadata

from langchain_pacms.core import available_strategies, register_strategy
from langchain_pacms.embeddings import CachedEmbeddings, HashedTfidfEmbeddings
from langchain_pacms.selector import Candidate, ContextSelector, Selection, Verdict
from langchain_pacms.tokens import TokenCounter, get_encoding

try:
    __version__ = metadata.version("langchain-pacms")
except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "CachedEmbeddings",
    "Candidate",
    "ContextSelector",
    "HashedTfidfEmbeddings",
    "Selection",
    "TokenCounter",
    "Verdict",
    "__version__",
    "available_strategies",
    "get_encoding",
    "register_strategy",
]
