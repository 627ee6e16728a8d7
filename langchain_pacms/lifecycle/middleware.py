"""``LifecycleMiddleware``: the context lifecycle inside ``langchain.agents.create_agent``.

Needs LangChain v1 (the ``middleware`` extra): ``pip install "langchain-pacms[middleware]"``.

Before each model call the middleware hands the agent's messages to the
:class:`~langchain_pacms.lifecycle.harness.LifecycleHarness`. At a safe boundary (a new user turn
or a finished answer; in a long tool loop also after a tool result) it plans, stages, and
when the saving is worth the cache break, commits: the folds, masks and prunes land in the
agent *state* as a ``messages`` update, so later calls reuse the shorter, stable prefix. The
middleware adds the ``recover_context`` tool itself, so the model can read any folded payload
back byte for byte.

With :class:`~langchain_pacms.integrations.PACMSMiddleware` in the same agent, list the
lifecycle first: it edits the state in ``before_model``; selection then picks each call's
context from that state in ``wrap_model_call``.

Example:
    >>> from langchain.agents import create_agent  # doctest: +SKIP
    >>> agent = create_agent(model, tools, middleware=[LifecycleMiddleware(),
    ...                      PACMSMiddleware(budget_tokens=8000)])  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState
    from langchain.agents.middleware.types import ToolCallRequest
except ImportError as err:  # pragma: no cover - exercised by a test that hides langchain
    raise ImportError(
        "LifecycleMiddleware needs LangChain v1 (langchain.agents.middleware). Install it with: "
        'pip install "langchain-pacms[middleware]"'
    ) from err

from langchain_core.messages import BaseMessage, ToolMessage
from langgraph.runtime import Runtime
from langgraph.types import Command
from typing_extensions import NotRequired

from langchain_pacms.integrations.middleware import run_config
from langchain_pacms.lifecycle.harness import LifecycleHarness
from langchain_pacms.lifecycle.node import (
    build_harness,
    state_inputs,
    state_update,
    thread_of,
)
from langchain_pacms.lifecycle.recover import RECOVER_TOOL_NAME, make_recover_tool

__all__ = ["LifecycleMiddleware", "LifecycleState"]

logger = logging.getLogger(__name__)


class LifecycleState(AgentState):
    """Agent state with the lifecycle's object-id map (keeps ids stable after prunes)."""

    pacms_lifecycle_ids: NotRequired[dict[str, str]]


class LifecycleMiddleware(AgentMiddleware):
    """Fold, mask and prune the agent's history at safe boundaries, with byte-exact recovery.

    Args:
        harness: A ready :class:`~langchain_pacms.lifecycle.harness.LifecycleHarness`.
            Otherwise one is built from ``options``.
        recover_tool: Add the ``recover_context`` tool to the agent (default ``True``).
        reactivate: When the model recovers a folded object, also put the exact payload back
            into the history in place of its stub (the tool result then says so instead of
            repeating the payload). Default ``False``: the payload arrives as the tool result
            and the stub stays.
        **options: The options of :class:`~langchain_pacms.lifecycle.harness.LifecycleHarness`
            (see :func:`~langchain_pacms.lifecycle.node.build_harness`): ``planner`` (default:
            the offline :class:`~langchain_pacms.lifecycle.heuristic.HeuristicPlanner`),
            ``store`` (default: an ``InMemoryStore`` in this process; ``SqliteStore`` or
            ``PostgresStore`` keep payloads across restarts and workers), ``threshold``,
            ``max_active_tokens``, ``boundary`` (``"tool"`` commits inside one long tool loop
            too), ``token_counter`` (share the selector's), ``mask_head``, ``mask_tail``,
            ``log_path``.

    Raises:
        ValueError: For an unknown or invalid option, or ``harness`` together with options.
    """

    state_schema = LifecycleState

    def __init__(
        self,
        harness: LifecycleHarness | None = None,
        *,
        recover_tool: bool = True,
        reactivate: bool = False,
        **options: Any,
    ) -> None:
        super().__init__()
        self.harness = build_harness(harness, options)
        self.tools = [make_recover_tool(self.harness.store)] if recover_tool else []
        self.reactivate = reactivate

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Step the harness; return the commit as a state update (``None``: no change)."""
        config = run_config()
        messages, known = state_inputs(state)
        commit = self.harness.step(
            messages, thread_id=thread_of(config, messages), known_ids=known, config=config
        )
        return state_update(commit)

    async def abefore_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async twin of :meth:`before_model`."""
        config = run_config()
        messages, known = state_inputs(state)
        commit = await self.harness.astep(
            messages, thread_id=thread_of(config, messages), known_ids=known, config=config
        )
        return state_update(commit)

    def _recovered(
        self, request: ToolCallRequest, result: ToolMessage | Command[Any]
    ) -> tuple[str, Sequence[BaseMessage], Mapping[str, str] | None, str] | None:
        """What to re-activate after a successful recovery (``None``: leave the result alone)."""
        if (
            not self.reactivate
            or request.tool_call.get("name") != RECOVER_TOOL_NAME
            or not isinstance(result, ToolMessage)
            or result.status == "error"
        ):
            return None
        messages, known = state_inputs(request.state)
        config = getattr(request.runtime, "config", None)
        thread = thread_of(config, messages)
        return str(request.tool_call["args"].get("object_id")), messages, known, thread

    @staticmethod
    def _command(
        object_id: str, result: ToolMessage, restored: list[BaseMessage]
    ) -> ToolMessage | Command[Any]:
        if not restored:
            return result
        note = result.model_copy(
            update={
                "content": (
                    f"[{object_id} restored in place: its original message in the history "
                    "above holds the exact payload again]"
                )
            }
        )
        return Command(update={"messages": [*restored, note]})

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Run the tool; after a recovery with ``reactivate=True``, restore the object in place."""
        result = handler(request)
        found = self._recovered(request, result)
        if found is None:
            return result
        object_id, messages, known, thread = found
        try:
            restored = self.harness.reactivate(
                messages, object_id, thread_id=thread, known_ids=known
            )
        except Exception as err:  # not folded (any more), or the store failed: the result is enough
            logger.info("recover_context: %s not restored in place: %r", object_id, err)
            restored = []
        return self._command(object_id, result, restored)  # type: ignore[arg-type]

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async twin of :meth:`wrap_tool_call`."""
        result = await handler(request)
        found = self._recovered(request, result)
        if found is None:
            return result
        object_id, messages, known, thread = found
        try:
            restored = await self.harness.areactivate(
                messages, object_id, thread_id=thread, known_ids=known
            )
        except Exception as err:
            logger.info("recover_context: %s not restored in place: %r", object_id, err)
            restored = []
        return self._command(object_id, result, restored)  # type: ignore[arg-type]
