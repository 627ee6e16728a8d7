"""What a message says and what it costs: its text, as scored and counted, and its blocks."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langchain_pacms.messages.media import media_tokens

__all__ = [
    "CALL_BLOCKS",
    "blocks_cost",
    "bullet",
    "content_cost",
    "content_text",
    "document_text",
    "memory_text",
    "message_text",
    "message_tokens",
]

CALL_BLOCKS = ("tool_use", "tool_call", "function_call", "tool_call_chunk", "invalid_tool_call")
"""Content block types that hold a tool call (rendered from ``tool_calls``, never counted twice)."""

_MEMORY_KEYS = ("content", "text", "memory", "fact", "summary")


def _content_parts(content: str | list[Any]) -> tuple[list[str], list[Any]]:
    """A content's text parts (a ``[type]`` marker for each other block) and its other blocks."""
    if isinstance(content, str):
        return [content], []
    parts: list[str] = []
    whole: list[Any] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif not isinstance(block, Mapping):
            whole.append(block)
        else:
            kind = block.get("type")
            text = block.get("text")
            inner = block.get("content")
            if kind in ("text", "text-plain", None) and isinstance(text, str):
                parts.append(text)
            elif kind in ("thinking", "reasoning") and isinstance(block.get(kind), str):
                parts.append(block[kind])  # sent with the message, so it counts against the budget
            elif kind == "reasoning" and _summary_text(block):
                parts.append(_summary_text(block))  # OpenAI's form: the text is in its summary
            elif kind == "tool_result" and isinstance(inner, (str, list)):
                texts, blocks = _content_parts(inner)
                parts += texts
                whole += blocks
            elif kind not in CALL_BLOCKS:
                parts.append(f"[{kind or 'block'}]")
                whole.append(block)
    return parts, whole


def _summary_text(block: Mapping[str, Any]) -> str:
    """The text of a reasoning block's ``summary`` list (OpenAI's Responses form), or ``""``."""
    summary = block.get("summary")
    if not isinstance(summary, list):
        return ""
    texts = [i.get("text") for i in summary if isinstance(i, Mapping)]
    return "\n".join(t for t in texts if isinstance(t, str))


def _standard_parts(blocks: Iterable[Mapping[str, Any]]) -> list[str]:
    """The text of LangChain's standard content blocks (``BaseMessage.content_blocks``)."""
    parts: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "text-plain" and isinstance(block.get("text"), str):
            parts.append(block["text"])  # a plain-text document given inline: sent as its text
        elif kind == "reasoning":
            reasoning = block.get("reasoning")
            text = reasoning if isinstance(reasoning, str) else _summary_text(block)
            parts.append(text or "[reasoning]")
        elif kind == "non_standard":  # a provider's own block: read as the package knows it
            parts += _content_parts([block.get("value")])[0]
        elif kind not in CALL_BLOCKS:
            parts.append(f"[{kind or 'block'}]")
    return parts


def content_text(content: str | list[Any] | BaseMessage) -> str:
    """The text of a message (or of its content), for scoring and counting.

    Text and reasoning blocks give their text, tool-call blocks nothing, others a ``[type]`` marker.
    """
    message = content if isinstance(content, BaseMessage) else None
    raw: str | list[Any] = content.content if isinstance(content, BaseMessage) else content
    if isinstance(raw, str):
        return raw
    try:
        blocks = (message or HumanMessage(raw)).content_blocks
    except Exception:  # content LangChain cannot read as blocks: the package's own reading
        return "\n".join(_content_parts(raw)[0])
    return "\n".join(_standard_parts(blocks))


def content_cost(text: str, content: str | list[Any], token_counter: Callable[[str], int]) -> int:
    """What a message costs: its ``text``, plus each other block of its ``content``.

    An image or an inline PDF costs what a chat model charges for it
    (:func:`~langchain_pacms.messages.media.media_tokens`), any other block its JSON's tokens.
    """
    return token_counter(text) + blocks_cost(content, token_counter)


def blocks_cost(content: str | list[Any], token_counter: Callable[[str], int]) -> int:
    """What a content's blocks other than text cost (``0`` for a string).

    Example:
        >>> blocks_cost([{"type": "text", "text": "hi"}, {"type": "image", "url": "u"}], len)
        1600
    """
    if isinstance(content, str):
        return 0
    return sum(_block_cost(b, token_counter) for b in _content_parts(content)[1])


def _block_cost(block: Any, token_counter: Callable[[str], int]) -> int:
    media = media_tokens(block) if isinstance(block, Mapping) else None
    if media is not None:
        return media
    return token_counter(json.dumps(block, sort_keys=True, ensure_ascii=False, default=str))


def message_tokens(message: BaseMessage, token_counter: Callable[[str], int]) -> int:
    """What one message costs as the budget counts it: :func:`message_text` and its blocks."""
    return content_cost(message_text(message), message.content, token_counter)


def _tool_call_text(call: Mapping[str, Any]) -> str:
    args = call.get("args") or {}
    try:
        rendered = json.dumps(args, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        rendered = str(args)
    return f"{call.get('name') or 'tool'}({rendered})"


def message_text(message: BaseMessage) -> str:
    """A message's text as scored: calls as ``name({json args})``, a result as ``name: text``."""
    text = content_text(message)
    if isinstance(message, AIMessage) and message.tool_calls:
        calls = "\n".join(_tool_call_text(c) for c in message.tool_calls)
        return f"{text}\n{calls}" if text else calls
    if isinstance(message, ToolMessage):
        return f"{message.name or 'tool'}: {text}"
    return text


def memory_text(item: Any) -> str:
    """The text of one memory: a LangGraph store ``Item``, a ``dict``, a ``Document`` or a str.

    For a dict: the first string that is not blank under ``content``, ``text``, ``memory``,
    ``fact`` or ``summary`` (a blank one if all are), else the whole value as JSON.

    Example:
        >>> memory_text({"content": " ", "text": "Port 6543."})
        'Port 6543.'
    """
    if isinstance(item, str):
        return item
    if isinstance(item, Document):
        return item.page_content
    value = getattr(item, "value", item)
    if isinstance(value, Mapping):
        texts = [str(value[k]) for k in _MEMORY_KEYS if isinstance(value.get(k), str)]
        if texts:  # all blank: a blank memory (left out), not its JSON
            return next((t for t in texts if t.strip()), texts[0])
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return str(value)


def document_text(document: Any) -> str:
    """The text of one retrieved document (``Document.page_content``; else as a memory's)."""
    return memory_text(document)


def bullet(text: str) -> str:
    """A memory or document as one bullet of the context message (continuation lines indented)."""
    return "- " + text.strip().replace("\n", "\n  ")
