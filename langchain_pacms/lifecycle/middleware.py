"""``LifecycleMiddleware``: the context lifecycle inside ``langchain.agents.create_agent``."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

from langchain_pacms._steps import Call, Steps, adrive_calls, drive_calls
from langchain_pacms.errors import missing_extra

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest
    from langchain.agents.middleware.types import ToolCallRequest
except ImportError as err:  # pragma: no cover - exercised by a test that hides langchain
    raise missing_extra(
        "LifecycleMiddleware", "LangChain v1 (langchain.agents.middleware)", "middleware"
    ) from err

from langchain_core.messages import AnyMessage, ToolMessage
from langgraph.runtime import Runtime
from langgraph.types import Command
from typing_extensions import NotRequired, Unpack

from langchain_pacms.lifecycle.harness import LifecycleHarness
from langchain_pacms.lifecycle.node import HarnessOptions, build_harness, state_inputs, step_update
from langchain_pacms.lifecycle.recover import RECOVER_TOOL_NAME, RecoverCheck, make_recover_tool
from langchain_pacms.lifecycle.restored import by_recovery, restored_note, with_unsent_noted
from langchain_pacms.messages.runs import run_config, thread_of

__all__ = ["LifecycleMiddleware", "LifecycleState"]

logger = logging.getLogger(__name__)


class LifecycleState(AgentState):
    """Agent state with the lifecycle's object-id map (keeps ids stable after prunes)."""

    pacms_lifecycle_ids: NotRequired[dict[str, str]]


class LifecycleMiddleware(AgentMiddleware):
    """Fold, mask and prune the agent's history at safe boundaries, with byte-exact recovery.

    Before each model call it steps the harness; a commit lands in the agent state. It adds the
    ``recover_context`` tool. Needs the ``middleware`` extra; list it before ``PACMSMiddleware``.

    Args:
        harness: A ready :class:`~langchain_pacms.lifecycle.harness.LifecycleHarness`
            (otherwise one is built from ``options``).
        recover_tool: Add the ``recover_context`` tool to the agent (default ``True``).
        reactivate: After a recovery, also put the exact payload back in place of its stub,
            in view until the next user message (default ``False``: the payload arrives only
            as the tool result).
        **options: :class:`~langchain_pacms.lifecycle.node.HarnessOptions`.

    Raises:
        TypeError: For an unknown keyword (the message lists the valid ones).
        ValueError: For ``harness`` together with options.

    Example:
        >>> from langchain.agents import create_agent  # doctest: +SKIP
        >>> agent = create_agent(model, tools, middleware=[LifecycleMiddleware(),
        ...                      PACMSMiddleware(8000)])  # doctest: +SKIP
    """

    state_schema = LifecycleState

    def __init__(
        self,
        harness: LifecycleHarness | None = None,
        *,
        recover_tool: bool = True,
        reactivate: bool = False,
        **options: Unpack[HarnessOptions],
    ) -> None:
        super().__init__()
        self.harness = build_harness(harness, options, LifecycleMiddleware)
        self.tools = [make_recover_tool(self.harness.store)] if recover_tool else []
        self.reactivate = reactivate
        self._check_tools = RecoverCheck(self.harness.store, "LifecycleMiddleware")

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Step the harness; return the commit as a state update (``None``: no change)."""
        return drive_calls(step_update(self.harness, state, run_config()))

    async def abefore_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async twin of :meth:`before_model`."""
        return await adrive_calls(step_update(self.harness, state, run_config()), offload=True)

    def _after_tool(
        self, request: ToolCallRequest, result: ToolMessage | Command[Any]
    ) -> Steps[ToolMessage | Command[Any]]:
        """After a successful recovery with ``reactivate=True``, the object restored in place."""
        if (
            not self.reactivate
            or request.tool_call.get("name") != RECOVER_TOOL_NAME
            or not isinstance(result, ToolMessage)
            or result.status == "error"
        ):
            return result
        messages, known = state_inputs(request.state)
        thread = thread_of(getattr(request.runtime, "config", None), messages)
        object_id = str(request.tool_call["args"].get("object_id"))
        try:
            restored = yield Call(
                self.harness.reactivate,
                self.harness.areactivate,
                (messages, object_id),
                {"thread_id": thread, "known_ids": known},
            )
        except Exception as err:  # not folded (any more), or the store failed: the result is enough
            logger.info("recover_context: %s not restored in place: %r", object_id, err)
            return result
        if not restored:
            return result
        note = result.model_copy(update={"content": restored_note(object_id)})
        return Command(update={"messages": by_recovery(restored, note)})

    def _request(self, request: ModelRequest) -> ModelRequest:
        """``request``, no result in it claiming a restored round it does not hold whole.

        (A later commit folded the round again: see :func:`.restored.with_unsent_noted`.) Warns
        once if the agent's ``recover_context`` reads another store.
        """
        self._check_tools(request.tools)
        noted = with_unsent_noted(request.messages, request.messages)
        if all(a is b for a, b in zip(noted, request.messages)):
            return request
        return request.override(messages=cast("list[AnyMessage]", noted))

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        """Call the model with :meth:`_request` of ``request``."""
        return handler(self._request(request))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[Any]]
    ) -> Any:
        """Async twin of :meth:`wrap_model_call`."""
        return await handler(self._request(request))

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Run the tool; after a recovery with ``reactivate=True``, restore the object in place."""
        return drive_calls(self._after_tool(request, handler(request)))

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async twin of :meth:`wrap_tool_call`."""
        return await adrive_calls(self._after_tool(request, await handler(request)), offload=True)
