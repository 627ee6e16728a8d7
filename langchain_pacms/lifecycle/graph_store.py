"""The store of the graph a call runs in: where the lifecycle keeps sidecars by default."""

from __future__ import annotations

from collections.abc import Iterable

from langgraph.config import get_store
from langgraph.store.base import BaseStore, Op, Result
from langgraph.store.memory import InMemoryStore

__all__ = ["GraphStore"]


_PROCESS_STORE = InMemoryStore()  # the fallback of every GraphStore built without one


class GraphStore(BaseStore):
    """A ``BaseStore`` that is the running graph's store, or ``fallback`` outside one.

    Every operation goes to the store the LangGraph run in context was given
    (``create_agent(..., store=...)``, ``compile(store=...)``, or the one a LangGraph server
    provides); outside a run, or in a graph without a store, to ``fallback``. The lifecycle's
    harness and its ``recover_context`` tool share one, so folds made in a graph with a store
    persist with it and any worker of that graph can recover them.

    Args:
        fallback: The store used where the run has none (default: one ``InMemoryStore`` that
            every ``GraphStore`` of the process shares, so an agent built again per request
            still recovers what an earlier build folded; it lasts as long as the process).

    Raises:
        TypeError: If ``fallback`` is not a ``BaseStore``.

    Example:
        >>> from langgraph.graph import START, StateGraph
        >>> from typing_extensions import TypedDict
        >>> class State(TypedDict):
        ...     n: int
        >>> sidecars, agents = GraphStore(), InMemoryStore()
        >>> def node(state: State) -> State:
        ...     sidecars.put(("notes",), "k", {"v": 1})  # goes to the graph's store
        ...     return state
        >>> graph = StateGraph(State).add_node(node).add_edge(START, "node")
        >>> _ = graph.compile(store=agents).invoke({"n": 0})
        >>> agents.get(("notes",), "k").value, sidecars.get(("notes",), "k")
        ({'v': 1}, None)
    """

    def __init__(self, fallback: BaseStore | None = None) -> None:
        if fallback is not None and not isinstance(fallback, BaseStore):
            raise TypeError(f"fallback must be a BaseStore, got {type(fallback).__name__}")
        self.fallback: BaseStore = fallback if fallback is not None else _PROCESS_STORE

    def __repr__(self) -> str:
        return f"GraphStore(fallback={type(self.fallback).__name__})"

    def __deepcopy__(self, memo: dict[int, object]) -> GraphStore:
        """A copy sends to the same stores: the data stays where it is, shared."""
        return GraphStore(self.fallback)

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled, the process's store stays behind: the receiving process's is used there."""
        return (GraphStore, (None if self.fallback is _PROCESS_STORE else self.fallback,))

    def current(self) -> BaseStore:
        """The store operations go to now: the running graph's, else ``fallback``."""
        try:
            store = get_store()
        except (RuntimeError, KeyError):  # not inside a LangGraph run
            return self.fallback
        return store if isinstance(store, BaseStore) and store is not self else self.fallback

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` on :meth:`current`."""
        return self.current().batch(ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async twin of :meth:`batch`."""
        return await self.current().abatch(ops)
