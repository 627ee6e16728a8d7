"""One task, a hundred tool calls: the budget holds on every model call with the default settings.

Everything happens after the one human message, so with the whole latest turn mandatory the
hook could only flag ``over_budget``. With the default ``keep_latest_turn="auto"`` the earlier
tool spans of the turn compete for the budget once the turn outgrows it, while the task, the
newest step and the system prompt stay.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from pacms_fakes import (
    LOOP_BUDGET,
    LOOP_CALLS,
    LOOP_SYSTEM,
    EventCollector,
    RecordingChatModel,
    assert_loop_calls_fit,
    create_react_agent,
    loop_run,
    module_reader,
    read_module,
)

from langchain_pacms import ContextSelector, ToolLoopOptions
from langchain_pacms.integrations import create_pacms_hook

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

read_file = module_reader()


def loop_script(messages: list[BaseMessage], index: int) -> AIMessage:
    """Read module 0, 1, 2, ... one call per step; answer after LOOP_CALLS reads."""
    if index >= LOOP_CALLS:
        return AIMessage("module_37 raises QuotaError.")
    return read_module(index)


def _check(model: RecordingChatModel, events: list[dict[str, Any]], counter: Any) -> None:
    assert len(model.received) == LOOP_CALLS + 1
    assert_loop_calls_fit(model, counter)
    last = model.received[-1]
    assert isinstance(last[-1], ToolMessage) and "module_99" in str(last[-1].content)
    assert not any(e["over_budget"] for e in events)
    assert events[0]["mandatory"] == "system prompt and the latest turn"
    assert events[-1]["mandatory"].endswith("(the latest turn alone exceeds the budget)")
    assert events[-1]["dropped_by_kind"].get("tool", 0) > 50


def test_hook_keeps_its_budget_over_a_hundred_tool_calls():
    selector = ContextSelector()
    model = RecordingChatModel(script=loop_script)
    hook = create_pacms_hook(selector=selector, budget=LOOP_BUDGET)
    agent = create_react_agent(model, [read_file], pre_model_hook=hook)
    collector = EventCollector()
    agent.invoke(*loop_run(collector, system=True))
    events = collector.selections
    _check(model, events, selector.token_counter)


def test_middleware_keeps_its_budget_over_a_hundred_tool_calls():
    from langchain.agents import create_agent

    from langchain_pacms.integrations import PACMSMiddleware

    selector = ContextSelector()
    model = RecordingChatModel(script=loop_script)
    agent = create_agent(
        model,
        [read_file],
        system_prompt=LOOP_SYSTEM,
        middleware=[PACMSMiddleware(selector=selector, budget=LOOP_BUDGET)],
    )
    collector = EventCollector()
    agent.invoke(*loop_run(collector))
    events = collector.selections
    _check(model, events, selector.token_counter)


def test_keep_latest_turn_true_still_keeps_the_whole_turn_and_flags_it():
    model = RecordingChatModel(script=loop_script)
    hook = create_pacms_hook(LOOP_BUDGET, tool_loop=ToolLoopOptions(keep_latest_turn=True))
    agent = create_react_agent(model, [read_file], pre_model_hook=hook)
    collector = EventCollector()
    agent.invoke(*loop_run(collector))
    events = collector.selections
    assert events[-1]["over_budget"] and events[-1]["dropped"] == 0
    assert events[-1]["mandatory"] == "system prompt and the latest turn"
