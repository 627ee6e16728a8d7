"""What one commit of the lifecycle harness did, and the harness's counters over its life."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from langchain_core.messages import BaseMessage, messages_to_dict

from langchain_pacms.lifecycle.actions import Action
from langchain_pacms.lifecycle.fold import SidecarRecord
from langchain_pacms.lifecycle.plan import Plan
from langchain_pacms.lifecycle.validate import Rejection

__all__ = ["COMMIT_EVENT", "Commit", "HarnessStats", "transcript_of"]

COMMIT_EVENT = "pacms_lifecycle_commit"
"""Name of the custom callback event dispatched for every commit."""


@dataclass
class HarnessStats:
    """Counters over the harness's life (all threads).

    Attributes:
        plans_rejected: Plans the planner could not make (:meth:`Plan.rejection`).
        actions_accepted: Actions that passed the checks and were staged.
        rejections: ``reason -> count`` of the dropped actions and rejected plans.
        commit_failures: Commits abandoned because the sidecar write failed.
        tokens_removed: Active-view tokens removed by commits.
        sidecars_written: Folded payloads persisted.
    """

    plans: int = 0
    plans_rejected: int = 0
    actions_accepted: int = 0
    actions_rejected: int = 0
    rejections: Counter[str] = field(default_factory=Counter)
    commits: int = 0
    commit_failures: int = 0
    tokens_removed: int = 0
    sidecars_written: int = 0
    reasons_kept: ClassVar[int] = 64  # distinct keys of ``rejections``; later ones are "other"
    _lock: ClassVar[threading.Lock] = threading.Lock()  # steps of several runs count at once

    def add(self, *, rejections: Iterable[str] = (), **counts: int) -> None:
        """Add ``counts`` to the counters and count each of ``rejections``, atomically.

        Past :attr:`reasons_kept` distinct reasons, a new one counts as ``"other"``.

        Example:
            >>> stats = HarnessStats()
            >>> stats.add(plans=1, rejections=["too small", "too small"])
            >>> stats.plans, stats.rejections["too small"]
            (1, 2)
        """
        with HarnessStats._lock:
            for name, amount in counts.items():
                setattr(self, name, getattr(self, name) + amount)
            held = self.rejections
            for key in rejections:
                full = key not in held and len(held) >= self.reasons_kept - 1
                held["other" if full else key] += 1

    def to_dict(self) -> dict[str, Any]:
        """The counters as plain data."""
        with HarnessStats._lock:
            return {**self.__dict__, "rejections": dict(self.rejections)}


@dataclass(frozen=True)
class Commit:
    """One committed edit of a thread's history.

    Attributes:
        messages: The new history.
        updates: The update for a LangGraph ``messages`` channel (removals, same-id replacements).
        rejected: Actions dropped at this commit.
        sidecars: The folded payloads written before the commit.
        tokens_before: Active-view tokens before (``tokens_after``: after).
        reason: ``"threshold"`` or ``"max_active_tokens"``.
        known_ids: ``message id -> object id`` to pass to the next step.
    """

    thread_id: str
    messages: list[BaseMessage]
    updates: list[BaseMessage]
    actions: tuple[Action, ...]
    rejected: tuple[Rejection, ...]
    sidecars: tuple[SidecarRecord, ...]
    tokens_before: int
    tokens_after: int
    reason: str
    known_ids: Mapping[str, str]

    @property
    def share(self) -> float:
        """Share of the active view removed."""
        return 1.0 - self.tokens_after / self.tokens_before if self.tokens_before else 0.0

    def event(self) -> dict[str, Any]:
        """The callback event / JSONL record for this commit."""
        groups = Plan("", self.actions).groups()
        return {
            "thread_id": self.thread_id,
            "reason": self.reason,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "share": round(self.share, 4),
            "actions": groups,
            "reasons": {a.target: a.reason for a in self.actions},
            "rejected": [
                {"op": r.action.op, "target": r.action.target, "reason": r.reason}
                for r in self.rejected
            ],
            "sidecars": [s.object_id for s in self.sidecars],
        }


def transcript_of(messages: Sequence[BaseMessage], indices: Sequence[int]) -> str:
    """An object's messages, whole, as JSON (LangChain message dicts): what an audit keeps.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, messages_from_dict
        >>> msgs = [HumanMessage("hi", id="h1"), AIMessage("yes", id="a1")]
        >>> [m.content for m in messages_from_dict(json.loads(transcript_of(msgs, [1])))]
        ['yes']
    """
    return json.dumps(
        messages_to_dict([messages[i] for i in indices]), ensure_ascii=False, default=str
    )
