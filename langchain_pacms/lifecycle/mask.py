"""Mask: keep a noisy output's head, tail and (within a budget) locator lines; no recovery."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from langchain_pacms.lifecycle.objects import ContextObject
from langchain_pacms.lifecycle.rewrite import REWRITES, rewrite
from langchain_pacms.messages.locators import locator_budget, locator_lines
from langchain_pacms.messages.text import content_text, split_blocks

__all__ = ["mask_object", "mask_text"]


def mask_text(text: str, head: int = 400, tail: int = 200, locator_chars: int = 0) -> str:
    r"""Keep ``head`` and ``tail`` characters; replace the middle with a marker.

    Args:
        text: The content (returned as it is when not longer than ``head + tail``).
        head: Characters kept at the start.
        tail: Characters kept at the end.
        locator_chars: Characters of elided lines holding a locator kept after the marker.

    Example:
        >>> print(mask_text("ok\n" * 9 + "FAIL src/a.py\n" + "ok\n" * 9 + "end", 2, 3, 99))
        ok
        [... 66 chars, 20 lines elided by mask; kept 1 line with locators ...]
        FAIL src/a.py
        end
    """
    if len(text) <= head + tail:
        return text
    middle = text[head : len(text) - tail]
    lines = middle.count("\n") + 1
    end = text[len(text) - tail :] if tail else ""
    kept = locator_lines(middle, locator_chars) if locator_chars > 0 else []
    note = f"; kept {len(kept)} line{'s' * (len(kept) > 1)} with locators" if kept else ""
    marker = f"[... {len(middle)} chars, {lines} lines elided by mask{note} ...]"
    return "\n".join([text[:head], marker, *kept, end])


def mask_object(messages: list[BaseMessage], obj: ContextObject, head: int, tail: int) -> list[int]:
    r"""Mask ``obj`` in ``messages`` (rewritten in place, a copy per message): the indices.

    A message's text is masked; its images and other blocks are kept as they are.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_pacms.lifecycle.objects import index_messages
        >>> msgs = [HumanMessage("x" * 50, id="h")]
        >>> mask_object(msgs, index_messages(msgs).objects[0], 5, 5), msgs[0].content[:9]
        ([0], 'xxxxx\n[..')
    """
    mark = {"object": obj.id, "state": "masked", "sha256": obj.sha256}
    results = [i for i in obj.indices if isinstance(messages[i], ToolMessage)]
    targets = results or [obj.indices[0]]
    for i in targets:
        messages[i] = rewrite(messages[i], _masked(messages[i], head, tail), mark)
    return targets


def _masked(message: BaseMessage, head: int, tail: int) -> str | list[Any]:
    """The masked content of ``message`` (memoised per message object).

    Its text is masked; blocks other than text (images, files) stay, after it.
    """

    def compute() -> str | list[Any]:
        text, blocks = split_blocks(message.content)
        if not blocks:
            text = content_text(message.content)  # content blocks: their text
        masked = mask_text(text, head, tail, locator_budget(len(text) - head - tail))
        return [{"type": "text", "text": masked}, *blocks] if blocks else masked

    return REWRITES((message,), ("mask", head, tail), compute)
