"""A LangGraph pre-model hook (or graph node) that selects the context of each model call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime, get_runtime
from langgraph.store.base import BaseStore

from langchain_pacms._steps import parameters_of
from langchain_pacms.integrations.config import agent_arguments, resolve_config
from langchain_pacms.integrations.runner import RunnerViews, SelectionRunner
from langchain_pacms.lifecycle import carry_numbers
from langchain_pacms.messages.runs import keep_run, state_messages, thread_id_of

__all__ = ["PACMSHook", "create_pacms_hook"]


def _state_messages(state: Any) -> Sequence[BaseMessage]:
    if isinstance(state, dict):
        messages = state.get("messages")
    else:
        messages = getattr(state, "messages", None)
    if messages is None:
        raise ValueError("the pacms hook needs a state with a 'messages' key")
    return messages


def _run_inputs(state: Any, config: RunnableConfig) -> dict[str, Any]:
    """What :meth:`SelectionRunner.run` needs besides the messages, from the running graph.

    Its ``Runtime`` comes from ``get_runtime``, else from ``config`` (Python 3.10).
    """
    try:
        runtime: Runtime | None = get_runtime()
    except Exception:
        values = ((config or {}).get("configurable") or {}).values()
        runtime = next((v for v in values if isinstance(v, Runtime)), None)
    store = getattr(runtime, "store", None)
    return {
        "state": state,
        "config": config,
        "store": store if isinstance(store, BaseStore) else None,
        "context": getattr(runtime, "context", None),
    }


class PACMSHook(RunnerViews, RunnableLambda):
    """The runnable :func:`create_pacms_hook` returns (use that function to build one).

    Attributes:
        runner: The resolved options and the selector.
        output_key: State key the selected messages are written to.
        selector: The selector (one warm embedding cache for the hook's whole life).
        last_selection: The most recent selection (for debugging; shared by concurrent runs).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> hook = create_pacms_hook(50)
        >>> hook.invoke({"messages": [HumanMessage("hello")]})["llm_input_messages"][0].content
        'hello'
    """

    def __init__(self, runner: SelectionRunner):
        self.runner = runner
        self.output_key = output_key = runner.config.output_key

        def update(state: Any, config: RunnableConfig, out: list[BaseMessage]) -> dict[str, Any]:
            if output_key != "messages":
                return {output_key: out}
            before = state_messages(state)
            if thread_id_of(config) is None:  # the run's sidecars are named after its history
                out = keep_run(before, out)
            # replace the stored history, as add_messages needs; ids of dropped stubs stay taken
            return {
                output_key: [RemoveMessage(id=REMOVE_ALL_MESSAGES), *carry_numbers(before, out)]
            }

        def pacms_pre_model_hook(state: Any, config: RunnableConfig) -> dict[str, Any]:
            out = runner.run(_state_messages(state), **_run_inputs(state, config))
            return update(state, config, out)

        async def apacms_pre_model_hook(state: Any, config: RunnableConfig) -> dict[str, Any]:
            out = await runner.arun(_state_messages(state), **_run_inputs(state, config))
            return update(state, config, out)

        super().__init__(
            pacms_pre_model_hook, afunc=apacms_pre_model_hook, name="pacms_pre_model_hook"
        )


@parameters_of(agent_arguments)
def create_pacms_hook(*args: Any, **kwargs: Any) -> PACMSHook:  # noqa: D417 (*args: the parameters)
    """Build a pre-model hook that keeps the most useful context under a token budget.

    Use it as ``pre_model_hook=`` of ``create_react_agent`` or as a ``StateGraph`` node. Each
    call selects from the conversation, memories and documents and returns
    ``{"llm_input_messages": [...]}`` (``state["messages"]`` is not changed). The budget covers
    all the hook sends; pass ``create_react_agent``'s prompt as ``SelectionConfig(prompt=...)``.

    Args:
        budget: Tokens, ``("tokens", n)``, ``("ratio", x)``, ``("fraction", x)`` (needs
            ``SelectionConfig(model=...)``) or a :class:`~langchain_pacms.budget.Budget`.
        strategy: A strategy name or its options (``StrategyOptions("rag", k=4)``, ``Pacms()``).
        memory: Where memories come from (:class:`~.options.MemoryOptions`).
        retriever: A retriever whose documents join the pool.
        tool_loop: How tool spans are selected (:class:`~.options.ToolLoopOptions`).
        selector: A ``Selector``, or the ``Embeddings`` of the ``ContextSelector`` built here.
        log: A JSONL path: one record per model call.
        config: All of the above and the advanced options as one :class:`SelectionConfig`.
        **unknown: Any other keyword is a ``TypeError`` listing the valid ones.

    Returns:
        A :class:`PACMSHook` (a ``RunnableLambda`` with sync and async paths).

    Raises:
        TypeError: For an unknown keyword.
        ValueError: For a bad or missing budget, strategy or option, both keywords and
            ``config``, or a ``fraction`` budget without a ``model`` that has a profile.

    Example:
        >>> from langchain_pacms import Budget, MemoryOptions, SelectionConfig
        >>> hook = create_pacms_hook(config=SelectionConfig(
        ...     budget=Budget(context_window=128_000, fill=0.25), prompt="Be careful.",
        ...     memory=MemoryOptions([("memories", "{user_id}")])))
        >>> agent = create_react_agent(model, tools, prompt="Be careful.",
        ...                            pre_model_hook=hook)  # doctest: +SKIP
    """
    resolved = resolve_config(*agent_arguments(*args, **kwargs), "create_pacms_hook")
    runner = SelectionRunner(resolved, source="hook")
    runner.request()  # a fraction budget without the model's profile fails now
    return PACMSHook(runner)
