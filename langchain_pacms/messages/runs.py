"""Which run a call belongs to: the run's config in context, and the thread of its messages.

Fold stubs that the selection sends and payloads that the lifecycle folds are written under
the same thread (:func:`thread_of`), so the ``recover_context`` tool finds them both.

Example:
    >>> thread_of({"configurable": {"thread_id": "t-1"}}), run_config() is None
    ('t-1', True)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config

__all__ = ["DEFAULT_THREAD", "run_config", "run_thread", "thread_of"]

DEFAULT_THREAD = "default"
"""Thread id used when a run has neither a ``configurable.thread_id`` nor messages."""


def run_config() -> Any:
    """The config of the run in context (``None`` outside a LangGraph run).

    Example:
        >>> run_config() is None
        True
    """
    try:
        return get_config()
    except Exception:
        return None


def run_thread(messages: Sequence[Any]) -> str:
    """The thread of a run that has no thread id: named after its first message.

    A LangGraph ``messages`` channel gives every message a unique id, so each conversation run
    without a checkpointer gets a namespace of its own instead of one shared default (a message
    without an id is named by a hash of its type and content).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> run_thread([HumanMessage("hi", id="m-1")]), run_thread([HumanMessage("hi")])[:8]
        ('run:m-1', 'run:sha2')
    """
    if not messages:
        raise ValueError("a run with no messages has no thread")
    first = messages[0]
    if getattr(first, "id", None):
        return f"run:{first.id}"
    text = f"{getattr(first, 'type', '')}\n{getattr(first, 'content', first)!s}"
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return "run:sha256:" + digest[:16]


def thread_of(config: RunnableConfig | None, messages: Sequence[BaseMessage] = ()) -> str:
    """The run's ``configurable.thread_id`` as a string, else the run's own thread.

    A run without a thread id (no checkpointer) gets a thread named after its first message
    (:func:`run_thread`), so two such conversations never share sidecars;
    :data:`DEFAULT_THREAD` only when there are no messages either.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> thread_of({"configurable": {"thread_id": 7}}), thread_of(None)
        ('7', 'default')
        >>> thread_of({}, [HumanMessage("hi", id="m-1")])
        'run:m-1'
    """
    found = ((config or {}).get("configurable") or {}).get("thread_id")
    if found is not None:
        return str(found)
    return run_thread(messages) if messages else DEFAULT_THREAD
