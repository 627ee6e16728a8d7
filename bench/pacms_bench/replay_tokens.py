"""How the lifecycle replay reads a message and counts the tokens of a view.

Example:
    >>> from langchain_core.messages import AIMessage
    >>> call = {"name": "bash", "args": {"command": "ls"}, "id": "c1"}
    >>> message_text(AIMessage("look", tool_calls=[call]))
    'look {"command": "ls"}'
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from langchain_core.messages import BaseMessage

from langchain_pacms.messages import by_message, content_text
from langchain_pacms.tokens import TokenCounter

__all__ = ["message_text", "message_tokens"]


@by_message  # the same messages are measured by every policy at every cut
def message_text(m: BaseMessage) -> str:
    """A message's text and its tool calls' arguments, as the replay measures and judges it."""
    calls = getattr(m, "tool_calls", None) or []
    args = " ".join(json.dumps(c.get("args") or {}, ensure_ascii=False) for c in calls)
    return f"{content_text(m.content)} {args}".strip()


def message_tokens(
    messages: Sequence[BaseMessage], counter: TokenCounter, system: bool = True
) -> int:
    """Tokens of ``messages`` by ``counter`` (without system messages unless ``system``)."""
    return sum(counter(message_text(m)) for m in messages if system or m.type != "system")
