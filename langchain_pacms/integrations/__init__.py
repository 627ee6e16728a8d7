"""LangChain and LangGraph integrations: a pre-model hook, an agent middleware, a compressor.

``create_pacms_hook`` (LangGraph) and the message mapping load with the package's core
dependencies. ``PACMSMiddleware`` needs LangChain v1 (``pip install "langchain-pacms[middleware]"``)
and ``PACMSCompressor`` is a document compressor; both are imported on first access.

Example:
    >>> from langchain_pacms.integrations import create_pacms_hook
    >>> hook = create_pacms_hook(budget_tokens=2000)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_pacms.integrations.config import Budget, SelectionConfig, resolve_config
from langchain_pacms.integrations.graph import PACMSHook, create_pacms_hook
from langchain_pacms.integrations.messages import (
    Span,
    apply_selection,
    build_context_message,
    messages_to_candidates,
    query_from_messages,
)
from langchain_pacms.integrations.report import EVENT_NAME, SelectionLog
from langchain_pacms.integrations.runner import SelectionRunner

if TYPE_CHECKING:
    from langchain_pacms.integrations.compressor import PACMSCompressor
    from langchain_pacms.integrations.middleware import PACMSMiddleware

__all__ = [
    "EVENT_NAME",
    "Budget",
    "PACMSCompressor",
    "PACMSHook",
    "PACMSMiddleware",
    "SelectionConfig",
    "SelectionLog",
    "SelectionRunner",
    "Span",
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
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
