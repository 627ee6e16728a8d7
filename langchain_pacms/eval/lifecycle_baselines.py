"""Replayable context-management baselines from the field, on plain message lists.

Each baseline maps a prefix to a managed view and the payloads it moved out (``sidecars``:
``id -> text``, empty for baselines that drop text). The system prompt and the first user
message (the task) are always kept, as is everything from the newest span on.

* ``turn_fold``: fold the oldest spans chronologically into one stub, keeping the last
  ``keep`` spans (a span is a user message, or an assistant message with its tool outputs).
* ``tool_prune``: replace every tool output but the last ``keep`` with a placeholder.
* ``tool_mask_prune``: mask (head and tail kept) the ``mask`` tool outputs before the last
  ``keep``, and prune the older ones.
* ``hybrid``: fold spans older than the last ``2 * keep`` and prune the tool outputs in
  between but the last ``keep``.
* ``clear_tool_uses``: LangChain v1 ``ContextEditingMiddleware`` with ``ClearToolUsesEdit``
  (``trigger=0``, ``keep``), run through the real middleware's ``wrap_model_call``.

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    >>> msgs = [HumanMessage("task", id="u")]
    >>> for k in range(5):
    ...     msgs += [AIMessage("", id=f"a{k}", tool_calls=[{"name": "f", "args": {},
    ...              "id": f"c{k}", "type": "tool_call"}]),
    ...              ToolMessage(f"out {k}", tool_call_id=f"c{k}", id=f"t{k}")]
    >>> view, sidecars = tool_prune(msgs)
    >>> [m.content for m in view if isinstance(m, ToolMessage)]
    ['[cleared]', '[cleared]', 'out 2', 'out 3', 'out 4']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

PLACEHOLDER = "[cleared]"
Baseline = Callable[[Sequence[BaseMessage]], tuple[list[BaseMessage], dict[str, str]]]


def _spans(messages: Sequence[BaseMessage]) -> list[list[int]]:
    spans: list[list[int]] = []
    for k, m in enumerate(messages):
        if isinstance(m, ToolMessage) and spans:
            spans[-1].append(k)
        else:
            spans.append([k])
    return spans


def _protected(messages: Sequence[BaseMessage]) -> set[int]:
    keep = {k for k, m in enumerate(messages) if isinstance(m, SystemMessage)}
    first_user = next((k for k, m in enumerate(messages) if isinstance(m, HumanMessage)), None)
    if first_user is not None:
        keep.add(first_user)
    return keep


def _text(m: BaseMessage) -> str:
    return m.content if isinstance(m.content, str) else str(m.content)


def _tools(messages: Sequence[BaseMessage]) -> list[int]:
    return [k for k, m in enumerate(messages) if isinstance(m, ToolMessage)]


def _replace(m: BaseMessage, content: str) -> BaseMessage:
    return m.model_copy(update={"content": content})


def _fold(
    messages: Sequence[BaseMessage], keep_spans: int
) -> tuple[list[BaseMessage], dict[str, str], int]:
    """Fold the spans before the last ``keep_spans`` into one stub; returns the first kept index."""
    spans = _spans(messages)
    protected = _protected(messages)
    cut = (
        spans[-keep_spans][0]
        if 0 < keep_spans < len(spans)
        else (0 if keep_spans else len(messages))
    )
    folded = [k for k in range(cut) if k not in protected]
    if not folded:
        return list(messages), {}, cut
    sid = f"fold:{messages[folded[0]].id}"
    payload = (
        "\n".join(_text(messages[k]) for k in folded)
        + "\n"
        + "\n".join(
            str(c.get("args"))
            for k in folded
            if isinstance(messages[k], AIMessage)
            for c in messages[k].tool_calls  # type: ignore[attr-defined]
        )
    )
    stub = HumanMessage(f"[{len(folded)} earlier messages folded into sidecar {sid}]", id=sid)
    view = [messages[k] for k in range(cut) if k in protected] + [stub] + list(messages[cut:])
    return view, {sid: payload}, cut


def turn_fold(
    messages: Sequence[BaseMessage], keep: int = 3
) -> tuple[list[BaseMessage], dict[str, str]]:
    """Oldest-turn chronological fold (see the module docstring).

    Example:
        >>> turn_fold([HumanMessage("t", id="u")])[1]
        {}
    """
    view, sidecars, _ = _fold(messages, keep)
    return view, sidecars


def tool_prune(
    messages: Sequence[BaseMessage], keep: int = 3
) -> tuple[list[BaseMessage], dict[str, str]]:
    """Replace all tool outputs but the last ``keep`` with a placeholder.

    Example:
        >>> tool_prune([])
        ([], {})
    """
    tools = _tools(messages)
    old = set(tools[:-keep] if keep else tools)
    return [_replace(m, PLACEHOLDER) if k in old else m for k, m in enumerate(messages)], {}


def tool_mask_prune(
    messages: Sequence[BaseMessage], keep: int = 3, mask: int = 5, head: int = 400, tail: int = 200
) -> tuple[list[BaseMessage], dict[str, str]]:
    """Mask the ``mask`` tool outputs before the last ``keep`` and prune the older ones.

    Example:
        >>> tool_mask_prune([])
        ([], {})
    """
    tools = _tools(messages)
    recent = tools[-keep:] if keep else []
    masked = set(tools[: len(tools) - len(recent)][-mask:]) if mask else set()
    pruned = set(tools) - set(recent) - masked
    view: list[BaseMessage] = []
    for k, m in enumerate(messages):
        text = _text(m)
        if k in pruned:
            view.append(_replace(m, PLACEHOLDER))
        elif k in masked and len(text) > head + tail + 40:
            elided = len(text) - head - tail
            view.append(
                _replace(m, f"{text[:head]}\n[... {elided} chars masked ...]\n{text[-tail:]}")
            )
        else:
            view.append(m)
    return view, {}


def hybrid(
    messages: Sequence[BaseMessage], keep: int = 3
) -> tuple[list[BaseMessage], dict[str, str]]:
    """Fold spans older than the last ``2 * keep``, prune tool outputs but the last ``keep``.

    Example:
        >>> hybrid([])
        ([], {})
    """
    view, sidecars, _ = _fold(messages, 2 * keep)
    pruned, _ = tool_prune(view, keep)
    return pruned, sidecars


def clear_tool_uses(
    messages: Sequence[BaseMessage], keep: int = 3
) -> tuple[list[BaseMessage], dict[str, str]]:
    """LangChain's ``ContextEditingMiddleware`` + ``ClearToolUsesEdit(trigger=0, keep=keep)``.

    The middleware's real ``wrap_model_call`` runs on a ``ModelRequest``; the handler records
    the messages the model would receive.

    Example:
        >>> clear_tool_uses([HumanMessage("t", id="u")])[0][0].content
        't'
    """
    from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware
    from langchain.agents.middleware.types import ModelRequest, ModelResponse
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel

    middleware = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=0, keep=keep)])
    seen: list[BaseMessage] = []

    def handler(request: Any) -> Any:
        seen.extend(request.messages)
        return ModelResponse(result=[AIMessage("")])

    model = FakeMessagesListChatModel(responses=[AIMessage("")])
    request = ModelRequest(model=model, messages=list(messages))  # type: ignore[arg-type]
    middleware.wrap_model_call(request, handler)
    return seen, {}


BASELINES: dict[str, Baseline] = {
    "turn_fold": turn_fold,
    "tool_prune_keep3": tool_prune,
    "tool_mask_prune": tool_mask_prune,
    "hybrid_fold_prune": hybrid,
    "langchain_clear_tool_uses": clear_tool_uses,
}
