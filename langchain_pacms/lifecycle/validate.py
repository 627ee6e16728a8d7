"""Check a plan's actions against a history: drop invalid ones with reasons, normalise overlaps."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from langchain_core.messages import AIMessage, BaseMessage

from langchain_pacms.lifecycle.actions import Action, ActionResult, apply_actions, provider_problems
from langchain_pacms.lifecycle.objects import ContextIndex
from langchain_pacms.lifecycle.tuning import Masking
from langchain_pacms.messages.payload import exact_payload
from langchain_pacms.tokens import TokenCounter

__all__ = ["Checked", "Rejection", "check_actions", "merge_actions"]
_MASKING = Masking()

_RANK = {"fold": 0, "mask": 1, "prune": 2}  # of two edits of one object, the lower rank wins


@dataclass(frozen=True)
class Rejection:
    """An action the checks dropped, and why.

    Example:
        >>> Rejection(Action("prune", "system:1"), "the system prompt is never edited").reason
        'the system prompt is never edited'
    """

    action: Action
    reason: str


@dataclass(frozen=True)
class Checked:
    """The outcome of :func:`check_actions`.

    Attributes:
        accepted: The valid actions, one per object, in plan order.
        rejected: The dropped actions with reasons.
        result: The rehearsal: ``accepted`` applied to a copy of the history.
    """

    accepted: tuple[Action, ...]
    rejected: tuple[Rejection, ...]
    result: ActionResult

    @property
    def tokens_saved(self) -> int:
        """Tokens the accepted actions remove from the active view."""
        return max(self.result.tokens_before - self.result.tokens_after, 0)


def merge_actions(*groups: Sequence[Action]) -> tuple[list[Action], list[Rejection]]:
    """One action per target (fold beats mask beats prune; plan order kept), and the dropped."""
    best: dict[str, Action] = {}  # in the order the targets first come
    dropped: list[Rejection] = []
    for action in (a for group in groups for a in group):
        current = best.get(action.target)
        if current is None:
            best[action.target] = action
            continue
        if action.op == current.op:
            continue  # the same action proposed again
        stronger = _RANK[action.op] < _RANK[current.op]
        keep, drop = (action, current) if stronger else (current, action)
        best[action.target] = keep
        dropped.append(Rejection(drop, f"overlaps {keep.op} of the same object ({keep.op} kept)"))
    return list(best.values()), dropped


def _repeated_ids(messages: Sequence[BaseMessage]) -> frozenset[str]:
    """The message ids that more than one message of ``messages`` carries."""
    counts = Counter(m.id for m in messages if m.id)
    return frozenset(str(mid) for mid, n in counts.items() if n > 1)


def _unlisted_call(message: BaseMessage) -> bool:
    """Whether ``message`` holds a ``tool_use`` content block that its ``tool_calls`` lack.

    The block is the call its tool result answers: an edit that drops it orphans the result,
    which ``provider_problems`` (reading ``tool_calls``) already counts as one before the edit.
    """
    if not isinstance(message, AIMessage) or not isinstance(message.content, list):
        return False
    listed = {c.get("id") for c in message.tool_calls}
    return any(
        isinstance(b, Mapping) and b.get("type") == "tool_use" and b.get("id") not in listed
        for b in message.content
    )


def _reason(
    index: ContextIndex,
    messages: Sequence[BaseMessage],
    action: Action,
    repeated: Collection[str] | None = None,
) -> str | None:
    """Why ``action`` is invalid (``None``: it is valid); ``repeated``: :func:`_repeated_ids`."""
    if action.op not in _RANK:
        return f"unknown op {action.op!r} (expected fold, mask or prune)"
    obj = index.by_id.get(action.target)
    if obj is None:
        return "unknown object id"
    if obj.kind == "system":
        return "the system prompt is never edited"
    if obj.latest:
        return "part of the latest turn"
    if any(not messages[i].id for i in obj.indices):
        return "a message without an id cannot be replaced or removed in state"
    repeated = _repeated_ids(messages) if repeated is None else repeated
    if any(messages[i].id in repeated for i in obj.indices):
        return "a message whose id another message shares cannot be replaced or removed in state"
    if action.scope not in ("output", "span"):
        return f"unknown scope {action.scope!r} (expected output or span)"
    if action.scope != "output" and (action.op != "fold" or obj.kind != "tool"):
        return f"scope {action.scope!r} applies to a fold of a tool span only"
    if action.op != "mask" and any(_unlisted_call(messages[i]) for i in obj.indices):
        return "a tool_use block its tool_calls lack would be lost, orphaning the call's result"
    if action.op != "prune" and obj.state != "active":
        return f"already {obj.state}"  # a fold of a masked body would store the masked text
    if action.op == "fold" and not exact_payload(
        messages, obj.indices, calls=action.scope == "span"
    ):
        return "its content holds values JSON cannot carry (bytes, ...): a fold would lose them"
    return None


def _valid(
    messages: Sequence[BaseMessage],
    index: ContextIndex,
    actions: Sequence[Action],
    rejected: list[Rejection],
) -> list[Action]:
    """The actions that pass every check before the savings one; the others go to ``rejected``."""
    repeated = _repeated_ids(messages)
    reasons = [(a, _reason(index, messages, a, repeated)) for a in actions]
    rejected.extend(Rejection(a, reason) for a, reason in reasons if reason is not None)
    merged, overlaps = merge_actions([a for a, reason in reasons if reason is None])
    rejected.extend(overlaps)
    if not any(a.op == "prune" for a in merged):
        return merged  # only a prune changes which messages remain (see ``_problems``)
    before = set(provider_problems(messages))
    if not _problems(messages, index, merged) - before:
        return merged
    accepted: list[Action] = []
    for action in merged:
        new = sorted(_problems(messages, index, [*accepted, action]) - before)
        if new:
            rejected.append(Rejection(action, f"would leave an invalid history: {new[0]}"))
        else:
            accepted.append(action)
    return accepted


def _problems(
    messages: Sequence[BaseMessage], index: ContextIndex, actions: Sequence[Action]
) -> set[str]:
    """What a provider would reject once ``actions`` are applied (only prunes matter)."""
    gone = {i for a in actions if a.op == "prune" for i in index.by_id[a.target].indices}
    return set(provider_problems([m for i, m in enumerate(messages) if i not in gone]))


def check_actions(
    messages: Sequence[BaseMessage],
    index: ContextIndex,
    actions: Sequence[Action],
    *,
    token_counter: TokenCounter | None = None,
    masking: Masking = _MASKING,
    prior: Checked | None = None,
) -> Checked:
    r"""Validate, normalise and rehearse ``actions`` on a copy of ``messages``.

    An action is dropped when its op, scope or target is unknown, it touches the system prompt
    or the latest turn, a target message has no id or one another message shares, it saves
    nothing, or it would leave a history a provider rejects (a fold or prune of a message whose
    ``tool_use`` content block its ``tool_calls`` lack included).

    Args:
        messages: The history ``index`` was built from (not modified).
        index: Its :class:`~langchain_pacms.lifecycle.objects.ContextIndex`.
        actions: The proposed actions (one plan, or staged plans merged).
        token_counter: Counter for the rehearsal's token figures.
        masking: What a mask keeps (default ``Masking()``).
        prior: An earlier check of the same history and settings; when ``actions`` are its
            accepted actions, only the savings check is made again.

    Raises:
        TypeError: If an action is not an :class:`Action`.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_pacms.lifecycle.objects import index_messages
        >>> msgs = [HumanMessage("old brief " * 40, id="h1"), HumanMessage("ok", id="h2")]
        >>> checked = check_actions(msgs, index_messages(msgs), [Action("prune", "system:1"),
        ...     Action("mask", "conversation:user:1"), Action("fold", "conversation:user:1")])
        >>> [a.op for a in checked.accepted], [r.reason for r in checked.rejected]
        (['fold'], ['unknown object id', 'overlaps fold of the same object (fold kept)'])
    """

    def rehearse(chosen: Sequence[Action]) -> ActionResult:
        return apply_actions(messages, index, chosen, token_counter=token_counter, masking=masking)

    for action in actions:
        if not isinstance(action, Action):
            raise TypeError(f"actions must be Action objects, got {type(action).__name__}")
    rejected: list[Rejection] = []
    if prior is not None and tuple(actions) == prior.accepted:
        merged, result = list(actions), prior.result
    else:
        merged = _valid(messages, index, actions, rejected)
        result = rehearse(merged)
    idle = [a for a in merged if a.op != "prune" and result.saved.get(a.target, 0) <= 0]
    if idle:
        rejected.extend(
            Rejection(a, f"saves nothing (the {a.op}ed text is not smaller)") for a in idle
        )
        merged = [a for a in merged if a not in idle]
        result = rehearse(merged)
    return Checked(tuple(merged), tuple(rejected), result)
