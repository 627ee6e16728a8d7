"""A LangGraph node that runs the lifecycle harness on a graph's ``messages`` channel."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.store.base import BaseStore

from langchain_pacms._steps import Call, Steps, adrive_calls, drive_calls
from langchain_pacms.lifecycle.harness import LifecycleHarness
from langchain_pacms.lifecycle.plan import Planner
from langchain_pacms.lifecycle.tuning import CommitRule, Masking
from langchain_pacms.messages.runs import thread_of

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["IDS_KEY", "HarnessOptions", "build_harness", "create_lifecycle_node", "known_ids_of"]

IDS_KEY = "pacms_lifecycle_ids"
"""State key holding ``message id -> object id`` (so ids stay stable after prunes)."""


def known_ids_of(state: Any) -> Mapping[str, str] | None:
    """A graph state's ``message id -> object id`` map (:data:`IDS_KEY`), ``None`` without one.

    What names objects of that state (fold stubs, ``recover_context``) reads it: ids outlive prunes.

    Example:
        >>> known_ids_of({IDS_KEY: {"t1": "function:tool:2"}}), known_ids_of({"messages": []})
        ({'t1': 'function:tool:2'}, None)
    """
    known = state.get(IDS_KEY) if isinstance(state, Mapping) else getattr(state, IDS_KEY, None)
    return known if isinstance(known, Mapping) else None


class HarnessOptions(TypedDict, total=False):
    """Keyword options that build a :class:`~langchain_pacms.lifecycle.LifecycleHarness`.

    Attributes:
        planner: Any :class:`~langchain_pacms.lifecycle.plan.Planner` (default: the offline
            :class:`~langchain_pacms.lifecycle.heuristic.HeuristicPlanner`).
        store: The sidecar store (default: a
            :class:`~langchain_pacms.lifecycle.graph_store.GraphStore`: the graph's store, else
            an in-process ``InMemoryStore``).
        token_counter: The token counter (share the selector's).
        log: Append one JSONL record per commit to this file (as ``PACMSMiddleware(log=...)``).
    """

    planner: Planner | None
    store: BaseStore | None
    commit: CommitRule | None
    masking: Masking | None
    token_counter: Any
    log: str | os.PathLike[str] | None


def build_harness(
    harness: LifecycleHarness | None, options: Mapping[str, Any], owner: Callable[..., Any]
) -> LifecycleHarness:
    """The given harness, or a new one from ``options`` (the heuristic planner by default).

    Example:
        >>> build_harness(None, {"threshold": 0.5}, create_lifecycle_node)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: create_lifecycle_node() got an unknown keyword: threshold. Its keywords are ...
    """
    unknown = sorted(set(options) - HarnessOptions.__optional_keys__)
    if unknown:
        params = inspect.signature(owner).parameters.values()
        own = [p.name for p in params if p.kind is not p.VAR_KEYWORD]
        raise TypeError(
            f"{owner.__name__}() got an unknown keyword: {', '.join(unknown)}. Its keywords "
            f"are {', '.join([*own, *HarnessOptions.__annotations__])}"
        )
    if harness is not None:
        if options:
            raise ValueError(
                f"pass either harness= or harness options, not both (got {sorted(options)})"
            )
        return harness
    return LifecycleHarness(**options)


def state_inputs(
    state: Mapping[str, Any], key: str = "messages"
) -> tuple[Sequence[BaseMessage], Mapping[str, str] | None]:
    """The messages and the object-id map a lifecycle step reads from a graph state."""
    messages = state.get(key)
    if messages is None:
        raise KeyError(f"the lifecycle node reads state[{key!r}], which this state lacks")
    return messages, known_ids_of(state)


def step_update(
    harness: LifecycleHarness,
    state: Mapping[str, Any],
    config: RunnableConfig | None,
    key: str = "messages",
) -> Steps[dict[str, Any] | None]:
    """One harness step on a graph state: its commit as a state update (``None``: no commit)."""
    messages, known = state_inputs(state, key)
    options = {"thread_id": thread_of(config, messages), "known_ids": known, "config": config}
    commit = yield Call(harness.step, harness.astep, (messages,), options)
    return None if commit is None else {key: commit.updates, IDS_KEY: dict(commit.known_ids)}


def create_lifecycle_node(
    harness: LifecycleHarness | None = None,
    *,
    messages_key: str = "messages",
    **options: Unpack[HarnessOptions],
) -> RunnableLambda[Any, dict[str, Any] | None]:
    """A graph node (sync and async) that commits lifecycle edits at safe boundaries.

    Put it before the model node, keep ``pacms_lifecycle_ids`` in the state (stable ids after
    prunes) and give the model ``make_recover_tool(node.harness.store)``.

    Args:
        harness: A ready :class:`~langchain_pacms.lifecycle.harness.LifecycleHarness`
            (otherwise one is built from ``options``).
        messages_key: The state key of the messages channel.
        **options: :class:`HarnessOptions`.

    Returns:
        A ``RunnableLambda`` for ``StateGraph.add_node``; its ``harness`` attribute is the harness.

    Raises:
        TypeError: For an unknown keyword (the message lists the valid ones).
        ValueError: For ``harness`` together with options.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langgraph.graph import START, MessagesState, StateGraph
        >>> graph = StateGraph(MessagesState)
        >>> _ = graph.add_node("lifecycle", create_lifecycle_node())
        >>> _ = graph.add_edge(START, "lifecycle")
        >>> graph.compile().invoke({"messages": [HumanMessage("hi")]})["messages"][0].content
        'hi'
    """
    live = build_harness(harness, options, create_lifecycle_node)

    def lifecycle(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any] | None:
        return drive_calls(step_update(live, state, config, messages_key))

    async def alifecycle(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any] | None:
        return await adrive_calls(step_update(live, state, config, messages_key), offload=True)

    node: RunnableLambda[Any, dict[str, Any] | None] = RunnableLambda(
        lifecycle, afunc=alifecycle, name="pacms_lifecycle"
    )
    node.harness = live  # type: ignore[attr-defined]
    return node
