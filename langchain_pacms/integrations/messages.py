"""One mapping between LangChain messages and selection candidates, shared by every integration.

:func:`messages_to_candidates` cuts a conversation into *spans*, each of which becomes one
:class:`~langchain_pacms.selector.Candidate`; :func:`apply_selection` turns a
:class:`~langchain_pacms.selector.Selection` back into a list of messages a provider accepts.

How a conversation is cut:

* every ``SystemMessage`` is its own mandatory ``system`` span;
* an ``AIMessage`` with ``tool_calls`` and all ``ToolMessage`` results that answer it (matched by
  ``tool_call_id``, however many parallel calls; calls that share an id take one result each)
  form one ``tool`` span, kept or dropped whole; each round of calls is its own span;
* a ``HumanMessage`` and the plain ``AIMessage`` replies that directly follow it form one
  ``turn`` span (a question travels with its answer); a plain AI message that follows a tool
  span (the answer built from tool results) is a ``turn`` span of its own;
* the latest ``HumanMessage`` is mandatory, and with ``keep_latest_turn=True`` so is everything
  after it: the agent's work in progress on the current question (the hook and middleware
  default, ``"auto"``, does so while that part fits the budget). A span holding the
  very last message of the conversation is mandatory too (the model must read fresh tool results);
* memory items (LangGraph store items, strings or dicts) and retrieved ``Document`` objects join
  the pool as ``memory`` and ``document`` candidates; the kept ones reach the model as one
  context message placed after the leading system messages.

What the output guarantees, whatever was selected:

* every kept ``ToolMessage`` follows the ``AIMessage`` that called it, directly, with its sibling
  results; every tool call of a kept ``AIMessage`` has a result (a short placeholder
  ``ToolMessage`` with the same ``tool_call_id`` when the input had none, or, in placeholder mode,
  when only the call was kept);
* orphan ``ToolMessage`` objects of the input (no earlier call with their id) are dropped, and
  tool calls without an id (no result can answer them) are left out of the copy that is sent;
* if dropping would make an AI message the first non-system message (Anthropic rejects that), a
  one-line ``HumanMessage`` note (:data:`OMISSION_NOTE`) is put before it;
* the order of the input is kept, messages are passed through unchanged (multimodal content
  included) and the input list is never modified.

Example:
    >>> from langchain_core.messages import HumanMessage, SystemMessage
    >>> from langchain_pacms import ContextSelector
    >>> msgs = [SystemMessage("Be brief."), HumanMessage("My code is 7-ALPHA."),
    ...         HumanMessage("Lunch?"), HumanMessage("What is my code?")]
    >>> cands, spans = messages_to_candidates(msgs)
    >>> [c.kind for c in cands]
    ['system', 'turn', 'turn', 'turn']
    >>> sel = ContextSelector().select(cands, query_from_messages(msgs), budget_tokens=18)
    >>> [m.text for m in apply_selection(msgs, sel, spans)]
    ['Be brief.', 'My code is 7-ALPHA.', 'What is my code?']
"""

from __future__ import annotations

import copy
import json
import logging
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.documents import Document
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from langchain_pacms._lru import LruMemo
from langchain_pacms.selector import Candidate, Selection

__all__ = [
    "CONTEXT_DOCUMENTS_HEADER",
    "CONTEXT_MEMORIES_HEADER",
    "CONTEXT_MESSAGE_ID",
    "OMISSION_NOTE",
    "MessageMemo",
    "Span",
    "agent_query",
    "apply_removals",
    "apply_selection",
    "build_context_message",
    "content_text",
    "document_text",
    "memory_text",
    "messages_to_candidates",
    "query_from_messages",
    "sent_tokens",
]

logger = logging.getLogger(__name__)

CONTEXT_MESSAGE_ID = "pacms-context"
"""Id of the message that carries kept memories and documents (see :func:`build_context_message`).

A history that holds such a message from an earlier call (a hook that writes its selection back
to ``messages``) has it replaced, not kept, by the next selection.
"""

CONTEXT_MEMORIES_HEADER = "Relevant memories:"
CONTEXT_DOCUMENTS_HEADER = "Relevant documents:"
OMISSION_NOTE = "(Earlier messages of this conversation were left out to fit the context window.)"
_MEMORY_KEYS = ("content", "text", "memory", "fact", "summary")
_CALL_BLOCKS = ("tool_use", "tool_call", "function_call", "tool_call_chunk", "invalid_tool_call")


@dataclass(frozen=True)
class Span:
    """What one candidate stands for.

    Attributes:
        id: The candidate id (``m<i>`` for a system message or turn starting at message ``i``,
            ``t<i>`` for the tool span of the ``AIMessage`` at ``i``, ``t<i>:call`` for its
            call-only variant, ``t<i>:fold`` for its fold-stub variant, ``mem<k>`` /
            ``doc<k>`` for memories and documents).
        kind: ``system``, ``turn``, ``tool``, ``memory`` or ``document``.
        indices: Positions in the input message list (empty for memories and documents).
        mandatory: Always kept.
        text: The text that is scored and counted.
        stub: A variant of a tool span: call-only (results replaced by placeholders) or
            fold stub (results replaced by the messages in ``sends``). A variant and its
            whole span are alternatives: at most one of them is sent.
        missing: Tool call ids of this span with no result in the input (an id shows once
            per unanswered call when calls share it).
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


# -- text extraction ----------------------------------------------------------------------------
def _content_parts(content: str | list[Any]) -> tuple[list[str], list[Any]]:
    """A content's text parts (a ``[type]`` marker for each other block) and its other blocks.

    The other blocks are sent as they are, so they are charged by their serialised size (see
    :func:`_block_dumps`); tool-call blocks are neither (rendered from ``tool_calls``).
    """
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
            elif kind not in _CALL_BLOCKS:
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
        elif kind == "reasoning":
            reasoning = block.get("reasoning")
            text = reasoning if isinstance(reasoning, str) else _summary_text(block)
            parts.append(text or "[reasoning]")
        elif kind == "non_standard":  # a provider's own block: read as the package knows it
            parts += _content_parts([block.get("value")])[0]
        elif kind not in _CALL_BLOCKS:
            parts.append(f"[{kind or 'block'}]")
    return parts


def content_text(content: str | list[Any] | BaseMessage) -> str:
    r"""The text of a message (or of its content), for scoring and counting.

    A list of blocks is read as LangChain's standard content blocks
    (``BaseMessage.content_blocks``, so an AI message's provider translates its own blocks):
    the text of text blocks and of reasoning blocks (an OpenAI reasoning block's summary
    included), and, of a provider's own blocks, the text of ``thinking`` and the content of
    ``tool_result`` blocks, joined by newlines; every other block (image, audio, file, JSON,
    a server tool's result, ...) is represented by a short ``[type]`` marker so the text stays
    readable. Those blocks are charged by their serialised size on top of the text (see
    :func:`sent_tokens`). Tool-call blocks are left out (a message's tool calls are rendered
    from ``tool_calls``). The content itself is never changed.

    Args:
        content: A message, or its ``content`` (a string or a list of blocks).

    Returns:
        The text.

    Example:
        >>> content_text(["see", {"type": "text", "text": "this"}, {"type": "audio"}])
        'see\nthis\n[audio]'
        >>> summary = [{"type": "summary_text", "text": "Port 6543 is staging."}]
        >>> content_text(AIMessage([{"type": "reasoning", "summary": summary}]))
        'Port 6543 is staging.'
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


def _block_dumps(content: str | list[Any]) -> list[str]:
    """The blocks of ``content`` that are not text, each serialised as it is charged.

    Example:
        >>> _block_dumps(["hi", {"type": "json", "json": {"b": 1, "a": "é"}}])
        ['{"json": {"a": "é", "b": 1}, "type": "json"}']
    """
    if isinstance(content, str):
        return []
    return [
        json.dumps(block, sort_keys=True, ensure_ascii=False, default=str)
        for block in _content_parts(content)[1]
    ]


def _cost(text: str, content: str | list[Any], token_counter: Callable[[str], int]) -> int:
    """What a message costs: its ``text``, plus each other block of its ``content`` serialised."""
    return token_counter(text) + sum(token_counter(d) for d in _block_dumps(content))


def _message_tokens(message: BaseMessage, token_counter: Callable[[str], int]) -> int:
    return _cost(_message_text(message), message.content, token_counter)


def _tool_call_text(call: Mapping[str, Any]) -> str:
    args = call.get("args") or {}
    try:
        rendered = json.dumps(args, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        rendered = str(args)
    return f"{call.get('name') or 'tool'}({rendered})"


def _message_text(message: BaseMessage) -> str:
    text = content_text(message)
    if isinstance(message, AIMessage) and message.tool_calls:
        calls = "\n".join(_tool_call_text(c) for c in message.tool_calls)
        return f"{text}\n{calls}" if text else calls
    if isinstance(message, ToolMessage):
        return f"{message.name or 'tool'}: {text}"
    return text


class MessageMemo:
    """Each message's text and token count, remembered per message object (bounded).

    An agent's next model call sees the same message objects again plus a few new ones, so
    :func:`messages_to_candidates` and :func:`sent_tokens` given a memo render and count only
    the new ones. An entry is found by the message's identity and is used only while the
    message still holds the same ``content``, ``name`` and ``tool_calls`` (a message edited
    in place is rendered again). The memo holds no reference to the messages themselves (weak
    references only) and forgets the least recently used entries beyond ``max_entries``.

    Args:
        max_entries: Most messages remembered (> 0).

    Example:
        >>> memo = MessageMemo(max_entries=2)
        >>> words = lambda text: len(text.split())
        >>> msg = HumanMessage("one two three")
        >>> memo.tokens(msg, words), memo.tokens(msg, words), memo.hits
        (3, 3, 1)
        >>> msg.content = "one"  # edited in place: rendered and counted again
        >>> memo.tokens(msg, words), len(memo)
        (1, 1)
    """

    def __init__(self, max_entries: int = 4096) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be an int >= 1, got {max_entries!r}")
        self.max_entries = max_entries
        self.hits = 0
        self._entries: LruMemo[int, _MemoEntry] = LruMemo(max_entries)

    def __len__(self) -> int:
        return len(self._entries)

    def _entry(self, message: BaseMessage) -> _MemoEntry:
        key = id(message)
        entry = self._entries.get(key)
        if entry is not None and entry.matches(message):
            self.hits += 1
            return entry
        entry = _MemoEntry(message)
        self._entries.put(key, entry)
        return entry

    def text(self, message: BaseMessage) -> str:
        """The message's text as it is scored and counted (see :func:`sent_tokens`)."""
        return self._entry(message).text

    def tokens(self, message: BaseMessage, token_counter: Callable[[str], int]) -> int:
        """The message's cost (see :func:`sent_tokens`), counted once per message and counter."""
        return self._entry(message).tokens(token_counter)

    def values(self, message: BaseMessage) -> frozenset[str]:
        """The values in the message's content a later tool call could take up, found once.

        See :func:`~langchain_pacms.lifecycle.heuristic.reusable_values` (paths, URLs, ids,
        long numbers).

        Example:
            >>> sorted(MessageMemo().values(HumanMessage("open docs/api.md for HAT039")))
            ['HAT039', 'docs/api.md']
        """
        entry = self._entry(message)
        if entry.handles is None:
            from langchain_pacms.lifecycle.heuristic import reusable_values
            from langchain_pacms.lifecycle.objects import payload_of

            entry.handles = reusable_values(payload_of([message], (0,)))
        return entry.handles


class _MemoEntry:
    """One message in a :class:`MessageMemo`: what it was made from, its text and its count."""

    __slots__ = ("content", "cost", "counter", "handles", "name", "ref", "text", "tool_calls")

    def __init__(self, message: BaseMessage) -> None:
        self.ref = weakref.ref(message)
        content = message.content
        # Lists can be edited in place: keep a copy to compare with (strings are immutable).
        self.content = content if isinstance(content, str) else copy.deepcopy(content)
        self.name = message.name
        calls = _calls_of(message)
        self.tool_calls = copy.deepcopy(calls) if calls else None
        self.text = _message_text(message)
        self.counter: Callable[[str], int] | None = None
        self.cost = 0
        self.handles: frozenset[str] | None = None  # reusable values, found on first use

    def tokens(self, token_counter: Callable[[str], int]) -> int:
        if self.counter is not token_counter:
            self.cost = _cost(self.text, self.content, token_counter)
            self.counter = token_counter
        return self.cost

    def matches(self, message: BaseMessage) -> bool:
        if self.ref() is not message or message.name != self.name:
            return False
        content = message.content
        if content is not self.content and content != self.content:
            return False
        return (_calls_of(message) or None) == self.tool_calls


def _calls_of(message: BaseMessage) -> list[Any] | None:
    # A plain getattr is slow on messages without the field (pydantic's __getattr__ raises).
    return message.tool_calls if isinstance(message, AIMessage) else None


def sent_tokens(
    messages: Iterable[BaseMessage],
    token_counter: Callable[[str], int],
    *,
    memo: MessageMemo | None = None,
) -> int:
    """The tokens of the messages a model receives, counted as the selection budget counts them.

    Each message is counted on its own: its text (see :func:`content_text`), an AI message's
    tool calls as ``name({json args})`` and a tool result as ``name: text``; each content block
    that is not text (an image, a JSON block, a provider's own block, ...) is sent whole, so it
    adds the tokens of its JSON (sorted keys) to its ``[type]`` marker's. The candidates of
    :func:`messages_to_candidates` (given a ``token_counter``) cost the sum of these counts over
    the messages they send, so the budget is a bound on this number. With a ``memo``, messages
    it has seen are not rendered or counted again.

    Example:
        >>> words = lambda t: len(t.split())
        >>> sent_tokens([HumanMessage("one two"), AIMessage("three")], words)
        3
        >>> block = {"type": "json", "json": {"two": 3}}  # "one [json]", then 5 words of JSON
        >>> sent_tokens([HumanMessage(["one", block])], words)
        7
    """
    if memo is not None:
        return sum(memo.tokens(m, token_counter) for m in messages)
    return sum(_message_tokens(m, token_counter) for m in messages)


def _without_unanswerable_calls(message: AIMessage) -> AIMessage | None:
    """``message`` without its tool calls that have no id (no result can ever answer them).

    Returns the message itself when every call has an id, a copy without the id-less calls
    otherwise (also removed from ``additional_kwargs["tool_calls"]`` and from tool-use content
    blocks, which some providers send instead), or ``None`` when nothing would be left to send.
    """
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
            if not (isinstance(b, Mapping) and b.get("type") in _CALL_BLOCKS and not b.get("id"))
        ]
    calls = [c for c in message.tool_calls if c.get("id")]
    logger.debug("leaving out %d tool call(s) without an id", len(message.tool_calls) - len(calls))
    if not calls and not content_text(content).strip():
        return None
    return message.model_copy(
        update={"tool_calls": calls, "additional_kwargs": extra, "content": content}
    )


def memory_text(item: Any) -> str:
    """The text of one memory: a LangGraph store ``Item``, a ``dict``, a ``Document`` or a str.

    For a dict value the first string under ``content``, ``text``, ``memory``, ``fact`` or
    ``summary`` is used, else the whole value as compact JSON.

    Example:
        >>> memory_text({"content": "Prefers metric units."})
        'Prefers metric units.'
    """
    if isinstance(item, str):
        return item
    if isinstance(item, Document):
        return item.page_content
    value = getattr(item, "value", item)
    if isinstance(value, Mapping):
        for key in _MEMORY_KEYS:
            if isinstance(value.get(key), str):
                return str(value[key])
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return str(value)


def document_text(document: Any) -> str:
    """The text of one retrieved document (``Document.page_content``, or ``str(document)``).

    Example:
        >>> document_text(Document("Port 6543."))
        'Port 6543.'
    """
    if isinstance(document, Document):
        return document.page_content
    return document if isinstance(document, str) else memory_text(document)


def apply_removals(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """``messages`` with each ``RemoveMessage`` applied, as LangGraph's ``add_messages`` does.

    A ``RemoveMessage(id=X)`` deletes the messages before it whose id is ``X``;
    ``RemoveMessage(id=REMOVE_ALL_MESSAGES)`` deletes everything before it. No
    ``RemoveMessage`` is left, one whose id matches nothing is dropped, and unlike
    ``add_messages`` no message gains an id and nothing is modified. Apply it before
    :func:`messages_to_candidates` (the hook and the middleware do).

    Args:
        messages: A history, oldest first.

    Returns:
        The messages still there, in their order (the same objects).

    Example:
        >>> msgs = [HumanMessage("a", id="1"), AIMessage("b", id="2"), RemoveMessage(id="2"),
        ...         HumanMessage("c")]
        >>> [m.content for m in apply_removals(msgs)]
        ['a', 'c']
        >>> [m.content for m in apply_removals([*msgs, RemoveMessage(id=REMOVE_ALL_MESSAGES)])]
        []
    """
    if not any(isinstance(m, RemoveMessage) for m in messages):
        return list(messages)
    removed: set[str] = set()  # ids a later RemoveMessage deletes
    kept: list[BaseMessage] = []
    for message in reversed(messages):
        if isinstance(message, RemoveMessage):
            if message.id == REMOVE_ALL_MESSAGES:
                break
            removed.add(str(message.id))
        elif message.id is None or message.id not in removed:
            kept.append(message)
    kept.reverse()
    return kept


def _is_human(message: BaseMessage) -> bool:
    """A user's message: a ``HumanMessage``, or a ``ChatMessage`` with role user/human."""
    if isinstance(message, HumanMessage):
        return True
    return isinstance(message, ChatMessage) and message.role in ("user", "human")


def query_from_messages(messages: Sequence[BaseMessage]) -> str:
    """The text of the latest human message (``""`` when there is none).

    Example:
        >>> query_from_messages([HumanMessage("hi"), AIMessage("hello")])
        'hi'
    """
    for message in reversed(messages):
        if _is_human(message):
            return content_text(message)
    return ""


def agent_query(messages: Sequence[BaseMessage]) -> str:
    """The task plus what the agent is doing now: the query for a call inside a tool loop.

    The latest human message, then the text and the tool calls (name and arguments) of the
    latest AI message after it. Before the agent has acted it is the human message alone.

    Example:
        >>> call = {"name": "read_file", "args": {"path": "src/app.py"}, "id": "c1"}
        >>> print(agent_query([HumanMessage("fix the crash"),
        ...                    AIMessage("Reading the entry point.", tool_calls=[call])]))
        fix the crash
        Reading the entry point.
        read_file {"path": "src/app.py"}
    """
    task = query_from_messages(messages)
    for message in reversed(messages):
        if _is_human(message):
            break
        if isinstance(message, AIMessage):
            calls = [
                f"{c.get('name')} "
                + json.dumps(c.get("args") or {}, ensure_ascii=False, default=str)
                for c in message.tool_calls
            ]
            return "\n".join(p for p in (task, content_text(message), *calls) if p.strip())
    return task


# -- messages -> candidates --------------------------------------------------------------------
def _placeholder_result(call: Mapping[str, Any], *, missing: bool) -> ToolMessage:
    name = call.get("name") or "tool"
    if missing:
        return ToolMessage(
            content=f"[no result was recorded for this {name} call]",
            tool_call_id=str(call["id"]),
            name=name,
            status="error",
        )
    return ToolMessage(
        content=f"[{name} result omitted to fit the context budget]",
        tool_call_id=str(call["id"]),
        name=name,
    )


def _unanswered(
    calls: Sequence[Mapping[str, Any]], results: Sequence[BaseMessage]
) -> list[Mapping[str, Any]]:
    """The calls no result answers: each result answers the first call left with its id.

    Example:
        >>> calls = [{"name": "a", "id": "x"}, {"name": "b", "id": "x"}]
        >>> _unanswered(calls, [ToolMessage("ra", tool_call_id="x")])
        [{'name': 'b', 'id': 'x'}]
    """
    left = Counter(str(m.tool_call_id) for m in results if isinstance(m, ToolMessage))
    out = []
    for call in calls:
        if left[str(call["id"])]:
            left[str(call["id"])] -= 1
        else:
            out.append(call)
    return out


def _cut(
    messages: Sequence[BaseMessage], pair_turns: bool
) -> tuple[list[tuple[str, list[int]]], list[int]]:
    """Group message indices into (kind, indices) units; also return orphan ToolMessage indices."""
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
        elif _is_human(message):
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
        memories: Memory items (LangGraph store ``Item``/``SearchItem``, dicts or strings).
        documents: Retrieved ``Document`` objects (or strings).
        keep_latest_turn: Make everything from the latest human message on mandatory (the agent's
            work on the current question). When false only that message is mandatory, plus the
            span holding the last message.
        pair_turns: Keep a human message together with the plain AI replies that follow it.
        tool_placeholders: Also offer, for each optional tool span, a cheaper call-only variant
            whose results are replaced by short placeholder ``ToolMessage`` objects.
        fold_stubs: Messages to send instead of an optional tool span, by the index of its
            ``AIMessage`` (the call and its folded results, see
            :func:`~langchain_pacms.lifecycle.variants.fold_variants`): offered as a
            ``t<i>:fold`` variant when every call of the span is answered.
        token_counter: Give each candidate the cost of what it sends (its ``tokens``): the
            :func:`sent_tokens` of its messages, placeholders included, or of its bullet line
            in the context message for a memory or document. Without it the selector counts
            each candidate's text.
        memo: Remembers each message's text and count between calls (see
            :class:`MessageMemo`), so a growing conversation renders only its new messages.

    Returns:
        The candidates (memories, then documents, then the conversation in order; positions
        follow that order) and the matching :class:`Span` list (same order, same ids).

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> call = {"name": "add", "args": {"a": 1}, "id": "c1"}
        >>> msgs = [HumanMessage("1+?"), AIMessage("", tool_calls=[call]),
        ...         ToolMessage("2", tool_call_id="c1"), AIMessage("It is 2.")]
        >>> [(s.id, s.kind, s.indices) for s in messages_to_candidates(msgs)[1]]
        [('m0', 'turn', (0,)), ('t1', 'tool', (1, 2)), ('m3', 'turn', (3,))]
    """
    units, orphans = _cut(messages, pair_turns)
    if orphans:
        logger.debug("dropping %d orphan ToolMessage(s) with no matching call", len(orphans))
    latest_human = max((i for i, m in enumerate(messages) if _is_human(m)), default=-1)
    last = len(messages) - 1
    costed = memo is not None and token_counter is not None
    costs: dict[str, int] = {}  # spans that send their own messages as they are, costed here
    spans: list[Span] = []
    for k, item in enumerate(memories):
        spans.append(Span(f"mem{k}", "memory", text=memory_text(item), item=item))
    for k, item in enumerate(documents):
        spans.append(Span(f"doc{k}", "document", text=document_text(item), item=item))
    for kind, indices in units:
        first = indices[0]
        mandatory = (
            kind == "system"
            or latest_human in indices
            or last in indices
            or (keep_latest_turn and latest_human >= 0 and first > latest_human)
        )
        if costed:
            assert memo is not None and token_counter is not None
            entries = [memo._entry(messages[i]) for i in indices]
            texts = [e.text for e in entries]
            own_cost = sum(e.tokens(token_counter) for e in entries)
        else:
            texts = [_message_text(messages[i]) for i in indices]
        if kind != "tool":
            spans.append(Span(f"m{first}", kind, tuple(indices), mandatory, "\n".join(texts)))
            if costed:
                costs[spans[-1].id] = own_cost
            continue
        sendable = _without_unanswerable_calls(messages[first])  # type: ignore[arg-type]
        if sendable is not messages[first]:  # a copy without the id-less calls, or nothing
            texts[0] = "" if sendable is None else _message_text(sendable)
        calls = [] if sendable is None else sendable.tool_calls
        missing_calls = _unanswered(calls, [messages[i] for i in indices[1:]])
        texts += [content_text(_placeholder_result(c, missing=True).content) for c in missing_calls]
        missing = tuple(str(c["id"]) for c in missing_calls)
        if tool_placeholders and not mandatory and len(indices) > 1:
            stub_text = "\n".join(
                [texts[0]] + [str(_placeholder_result(c, missing=False).content) for c in calls]
            )
            spans.append(Span(f"t{first}:call", "tool", (first,), False, stub_text, stub=True))
        folded = (fold_stubs or {}).get(first)
        if folded and not mandatory and sendable is messages[first] and not missing:
            render = memo.text if memo is not None else _message_text
            spans.append(
                Span(
                    f"t{first}:fold",
                    "tool",
                    (first,),
                    False,
                    "\n".join(render(m) for m in folded),
                    stub=True,
                    sends=tuple(folded),
                )
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


def _sent_cost(
    messages: Sequence[BaseMessage],
    span: Span,
    token_counter: Callable[[str], int],
    memo: MessageMemo | None,
) -> int:
    if span.kind in ("memory", "document"):
        return token_counter(_bullet(span.text))
    if memo is None:
        return sent_tokens(_span_messages(messages, span), token_counter)
    # Placeholders are made afresh on every call: the memo is for the input's own messages and
    # for fold stubs (the same objects from call to call when the runner keeps a FoldMemo).
    own = {id(m) for m in span.sends} or {id(messages[i]) for i in span.indices}
    return sum(
        memo.tokens(m, token_counter) if id(m) in own else _message_tokens(m, token_counter)
        for m in _span_messages(messages, span)
    )


def _span_messages(messages: Sequence[BaseMessage], span: Span) -> list[BaseMessage]:
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


# -- selection -> messages ---------------------------------------------------------------------
def _bullet(text: str) -> str:
    return "- " + text.strip().replace("\n", "\n  ")


def _bullets(texts: Iterable[str]) -> str:
    return "\n".join(_bullet(t) for t in texts)


def build_context_message(
    memories: Sequence[str] = (),
    documents: Sequence[str] = (),
    *,
    role: str = "system",
) -> BaseMessage | None:
    """The one marked message that carries kept memories and documents to the model.

    Args:
        memories: Memory texts, in pool order.
        documents: Document texts, in pool order.
        role: ``"system"`` (a ``SystemMessage``) or ``"human"`` (a ``HumanMessage``, for
            providers that accept a single leading system message only).

    Returns:
        The message, or ``None`` when there is nothing to carry.

    Example:
        >>> print(build_context_message(["Likes tea."]).content)
        Relevant memories:
        - Likes tea.
    """
    sections = []
    if memories:
        sections.append(f"{CONTEXT_MEMORIES_HEADER}\n{_bullets(memories)}")
    if documents:
        sections.append(f"{CONTEXT_DOCUMENTS_HEADER}\n{_bullets(documents)}")
    if not sections:
        return None
    if role not in ("system", "human"):
        raise ValueError(f"context message role must be 'system' or 'human', got {role!r}")
    text = "\n\n".join(sections)
    if role == "system":
        return SystemMessage(text, id=CONTEXT_MESSAGE_ID)
    return HumanMessage(text, id=CONTEXT_MESSAGE_ID)


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
    """Turn a selection back into a provider-valid message list.

    Args:
        messages: The same messages given to :func:`messages_to_candidates`. Not modified.
        selection: The verdict on those candidates.
        spans: The spans from :func:`messages_to_candidates` (default: read from the
            candidates' ``source``).
        context_role: Role of the memory/document message (see :func:`build_context_message`).
        start_on_human: When dropping made an AI message the first non-system message (some
            providers, Anthropic among them, reject that), insert :data:`OMISSION_NOTE` as a short
            ``HumanMessage`` before it. Nothing is inserted if the input itself started that way.

    Returns:
        Kept messages in their original order (each tool span's results directly after its call,
        with placeholders where a result is absent), and, when memories or documents were kept,
        one context message right after the leading system messages. A kept fold stub whose
        left-out locators (see :func:`~langchain_pacms.lifecycle.actions.reshow_left_out`) no
        longer show in another kept message lists them again.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_pacms import ContextSelector
        >>> msgs = [HumanMessage("a b c d e f"), HumanMessage("g")]
        >>> cands, spans = messages_to_candidates(msgs)
        >>> sel = ContextSelector().select(cands, "g", budget_tokens=1)
        >>> [m.content for m in apply_selection(msgs, sel, spans)]
        ['g']
    """
    by_id = _spans_of(selection, spans)
    kept = set(selection.kept_ids)
    at: dict[int, list[BaseMessage]] = {}
    memories: list[str] = []
    documents: list[str] = []
    for span in by_id.values():
        if span.id not in kept:
            continue
        if span.kind == "memory":
            memories.append(span.text)
        elif span.kind == "document":
            documents.append(span.text)
        elif span.kind == "tool":
            if span.stub and span.full_id in kept:
                continue
            at[span.indices[0]] = _span_messages(messages, span)
        else:
            for i in span.indices:
                at[i] = [messages[i]]
    order = sorted(at)
    result = [m for i in order for m in at[i]]
    lead = 0
    while lead < len(result) and isinstance(result[lead], SystemMessage):
        lead += 1
    if start_on_human and lead < len(result) and not _is_human(result[lead]):
        first = next(i for i in order if not isinstance(messages[i], SystemMessage))
        if any(not isinstance(messages[i], SystemMessage) for i in range(first)):
            result.insert(lead, HumanMessage(OMISSION_NOTE))
    context = build_context_message(memories, documents, role=context_role)
    if context is not None:
        result.insert(lead, context)
    from langchain_pacms.lifecycle.actions import reshow_left_out  # the lifecycle imports this

    return reshow_left_out(result)
