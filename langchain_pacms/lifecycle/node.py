"""A LangGraph node that runs the lifecycle harness on a graph's ``messages`` channel.

Put it before the model node of a hand-built ``StateGraph``. On each pass it gives the history
to :meth:`~langchain_pacms.lifecycle.harness.LifecycleHarness.step`; when the harness commits,
the node returns the commit as a state update (``RemoveMessage`` for pruned messages, same-id
replacements for folded and masked ones, which ``add_messages`` applies in place) plus the
object-id map under ``pacms_lifecycle_ids`` (add that key to your state to keep ids stable
across prunes; without it ids are re-derived from the fold marks). Otherwise it returns no
update, so the state, and the provider's prompt cache, stay as they are.

Give the model the recovery tool of the same store (``make_recover_tool(harness.store)``) so it
can read a folded payload back.

Example:
    >>> from langchain_core.messages import HumanMessage
    >>> from langgraph.graph import START, MessagesState, StateGraph
    >>> class State(MessagesState):
    ...     pacms_lifecycle_ids: dict[str, str]
    >>> graph = StateGraph(State)
    >>> _ = graph.add_node("lifecycle", create_lifecycle_node())
    >>> _ = graph.add_edge(START, "lifecycle")
    >>> graph.compile().invoke({"messages": [HumanMessage("hi")]})["messages"][0].content
    'hi'
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda

from langchain_pacms.lifecycle.harness import Commit, LifecycleHarness
from langchain_pacms.lifecycle.heuristic import HeuristicPlanner
from langchain_pacms.lifecycle.sidecar import run_thread

__all__ = ["DEFAULT_THREAD", "IDS_KEY", "build_harness", "create_lifecycle_node", "thread_of"]

IDS_KEY = "pacms_lifecycle_ids"
"""State key holding ``message id -> object id`` (so ids stay stable after prunes)."""

DEFAULT_THREAD = "default"
"""Thread id used when a run has neither a ``configurable.thread_id`` nor messages."""


def thread_of(config: RunnableConfig | None, messages: Sequence[BaseMessage] = ()) -> str:
    """The run's ``configurable.thread_id`` as a string, else the run's own thread.

    A run without a thread id (no checkpointer) gets a thread named after its first message
    (:func:`~langchain_pacms.lifecycle.sidecar.run_thread`), so two such conversations never
    share sidecars; :data:`DEFAULT_THREAD` only when there are no messages either.

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


def build_harness(harness: LifecycleHarness | None, options: Mapping[str, Any]) -> LifecycleHarness:
    """The given harness, or a new one from ``options`` (the heuristic planner by default).

    Args:
        harness: A ready harness, or ``None``.
        options: Keyword arguments of :class:`~langchain_pacms.lifecycle.harness.LifecycleHarness`
            (``planner``, ``store``, ``threshold``, ``max_active_tokens``, ``boundary``,
            ``token_counter``, ``mask_head``, ``mask_tail``, ``log_path``).

    Raises:
        ValueError: For an unknown option (the message lists the valid ones), an invalid value,
            or a harness together with options.

    Example:
        >>> build_harness(None, {"threshold": 0.5}).threshold
        0.5
        >>> build_harness(None, {"treshold": 0.5})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: unknown lifecycle option 'treshold'; valid: boundary, cached_price, ...
    """
    valid = sorted(_HARNESS_OPTIONS)
    for name in options:
        if name not in _HARNESS_OPTIONS:
            raise ValueError(f"unknown lifecycle option {name!r}; valid: {', '.join(valid)}")
    if harness is not None:
        if options:
            raise ValueError(
                f"pass either harness= or harness options, not both (got {sorted(options)})"
            )
        return harness
    chosen = dict(options)
    planner = chosen.pop("planner", None)
    return LifecycleHarness(planner if planner is not None else HeuristicPlanner(), **chosen)


_HARNESS_OPTIONS = frozenset(
    name for name in inspect.signature(LifecycleHarness.__init__).parameters if name != "self"
)


def state_update(commit: Commit | None) -> dict[str, Any] | None:
    """The graph state update for a commit (``None`` when nothing was committed)."""
    if commit is None:
        return None
    return {"messages": commit.updates, IDS_KEY: dict(commit.known_ids)}


def state_inputs(
    state: Mapping[str, Any], key: str = "messages"
) -> tuple[Sequence[BaseMessage], Mapping[str, str] | None]:
    """The messages and the object-id map a lifecycle step reads from a graph state.

    Raises:
        KeyError: If the state has no ``key``.
    """
    messages = state.get(key)
    if messages is None:
        raise KeyError(f"the lifecycle node reads state[{key!r}], which this state lacks")
    known = state.get(IDS_KEY)
    return messages, known if isinstance(known, Mapping) else None


def create_lifecycle_node(
    harness: LifecycleHarness | None = None,
    *,
    messages_key: str = "messages",
    **options: Any,
) -> RunnableLambda[Any, dict[str, Any] | None]:
    """A graph node (sync and async) that commits lifecycle edits at safe boundaries.

    Args:
        harness: A ready :class:`~langchain_pacms.lifecycle.harness.LifecycleHarness` (its
            store is where sidecars go). Otherwise one is built from ``options``.
        messages_key: The state key of the messages channel.
        **options: The options of :class:`~langchain_pacms.lifecycle.harness.LifecycleHarness`
            (see :func:`build_harness`): ``planner`` (default: the offline
            :class:`~langchain_pacms.lifecycle.heuristic.HeuristicPlanner`), ``store``
            (default: an ``InMemoryStore``; ``SqliteStore`` or ``PostgresStore`` survive
            restarts), ``threshold``, ``max_active_tokens``, ``boundary`` (``"tool"`` for long
            single-task tool loops), ``token_counter``, ``mask_head``, ``mask_tail``,
            ``log_path``.

    Returns:
        A ``RunnableLambda`` to pass to ``StateGraph.add_node``; its ``harness`` attribute is
        the harness (stats, sidecars).

    Raises:
        ValueError: For an unknown or invalid option.
    """
    live = build_harness(harness, options)

    def lifecycle(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any] | None:
        messages, known = state_inputs(state, messages_key)
        thread = thread_of(config, messages)
        commit = live.step(messages, thread_id=thread, known_ids=known, config=config)
        return _keyed(state_update(commit), messages_key)

    async def alifecycle(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any] | None:
        messages, known = state_inputs(state, messages_key)
        commit = await live.astep(
            messages, thread_id=thread_of(config, messages), known_ids=known, config=config
        )
        return _keyed(state_update(commit), messages_key)

    node: RunnableLambda[Any, dict[str, Any] | None] = RunnableLambda(
        lifecycle, afunc=alifecycle, name="pacms_lifecycle"
    )
    node.harness = live  # type: ignore[attr-defined]
    return node


def _keyed(update: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    if update is None or key == "messages":
        return update
    return {key: update.pop("messages"), **update}
