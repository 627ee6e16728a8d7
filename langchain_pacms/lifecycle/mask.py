"""Mask: keep a noisy output's head, tail and (within a budget) locator lines; no recovery."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from langchain_pacms.lifecycle.objects import ContextObject
from langchain_pacms.lifecycle.rewrite import REWRITES, rewrite
from langchain_pacms.lifecycle.tuning import Masking
from langchain_pacms.messages.locators import locator_budget, locator_lines
from langchain_pacms.messages.text import content_text

__all__ = ["mask_object", "mask_text"]


def mask_text(text: str, head: int = 400, tail: int = 200, locator_chars: int = 0) -> str:
    r"""Keep ``head`` and ``tail`` characters; replace the middle with a marker.

    Args:
        text: The content (returned as it is when not longer than ``head + tail``).
        head: Characters kept at the start.
        tail: Characters kept at the end.
        locator_chars: Characters of elided lines holding a locator kept after the marker.

    Raises:
        ValueError: If ``head`` or ``tail`` is not an int >= 0 (as for :class:`Masking`).

    Example:
        >>> print(mask_text("ok\n" * 9 + "FAIL src/a.py\n" + "ok\n" * 9 + "end", 2, 3, 99))
        ok
        [... 66 chars, 20 lines elided by mask; kept 1 line with locators ...]
        FAIL src/a.py
        end
    """
    Masking(head, tail)  # checks them
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

    A string stays a string; list content stays a list: its text blocks become one masked
    text block (the first one's other keys, such as ``cache_control``, kept; a list of strings
    becomes one masked string in a list); every other block (an image, a file, ``text-plain``)
    stays as it is, after it. A result wrapped in ``tool_result`` blocks is left whole: masking
    inside would lose the wrapper a provider pairs with its call.
    """

    def compute() -> str | list[Any]:
        content = message.content
        texts: list[str] = []
        others: list[Any] = []
        first: Mapping[str, Any] | None = None  # the first text block
        for block in content if isinstance(content, list) else ():
            if isinstance(block, Mapping) and block.get("type") == "tool_result":
                return content
            if isinstance(block, str):
                texts.append(block)
            elif isinstance(block, Mapping) and block.get("type") == "text":
                first = block if first is None else first
                texts.append(str(block.get("text", "")))
            else:
                others.append(block)
        text = "\n".join(texts) if others else content_text(content)
        masked = mask_text(text, head, tail, locator_budget(len(text) - head - tail))
        if not isinstance(content, list):
            return masked
        if first is None and not others:  # a list of strings stays one
            return [masked]
        return [{**(first or {"type": "text"}), "text": masked}, *others]

    return REWRITES((message,), ("mask", head, tail), compute)
