"""Which run a call belongs to: the run's config in context, and the thread of its messages."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config

from langchain_pacms.messages.selection import CONTEXT_MESSAGE_ID

__all__ = [
    "DEFAULT_THREAD",
    "RUN_KEY",
    "keep_run",
    "run_config",
    "run_head",
    "run_thread",
    "state_messages",
    "thread_id_of",
    "thread_of",
]

DEFAULT_THREAD = "default"
"""Thread id used when a run has neither a ``configurable.thread_id`` nor messages."""
RUN_KEY = "pacms_run"
"""``additional_kwargs`` key naming the run of a history whose first message was left out."""


def run_config() -> Any:
    """The config of the run in context (``None`` outside a LangGraph run)."""
    try:
        return get_config()
    except Exception:
        return None


def run_thread(messages: Sequence[Any]) -> str:
    """The thread of a run without a thread id: the name its messages carry, else its own.

    Its own name is its first message's id and the first AI message's after it (a prompt or a
    task kept as one message object is shared by every run that starts with it, as LangGraph
    writes the id into it; the first reply is the run's own), or its first message's id alone
    before any reply; a message without an id counts by a hash of its text. A commit leaves
    the name (:data:`RUN_KEY`) on the messages it keeps, so a caller that drops or replaces the
    first message keeps the run's sidecars.

    The context message a hook writes into the state (id :data:`CONTEXT_MESSAGE_ID`, the same
    in every run) does not count: the message after it names the thread.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
        >>> task = HumanMessage("fix it", id="h1")
        >>> run_thread([task]), run_thread([SystemMessage("memories", id="pacms-context"), task])
        ('run:h1', 'run:h1')
        >>> run_thread([task, AIMessage("on it", id="a1")])
        'run:h1+a1'
    """
    if not messages:
        raise ValueError("a run with no messages has no thread")
    for message in messages:
        marked = (getattr(message, "additional_kwargs", None) or {}).get(RUN_KEY)
        if isinstance(marked, str) and marked:
            return marked
    first = run_head(messages)
    reply = next((m for m in messages if isinstance(m, AIMessage) and m is not first), None)
    return "run:" + "+".join(_named(m) for m in (first, reply) if m is not None)


def _named(message: Any) -> str:
    """A message's id, else ``sha256:`` and a hash of its type and text."""
    if getattr(message, "id", None):
        return str(message.id)
    text = f"{getattr(message, 'type', '')}\n{getattr(message, 'content', message)!s}"
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def run_head(messages: Sequence[Any]) -> Any:
    """The message a run is named after: the first that is not the selection's context message."""
    return next((m for m in messages if getattr(m, "id", None) != CONTEXT_MESSAGE_ID), messages[0])


def keep_run(before: Sequence[BaseMessage], after: list[BaseMessage]) -> list[BaseMessage]:
    """``after`` (a history replacing ``before``) still named after ``before``'s run.

    A run without a thread id keeps its sidecars under :func:`run_thread` of its history; when
    the new history starts with another message, that message carries the run's name
    (:data:`RUN_KEY`), so the payloads folded before stay recoverable.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> before = [HumanMessage("task", id="h1"), HumanMessage("next", id="h2")]
        >>> run_thread(keep_run(before, before[1:])), run_thread(before[1:])
        ('run:h1', 'run:h2')
    """
    if not before or not after:
        return after
    run = run_thread(before)
    if run_thread(after) == run:
        return after
    first = run_head(after)
    marked = first.model_copy(
        update={"additional_kwargs": {**first.additional_kwargs, RUN_KEY: run}}
    )
    return [marked if m is first else m for m in after]


def state_messages(state: Any, key: str = "messages") -> Sequence[BaseMessage]:
    """A graph state's messages (``key``, an item or attribute) when all are messages, else ``[]``.

    What a tool reading ``InjectedState`` sees of the history: the thread of a run without a
    thread id is named after its first message and reply (:func:`run_thread`).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> state = {"messages": [HumanMessage("hi")]}
        >>> [m.content for m in state_messages(state)], state_messages(None)
        (['hi'], [])
    """
    messages = state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)
    if not isinstance(messages, Sequence) or not all(isinstance(m, BaseMessage) for m in messages):
        return []
    return messages


def thread_id_of(config: RunnableConfig | None) -> Any:
    """The run's ``configurable.thread_id`` (``None`` without one)."""
    return ((config or {}).get("configurable") or {}).get("thread_id")


def thread_of(config: RunnableConfig | None, messages: Sequence[BaseMessage] = ()) -> str:
    """The run's ``thread_id``, else :func:`run_thread` of ``messages``, else the default."""
    found = thread_id_of(config)
    if found is not None:
        return str(found)
    return run_thread(messages) if messages else DEFAULT_THREAD
