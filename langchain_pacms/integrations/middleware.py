"""``PACMSMiddleware``: budgeted context selection for ``langchain.agents.create_agent``.

Needs LangChain v1 (the ``middleware`` extra): ``pip install "langchain-pacms[middleware]"``.

The middleware selects in ``wrap_model_call`` / ``awrap_model_call``: the outgoing request gets
the selected messages through ``request.override(messages=...)``; the agent state (the full
transcript) is not changed. The request's system message is counted as mandatory context and
stays where it is; kept memories and documents travel as one context message at the start of
``request.messages``, so the system prompt itself stays byte-stable for prompt caching. The
schemas of the request's tools are charged to the budget, and ``budget=("fraction", x)`` is a
share of ``request.model``'s ``profile["max_input_tokens"]``.

Example:
    >>> from langchain.agents import create_agent  # doctest: +SKIP
    >>> agent = create_agent(model, tools, middleware=[PACMSMiddleware(("fraction", 0.5))])
    ... # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
except ImportError as err:  # pragma: no cover - exercised by a test that hides langchain
    raise ImportError(
        "PACMSMiddleware needs LangChain v1 (langchain.agents.middleware). Install it with: "
        'pip install "langchain-pacms[middleware]"'
    ) from err

from langchain_core.embeddings import Embeddings
from langchain_core.messages import AnyMessage, BaseMessage
from langchain_core.retrievers import BaseRetriever

from langchain_pacms.budget import BudgetInput
from langchain_pacms.integrations.config import (
    DEFAULT_OUTPUT_KEY,
    SelectionConfig,
    resolve_config,
)
from langchain_pacms.integrations.options import MemoryOptions, StrategyOptions, ToolLoopOptions
from langchain_pacms.integrations.runner import RunnerViews, SelectionRunner
from langchain_pacms.messages.runs import run_config
from langchain_pacms.selector import Selector

__all__ = ["PACMSMiddleware"]


class PACMSMiddleware(RunnerViews, AgentMiddleware):
    """Select each model call's context under a token budget (request only, state untouched).

    Takes the keywords of :func:`~langchain_pacms.integrations.create_pacms_hook` (or one
    ``config``); the store defaults to the agent's store (``create_agent(..., store=...)``).
    The request's model and tools are its own: ``budget=("fraction", x)`` is that share of
    ``request.model``'s ``profile["max_input_tokens"]`` (a model without one is a
    ``ValueError`` at its first call), and the schemas of ``request.tools`` are charged to the
    budget.

    Args:
        budget: The token budget (a number of tokens, ``("tokens", n)``, ``("ratio", x)``,
            ``("fraction", x)`` or a :class:`~langchain_pacms.budget.Budget`).
        strategy: A strategy name or its options (``StrategyOptions``, ``Pacms``).
        memory: Where memories come from (:class:`~.options.MemoryOptions`).
        retriever: A retriever whose documents join the pool.
        tool_loop: How tool spans are selected (:class:`~.options.ToolLoopOptions`).
        selector: A :class:`~langchain_pacms.selector.Selector` to use, or the ``Embeddings``
            of the ``ContextSelector`` built here.
        log: A JSONL path: one record per model call.
        config: All of the above and the advanced options as one :class:`SelectionConfig`.
        **unknown: Any other keyword is a ``TypeError`` listing the valid ones.

    Raises:
        TypeError: For an unknown keyword.
        ValueError: For a missing or bad budget, both keywords and ``config``, an unknown
            strategy or option, or a configuration with ``prompt``, ``model``, ``tools`` (the
            middleware sees and counts the request's system message, model and tools) or an
            ``output_key`` (the hook's).

    Example:
        >>> mw = PACMSMiddleware(("fraction", 0.5),
        ...                      memory=MemoryOptions([("memories", "{user_id}")]))
        >>> mw.name
        'PACMSMiddleware'
    """

    def __init__(
        self,
        budget: BudgetInput | None = None,
        *,
        strategy: str | StrategyOptions | None = None,
        memory: MemoryOptions | None = None,
        retriever: BaseRetriever | None = None,
        tool_loop: ToolLoopOptions | None = None,
        selector: Selector | Embeddings | None = None,
        log: str | Path | None = None,
        config: SelectionConfig | None = None,
        **unknown: Any,
    ) -> None:
        super().__init__()
        self.tools = []
        keywords = {
            "budget": budget,
            "strategy": strategy,
            "memory": memory,
            "retriever": retriever,
            "tool_loop": tool_loop,
            "selector": selector,
            "log": log,
        }
        resolved = resolve_config(config, keywords, unknown, "PACMSMiddleware")
        if resolved.prompt is not None:
            raise ValueError(
                "prompt is for the pre-model hook; the middleware counts the request's system "
                "message itself (use reserve_tokens for anything else it cannot see)"
            )
        if resolved.model is not None or resolved.tools:
            raise ValueError(
                "model and tools are for the pre-model hook; the middleware reads each "
                "request's model and tools itself"
            )
        if resolved.output_key != DEFAULT_OUTPUT_KEY:
            raise ValueError("output_key is for the pre-model hook; the middleware edits requests")
        self.runner = SelectionRunner(resolved, source="middleware")

    def _inputs(self, request: ModelRequest) -> tuple[list[BaseMessage], dict[str, Any]]:
        """The messages to select from (system message first) and the runner's other inputs."""
        head = [request.system_message] if request.system_message is not None else []
        runtime = request.runtime
        return [*head, *request.messages], {
            "state": request.state,
            "config": run_config(),
            "store": getattr(runtime, "store", None),
            "context": getattr(runtime, "context", None),
            "model": request.model,
            "tools": request.tools,
        }

    @staticmethod
    def _rejoin(request: ModelRequest, selected: list[BaseMessage]) -> ModelRequest:
        system = request.system_message
        if system is not None and selected and selected[0] is system:
            selected = selected[1:]  # it stays the request's system message
        return request.override(messages=cast("list[AnyMessage]", selected))

    def wrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], ModelResponse],
    ) -> Any:
        """Replace the request's messages by the selected ones, then call the model.

        Raises:
            ValueError: For ``budget=("fraction", x)`` when the request's model has no
                ``profile["max_input_tokens"]``.
        """
        messages, inputs = self._inputs(request)
        return handler(self._rejoin(request, self.runner.run(messages, **inputs)))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> Any:
        """Async twin of :meth:`wrap_model_call`."""
        messages, inputs = self._inputs(request)
        return await handler(self._rejoin(request, await self.runner.arun(messages, **inputs)))
