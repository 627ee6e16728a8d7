"""The latest turn is kept whole only if it fits as sent: its stubs' locators listed again too."""

from __future__ import annotations

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from pacms_fakes import EventCollector, call

from langchain_pacms import ContextSelector
from langchain_pacms.integrations import create_pacms_hook
from langchain_pacms.lifecycle import Action, apply_actions, index_messages
from langchain_pacms.messages import sent_tokens

PRICES = "\n".join(f"item {i}: price {1000 + 7.5 * i}" for i in range(80))


def _history() -> list[BaseMessage]:
    """Two turns; the latest one's first record is folded, its prices left to the first's stub."""
    msgs: list[BaseMessage] = [
        SystemMessage("You look up records.", id="s"),
        HumanMessage("Turn one: fetch k0", id="h1"),
        AIMessage("", tool_calls=[call("get_record", {"key": "k0"}, "c0")], id="a0"),
        ToolMessage(f"REC-k0\n{PRICES}", tool_call_id="c0", id="t0"),
        AIMessage("Fetched k0. " + "padding " * 400, id="a0x"),
        HumanMessage("Turn two: fetch k1 and k2", id="h2"),
        AIMessage("", tool_calls=[call("get_record", {"key": "k1"}, "c1")], id="a1"),
        ToolMessage(f"REC-k1\n{PRICES}", tool_call_id="c1", id="t1"),
        AIMessage("", tool_calls=[call("get_record", {"key": "k2"}, "c2")], id="a2"),
        ToolMessage("REC-k2: empty", tool_call_id="c2", id="t2"),
    ]
    index = index_messages(msgs)
    tools = [o.id for o in index.objects if o.kind == "tool"][:2]
    return apply_actions(msgs, index, [Action("fold", o) for o in tools]).messages


def test_a_latest_turn_that_fits_only_without_its_stubs_locators_is_narrowed() -> None:
    msgs = _history()
    latest = msgs[5:]
    assert "1007.5" not in str(latest[2].content)  # left out: the first turn's stub shows it
    selector = ContextSelector()
    counter = selector.token_counter
    budget = sent_tokens([msgs[0], *latest], counter) + 20  # the turn fits as it is in the state
    hook = create_pacms_hook(budget, selector=selector)
    events = EventCollector()
    out = hook.invoke({"messages": msgs}, {"callbacks": [events]})["llm_input_messages"]
    (event,) = events.selections
    assert sent_tokens(out, counter) <= budget
    assert not event["over_budget"] and "the newest step" in event["mandatory"]
