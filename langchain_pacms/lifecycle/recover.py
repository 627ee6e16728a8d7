"""The ``recover_context`` tool: an agent gets a folded payload back, byte for byte.

A fold leaves a stub such as ``[folded: 40 lines;
recover_context("function:tool:3"); locators: ...]`` in the history.
:func:`make_recover_tool` builds the LangChain tool the model calls with that id; it reads the
sidecar from the store (:class:`~langchain_pacms.lifecycle.sidecar.SidecarStore`), checks its
sha256 and returns the exact payload. An unknown id, a hash mismatch or a missing thread id
comes back to the model as an error result (the tool's ``handle_tool_error``), never as a wrong
payload and never as an exception in the agent loop.

The thread is the ``thread_id`` given to :func:`make_recover_tool`, else the
``configurable.thread_id`` of the run (what LangGraph's checkpointers use), so one tool serves
every thread of a compiled graph.
"""

from __future__ import annotations

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.store.base import BaseStore
from pydantic import BaseModel, Field

from langchain_pacms.lifecycle.sidecar import SidecarError, SidecarNotFoundError, SidecarStore

__all__ = ["RECOVER_TOOL_NAME", "RecoverInput", "make_recover_tool"]

RECOVER_TOOL_NAME = "recover_context"
"""The tool's name, as fold stubs spell it."""

_DESCRIPTION = (
    "Return the exact, complete content of a folded context object. Call it when a message "
    "reads '[folded: ...; recover_context(\"<object_id>\") ...]' and you need the original "
    "content (exact text, values, paths or ids not shown in the stub). Pass the object id "
    "from the stub, e.g. function:tool:3."
)
_KNOWN_SHOWN = 20


class RecoverInput(BaseModel):
    """Arguments of ``recover_context``.

    Example:
        >>> RecoverInput(object_id="function:tool:3").object_id
        'function:tool:3'
    """

    object_id: str = Field(
        description="Id of the folded object, as written in its stub (e.g. function:tool:3)."
    )


def _thread(thread_id: str | None, config: RunnableConfig, default: str | None = None) -> str:
    if thread_id is not None:
        return thread_id
    found = (config.get("configurable") or {}).get("thread_id", default)
    if found is None:
        raise ToolException(
            "recover_context has no thread id: build it with make_recover_tool(store, "
            "thread_id=...) or run with config={'configurable': {'thread_id': ...}}"
        )
    return str(found)


def _open(
    store: BaseStore, thread_id: str | None, config: RunnableConfig, default: str | None
) -> SidecarStore:
    try:
        return SidecarStore(store, _thread(thread_id, config, default))
    except ValueError as exc:
        raise ToolException(str(exc)) from exc


def _failure(exc: SidecarError, known: list[str]) -> ToolException:
    shown = ", ".join(known[:_KNOWN_SHOWN]) + (" ..." if len(known) > _KNOWN_SHOWN else "")
    hint = f" Folded ids in this thread: {shown}." if known else ""
    return ToolException(f"recover_context failed: {exc}.{hint}")


def make_recover_tool(
    store: BaseStore, *, thread_id: str | None = None, default_thread_id: str | None = None
) -> BaseTool:
    r"""Build the ``recover_context(object_id)`` tool over the sidecars in ``store``.

    Args:
        store: The ``BaseStore`` the folds wrote their sidecars to.
        thread_id: Read this thread's sidecars; ``None`` (default) reads the run's
            ``configurable.thread_id``.
        default_thread_id: The thread when the run has no ``configurable.thread_id`` (an
            agent without a checkpointer); ``None`` makes that an error result.

    Returns:
        A ``StructuredTool`` (sync and async) that returns the exact payload string; errors
        (unknown id, hash mismatch, no thread id) are returned as the tool's error result.

    Raises:
        TypeError: If ``store`` is not a ``BaseStore`` or ``thread_id`` is not a string.
        ValueError: If ``thread_id`` is not a valid namespace label.

    Example:
        >>> from langgraph.store.memory import InMemoryStore
        >>> from langchain_pacms.lifecycle.actions import SidecarRecord
        >>> store = InMemoryStore()
        >>> SidecarStore(store, "t1").put(SidecarRecord.of("function:tool:1", "a\x00b", "tool"))
        >>> tool = make_recover_tool(store)
        >>> tool.invoke({"object_id": "function:tool:1"},
        ...             {"configurable": {"thread_id": "t1"}}) == "a\x00b"
        True
        >>> print(tool.invoke({"object_id": "function:tool:9"},
        ...                   {"configurable": {"thread_id": "t1"}}))  # doctest: +ELLIPSIS
        recover_context failed: no sidecar for 'function:tool:9' in thread 't1'. Folded ids ...
    """
    if thread_id is not None:
        SidecarStore(store, thread_id)  # fail at construction, not on the first call
    elif not isinstance(store, BaseStore):
        raise TypeError(f"store must be a langgraph BaseStore, got {type(store).__name__}")

    def recover(object_id: str, config: RunnableConfig) -> str:
        sidecars = _open(store, thread_id, config, default_thread_id)
        try:
            return sidecars.get(object_id).payload
        except SidecarNotFoundError as exc:
            raise _failure(exc, sidecars.list_ids()) from exc
        except SidecarError as exc:
            raise _failure(exc, []) from exc

    async def arecover(object_id: str, config: RunnableConfig) -> str:
        sidecars = _open(store, thread_id, config, default_thread_id)
        try:
            return (await sidecars.aget(object_id)).payload
        except SidecarNotFoundError as exc:
            raise _failure(exc, await sidecars.alist_ids()) from exc
        except SidecarError as exc:
            raise _failure(exc, []) from exc

    return StructuredTool.from_function(
        func=recover,
        coroutine=arecover,
        name=RECOVER_TOOL_NAME,
        description=_DESCRIPTION,
        args_schema=RecoverInput,
        handle_tool_error=True,
    )
