"""Turn a selection back into a message list a provider accepts."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from langchain_pacms.messages.history import is_human
from langchain_pacms.messages.payload import LIFECYCLE_KEY
from langchain_pacms.messages.spans import Span, span_messages
from langchain_pacms.messages.text import bullet, content_text
from langchain_pacms.selector import Selection

__all__ = [
    "CONTEXT_DOCUMENTS_HEADER",
    "CONTEXT_MEMORIES_HEADER",
    "CONTEXT_MESSAGE_ID",
    "OMISSION_NOTE",
    "apply_selection",
    "build_context_message",
    "reshow_left_out",
]

CONTEXT_MESSAGE_ID = "pacms-context"
"""Id of the message that carries kept memories and documents (replaced at each selection)."""

CONTEXT_MEMORIES_HEADER = "Relevant memories:"
CONTEXT_DOCUMENTS_HEADER = "Relevant documents:"
OMISSION_NOTE = "(Earlier messages of this conversation were left out to fit the context window.)"


def build_context_message(
    memories: Sequence[str] = (), documents: Sequence[str] = (), *, role: str = "system"
) -> BaseMessage | None:
    """The one marked message that carries kept memories and documents to the model.

    Args:
        memories: Memory texts, in pool order.
        documents: Document texts, in pool order.
        role: ``"system"``, or ``"human"`` for providers that accept one leading system
            message only.

    Returns:
        The message, or ``None`` when there is nothing to carry.

    Raises:
        ValueError: If ``role`` is neither ``"system"`` nor ``"human"``.

    Example:
        >>> print(build_context_message(["Likes tea."]).content)
        Relevant memories:
        - Likes tea.
    """
    parts = ((CONTEXT_MEMORIES_HEADER, memories), (CONTEXT_DOCUMENTS_HEADER, documents))
    sections = [f"{header}\n" + "\n".join(map(bullet, texts)) for header, texts in parts if texts]
    if not sections:
        return None
    if role not in ("system", "human"):
        raise ValueError(f"context message role must be 'system' or 'human', got {role!r}")
    kind = SystemMessage if role == "system" else HumanMessage
    return kind("\n\n".join(sections), id=CONTEXT_MESSAGE_ID)


def _spans_of(selection: Selection, spans: Sequence[Span] | None) -> dict[str, Span]:
    if spans is not None:
        return {s.id: s for s in spans}
    found = {}
    for cand in selection.candidates:
        if not isinstance(cand.source, Span):
            raise ValueError(
                f"candidate {cand.id!r} carries no Span; pass the spans from messages_to_candidates"
            )
        found[str(cand.id)] = cand.source
    return found


def apply_selection(
    messages: Sequence[BaseMessage],
    selection: Selection,
    spans: Sequence[Span] | None = None,
    *,
    context_role: str = "system",
    start_on_human: bool = True,
) -> list[BaseMessage]:
    """Turn a selection back into a provider-valid message list (the input is not modified).

    Kept messages keep their order; each kept call gets its results (placeholders where there
    are none); orphan results and id-less calls are left out; kept memories and documents travel
    as one context message after the leading system messages.

    Args:
        messages: The messages given to
            :func:`~langchain_pacms.messages.spans.messages_to_candidates`.
        selection: The verdict on those candidates.
        spans: The spans from ``messages_to_candidates`` (default: the candidates' ``source``).
        context_role: Role of the memory/document message (see :func:`build_context_message`).
        start_on_human: Insert :data:`OMISSION_NOTE` before an AI message that dropping made
            the first non-system message.

    Returns:
        The messages to send; fold stubs show again the locators they lost.

    Raises:
        ValueError: If ``spans`` is not given and a candidate carries no :class:`Span`.

    Example:
        >>> from langchain_pacms.messages.spans import messages_to_candidates
        >>> from langchain_pacms.selector import ContextSelector
        >>> msgs = [HumanMessage("a b c d e f"), HumanMessage("g")]
        >>> sel = ContextSelector().select(messages_to_candidates(msgs)[0], "g", budget=1)
        >>> [m.content for m in apply_selection(msgs, sel)]
        ['g']
    """
    by_id = _spans_of(selection, spans)
    kept = set(selection.kept_ids)
    chosen = [span for span in by_id.values() if span.id in kept]
    memories = [span.text for span in chosen if span.kind == "memory"]
    documents = [span.text for span in chosen if span.kind == "document"]
    at: dict[int, list[BaseMessage]] = {}
    for span in chosen:
        if span.kind == "tool" and not (span.stub and span.full_id in kept):
            at[span.indices[0]] = span_messages(messages, span)
        elif span.kind not in ("tool", "memory", "document"):
            at.update((i, [messages[i]]) for i in span.indices)
    order = sorted(at)
    result = [m for i in order for m in at[i]]
    lead = next((i for i, m in enumerate(result) if not isinstance(m, SystemMessage)), len(result))
    if start_on_human and lead < len(result) and not is_human(result[lead]):
        first = next(i for i in order if not isinstance(messages[i], SystemMessage))
        if any(not isinstance(messages[i], SystemMessage) for i in range(first)):
            result.insert(lead, HumanMessage(OMISSION_NOTE))
    context = build_context_message(memories, documents, role=context_role)
    if context is not None:
        result.insert(lead, context)
    return reshow_left_out(result)


def reshow_left_out(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """``messages`` (copied) with each fold stub showing again lost locators no message shows."""
    marked = {i: left for i, m in enumerate(messages) if (left := _left_out(m))}
    out = list(messages)
    if not marked:
        return out
    texts = [
        content_text(m.content)
        + "".join(
            json.dumps(c.get("args") or {}, ensure_ascii=False, default=str)
            for c in getattr(m, "tool_calls", None) or []
        )
        for m in messages
    ]
    occurrences = functools.cache("\n".join(texts).count)  # stubs share values: count each once
    for i, left in marked.items():
        stub = str(messages[i].content)
        # shown by another message: more occurrences in all the texts than in this one's
        lost = [v for v in map(str, left) if v not in stub and occurrences(v) == texts[i].count(v)]
        if lost:
            joint = ", " if "; locators: " in stub else "; locators: "
            out[i] = messages[i].model_copy(
                update={"content": f"{stub[:-1]}{joint}{', '.join(lost)}]"}
            )
    return out


def _left_out(message: BaseMessage) -> list[Any]:
    """The locators a fold stub left out as shown elsewhere; none once its text is not the stub.

    A middleware may replace a stub's text and keep its mark (``ContextEditingMiddleware``
    clears it to ``"[cleared]"``): only a text that still reads as the stub of the marked
    object, ``[folded: ...; recover_context("<its id>")...]``, lists them again.
    """
    mark = message.additional_kwargs.get(LIFECYCLE_KEY) or {}
    text = message.content
    stub = (
        isinstance(text, str)
        and text.startswith("[folded: ")
        and text.endswith("]")
        and f'; recover_context("{mark.get("object")}")' in text
    )
    return list(mark.get("elsewhere") or ()) if stub else []
