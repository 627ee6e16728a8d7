"""langchain-pacms: budgeted, query-aware context selection for LangChain and LangGraph agents."""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import TYPE_CHECKING, Any

from langchain_pacms.budget import Budget
from langchain_pacms.core import Pick, Problem, Strategy, available_strategies, register_strategy
from langchain_pacms.embeddings import CachedEmbeddings, HashedTfidfEmbeddings
from langchain_pacms.errors import PACMSError
from langchain_pacms.selector import (
    Candidate,
    ContextSelector,
    EmbedderProfile,
    EmbeddingError,
    Selection,
    Selector,
    Verdict,
)
from langchain_pacms.tokens import TokenCounter, get_encoding

if TYPE_CHECKING:
    from langchain_pacms.integrations import (
        MemoryOptions,
        Pacms,
        PACMSCompressor,
        PACMSMiddleware,
        SelectionConfig,
        StrategyOptions,
        ToolLoopOptions,
        create_pacms_hook,
    )
    from langchain_pacms.remote import RemoteSelector

try:
    __version__ = metadata.version("langchain-pacms")
except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "Budget",
    "CachedEmbeddings",
    "Candidate",
    "ContextSelector",
    "EmbedderProfile",
    "EmbeddingError",
    "HashedTfidfEmbeddings",
    "MemoryOptions",
    "PACMSCompressor",
    "PACMSError",
    "PACMSMiddleware",
    "Pacms",
    "Pick",
    "Problem",
    "RemoteSelector",
    "Selection",
    "SelectionConfig",
    "Selector",
    "Strategy",
    "StrategyOptions",
    "TokenCounter",
    "ToolLoopOptions",
    "Verdict",
    "__version__",
    "available_strategies",
    "create_pacms_hook",
    "get_encoding",
    "register_strategy",
]

# Integrations load on first access: the middleware's extra is needed only by its users.
_LAZY = {
    "PACMSCompressor": "langchain_pacms.integrations.compressor",
    "PACMSMiddleware": "langchain_pacms.integrations.middleware",
    "create_pacms_hook": "langchain_pacms.integrations.graph",
    "MemoryOptions": "langchain_pacms.integrations.options",
    "Pacms": "langchain_pacms.integrations.options",
    "SelectionConfig": "langchain_pacms.integrations.config",
    "StrategyOptions": "langchain_pacms.integrations.options",
    "ToolLoopOptions": "langchain_pacms.integrations.options",
    "RemoteSelector": "langchain_pacms.remote",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
