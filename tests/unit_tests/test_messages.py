"""Message <-> candidate mapping: unit tests and property tests over random conversations."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from pacms_fakes import assert_provider_valid, slow_examples

from langchain_pacms import ContextSelector, available_strategies
from langchain_pacms.integrations import (
    ToolLoopOptions,
    apply_selection,
    create_pacms_hook,
    messages_to_candidates,
    query_from_messages,
)
from langchain_pacms.messages import (
    CONTEXT_DOCUMENTS_HEADER,
    CONTEXT_MEMORIES_HEADER,
    OMISSION_NOTE,
    content_text,
    memory_text,
)

SELECTOR = ContextSelector()
STRATEGIES = ["pacms", "topk", "lastk", "mmr", "rag"]
WORDS = [
    "port",
    "database",
    "staging",
    "deploy",
    "alpha",
    "invoice",
    "lunch",
    "weather",
    "cache",
    "latency",
    "budget",
    "token",
    "river",
    "mountain",
    "code",
    "secret",
    "cat",
    "dog",
    "error",
    "retry",
]


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


# -- random conversations ---------------------------------------------------------------------
text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=30).map(" ".join)


@st.composite
def contents(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 4)) == 0:  # multimodal
        blocks: list[Any] = [{"type": "text", "text": draw(text)}]
        if draw(st.booleans()):
            blocks.append({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}})
        if draw(st.booleans()):
            blocks.append(draw(text))
        return blocks
    return draw(text)


@st.composite
def conversations(draw: st.DrawFn) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    if draw(st.booleans()):
        messages.append(SystemMessage(draw(text)))
    n_calls = 0
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["human", "ai", "tools", "tools", "orphan", "system"]))
        if kind == "human":
            messages.append(HumanMessage(draw(contents())))
        elif kind == "ai":
            messages.append(AIMessage(draw(contents())))
        elif kind == "system" and draw(st.integers(0, 5)) == 0:
            messages.append(SystemMessage(draw(text)))
        elif kind == "orphan":
            messages.append(ToolMessage(draw(text), tool_call_id=f"ghost{n_calls}"))
            n_calls += 1
        elif kind == "tools":
            for _round in range(draw(st.integers(1, 3))):  # several rounds in a row
                calls = []
                for _ in range(draw(st.integers(1, 3))):  # parallel calls
                    # now and then a call gets the id of the one before (some models do that)
                    shared = calls and draw(st.integers(0, 5)) == 0
                    call_id = calls[-1]["id"] if shared else f"c{n_calls}"
                    calls.append(
                        call(draw(st.sampled_from(["search", "fetch"])), call_id, q=draw(text))
                    )
                    n_calls += 1
                ai_text = draw(st.one_of(st.just(""), text))
                messages.append(AIMessage(ai_text, tool_calls=calls))
                results = [c for c in calls if draw(st.integers(0, 9)) > 0]  # ~10% missing
                for c in draw(st.permutations(results)):
                    messages.append(
                        ToolMessage(draw(contents()), tool_call_id=c["id"], name=c["name"])
                    )
    if draw(st.booleans()) or not any(isinstance(m, HumanMessage) for m in messages):
        messages.append(HumanMessage(draw(contents())))
    return messages


def selection_inputs(
    messages: st.SearchStrategy[list[BaseMessage]], max_budget: int, *, context: bool = False
) -> dict[str, st.SearchStrategy[Any]]:
    """Hypothesis strategies of a selection's inputs, by argument name.

    ``messages``; with ``context``, memories and documents; a budget from 1 to ``max_budget``;
    one of :data:`STRATEGIES`; and whether placeholders stand in for left-out tool results.
    """
    inputs: dict[str, st.SearchStrategy[Any]] = {"messages": messages}
    if context:
        inputs |= {"memories": st.lists(text, max_size=4), "documents": st.lists(text, max_size=3)}
    return inputs | {
        "budget": st.integers(1, max_budget),
        "strategy": st.sampled_from(STRATEGIES),
        "placeholders": st.booleans(),
    }


def snapshot(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    return [m.model_dump() for m in messages]


@slow_examples(300)
@given(**selection_inputs(conversations(), 1500, context=True), keep_latest_turn=st.booleans())
def test_selection_output_is_always_valid(
    messages, memories, documents, budget, strategy, placeholders, keep_latest_turn
):
    before = snapshot(messages)
    ids_before = [id(m) for m in messages]
    docs = [Document(d) for d in documents]
    cands, spans = messages_to_candidates(
        messages,
        memories=memories,
        documents=docs,
        tool_placeholders=placeholders,
        keep_latest_turn=keep_latest_turn,
    )
    query = query_from_messages(messages) or "anything"
    if not query.strip():
        query = "anything"
    sel = SELECTOR.select(cands, query, budget=budget, strategy=strategy)
    out = apply_selection(messages, sel, spans)

    # inputs unmutated
    assert [id(m) for m in messages] == ids_before
    assert snapshot(messages) == before

    # provider validity: tool integrity
    assert_provider_valid(out)

    # system messages and the latest human message kept (same objects)
    out_ids = {id(m) for m in out}
    for m in messages:
        if isinstance(m, SystemMessage):
            assert id(m) in out_ids
    latest = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
    assert id(messages[latest]) in out_ids
    if keep_latest_turn:  # the work after the latest question is kept too
        for m in messages[latest + 1 :]:
            if not (isinstance(m, ToolMessage) and m.tool_call_id.startswith("ghost")):
                assert id(m) in out_ids

    # order preserved: input messages appear in input order (results adjacent in the input)
    index = {id(m): i for i, m in enumerate(messages)}
    positions = [index[id(m)] for m in out if id(m) in index]
    assert positions == sorted(positions)

    # passed through unchanged (multimodal content included)
    for m in out:
        if id(m) in index:
            assert m is messages[index[id(m)]]

    # budget respected unless the mandatory part alone exceeds it
    kept = set(sel.kept_ids)
    kept_tokens = sum(SELECTOR.token_counter(c.text) for c in cands if c.id in kept)
    mandatory_tokens = sum(SELECTOR.token_counter(c.text) for c in cands if c.mandatory)
    if mandatory_tokens <= budget:
        assert not sel.over_budget
        assert kept_tokens <= budget
    else:
        assert sel.over_budget
        assert kept == {c.id for c in cands if c.mandatory}

    # memories/documents: one context message, exactly the kept ones
    contexts = [m for m in out if id(m) not in index and isinstance(m, SystemMessage)]
    kept_mem = [c.text for c in cands if c.kind == "memory" and c.id in kept]
    kept_doc = [c.text for c in cands if c.kind == "document" and c.id in kept]
    assert len(contexts) == (1 if kept_mem or kept_doc else 0)
    if contexts:
        body = contexts[0].content
        assert (CONTEXT_MEMORIES_HEADER in body) == bool(kept_mem)
        assert (CONTEXT_DOCUMENTS_HEADER in body) == bool(kept_doc)
        bullets = [line[2:] for line in body.splitlines() if line.startswith("- ")]
        assert bullets == [t.strip() for t in kept_mem + kept_doc]

    # the first conversational message is human whenever the input's was
    conversational = [m for m in out if not isinstance(m, SystemMessage)]
    first_in = next(m for m in messages if not isinstance(m, SystemMessage))
    if isinstance(first_in, HumanMessage) and conversational:
        assert isinstance(conversational[0], HumanMessage)

    # deterministic
    again = apply_selection(
        messages, SELECTOR.select(cands, query, budget=budget, strategy=strategy), spans
    )
    assert [m.model_dump() for m in again] == [m.model_dump() for m in out]


@settings(max_examples=60, deadline=None)
@given(messages=conversations(), budget=st.integers(1, 800), strategy=st.sampled_from(STRATEGIES))
def test_hook_output_is_valid_for_random_conversations(messages, budget, strategy):
    hook = create_pacms_hook(
        budget, strategy=strategy, selector=SELECTOR, tool_loop=ToolLoopOptions(placeholders=True)
    )
    before = snapshot(messages)
    out = hook.invoke({"messages": messages})["llm_input_messages"]
    assert snapshot(messages) == before
    assert_provider_valid(out)
    assert hook.last_selection is not None
    assert hook.last_selection.tokens_kept <= budget or hook.last_selection.over_budget


# -- focused unit tests -----------------------------------------------------------------------
def test_parallel_calls_and_rounds_group_into_spans():
    msgs = [
        SystemMessage("sys"),
        HumanMessage("q"),
        AIMessage("", tool_calls=[call("a", "1"), call("b", "2")]),
        ToolMessage("rb", tool_call_id="2"),
        ToolMessage("ra", tool_call_id="1"),
        AIMessage("", tool_calls=[call("a", "3")]),
        ToolMessage("r3", tool_call_id="3"),
        AIMessage("final"),
        HumanMessage("next"),
        AIMessage("reply"),
        HumanMessage("latest"),
    ]
    _, spans = messages_to_candidates(msgs)
    assert [(s.id, s.kind, s.indices, s.mandatory) for s in spans] == [
        ("m0", "system", (0,), True),
        ("m1", "turn", (1,), False),
        ("t2", "tool", (2, 3, 4), False),
        ("t5", "tool", (5, 6), False),
        ("m7", "turn", (7,), False),
        ("m8", "turn", (8, 9), False),  # a human turn with its AI reply
        ("m10", "turn", (10,), True),
    ]


def test_orphan_tool_messages_dropped_and_missing_results_filled():
    msgs = [
        HumanMessage("q"),
        ToolMessage("orphan", tool_call_id="nope"),
        AIMessage("", tool_calls=[call("a", "1"), call("b", "2")]),
        ToolMessage("ra", tool_call_id="1"),
        HumanMessage("latest"),
    ]
    cands, spans = messages_to_candidates(msgs)
    sel = SELECTOR.select(cands, "q", budget=10_000)
    out = apply_selection(msgs, sel, spans)
    assert_provider_valid(out)
    assert all(m.content != "orphan" for m in out)
    filled = [m for m in out if isinstance(m, ToolMessage) and m.tool_call_id == "2"]
    assert len(filled) == 1 and filled[0].status == "error"
    assert "no result" in filled[0].content


def test_results_moved_next_to_their_call():
    msgs = [
        HumanMessage("q"),
        AIMessage("", tool_calls=[call("a", "1")]),
        HumanMessage("interjection"),
        ToolMessage("ra", tool_call_id="1"),
        HumanMessage("latest"),
    ]
    cands, spans = messages_to_candidates(msgs)
    out = apply_selection(msgs, SELECTOR.select(cands, "q", budget=10_000), spans)
    assert_provider_valid(out)
    assert [m.content for m in out] == ["q", "", "ra", "interjection", "latest"]


def test_placeholder_mode_keeps_call_with_placeholder_result():
    big = "lorem ipsum dolor " * 300
    msgs = [
        HumanMessage("fetch the invoice"),
        AIMessage("", tool_calls=[call("fetch_invoice", "1", number="INV-7")]),
        ToolMessage(big, tool_call_id="1", name="fetch_invoice"),
        AIMessage("The invoice INV-7 totals 420 EUR."),
        HumanMessage("what did the invoice INV-7 total?"),
    ]
    cands, spans = messages_to_candidates(msgs, tool_placeholders=True)
    assert [c.id for c in cands] == ["m0", "t1:call", "t1", "m3", "m4"]
    sel = SELECTOR.select(cands, query_from_messages(msgs), budget=80, strategy="topk")
    out = apply_selection(msgs, sel, spans)
    assert_provider_valid(out)
    assert "t1:call" in sel.kept_ids and "t1" not in sel.kept_ids
    results = [m for m in out if isinstance(m, ToolMessage)]
    assert len(results) == 1 and "omitted" in results[0].content
    assert results[0].tool_call_id == "1"
    # with room for everything, the full span wins and no placeholder is sent
    sel = SELECTOR.select(cands, query_from_messages(msgs), budget=100_000)
    out = apply_selection(msgs, sel, spans)
    assert [m.content for m in out if isinstance(m, ToolMessage)] == [big]


def test_multimodal_content_scored_as_text_and_passed_through():
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    human = HumanMessage([{"type": "text", "text": "the staging port is 6543"}, image])
    msgs = [human, HumanMessage("lunch was nice"), HumanMessage("which staging port?")]
    cands, spans = messages_to_candidates(msgs)
    assert cands[0].text == "the staging port is 6543\n[image]"  # LangChain's standard type
    sel = SELECTOR.select(cands, "which staging port?", budget=20)
    out = apply_selection(msgs, sel, spans)
    assert out[0] is human and out[0].content[1] == image


def test_reasoning_blocks_count_against_the_budget():
    thought = "let me think about ports and databases " * 40
    for kind in ("thinking", "reasoning"):
        ai = AIMessage([{"type": kind, kind: thought}, {"type": "text", "text": "It is 6543."}])
        msgs = [HumanMessage("the staging port is 6543"), ai, HumanMessage("which port?")]
        cands, spans = messages_to_candidates(msgs)
        assert any(thought in c.text for c in cands)  # scored and counted like text
        sel = SELECTOR.select(cands, "which port?", budget=60)
        out = apply_selection(msgs, sel, spans)
        assert ai not in out and sel.tokens_kept <= 60  # too long to fit: left out


def test_chat_message_with_user_role_is_a_human_turn():
    from langchain_core.messages import ChatMessage

    question = ChatMessage(role="user", content="which staging port?")
    msgs = [HumanMessage("lunch was nice " * 20), AIMessage("ok"), question]
    assert query_from_messages(msgs) == "which staging port?"
    cands, spans = messages_to_candidates(msgs)
    latest = next(c for c in cands if 2 in spans[[s.id for s in spans].index(c.id)].indices)
    assert latest.mandatory  # the latest turn is kept, as for a HumanMessage
    out = apply_selection(msgs, SELECTOR.select(cands, "which staging port?", budget=8), spans)
    assert out[-1] is question


def test_memories_and_documents_become_one_context_message():
    msgs = [SystemMessage("You are helpful."), HumanMessage("What port does staging use?")]
    memories = [{"content": "Staging DB port is 6543."}, "User likes cats."]
    docs = [Document("Staging runs Postgres 16 on port 6543.")]
    cands, spans = messages_to_candidates(msgs, memories=memories, documents=docs)
    assert [c.kind for c in cands] == ["memory", "memory", "document", "system", "turn"]
    sel = SELECTOR.select(cands, query_from_messages(msgs), budget=32, strategy="topk")
    out = apply_selection(msgs, sel, spans)
    assert out[0].content == "You are helpful."
    assert isinstance(out[1], SystemMessage)
    assert out[1].content.startswith(CONTEXT_MEMORIES_HEADER)
    assert "- Staging DB port is 6543." in out[1].content
    assert "cats" not in out[1].content
    assert CONTEXT_DOCUMENTS_HEADER in out[1].content
    assert out[2] is msgs[1]
    human = apply_selection(msgs, sel, spans, context_role="human")
    assert isinstance(human[1], HumanMessage)


def test_omission_note_when_an_ai_message_would_come_first():
    msgs = [
        SystemMessage("sys"),
        HumanMessage("zzz filler filler filler filler filler"),
        AIMessage("the secret code is 99"),
        HumanMessage("what is the secret code?"),
    ]
    cands, spans = messages_to_candidates(msgs, pair_turns=False)
    sel = SELECTOR.select(cands, query_from_messages(msgs), budget=13, strategy="topk")
    assert sel.kept_ids == ("m0", "m2", "m3")
    out = apply_selection(msgs, sel, spans)
    assert [type(m).__name__ for m in out] == [
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "HumanMessage",
    ]
    assert out[1].content == OMISSION_NOTE
    assert apply_selection(msgs, sel, spans, start_on_human=False)[1] is msgs[2]


def test_spans_read_from_selection_when_not_passed():
    msgs = [HumanMessage("a"), HumanMessage("b")]
    cands, spans = messages_to_candidates(msgs)
    sel = SELECTOR.select(cands, "b", budget=100)
    assert apply_selection(msgs, sel) == apply_selection(msgs, sel, spans)
    plain = SELECTOR.select(["a", "b"], "b", budget=100)
    with pytest.raises(ValueError, match="carries no Span"):
        apply_selection(msgs, plain)


def test_text_helpers():
    assert content_text([{"type": "text", "text": "x"}, {"type": "audio"}]) == "x\n[audio]"
    assert memory_text({"text": "t"}) == "t"
    assert memory_text({"a": 1}) == '{"a": 1}'
    assert memory_text({"content": "", "text": "real"}) == "real"  # a blank first key: the next
    assert memory_text({"content": " "}) == " "  # only blank: blank (left out), not JSON
    assert query_from_messages([AIMessage("x")]) == ""
    assert set(STRATEGIES) <= set(available_strategies())


def test_a_tool_call_without_an_id_is_never_sent_without_a_result():
    no_id = {"name": "search", "args": {"q": "x"}, "id": None, "type": "tool_call"}
    raw = {"id": None, "type": "function", "function": {"name": "search", "arguments": "{}"}}
    msgs = [
        HumanMessage("find x and y"),
        AIMessage(
            "",
            tool_calls=[no_id, call("fetch", "c1", q="y")],
            additional_kwargs={"tool_calls": [raw]},
        ),
        ToolMessage("y found", tool_call_id="c1", name="fetch"),
        AIMessage("Looking once more.", tool_calls=[no_id]),  # text stays, the call goes
        AIMessage("", tool_calls=[no_id]),  # nothing left to send: dropped
        HumanMessage("thanks, and z?"),
        AIMessage("", tool_calls=[no_id]),  # in the latest turn (mandatory) all the same
    ]
    for budget in (30, 2000):
        cands, spans = messages_to_candidates(msgs, token_counter=SELECTOR.token_counter)
        out = apply_selection(msgs, SELECTOR.select(cands, "z", budget=budget), spans)
        assert_provider_valid(out)
        for m in out:
            if isinstance(m, AIMessage):
                assert all(c["id"] for c in m.tool_calls)
                assert not m.additional_kwargs.get("tool_calls")
                assert m.content or m.tool_calls
        assert msgs[1].tool_calls[0]["id"] is None  # the input is not modified
    assert any(m.content == "Looking once more." and not m.tool_calls for m in out)
    hook = create_pacms_hook(2000, selector=SELECTOR)
    assert_provider_valid(hook.invoke({"messages": msgs})["llm_input_messages"])
