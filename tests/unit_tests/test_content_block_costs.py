"""Every content block is charged what it costs: an image what models charge, the rest its JSON."""

from __future__ import annotations

import json
import string
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from pacms_fakes import assert_provider_valid, slow_examples
from test_messages import SELECTOR, selection_inputs, text

from langchain_pacms.integrations import ToolLoopOptions, create_pacms_hook, messages_to_candidates
from langchain_pacms.messages import MessageMemo, content_text, sent_tokens
from langchain_pacms.messages.media import IMAGE_TOKENS
from langchain_pacms.tokens import TokenCounter

COUNTER = SELECTOR.token_counter


def dump(block: Any) -> str:
    return json.dumps(block, sort_keys=True, ensure_ascii=False, default=str)


def independent_tokens(messages: list[BaseMessage], counter=COUNTER) -> int:
    """Each message's content, counted here: text as text, an image (these are unreadable) the
    most one costs, every other block as JSON."""
    total = 0
    for m in messages:
        if isinstance(m.content, str):
            total += counter(m.content)
            continue
        for block in m.content:
            if isinstance(block, str):
                total += counter(block)
            elif block.get("type") == "text":
                total += counter(block["text"])
            elif block.get("type") in ("reasoning", "thinking"):
                total += counter(block[block["type"]])
            elif block.get("type") in ("image", "image_url"):  # of no size read here: the most
                total += IMAGE_TOKENS
            else:
                total += counter(dump(block))
    return total


def web_search_result(n: int = 6) -> dict[str, Any]:
    """An Anthropic server-tool result block: sent whole, no text of its own."""
    return {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": [
            {
                "type": "web_search_result",
                "url": f"https://example.com/ports/{i}",
                "title": "Default database ports and how to change them " * 3,
                "encrypted_content": "Eq8BCioIAhgCIiQ4YjI" * 30,
            }
            for i in range(n)
        ],
    }


# -- what each kind of block costs --------------------------------------------------------------
def test_string_contents_cost_what_they_did():
    counter = TokenCounter()
    call = {"name": "search", "args": {"q": "ports"}, "id": "c1", "type": "tool_call"}
    msgs = [
        HumanMessage("which port does staging use?"),
        AIMessage("", tool_calls=[call]),
        ToolMessage("port 6543", tool_call_id="c1", name="search"),
    ]
    assert [sent_tokens([m], counter) for m in msgs] == [
        counter("which port does staging use?"),
        counter('search({"q": "ports"})'),
        counter("search: port 6543"),
    ]


@pytest.mark.parametrize(
    "block",
    [
        web_search_result(),
        {"type": "json", "json": {"rows": [{"id": i, "name": f"item {i}"} for i in range(80)]}},
        {"type": "file", "file": {"file_data": "JVBERi0x" * 200, "filename": "a.pdf"}},
        {"kind": "unknown", "payload": list(range(300))},
    ],
    ids=["web_search", "json", "file", "untyped"],
)
def test_a_block_that_is_not_text_costs_its_json(block):
    message = ToolMessage(["rows follow", block], tool_call_id="c1", name="query")
    marker = content_text(message.content).rsplit("\n", 1)[1]
    expected = COUNTER("query: rows follow\n" + marker) + COUNTER(dump(block))
    assert sent_tokens([message], COUNTER) == expected > COUNTER(dump(block))
    assert MessageMemo().tokens(message, COUNTER) == expected


def test_text_of_known_blocks_is_counted_as_text():
    thought = "let me weigh the staging and production ports"
    result = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": "6543"}],
    }
    msgs = [
        AIMessage([{"type": "reasoning", "reasoning": thought}, {"type": "text", "text": "6543"}]),
        AIMessage([{"type": "thinking", "thinking": thought, "signature": "c2ln"}, "6543"]),
        HumanMessage([result, {"type": "text", "text": "and production?"}]),
    ]
    assert [content_text(m.content) for m in msgs] == [
        f"{thought}\n6543",
        f"{thought}\n6543",
        "6543\nand production?",
    ]
    for m in msgs:
        assert sent_tokens([m], COUNTER) == COUNTER(content_text(m.content))


@pytest.mark.parametrize(
    "block",
    [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBORw0K" * 2000}},
        {"type": "image", "base64": "iVBORw0K" * 2000, "mime_type": "image/png"},
    ],
    ids=["image_url", "image"],
)
def test_an_image_costs_what_a_model_charges_not_its_json(block):
    # PNG's signature repeated: no size to read, so the most one image costs
    message = ToolMessage(["rows follow", block], tool_call_id="c1", name="query")
    expected = COUNTER("query: rows follow\n[image]") + IMAGE_TOKENS
    assert sent_tokens([message], COUNTER) == expected < COUNTER(dump(block))
    assert MessageMemo().tokens(message, COUNTER) == expected


def test_blocks_in_a_tool_result_cost_what_they_cost_outside_one():
    image = {"type": "image", "base64": "iVBORw0K" * 100, "mime_type": "image/png"}
    rows = {"type": "json", "json": {"rows": list(range(50))}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": ["a chart", image, rows]}
    message = HumanMessage([result])
    assert content_text(message.content) == "a chart\n[image]\n[json]"
    expected = COUNTER("a chart\n[image]\n[json]") + IMAGE_TOKENS + COUNTER(dump(rows))
    assert sent_tokens([message], COUNTER) == expected


def test_candidates_cost_their_blocks_with_and_without_a_memo():
    block = web_search_result()
    msgs = [HumanMessage("search ports"), AIMessage(["Found them.", block]), HumanMessage("and?")]
    for memo in (None, MessageMemo()):
        cands, _ = messages_to_candidates(msgs, token_counter=COUNTER, memo=memo)
        assert cands[0].tokens == sent_tokens(msgs[:2], COUNTER) > COUNTER(dump(block))


def test_the_memo_counts_a_block_edited_in_place_again():
    block = {"type": "json", "json": {"rows": [1, 2]}}
    message = ToolMessage([block], tool_call_id="c1", name="q")
    memo = MessageMemo()
    before = memo.tokens(message, COUNTER)
    message.content[0]["json"]["rows"] = list(range(200))  # type: ignore[index]
    assert memo.tokens(message, COUNTER) == sent_tokens([message], COUNTER) > before + 100


# -- the hook charges them to the budget ---------------------------------------------------------
def test_the_hook_does_not_send_a_web_search_block_past_the_budget():
    # before the fix: 17 tokens reported sent at budget 40, the block alone held thousands
    block = web_search_result()
    assert COUNTER(dump(block)) > 1000
    msgs = [
        HumanMessage("search the web for the default postgres port"),
        AIMessage([{"type": "text", "text": "The default port is 5432."}, block]),
        HumanMessage("thanks, and the staging port?"),
    ]
    hook = create_pacms_hook(40, selector=SELECTOR)
    out = hook.invoke({"messages": msgs})["llm_input_messages"]
    assert msgs[1] not in out
    selection = hook.last_selection
    assert selection.info["tokens_sent"] == sent_tokens(out, COUNTER) <= 40
    assert independent_tokens(out) <= 40 and not selection.over_budget


def test_a_mandatory_block_is_charged_and_reported_over_budget():
    block = {"type": "json", "json": {"rows": [{"id": i} for i in range(300)]}}
    call = {"name": "query", "args": {}, "id": "c1", "type": "tool_call"}
    msgs = [
        HumanMessage("list the rows"),
        AIMessage("", tool_calls=[call]),
        ToolMessage([block], tool_call_id="c1", name="query"),
    ]
    hook = create_pacms_hook(40, selector=SELECTOR)
    out = hook.invoke({"messages": msgs})["llm_input_messages"]
    assert out == msgs  # the fresh tool result is mandatory: sent, and said to be over
    selection = hook.last_selection
    assert selection.over_budget
    assert selection.info["tokens_sent"] == sent_tokens(out, COUNTER) >= COUNTER(dump(block))


# -- the property ---------------------------------------------------------------------------------
base64ish = st.text(alphabet=string.ascii_letters + string.digits + "+/", min_size=1, max_size=3000)


@st.composite
def blocks(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["text", "str", "image_url", "json", "unknown", "reasoning"]))
    if kind == "text":
        return {"type": "text", "text": draw(text)}
    if kind == "str":
        return draw(text)
    if kind == "image_url":
        return {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + draw(base64ish)},
        }
    if kind == "json":
        return {"type": "json", "json": {"rows": draw(st.lists(text, max_size=20))}}
    if kind == "unknown":
        return {
            "type": draw(st.sampled_from(["citation_bundle", "server_event"])),
            "data": draw(base64ish),
        }
    return {"type": "reasoning", "reasoning": draw(text)}


contents = st.one_of(text, st.lists(blocks(), min_size=1, max_size=4))


@st.composite
def histories(draw: st.DrawFn) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    if draw(st.booleans()):
        messages.append(SystemMessage(draw(text)))
    for k in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(["human", "ai", "tool"]))
        if kind == "human":
            messages.append(HumanMessage(draw(contents)))
        elif kind == "ai":
            messages.append(AIMessage(draw(contents)))
        else:
            call = {"name": "query", "args": {"q": draw(text)}, "id": f"c{k}", "type": "tool_call"}
            messages += [
                AIMessage("", tool_calls=[call]),
                ToolMessage(draw(contents), tool_call_id=f"c{k}", name="query"),
            ]
    messages.append(HumanMessage(draw(contents)))
    return messages


@slow_examples(80)
@given(**selection_inputs(histories(), 3000))
def test_what_the_hook_sends_fits_counted_independently(messages, budget, strategy, placeholders):
    hook = create_pacms_hook(
        budget,
        strategy=strategy,
        selector=SELECTOR,
        tool_loop=ToolLoopOptions(placeholders=placeholders),
    )
    out = hook.invoke({"messages": messages})["llm_input_messages"]
    assert_provider_valid(out)
    selection = hook.last_selection
    sent = independent_tokens(out)
    assert sent <= selection.info["tokens_sent"] == sent_tokens(out, COUNTER)
    if sent > budget:  # only when the mandatory part alone is over
        assert selection.over_budget
        assert set(selection.kept_ids) == {c.id for c in selection.candidates if c.mandatory}
