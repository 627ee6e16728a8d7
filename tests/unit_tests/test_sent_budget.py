"""The budget holds on what the model receives: framing text, placeholders and unseen prompts."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.retrievers import BaseRetriever
from langgraph.store.memory import InMemoryStore
from pacms_fakes import assert_provider_valid, slow_examples
from test_messages import SELECTOR, STRATEGIES, conversations, selection_inputs, text

from langchain_pacms.integrations import (
    MemoryOptions,
    PACMSCompressor,
    SelectionConfig,
    ToolLoopOptions,
    create_pacms_hook,
)
from langchain_pacms.messages import OMISSION_NOTE, sent_tokens


def plain_tokens(hook, messages: list[BaseMessage]) -> int:
    """Tokens of text-only messages, each counted on its own with the hook's counter."""
    return sum(hook.selector.token_counter(str(m.content)) for m in messages)


def memory_store() -> InMemoryStore:
    store = InMemoryStore()
    for i, fact in enumerate(
        ["The user likes green tea.", "The user lives in Porto.", "The user owns a cat named Rex."]
    ):
        store.put(("mem",), f"k{i}", {"content": fact})
    return store


def test_context_message_header_and_bullets_are_charged_to_the_budget():
    # before the fix: 46 tokens sent on a 40-token budget (the header and bullets were free)
    hook = create_pacms_hook(
        40, strategy="topk", memory=MemoryOptions([("mem",)], store=memory_store())
    )
    msgs = [
        AIMessage("Earlier I answered a question about tea and cats."),
        HumanMessage("Where does the user live, and what tea?"),
    ]
    out = hook.invoke({"messages": msgs})["llm_input_messages"]
    assert "Relevant memories:" in out[0].content  # memories still reach the model
    assert plain_tokens(hook, out) <= 40
    assert not hook.last_selection.over_budget


def test_omission_note_is_charged_to_the_budget():
    # before the fix: the 15-token note came on top of 27 kept tokens on a 30-token budget
    weather = {"name": "weather", "args": {"city": "Lisbon"}, "id": "c1", "type": "tool_call"}
    msgs = [
        HumanMessage("Tell me about the weather in Lisbon today and this weekend, please."),
        AIMessage("", tool_calls=[weather]),
        ToolMessage("Sunny, 25 C.", tool_call_id="c1", name="weather"),
        AIMessage("It is sunny and 25 degrees."),
        HumanMessage("And tomorrow?"),
    ]
    hook = create_pacms_hook(budget=30, strategy="lastk")
    out = hook.invoke({"messages": msgs})["llm_input_messages"]
    assert out[0].content == OMISSION_NOTE  # the first turn was dropped: the note is needed
    assert sent_tokens(out, hook.selector.token_counter) <= 30
    assert not hook.last_selection.over_budget


def test_over_budget_when_the_mandatory_part_and_its_framing_exceed_the_budget():
    hook = create_pacms_hook(budget=5)
    msgs = [
        SystemMessage("You are a careful assistant who answers briefly."),
        HumanMessage("What is the capital of Portugal?"),
    ]
    out = hook.invoke({"messages": msgs})["llm_input_messages"]
    assert out == msgs
    assert hook.last_selection.over_budget


def tool_history() -> list[BaseMessage]:
    msgs: list[BaseMessage] = []
    for i in range(4):
        cid = f"c{i}"
        msgs += [
            HumanMessage(f"Look up invoice number {i} in the archive."),
            AIMessage(
                "",
                tool_calls=[
                    {
                        "name": "search",
                        "args": {"q": f"invoice {i}"},
                        "id": cid,
                        "type": "tool_call",
                    }
                ],
            ),
            ToolMessage(f"Invoice {i}: " + "line item " * 30, tool_call_id=cid, name="search"),
            AIMessage(f"Invoice {i} has thirty line items."),
        ]
    return [*msgs, HumanMessage("Which invoice had line items?")]


@pytest.mark.parametrize("budget", [120, 400, 5000])
def test_a_tool_span_and_its_call_only_variant_are_alternatives(budget):
    # before the fix, with room for both, topk kept t1 and t1:call and paid for both
    hook = create_pacms_hook(budget, strategy="topk", tool_loop=ToolLoopOptions(placeholders=True))
    msgs = tool_history()
    out = hook.invoke({"messages": msgs})["llm_input_messages"]
    selection = hook.last_selection
    kept = set(selection.kept_ids)
    assert not any(k.endswith(":call") and k.removesuffix(":call") in kept for k in kept)
    counter = hook.selector.token_counter
    assert selection.tokens_kept == sent_tokens(out, counter) <= budget  # nothing paid twice
    calls = [m for m in out if isinstance(m, AIMessage) and m.tool_calls]
    assert len({m.tool_calls[0]["id"] for m in calls}) == len(calls)  # no call sent twice


# -- the property: what is sent, counted the same way, fits (or over_budget says why not) ------
class ListRetriever(BaseRetriever):
    """Returns the same documents for every query."""

    documents: list[Document]

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        return list(self.documents)


def check_sent(selection, sent: int, budget: int, mandatory_only: bool) -> None:
    assert selection.info["tokens_sent"] == sent
    assert selection.budget == budget
    if sent > budget:
        assert selection.over_budget and mandatory_only
    else:
        assert not selection.over_budget


@slow_examples(60)
@given(**selection_inputs(conversations(), 600, context=True), reserve=st.integers(0, 40))
def test_hook_sends_within_the_budget(
    messages, memories, documents, budget, strategy, placeholders, reserve
):
    store = InMemoryStore()
    for i, memory in enumerate(memories):
        store.put(("mem",), f"k{i}", {"content": memory})
    config = SelectionConfig(
        budget=budget,
        strategy=strategy,
        selector=SELECTOR,
        tool_loop=ToolLoopOptions(placeholders=placeholders),
        memory=MemoryOptions([("mem",)], store=store),
        reserve_tokens=reserve,
        retriever=ListRetriever(documents=[Document(d) for d in documents]),
    )
    hook = create_pacms_hook(config=config)
    out = hook.invoke({"messages": messages})["llm_input_messages"]
    assert_provider_valid(out)
    selection = hook.last_selection
    sent = sent_tokens(out, SELECTOR.token_counter) + reserve
    check_sent(selection, sent, budget, all(c.mandatory for c in selection.kept))


@slow_examples(30)
@given(**selection_inputs(conversations(), 600))
def test_middleware_sends_within_the_budget(messages, budget, strategy, placeholders):
    from langchain.agents.middleware import ModelRequest

    from langchain_pacms.integrations.middleware import PACMSMiddleware

    system = next((m for m in messages if isinstance(m, SystemMessage)), None)
    rest = [m for m in messages if m is not system]
    mw = PACMSMiddleware(
        budget,
        strategy=strategy,
        selector=SELECTOR,
        tool_loop=ToolLoopOptions(placeholders=placeholders),
    )
    seen: list[ModelRequest] = []
    request = ModelRequest(
        model=FakeMessagesListChatModel(responses=[AIMessage("ok")]),
        messages=rest,
        system_message=system,
    )
    mw.wrap_model_call(request, lambda r: seen.append(r) or AIMessage("ok"))
    (sent_request,) = seen
    sent_messages = [
        *([sent_request.system_message] if system is not None else []),
        *sent_request.messages,
    ]
    assert_provider_valid(sent_messages)
    selection = mw.last_selection
    sent = sent_tokens(sent_messages, SELECTOR.token_counter)
    check_sent(selection, sent, budget, all(c.mandatory for c in selection.kept))


@settings(max_examples=60, deadline=None)
@given(
    documents=st.lists(text, min_size=1, max_size=12),
    budget=st.integers(1, 300),
    strategy=st.sampled_from(STRATEGIES),
    query=text,
)
def test_compressor_sends_within_the_budget(documents, budget, strategy, query):
    compressor = PACMSCompressor(budget, selector=SELECTOR, strategy=strategy)
    kept = compressor.compress_documents([Document(d) for d in documents], query)
    assert sum(SELECTOR.token_counter(d.page_content) for d in kept) <= budget


def test_blank_documents_and_memories_are_not_sent_as_empty_bullets():
    # before the fix: a Document("") and a memory "  " each became an empty "- " bullet
    store = InMemoryStore()
    store.put(("mem",), "k0", {"content": "The user lives in Porto."})
    store.put(("mem",), "k1", {"content": "  "})
    hook = create_pacms_hook(
        500,
        strategy="topk",
        memory=MemoryOptions([("mem",)], store=store),
        retriever=ListRetriever(documents=[Document(""), Document("Porto is in Portugal.")]),
    )
    out = hook.invoke({"messages": [HumanMessage("Where does the user live?")]})
    context = out["llm_input_messages"][0].content
    assert "Porto is in Portugal." in context and "The user lives in Porto." in context
    bullets = [line for line in context.splitlines() if line.startswith("-")]
    assert len(bullets) == 2 and all(b.removeprefix("-").strip() for b in bullets)
    kept = sorted(c.id for c in hook.last_selection.kept if c.id[:3] in ("doc", "mem"))
    assert kept == ["doc1", "mem0"]  # ids still name each item's place in its lookup
