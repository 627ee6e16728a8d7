"""``PACMSMiddleware``: budgeted context selection for ``langchain.agents.create_agent``.

Needs LangChain v1: ``pip install "langchain-pacms[middleware]"``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from langchain_pacms.errors import missing_extra

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langchain.agents.structured_output import (
        AutoStrategy,
        OutputToolBinding,
        ProviderStrategy,
        ToolStrategy,
    )
except ImportError as err:  # pragma: no cover - exercised by a test that hides langchain
    raise missing_extra(
        "PACMSMiddleware", "LangChain v1 (langchain.agents.middleware)", "middleware"
    ) from err

from langchain_core.messages import AnyMessage, BaseMessage

from langchain_pacms._steps import method_parameters_of
from langchain_pacms.integrations.config import DEFAULT_OUTPUT_KEY, agent_arguments, resolve_config
from langchain_pacms.integrations.runner import RunnerViews, SelectionRunner
from langchain_pacms.lifecycle import RecoverCheck, make_recover_tool
from langchain_pacms.messages.runs import run_config

__all__ = ["PACMSMiddleware"]


def _response_tools(response_format: Any) -> list[Any]:
    """The schemas a structured-output request sends beside its tools, as tools to charge.

    ``create_agent(response_format=ToolStrategy(...))`` binds one tool per schema (an
    ``AutoStrategy`` may become that); a ``ProviderStrategy`` sends its JSON schema to the
    provider. Neither is in ``request.tools``.

    Example:
        >>> from pydantic import BaseModel
        >>> class Report(BaseModel):
        ...     title: str
        >>> [t.name for t in _response_tools(ToolStrategy(Report))], _response_tools(None)
        (['Report'], [])
    """
    if isinstance(response_format, ProviderStrategy):
        spec = response_format.schema_spec
        return [
            {"name": spec.name, "description": spec.description, "parameters": spec.json_schema}
        ]
    if isinstance(response_format, AutoStrategy):
        response_format = ToolStrategy(response_format.schema)
    if isinstance(response_format, ToolStrategy):
        return [OutputToolBinding.from_schema_spec(s).tool for s in response_format.schema_specs]
    return []


class PACMSMiddleware(RunnerViews, AgentMiddleware):
    """Select each model call's context under a token budget (request only, state untouched).

    The request's system message stays in place and is mandatory; kept memories and documents
    go in one context message first. A ``fraction`` budget is a share of ``request.model``'s
    ``profile["max_input_tokens"]``, and the schemas of ``request.tools`` are charged.

    With fold stubs (``tool_loop=ToolLoopOptions(sidecar_store=store)``) it adds the
    ``recover_context`` tool over that store to the agent, so the model can read back what a
    stub stands for. An agent keeps one tool per name (``create_agent`` prefers a tool passed
    in ``tools`` to a middleware's, and a later middleware's to an earlier one's): with a
    ``LifecycleMiddleware`` too, give both the same store.

    Args:
        budget: The token budget (as for :func:`~langchain_pacms.integrations.create_pacms_hook`).
        strategy: A strategy name or its options (``StrategyOptions``, ``Pacms``).
        memory: Where memories come from (default store: the agent's).
        retriever: A retriever whose documents join the pool.
        tool_loop: How tool spans are selected (:class:`~.options.ToolLoopOptions`).
        selector: A ``Selector``, or the ``Embeddings`` of the ``ContextSelector`` built here.
        log: A JSONL path: one record per model call.
        config: All of the above and the advanced options as one :class:`SelectionConfig`.
        **unknown: Any other keyword is a ``TypeError`` listing the valid ones.

    Raises:
        TypeError: For an unknown keyword.
        ValueError: For a bad budget, strategy or option, both keywords and ``config``, or the
            hook-only options ``prompt``, ``model``, ``tools`` or ``output_key``.

    Example:
        >>> from langchain.agents import create_agent  # doctest: +SKIP
        >>> from langchain_pacms import MemoryOptions
        >>> mw = PACMSMiddleware(("fraction", 0.5), memory=MemoryOptions([("memories", "{u}")]))
        >>> agent = create_agent(model, tools, middleware=[mw])  # doctest: +SKIP
    """

    @method_parameters_of(agent_arguments)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        resolved = resolve_config(*agent_arguments(*args, **kwargs), "PACMSMiddleware")
        store = resolved.tool_loop.sidecar_store if resolved.tool_loop.fold_stubs else None
        self.tools = [] if store is None else [make_recover_tool(store)]
        self._check_tools = None if store is None else RecoverCheck(store, "PACMSMiddleware")
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
        self._formats: tuple[Any, list[Any]] | None = None  # a response format and its tools

    def _inputs(self, request: ModelRequest) -> tuple[list[BaseMessage], dict[str, Any]]:
        """The messages to select from (system message first) and the runner's other inputs."""
        if self._check_tools is not None:
            self._check_tools(request.tools)
        head = [request.system_message] if request.system_message is not None else []
        runtime = request.runtime
        return [*head, *request.messages], {
            "state": request.state,
            "config": run_config(),
            "store": getattr(runtime, "store", None),
            "context": getattr(runtime, "context", None),
            "model": request.model,
            "tools": [*request.tools, *self._format_tools(request.response_format)],
        }

    def _format_tools(self, response_format: Any) -> list[Any]:
        """:func:`_response_tools` of the agent's response format, kept (the tools' costs too)."""
        held = self._formats
        if held is None or held[0] is not response_format:
            held = self._formats = (response_format, _response_tools(response_format))
        return held[1]

    @staticmethod
    def _rejoin(request: ModelRequest, selected: list[BaseMessage]) -> ModelRequest:
        system = request.system_message
        if system is not None and selected and selected[0] is system:
            selected = selected[1:]  # it stays the request's system message
        return request.override(messages=cast("list[AnyMessage]", selected))

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> Any:
        """Replace the request's messages by the selected ones, then call the model.

        Raises:
            ValueError: For a ``fraction`` budget when the request's model has no profile.
        """
        messages, inputs = self._inputs(request)
        return handler(self._rejoin(request, self.runner.run(messages, **inputs)))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Any:
        """Async twin of :meth:`wrap_model_call`."""
        messages, inputs = self._inputs(request)
        return await handler(self._rejoin(request, await self.runner.arun(messages, **inputs)))
