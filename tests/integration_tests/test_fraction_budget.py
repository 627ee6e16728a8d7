"""``budget=("fraction", x)`` of the model's ``profile["max_input_tokens"]``, tools charged."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from pacms_fakes import RecordingChatModel, call, slow_examples

from langchain_pacms.integrations import SelectionConfig, create_pacms_hook
from langchain_pacms.integrations.config import DEFAULT_TOKENS_PER_MESSAGE
from langchain_pacms.integrations.middleware import PACMSMiddleware
from langchain_pacms.integrations.request import tool_schema_text
from langchain_pacms.integrations.runner import SelectionRunner
from langchain_pacms.messages import sent_tokens

SYSTEM = "You are the archive assistant. Answer from the archive."


@tool
def lookup(record_id: str, fields: list[str], include_history: bool = False) -> str:
    """Look up an archive record by id and return the requested fields (and its history)."""
    return f"record {record_id}"


@tool
def search_archive(query: str, limit: int = 10) -> str:
    """Search the archive for records matching a free-text query, newest first."""
    return f"results for {query}"


TOOLS = [lookup, search_archive]


def profiled(limit: int | None, script: list[AIMessage] | None = None) -> RecordingChatModel:
    profile = None if limit is None else {"max_input_tokens": limit}
    return RecordingChatModel(script=script or [AIMessage("done")], profile=profile)


def received_tokens(model: RecordingChatModel, counter) -> list[int]:
    """What each call sent: messages, their framing, and the bound tools' schemas."""
    schemas = sum(counter(tool_schema_text(t)) for t in model.bound_tools)
    return [
        sent_tokens(r, counter) + DEFAULT_TOKENS_PER_MESSAGE * len(r) + schemas
        for r in model.received
    ]


words = st.lists(st.sampled_from(["port", "staging", "billing", "rows", "archive", "job", "of"]))


@st.composite
def histories(draw: st.DrawFn) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for k in range(draw(st.integers(0, 30))):
        size = draw(st.integers(1, 400))
        text = " ".join(draw(words) or ["x"]) + " filler" * size
        kind = draw(st.sampled_from(["turn", "tool"]))
        if kind == "turn":
            messages += [HumanMessage(text), AIMessage("ok " + text[:200])]
        else:
            messages += [
                AIMessage("", tool_calls=[call("search_archive", {"query": "q"}, f"c{k}")]),
                ToolMessage(text, tool_call_id=f"c{k}", name="search_archive"),
            ]
    messages.append(HumanMessage("Which port does staging use?"))
    return messages


@slow_examples(40)
@given(messages=histories(), limit=st.integers(1200, 20_000), use_tools=st.booleans())
def test_a_half_of_the_window_holds_with_the_tool_schemas(messages, limit, use_tools):
    model = profiled(limit)
    mw = PACMSMiddleware(budget=("fraction", 0.5))
    agent = create_agent(model, TOOLS if use_tools else [], system_prompt=SYSTEM, middleware=[mw])
    agent.invoke({"messages": messages})
    counter = mw.selector.token_counter
    (sent,) = received_tokens(model, counter)
    selection = mw.last_selection
    assert selection.budget == limit // 2
    assert sent == selection.info["tokens_sent"]
    assert sent <= limit // 2 and not selection.over_budget


def test_the_tool_schemas_and_framing_are_what_is_charged():
    model = profiled(4000)
    mw = PACMSMiddleware(budget=("fraction", 0.5))
    create_agent(model, TOOLS, system_prompt=SYSTEM, middleware=[mw]).invoke(
        {"messages": [HumanMessage("hello")]}
    )
    counter = mw.selector.token_counter
    schemas = mw.runner.tool_tokens(TOOLS)
    assert schemas == sum(counter(tool_schema_text(t)) for t in TOOLS) > 100
    (received,) = model.received
    framing = DEFAULT_TOKENS_PER_MESSAGE * len(received)
    assert (
        mw.last_selection.info["tokens_sent"] == sent_tokens(received, counter) + framing + schemas
    )


def test_the_hook_takes_the_model_and_tools_it_cannot_see():
    model = profiled(1000)
    hook = create_pacms_hook(
        config=SelectionConfig(budget=("fraction", 0.25), model=model, tools=TOOLS)
    )
    history = [HumanMessage("tell me about job " + "details " * 80, id=f"h{i}") for i in range(8)]
    out = hook.invoke({"messages": [*history, HumanMessage("which job?")]})["llm_input_messages"]
    selection = hook.last_selection
    counter = hook.selector.token_counter
    schemas = sum(counter(tool_schema_text(t)) for t in TOOLS)
    sent = sent_tokens(out, counter) + DEFAULT_TOKENS_PER_MESSAGE * len(out) + schemas
    assert selection.budget == 250 and sent == selection.info["tokens_sent"] <= 250
    assert len(out) < 9


def test_budget_tokens_tuple_is_budget_tokens():
    hook = create_pacms_hook(budget=("tokens", 40))
    assert hook.runner.config.budget.tokens == 40 and hook.runner.config.message_framing == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"budget": ("fraction", 0.5)}, "SelectionConfig\\(model=<the agent's chat model>\\)"),
        ({"budget": ("fraction", 0.5), "model": profiled(None)}, "has none"),
        ({"budget": ("fraction", 1.5)}, r"fraction=...\) must be a number in \(0, 1\]"),
        ({"budget": ("messages", 10)}, r"budget must be a Budget, a positive int"),
        ({"budget": 10, "model": profiled(1000)}, "only used with"),
        ({"budget": 10, "tools": lookup}, "tools must be a list"),
    ],
)
def test_the_hook_rejects_what_it_cannot_use(options, message):
    with pytest.raises(ValueError, match=message):
        create_pacms_hook(config=SelectionConfig(**options))


def test_the_middleware_reads_the_model_and_tools_from_the_request():
    with pytest.raises(ValueError, match="reads each request's model and tools"):
        PACMSMiddleware(config=SelectionConfig(budget=("fraction", 0.5), model=profiled(1000)))
    with pytest.raises(ValueError, match="reads each request's model and tools"):
        PACMSMiddleware(config=SelectionConfig(budget=100, tools=TOOLS))


def test_a_model_without_a_profile_is_a_clear_error_at_the_first_call():
    mw = PACMSMiddleware(budget=("fraction", 0.5))
    agent = create_agent(profiled(None), TOOLS, middleware=[mw])
    with pytest.raises(ValueError, match=r'profile\["max_input_tokens"\].*has none'):
        agent.invoke({"messages": [HumanMessage("hi")]})


def test_a_tool_edited_in_place_is_charged_at_its_new_size() -> None:
    # the count was remembered per tool object: a description that grew was still charged at
    # its old size, and requests went over the budget unflagged (617 tokens sent on 400)
    runner = SelectionRunner(SelectionConfig(budget=400))
    schema = {"name": "lookup", "description": "Look up.", "parameters": {}}
    before = runner.tool_tokens([schema])
    schema["description"] = "Look up a record by its key. " * 20
    after = runner.tool_tokens([schema])
    assert after == runner.selector.token_counter(tool_schema_text(schema)) > before
