"""Message text is read from LangChain's standard blocks (``BaseMessage.content_blocks``)."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_pacms.messages import content_text, sent_tokens
from langchain_pacms.messages.media import IMAGE_TOKENS
from langchain_pacms.tokens import TokenCounter

COUNTER = TokenCounter()
SUMMARY = ("The staging database listens on 6543 behind pgbouncer; production uses 5432. " * 13)[
    :1000
]


def reasoning_block() -> dict:
    return {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": SUMMARY}],
    }


@pytest.mark.parametrize("metadata", [{}, {"model_provider": "openai"}], ids=["bare", "openai"])
def test_an_openai_reasoning_summary_is_read_as_its_text(metadata):
    message = AIMessage(
        [reasoning_block(), {"type": "text", "text": "Use 6543."}], response_metadata=metadata
    )
    text = content_text(message)
    assert "[reasoning]" not in text
    assert text == f"{SUMMARY}\nUse 6543."
    # counted as text, like every reasoning text, not by its JSON
    assert sent_tokens([message], COUNTER) == COUNTER(text)


def test_the_content_alone_reads_the_same():
    content = [reasoning_block(), "Use 6543."]
    assert content_text(content) == content_text(AIMessage(content)) == f"{SUMMARY}\nUse 6543."


def test_a_standard_image_block_is_marked_and_charged_as_an_image():
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBO" * 300}}
    message = HumanMessage(["a chart", image])
    assert content_text(message) == "a chart\n[image]"
    assert sent_tokens([message], COUNTER) == COUNTER("a chart\n[image]") + IMAGE_TOKENS


def test_tool_call_blocks_are_left_to_the_tool_calls():
    call = {"name": "search", "args": {"q": "ports"}, "id": "c1", "type": "tool_call"}
    message = AIMessage("", tool_calls=[call])
    assert content_text(message) == ""
    assert sent_tokens([message], COUNTER) == COUNTER('search({"q": "ports"})')
