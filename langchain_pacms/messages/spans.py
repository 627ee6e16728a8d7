"""Cut a conversation into spans: the selection candidates, each a group of whole messages.

A system message is a mandatory span; a call with its results one ``tool`` span; a human
message with the plain AI replies after it one ``turn`` span.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage

from langchain_pacms.messages.history import is_human
from langchain_pacms.messages.memo import MessageMemo, sent_tokens
from langchain_pacms.messages.text import (
    CALL_BLOCKS,
    bullet,
    content_text,
    document_text,
    memory_text,
    message_text,
    message_tokens,
)
from langchain_pacms.selector import Candidate

__all__ = ["Span", "cut_spans", "messages_to_candidates", "span_messages", "span_text"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Span:
    """What one candidate stands for.

    Attributes:
        id: ``m<i>`` (system message or turn at message ``i``), ``t<i>`` (tool span of the call
            at ``i``), ``t<i>:call`` / ``t<i>:fold`` (its variants), ``mem<k>`` / ``doc<k>``.
        kind: ``system``, ``turn``, ``tool``, ``memory`` or ``document``.
        indices: Positions in the input message list (empty for memories and documents).
        mandatory: Always kept.
        text: The text that is scored and counted.
        stub: A variant of a tool span (at most one of it and the whole span is sent).
        missing: Tool call ids of this span with no result in the input.
        item: The memory item or ``Document`` (memories and documents only).
        sends: For a fold-stub variant, the messages it sends instead of the span's own.

    Example:
        >>> Span("t3:call", "tool", (3,), stub=True).full_id
        't3'
    """

    id: str
    kind: str
    indices: tuple[int, ...] = ()
    mandatory: bool = False
    text: str = ""
    stub: bool = False
    missing: tuple[str, ...] = ()
    item: Any = None
    sends: tuple[BaseMessage, ...] = ()

    @property
    def full_id(self) -> str:
        """For a variant, the id of the whole tool span; else the span's own id."""
        return self.id.rpartition(":")[0] if self.stub else self.id


def _placeholder_result(call: Mapping[str, Any], *, missing: bool) -> ToolMessage:
    name = call.get("name") or "tool"
    if missing:
        text, extra = f"[no result was recorded for this {name} call]", {"status": "error"}
    else:
        text, extra = f"[{name} result omitted to fit the context budget]", {}
    return ToolMessage(content=text, tool_call_id=str(call["id"]), name=name, **extra)


def _unanswered(
    calls: Sequence[Mapping[str, Any]], results: Sequence[BaseMessage]
) -> list[Mapping[str, Any]]:
    """The calls no result answers: each result answers the first call left with its id."""
    left = Counter(str(m.tool_call_id) for m in results if isinstance(m, ToolMessage))
    out = []
    for call in calls:
        if left[str(call["id"])]:
            left[str(call["id"])] -= 1
        else:
            out.append(call)
    return out


def cut_spans(
    messages: Sequence[BaseMessage], pair_turns: bool = True
) -> tuple[list[tuple[str, list[int]]], list[int]]:
    """The conversation's spans as ``(kind, indices)``, oldest first, and the orphan results.

    What :func:`messages_to_candidates` cuts, without reading any text.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> call = {"name": "add", "args": {"a": 1}, "id": "c1"}
        >>> cut_spans([HumanMessage("1+?"), AIMessage("", tool_calls=[call]),
        ...            ToolMessage("2", tool_call_id="c1"), ToolMessage("3", tool_call_id="c9")])
        ([('turn', [0]), ('tool', [1, 2])], [3])
    """
    units: list[tuple[str, list[int]]] = []
    owner: dict[str, list[int]] = {}  # call id -> [its unit, results it still takes]
    orphans: list[int] = []
    open_turn: int | None = None
    for i, message in enumerate(messages):
        if isinstance(message, SystemMessage):
            units.append(("system", [i]))
            open_turn = None
        elif isinstance(message, AIMessage) and message.tool_calls:
            units.append(("tool", [i]))
            for call in message.tool_calls:
                if call.get("id"):
                    entry = owner.get(str(call["id"]))
                    if entry is not None and entry[0] == len(units) - 1:
                        entry[1] += 1  # calls sharing an id take one result each
                    else:
                        owner[str(call["id"])] = [len(units) - 1, 1]
            open_turn = None
        elif isinstance(message, ToolMessage):
            entry = owner.get(str(message.tool_call_id))
            if entry is None:
                orphans.append(i)
            else:
                units[entry[0]][1].append(i)
                entry[1] -= 1
                if not entry[1]:
                    del owner[str(message.tool_call_id)]
            open_turn = None
        elif is_human(message):
            units.append(("turn", [i]))
            open_turn = len(units) - 1 if pair_turns else None
        elif isinstance(message, AIMessage) and open_turn is not None:
            units[open_turn][1].append(i)
        else:
            units.append(("turn", [i]))
            open_turn = None
    return units, orphans


def messages_to_candidates(
    messages: Sequence[BaseMessage],
    *,
    memories: Iterable[Any] = (),
    documents: Iterable[Any] = (),
    keep_latest_turn: bool = True,
    pair_turns: bool = True,
    tool_placeholders: bool = False,
    fold_stubs: Mapping[int, Sequence[BaseMessage]] | None = None,
    token_counter: Callable[[str], int] | None = None,
    memo: MessageMemo | None = None,
) -> tuple[list[Candidate], list[Span]]:
    """Cut a conversation (plus memories and documents) into selection candidates.

    Args:
        messages: The conversation, oldest first. Not modified.
        memories: Memory items (LangGraph store ``Item``/``SearchItem``, dicts or strings);
            one whose text is blank is left out.
        documents: Retrieved ``Document`` objects (or strings); blank ones are left out.
        keep_latest_turn: Make everything from the latest human message on mandatory.
        pair_turns: Keep a human message together with the plain AI replies that follow it.
        tool_placeholders: Also offer a call-only variant of each optional tool span.
        fold_stubs: Fold-stub messages by the index of a span's call (see
            :func:`~langchain_pacms.lifecycle.variants.fold_variants`), offered as variants.
        token_counter: Give each candidate the cost of what it sends (:func:`sent_tokens`);
            without it the selector counts each candidate's text.
        memo: A :class:`MessageMemo`, so a growing conversation renders only its new messages.

    Returns:
        The candidates (memories, documents, then the conversation) and the matching
        :class:`Span` list.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> call = {"name": "add", "args": {"a": 1}, "id": "c1"}
        >>> msgs = [HumanMessage("1+?"), AIMessage("", tool_calls=[call]),
        ...         ToolMessage("2", tool_call_id="c1"), AIMessage("It is 2.")]
        >>> [(s.id, s.indices) for s in messages_to_candidates(msgs)[1]]
        [('m0', (0,)), ('t1', (1, 2)), ('m3', (3,))]
    """
    units, orphans = cut_spans(messages, pair_turns)
    if orphans:
        logger.debug("dropping %d orphan ToolMessage(s) with no matching call", len(orphans))
    latest_human = max((i for i, m in enumerate(messages) if is_human(m)), default=-1)
    last = len(messages) - 1
    costed = memo is not None and token_counter is not None
    costs: dict[str, int] = {}  # spans that send their own messages as they are, costed here
    spans: list[Span] = []
    for k, item in enumerate(memories):  # an empty one would be an empty bullet: left out
        if (said := memory_text(item)).strip():
            spans.append(Span(f"mem{k}", "memory", text=said, item=item))
    for k, item in enumerate(documents):
        if (said := document_text(item)).strip():
            spans.append(Span(f"doc{k}", "document", text=said, item=item))
    for kind, indices in units:
        first = indices[0]
        mandatory = (
            kind == "system"
            or latest_human in indices
            or last in indices
            or (keep_latest_turn and latest_human >= 0 and first > latest_human)
        )
        if memo is not None and token_counter is not None:
            measured = [memo.measure(messages[i], token_counter) for i in indices]
            texts = [text for text, _ in measured]
            own_cost = sum(cost for _, cost in measured)
        else:
            texts = [message_text(messages[i]) for i in indices]
        if kind != "tool":
            spans.append(Span(f"m{first}", kind, tuple(indices), mandatory, "\n".join(texts)))
            if costed:
                costs[spans[-1].id] = own_cost
            continue
        sendable, calls, missing_calls = _tool_texts(messages, indices, texts)
        missing = tuple(str(c["id"]) for c in missing_calls)
        if tool_placeholders and not mandatory and len(indices) > 1:
            stub_text = "\n".join(
                [texts[0]] + [str(_placeholder_result(c, missing=False).content) for c in calls]
            )
            spans.append(Span(f"t{first}:call", "tool", (first,), False, stub_text, stub=True))
        folded = (fold_stubs or {}).get(first)
        if folded and not mandatory and sendable is messages[first] and not missing:
            render = memo.text if memo is not None else message_text
            text = "\n".join(render(m) for m in folded)
            spans.append(
                Span(f"t{first}:fold", "tool", (first,), text=text, stub=True, sends=tuple(folded))
            )
        spans.append(
            Span(f"t{first}", "tool", tuple(indices), mandatory, "\n".join(texts), missing=missing)
        )
        if costed and sendable is messages[first] and not missing:
            costs[spans[-1].id] = own_cost
    candidates = [
        Candidate(
            text=span.text,
            id=span.id,
            kind=span.kind,
            position=pos,
            mandatory=span.mandatory,
            tokens=(
                None
                if token_counter is None
                else costs[span.id]
                if span.id in costs
                else _sent_cost(messages, span, token_counter, memo)
            ),
            metadata={"indices": span.indices} if span.indices else {},
            source=span,
        )
        for pos, span in enumerate(spans)
    ]
    return candidates, spans


def _tool_texts(
    messages: Sequence[BaseMessage], indices: Sequence[int], texts: list[str]
) -> tuple[AIMessage | None, list[Any], list[Mapping[str, Any]]]:
    """A tool span's call as sent, its calls, and those no result answers.

    ``texts``, its messages' texts, become the span's: the call's is the sent call's, and each
    call no result answers adds its placeholder's.
    """
    sendable = _without_unanswerable_calls(messages[indices[0]])  # type: ignore[arg-type]
    if sendable is not messages[indices[0]]:  # a copy without the id-less calls, or nothing
        texts[0] = "" if sendable is None else message_text(sendable)
    calls = [] if sendable is None else sendable.tool_calls
    missing = _unanswered(calls, [messages[i] for i in indices[1:]])
    texts += [content_text(_placeholder_result(c, missing=True).content) for c in missing]
    return sendable, calls, missing


def span_text(messages: Sequence[BaseMessage], kind: str, indices: Sequence[int]) -> str:
    r"""The text of the span ``(kind, indices)`` of :func:`cut_spans` (``Span.text``).

    It reads the span's own messages only.

    Example:
        >>> call = {"name": "add", "args": {"a": 1}, "id": "c1"}
        >>> span_text([AIMessage("", tool_calls=[call])], "tool", [0])
        'add({"a": 1})\n[no result was recorded for this add call]'
    """
    texts = [message_text(messages[i]) for i in indices]
    if kind == "tool":
        _tool_texts(messages, indices, texts)
    return "\n".join(texts)


def _sent_cost(
    messages: Sequence[BaseMessage],
    span: Span,
    token_counter: Callable[[str], int],
    memo: MessageMemo | None,
) -> int:
    if span.kind in ("memory", "document"):
        return token_counter(bullet(span.text))
    if memo is None:
        return sent_tokens(span_messages(messages, span), token_counter)
    # the memo is for the input's own messages and fold stubs (placeholders are made afresh)
    own = {id(m) for m in span.sends} or {id(messages[i]) for i in span.indices}
    return sum(
        memo.tokens(m, token_counter) if id(m) in own else message_tokens(m, token_counter)
        for m in span_messages(messages, span)
    )


def span_messages(messages: Sequence[BaseMessage], span: Span) -> list[BaseMessage]:
    """The messages a kept conversation span sends (a tool span: call, results, placeholders)."""
    if span.sends:
        return list(span.sends)
    if span.kind != "tool":
        return [messages[i] for i in span.indices]
    call_msg = _without_unanswerable_calls(messages[span.indices[0]])  # type: ignore[arg-type]
    if call_msg is None:
        return []
    calls = call_msg.tool_calls
    if span.stub:
        return [call_msg, *(_placeholder_result(c, missing=False) for c in calls)]
    results = [messages[i] for i in span.indices[1:]]
    missing = _unanswered(calls, results)
    return [call_msg, *results, *(_placeholder_result(c, missing=True) for c in missing)]


def _without_unanswerable_calls(message: AIMessage) -> AIMessage | None:
    """``message`` without its id-less tool calls (``None`` when nothing would be left to send)."""
    if all(c.get("id") for c in message.tool_calls):
        return message
    extra = dict(message.additional_kwargs)
    if isinstance(extra.get("tool_calls"), list):
        extra["tool_calls"] = [c for c in extra["tool_calls"] if c.get("id")] or None
        if extra["tool_calls"] is None:
            del extra["tool_calls"]
    content = message.content
    if isinstance(content, list):
        content = [
            b
            for b in content
            if not (isinstance(b, Mapping) and b.get("type") in CALL_BLOCKS and not b.get("id"))
        ]
    calls = [c for c in message.tool_calls if c.get("id")]
    logger.debug("leaving out %d tool call(s) without an id", len(message.tool_calls) - len(calls))
    if not calls and not content_text(content).strip():
        return None
    return message.model_copy(
        update={"tool_calls": calls, "additional_kwargs": extra, "content": content}
    )
