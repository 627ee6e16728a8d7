"""LangChain and LangGraph integrations: a pre-model hook, an agent middleware, a compressor.

``PACMSMiddleware`` (needs ``langchain-pacms[middleware]``) and ``PACMSCompressor`` load lazily.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from langchain_pacms.budget import Budget
from langchain_pacms.integrations.config import SelectionConfig, resolve_config
from langchain_pacms.integrations.graph import PACMSHook, create_pacms_hook
from langchain_pacms.integrations.options import (
    MemoryOptions,
    Pacms,
    StrategyOptions,
    ToolLoopOptions,
)
from langchain_pacms.integrations.runner import SelectionRunner
from langchain_pacms.messages import (
    EVENT_NAME,
    SelectionLog,
    Span,
    apply_selection,
    build_context_message,
    messages_to_candidates,
    query_from_messages,
)

if TYPE_CHECKING:
    from langchain_pacms.integrations.compressor import PACMSCompressor
    from langchain_pacms.integrations.middleware import PACMSMiddleware

__all__ = [
    "EVENT_NAME",
    "Budget",
    "MemoryOptions",
    "PACMSCompressor",
    "PACMSHook",
    "PACMSMiddleware",
    "Pacms",
    "SelectionConfig",
    "SelectionLog",
    "SelectionRunner",
    "Span",
    "StrategyOptions",
    "ToolLoopOptions",
    "apply_selection",
    "build_context_message",
    "create_pacms_hook",
    "messages_to_candidates",
    "query_from_messages",
    "resolve_config",
]

_LAZY = {
    "PACMSCompressor": "langchain_pacms.integrations.compressor",
    "PACMSMiddleware": "langchain_pacms.integrations.middleware",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
