"""create_react_agent(prompt=...): the prompt the hook cannot see is charged to the budget."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from pacms_fakes import (
    EventCollector,
    RecordingChatModel,
    assert_provider_valid,
    create_react_agent,
    long_conversation,
    tool_calling_script,
)

from langchain_pacms.integrations import SelectionConfig, create_pacms_hook
from langchain_pacms.messages import sent_tokens

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PROMPT = "You are a meticulous archive assistant. " + "Follow the house style guide. " * 60
BUDGET = 1500


@tool
def search(query: str) -> str:
    """Search the archive (returns a large payload)."""
    return f"Archive results for {query}: " + "row " * 400


def run_agent(hook) -> tuple[RecordingChatModel, list[dict]]:
    model = RecordingChatModel(script=tool_calling_script("search", "invoices"))
    agent = create_react_agent(model, [search], prompt=PROMPT, pre_model_hook=hook)
    history = long_conversation(20, fact="My locker code is 31-07-42.")
    collector = EventCollector()
    agent.invoke(
        {"messages": [*history, HumanMessage("Search the archive for invoices.")]},
        {"callbacks": [collector]},
    )
    events = collector.selections
    return model, events


def test_the_agent_prompt_is_charged_to_the_budget():
    hook = create_pacms_hook(config=SelectionConfig(budget=BUDGET, prompt=PROMPT))
    model, events = run_agent(hook)
    counter = hook.selector.token_counter
    prompt_tokens = counter(PROMPT)
    assert prompt_tokens > 300  # a prompt big enough to matter
    assert len(model.received) == 2 and len(events) == 2
    for received, event in zip(model.received, events):
        assert isinstance(received[0], SystemMessage) and received[0].content == PROMPT
        assert_provider_valid(received)
        sent = sent_tokens(received, counter)
        assert sent <= BUDGET
        assert event["tokens_sent"] == sent and not event["over_budget"]


def test_without_the_prompt_option_the_hook_cannot_see_it():
    # What the docs warn about: the model then receives more than the budget.
    hook = create_pacms_hook(budget=BUDGET)
    model, events = run_agent(hook)
    counter = hook.selector.token_counter
    assert any(sent_tokens(r, counter) > BUDGET for r in model.received)
    assert all(e["tokens_sent"] <= BUDGET for e in events)  # what the hook itself sent fits


def test_over_budget_when_the_prompt_and_the_mandatory_part_exceed_the_budget():
    hook = create_pacms_hook(config=SelectionConfig(budget=200, prompt=PROMPT))
    model, events = run_agent(hook)
    assert all(e["over_budget"] for e in events)
    counter = hook.selector.token_counter
    for received, event in zip(model.received, events):
        assert event["tokens_sent"] == sent_tokens(received, counter) > 200
        assert received[-1].content  # the latest turn is still sent


def test_reserve_tokens_are_charged_like_a_prompt():
    counter = create_pacms_hook(budget=10).selector.token_counter
    reserve = sent_tokens([SystemMessage(PROMPT)], counter)
    by_prompt = create_pacms_hook(config=SelectionConfig(budget=BUDGET, prompt=PROMPT))
    by_reserve = create_pacms_hook(config=SelectionConfig(budget=BUDGET, reserve_tokens=reserve))
    run_agent(by_prompt)
    run_agent(by_reserve)
    assert by_prompt.last_selection.kept_ids == by_reserve.last_selection.kept_ids
    assert by_prompt.last_selection.info["tokens_unseen"] == reserve


@pytest.mark.parametrize(
    "kwargs, message",
    [({"reserve_tokens": -1}, "reserve_tokens"), ({"prompt": 3}, "prompt must be a str")],
)
def test_bad_unseen_options_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        create_pacms_hook(config=SelectionConfig(budget=100, **kwargs))


def test_the_middleware_refuses_prompt_it_counts_the_system_message_itself():
    from langchain_pacms.integrations.middleware import PACMSMiddleware

    with pytest.raises(ValueError, match="prompt is for the pre-model hook"):
        PACMSMiddleware(config=SelectionConfig(budget=100, prompt=PROMPT))
    mw = PACMSMiddleware(config=SelectionConfig(budget=100, reserve_tokens=5))
    assert mw.runner.unseen_tokens() == 5
