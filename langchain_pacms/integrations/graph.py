"""A LangGraph pre-model hook (or graph node) that selects the context of each model call.

:func:`create_pacms_hook` returns a runnable with sync and async paths. Given a state with
``messages`` it returns ``{"llm_input_messages": [...]}``: the messages the model should see for
this call, chosen by a :class:`~langchain_pacms.selector.Selector` under a token budget.
``state["messages"]`` is left untouched, so the full transcript stays in the checkpoint.

Example:
    >>> from langchain_core.messages import HumanMessage
    >>> hook = create_pacms_hook(50)
    >>> hook.invoke({"messages": [HumanMessage("hello")]})["llm_input_messages"][0].content
    'hello'
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage, RemoveMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime, get_runtime
from langgraph.store.base import BaseStore

from langchain_pacms.budget import BudgetInput
from langchain_pacms.integrations.config import SelectionConfig, resolve_config
from langchain_pacms.integrations.options import MemoryOptions, StrategyOptions, ToolLoopOptions
from langchain_pacms.integrations.runner import RunnerViews, SelectionRunner
from langchain_pacms.selector import Selector

__all__ = ["PACMSHook", "create_pacms_hook"]


def _state_messages(state: Any) -> Sequence[BaseMessage]:
    if isinstance(state, dict):
        messages = state.get("messages")
    else:
        messages = getattr(state, "messages", None)
    if messages is None:
        raise ValueError("the pacms hook needs a state with a 'messages' key")
    return messages


def _graph_runtime(config: RunnableConfig | None) -> Runtime | None:
    """The LangGraph ``Runtime`` of the running graph (store and context), if any.

    ``langgraph.runtime.get_runtime`` reads the config from a context variable, which async
    code on Python 3.10 does not carry; then the ``Runtime`` is looked for among the values of
    the ``config`` LangGraph passes to the hook (by its public type, not by an internal key).
    """
    try:
        return get_runtime()
    except Exception:
        values = ((config or {}).get("configurable") or {}).values()
        return next((v for v in values if isinstance(v, Runtime)), None)


def _run_inputs(state: Any, config: RunnableConfig) -> dict[str, Any]:
    """What :meth:`SelectionRunner.run` needs besides the messages, from the running graph."""
    runtime = _graph_runtime(config)
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
        output_key: State key the selected messages are written to (``SelectionConfig``'s).
        selector: The selector (one warm embedding cache for the hook's whole life).
        last_selection: The most recent selection (for debugging; shared by concurrent runs).

    Example:
        >>> hook = create_pacms_hook(100)
        >>> isinstance(hook, PACMSHook), hook.name
        (True, 'pacms_pre_model_hook')
    """

    def __init__(self, runner: SelectionRunner):
        self.runner = runner
        self.output_key = output_key = runner.config.output_key

        def update(out: list[BaseMessage]) -> dict[str, Any]:
            if output_key == "messages":  # replace the stored history, as add_messages needs
                return {output_key: [RemoveMessage(id=REMOVE_ALL_MESSAGES), *out]}
            return {output_key: out}

        def pacms_pre_model_hook(state: Any, config: RunnableConfig) -> dict[str, Any]:
            return update(runner.run(_state_messages(state), **_run_inputs(state, config)))

        async def apacms_pre_model_hook(state: Any, config: RunnableConfig) -> dict[str, Any]:
            return update(await runner.arun(_state_messages(state), **_run_inputs(state, config)))

        super().__init__(
            pacms_pre_model_hook, afunc=apacms_pre_model_hook, name="pacms_pre_model_hook"
        )


def create_pacms_hook(
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
) -> PACMSHook:
    """Build a pre-model hook that keeps the most useful context under a token budget.

    Use it as ``pre_model_hook=`` of ``langgraph.prebuilt.create_react_agent`` or as a node of
    your own ``StateGraph`` (declare ``llm_input_messages: list[AnyMessage]`` in the state and
    let the model node read it). It returns ``{"llm_input_messages": [...]}`` and never changes
    ``state["messages"]``. Works with ``invoke`` and ``ainvoke``.

    ``create_react_agent(prompt=...)`` adds its prompt after the hook, where the hook cannot
    see it: pass the same prompt as ``SelectionConfig(prompt=...)`` (or its size as
    ``reserve_tokens``) so the budget holds on what the model receives. The budget covers
    everything the hook sends: the context message's header and bullets, the omission note and
    placeholder tool results included.

    Each call: the query (``query(state)``, else by ``query_mode`` the task plus the agent's
    latest step) is used to fetch memories from the store and documents from the retriever;
    these and the conversation become candidates (see
    :mod:`langchain_pacms.messages`); the selector picks under the budget; the
    kept messages (tool calls always with their results) plus one "Relevant memories" message
    go to the model; the selection is reported as a ``pacms_selection``
    custom event, a log line and, with ``log``, a JSONL record.

    Pass the keywords, or one ``config`` (a :class:`SelectionConfig` holding them and the
    advanced options), not both.

    Args:
        budget: The token budget: a number of tokens, ``("tokens", n)``, ``("ratio", x)`` (a
            share of the conversation's tokens), ``("fraction", x)`` (a share of the model's
            ``profile["max_input_tokens"]``: give the model as ``SelectionConfig(model=...)``,
            the hook does not see it) or a :class:`~langchain_pacms.budget.Budget`.
        strategy: A strategy name or its options (``StrategyOptions("rag", k=4)``,
            ``Pacms(similarity_threshold=0.3)``); default: the selector's (``pacms``).
        memory: Where memories come from (:class:`~.options.MemoryOptions`).
        retriever: A retriever whose documents join the pool.
        tool_loop: How tool spans are selected (:class:`~.options.ToolLoopOptions`).
        selector: A :class:`~langchain_pacms.selector.Selector` to use, or the ``Embeddings``
            of the ``ContextSelector`` built here (default: the offline lexical embedder).
        log: A JSONL path: one record per model call.
        config: All of the above and the advanced options as one :class:`SelectionConfig`.
        **unknown: Any other keyword is a ``TypeError`` listing the valid ones.

    Returns:
        A :class:`PACMSHook` (a ``RunnableLambda`` with sync and async paths).

    Raises:
        TypeError: For an unknown keyword.
        ValueError: For a missing or bad budget, both keywords and ``config``, an unknown
            strategy or option, or ``budget=("fraction", x)`` without a ``model`` that has a
            profile (the hook does not see the model the agent calls).

    Example:
        >>> from langchain_pacms import Budget
        >>> from langgraph.prebuilt import create_react_agent  # doctest: +SKIP
        >>> prompt = "You are a careful ops assistant."
        >>> hook = create_pacms_hook(config=SelectionConfig(
        ...     budget=Budget(context_window=128_000, fill=0.25), prompt=prompt,
        ...     memory=MemoryOptions([("memories", "{user_id}")])))
        >>> agent = create_react_agent(model, tools, prompt=prompt,
        ...                            pre_model_hook=hook)  # doctest: +SKIP
    """
    keywords = {
        "budget": budget,
        "strategy": strategy,
        "memory": memory,
        "retriever": retriever,
        "tool_loop": tool_loop,
        "selector": selector,
        "log": log,
    }
    resolved = resolve_config(config, keywords, unknown, "create_pacms_hook")
    runner = SelectionRunner(resolved, source="hook")
    runner.request()  # a fraction budget without the model's profile fails now
    return PACMSHook(runner)
