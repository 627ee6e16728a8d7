"""The LLM planner reads a reply's JSON with LangChain's ``parse_json_markdown``."""

from __future__ import annotations

from langchain_core.messages import AIMessage
from test_lifecycle_planners import llm_plan

PLAN = (
    '{"summary": "tidy", "actions": [{"op": "fold", "target": "function:tool:1", "reason": "%s"}]}'
)


def test_a_fenced_block_after_prose_is_read():
    text = "Sure, here is the plan:\n```json\n" + PLAN % "old read" + "\n```\nAnything else?"
    assert llm_plan(text).groups() == {"fold": ["function:tool:1"]}


def test_an_openai_reasoning_block_does_not_hide_the_reply():
    summary = [{"type": "summary_text", "text": "Folding {the} read."}]
    reply = AIMessage([{"type": "reasoning", "summary": summary}, PLAN % "old read"])
    assert llm_plan(reply).groups() == {"fold": ["function:tool:1"]}
