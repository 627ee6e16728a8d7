r"""The lifecycle harness: plan on the side, rehearse and validate, stage, commit when it pays.

One :meth:`LifecycleHarness.step` per agent step (before a model call, for example):

1. index the history (ids kept stable with ``known_ids``);
2. at a safe boundary, ask the planner for a :class:`~langchain_pacms.lifecycle.plan.Plan`
   and check it (:func:`~langchain_pacms.lifecycle.validate.check_actions`); accepted actions
   are *staged*, rejected ones counted with their reasons;
3. re-check everything staged against the current history and commit only when the expected
   pruned share of the active view reaches ``threshold`` (default 0: whenever the planner
   acts) or the view exceeds ``max_active_tokens``; with ``cached_price`` also only when it
   pays under prompt caching (see :meth:`LifecycleHarness.pays`). Every folded payload is
   written to the sidecar store first, and every masked or pruned original, each of its
   messages whole (a call's text and arguments included), to the audit namespace; a failed
   write means no commit. Records are keyed by object id and content hash, so a mask and a
   later prune of one object keep both originals, and two branches of a forked thread never
   overwrite each other.

A :class:`Commit` carries the new message list and ``updates``: the ``RemoveMessage`` and
same-id replacements a LangGraph ``messages`` channel (``add_messages``) applies, so the edit
lands as a state update at the boundary, never as a per-request rewrite. Each commit is
reported as a ``pacms_lifecycle_commit`` custom callback event and, with ``log_path``, a JSONL
line.

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    >>> from langgraph.store.memory import InMemoryStore
    >>> class FoldOldTools:
    ...     name = "fold-old-tools"
    ...     def plan(self, index, messages):
    ...         return Plan("fold old tool output", tuple(
    ...             Action("fold", o.id, "old") for o in index.objects
    ...             if o.kind == "tool" and not o.latest))
    ...     async def aplan(self, index, messages):
    ...         return self.plan(index, messages)
    >>> call = {"name": "cat", "args": {"path": "log.txt"}, "id": "c1"}
    >>> msgs = [HumanMessage("show the log", id="h1"), AIMessage("", tool_calls=[call], id="a1"),
    ...         ToolMessage("line\n" * 500, tool_call_id="c1", id="t1"),
    ...         AIMessage("It repeats.", id="a2"), HumanMessage("thanks", id="h2")]
    >>> store = InMemoryStore()
    >>> harness = LifecycleHarness(FoldOldTools(), store=store)
    >>> commit = harness.step(msgs, thread_id="t")
    >>> commit.reason, [type(m).__name__ for m in commit.updates]
    ('threshold', ['ToolMessage'])
    >>> SidecarStore(store, "t").get("function:tool:1").payload == msgs[2].content
    True
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from langchain_core.callbacks import adispatch_custom_event, dispatch_custom_event
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    messages_to_dict,
)
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from langchain_pacms._steps import Call, Steps, adrive_calls, drive_calls
from langchain_pacms.integrations.report import SelectionLog
from langchain_pacms.lifecycle.actions import Action, SidecarRecord, restore
from langchain_pacms.lifecycle.objects import ContextIndex, index_messages
from langchain_pacms.lifecycle.plan import Plan, Planner
from langchain_pacms.lifecycle.sidecar import AUDIT_NAMESPACE, SidecarStore, run_thread
from langchain_pacms.lifecycle.validate import Checked, Rejection, check_actions, merge_actions
from langchain_pacms.tokens import TokenCounter, resolve_token_counter

__all__ = [
    "COMMIT_EVENT",
    "TOOL_LOOP_STEPS",
    "Boundary",
    "Commit",
    "HarnessStats",
    "LifecycleHarness",
    "at_boundary",
    "boundary_in_force",
    "tool_steps",
]

logger = logging.getLogger(__name__)

COMMIT_EVENT = "pacms_lifecycle_commit"
"""Name of the custom callback event dispatched for every commit."""

Boundary = Literal["auto", "turn", "tool"]

TOOL_LOOP_STEPS = 4
"""Tool-calling steps since the latest user message after which ``boundary="auto"`` treats the
run as one long task and commits after tool results too."""


def tool_steps(messages: Sequence[BaseMessage]) -> int:
    """Model calls that requested tools since the latest user message.

    Example:
        >>> from langchain_core.messages import ToolMessage
        >>> call = {"name": "f", "args": {}, "id": "c"}
        >>> tool_steps([HumanMessage("go"), AIMessage("", tool_calls=[call]),
        ...             ToolMessage("1", tool_call_id="c")])
        1
    """
    steps = 0
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            break
        if isinstance(message, AIMessage) and message.tool_calls:
            steps += 1
    return steps


def boundary_in_force(
    messages: Sequence[BaseMessage], boundary: Boundary
) -> Literal["turn", "tool"]:
    """The boundary in force: ``"auto"`` is ``"tool"`` inside a long tool loop, else ``"turn"``.

    Example:
        >>> boundary_in_force([HumanMessage("hi")], "auto"), boundary_in_force([], "tool")
        ('turn', 'tool')
    """
    if boundary == "auto":
        return "tool" if tool_steps(messages) >= TOOL_LOOP_STEPS else "turn"
    return boundary


def at_boundary(messages: Sequence[BaseMessage], boundary: Boundary = "auto") -> bool:
    """Whether the history ends at a point where a commit is safe.

    ``"turn"``: the last message is a user message (a turn starts) or an AI answer without tool
    calls (a turn ended). ``"tool"`` also allows the point after a tool call's results are all in,
    for long single-task tool loops. ``"auto"`` (default) is ``"turn"`` in a conversation and
    ``"tool"`` once the run has made :data:`TOOL_LOOP_STEPS` tool-calling steps since the latest
    user message (a coding agent's single task has one user turn and never ends it).

    Example:
        >>> from langchain_core.messages import ToolMessage
        >>> call = {"name": "f", "args": {}, "id": "c"}
        >>> msgs = [HumanMessage("go"), AIMessage("", tool_calls=[call])]
        >>> at_boundary(msgs), at_boundary([*msgs, ToolMessage("1", tool_call_id="c")], "tool")
        (False, True)
        >>> at_boundary([*msgs, ToolMessage("1", tool_call_id="c")])  # one step: not a loop yet
        False
    """
    if boundary not in ("auto", "turn", "tool"):
        raise ValueError(f"boundary must be 'auto', 'turn' or 'tool', not {boundary!r}")
    if not messages:
        return False
    last = messages[-1]
    if isinstance(last, HumanMessage) or (isinstance(last, AIMessage) and not last.tool_calls):
        return True
    if boundary_in_force(messages, boundary) == "turn" or last.type != "tool":
        return False
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            answered = {str(getattr(m, "tool_call_id", "")) for m in messages if m.type == "tool"}
            return all(str(c.get("id")) in answered for c in message.tool_calls)
    return False


@dataclass
class HarnessStats:
    """Counters over the harness's life (all threads).

    Attributes:
        plans: Plans asked for.
        plans_rejected: Plans the planner could not make (:meth:`Plan.rejection`).
        actions_accepted: Actions that passed the checks and were staged.
        actions_rejected: Actions dropped by the checks.
        rejections: ``reason -> count``.
        commits: Commits made.
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

    def to_dict(self) -> dict[str, Any]:
        """The counters as plain data."""
        return {**self.__dict__, "rejections": dict(self.rejections)}


@dataclass(frozen=True)
class Commit:
    """One committed edit of a thread's history.

    Attributes:
        thread_id: The thread.
        messages: The new history.
        updates: What to return for a LangGraph ``messages`` channel: a ``RemoveMessage`` per
            removed message and the rewritten messages (same ids, so they replace in place).
        actions: The committed actions.
        rejected: Actions dropped at this commit (re-checked staged ones included).
        sidecars: The folded payloads written before the commit.
        tokens_before: Active-view tokens before.
        tokens_after: Active-view tokens after.
        reason: ``"threshold"`` or ``"max_active_tokens"``.
        known_ids: ``message id -> object id`` to pass to the next step (pruned objects
            included, so their numbers are never reused).
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


@dataclass
class _Thread:
    staged: list[Action] = field(default_factory=list)
    checked: tuple[ContextIndex, Checked] | None = None  # this step's plan, checked on its index


@dataclass(frozen=True)
class _Decision:
    index: ContextIndex
    checked: Checked
    reason: str | None


class LifecycleHarness:
    """Rehearse, validate, stage and commit a planner's lifecycle actions.

    Args:
        planner: Any :class:`~langchain_pacms.lifecycle.plan.Planner`.
        store: The LangGraph ``BaseStore`` for sidecars (default: a new ``InMemoryStore``, which
            keeps payloads recoverable for this process only; pass ``SqliteStore`` or
            ``PostgresStore`` to keep them across restarts and workers).
        threshold: Commit when the staged actions remove at least this share of the active view
            (``0``, the default, commits every accepted plan at the next boundary).
        max_active_tokens: Also commit, whatever the share, when the view exceeds this.
        boundary: ``"auto"`` (default), ``"turn"`` or ``"tool"``, see :func:`at_boundary`.
            Where the tool boundary is in force, only the latest user message and the newest
            object are protected (one long task); ``"auto"`` needs no choice between a chat and
            a coding agent's loop.
        token_counter: Callable, encoding name, :class:`~langchain_pacms.tokens.TokenCounter` or
            ``None`` (offline ``o200k_base``); use the selector's so both count alike.
        mask_head: Characters a mask keeps at the start.
        mask_tail: Characters a mask keeps at the end.
        log_path: Append one JSONL record per commit to this file.
        cached_price: The price of a cached input token relative to an uncached one (``0.1``
            for many providers); when set, a commit must also pay under prompt caching
            (:meth:`pays`). ``None`` (default): the share threshold alone decides.

    Raises:
        TypeError: If ``planner`` does not follow the planner protocol.
        ValueError: If ``threshold``, ``max_active_tokens``, ``boundary`` or ``cached_price``
            is out of range.
    """

    def __init__(
        self,
        planner: Planner,
        *,
        store: BaseStore | None = None,
        threshold: float = 0.0,
        max_active_tokens: int | None = None,
        boundary: Boundary = "auto",
        token_counter: Any = None,
        mask_head: int = 400,
        mask_tail: int = 200,
        log_path: str | os.PathLike[str] | None = None,
        cached_price: float | None = None,
    ) -> None:
        if not isinstance(planner, Planner):
            raise TypeError(
                f"planner must have name, plan() and aplan(); got {type(planner).__name__}"
            )
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be within [0, 1], got {threshold!r}")
        if max_active_tokens is not None and max_active_tokens <= 0:
            raise ValueError(f"max_active_tokens must be positive, got {max_active_tokens!r}")
        at_boundary([], boundary)
        if cached_price is not None and not 0.0 <= cached_price < 1.0:
            raise ValueError(f"cached_price must be within [0, 1), got {cached_price!r}")
        for name, value in (("mask_head", mask_head), ("mask_tail", mask_tail)):
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")
        self.planner = planner
        self.store: BaseStore = store if store is not None else InMemoryStore()
        self.threshold = threshold
        self.cached_price = cached_price
        self.max_active_tokens = max_active_tokens
        self.boundary: Boundary = boundary
        self.token_counter: TokenCounter = resolve_token_counter(token_counter)
        self.mask_head = mask_head
        self.mask_tail = mask_tail
        self.log = SelectionLog(log_path) if log_path is not None else None
        self.stats = HarnessStats()
        self._threads: dict[str, _Thread] = {}

    def __repr__(self) -> str:
        return (
            f"LifecycleHarness(planner={self.planner.name!r}, threshold={self.threshold}, "
            f"max_active_tokens={self.max_active_tokens}, boundary={self.boundary!r}, "
            f"store={type(self.store).__name__})"
        )

    def sidecars(self, thread_id: str) -> SidecarStore:
        """The sidecar store of one thread (what the recovery tool reads)."""
        return SidecarStore(self.store, thread_id)

    def audit(self, thread_id: str) -> SidecarStore:
        """The audit records of one thread: the originals of masked and pruned objects."""
        return SidecarStore(self.store, thread_id, namespace=AUDIT_NAMESPACE)

    def staged(self, thread_id: str) -> tuple[Action, ...]:
        """The actions staged for a thread and not yet committed."""
        return tuple(self._threads.get(thread_id, _Thread()).staged)

    def index(
        self, messages: Sequence[BaseMessage], known_ids: Mapping[str, str] | None = None
    ) -> ContextIndex:
        """Index ``messages`` with the harness's token counter.

        Where the tool boundary is in force (``"tool"``, or ``"auto"`` in a long tool loop) the
        protected current work is the latest user message and the newest object
        (``latest="step"``), so earlier tool spans of one long task are plannable.
        """
        return index_messages(
            messages,
            token_counter=self.token_counter,
            known_ids=known_ids,
            latest="step" if boundary_in_force(messages, self.boundary) == "tool" else "turn",
        )

    def check(
        self,
        messages: Sequence[BaseMessage],
        index: ContextIndex,
        actions: Sequence[Action],
        prior: Checked | None = None,
    ) -> Checked:
        """Validate and rehearse ``actions`` (see :func:`check_actions`, ``prior`` included)."""
        return check_actions(
            messages,
            index,
            actions,
            token_counter=self.token_counter,
            mask_head=self.mask_head,
            mask_tail=self.mask_tail,
            prior=prior,
        )

    # -- the pure steps shared by step() and astep() -------------------------------------------

    def _stage(
        self, thread: _Thread, messages: Sequence[BaseMessage], index: ContextIndex, plan: Plan
    ) -> None:
        self.stats.plans += 1
        if not plan.ok:
            self.stats.plans_rejected += 1
            self.stats.rejections[f"plan rejected: {plan.rejected}"] += 1
            logger.info("lifecycle planner %s made no plan: %s", plan.planner, plan.rejected)
            return
        checked = self.check(messages, index, plan.actions)
        self.stats.actions_accepted += len(checked.accepted)
        self.stats.actions_rejected += len(checked.rejected)
        for rejection in checked.rejected:
            self.stats.rejections[rejection.reason] += 1
        thread.staged, _ = merge_actions(thread.staged, checked.accepted)
        thread.checked = (index, checked)

    def _decide(
        self, thread: _Thread, messages: Sequence[BaseMessage], index: ContextIndex
    ) -> _Decision:
        staged, thread.checked = thread.checked, None
        # when nothing else is staged, this step's check of the plan rehearsed what is staged
        prior = staged[1] if staged is not None and staged[0] is index else None
        checked = self.check(messages, index, thread.staged, prior)
        thread.staged = list(checked.accepted)  # staged actions that no longer apply go
        if not checked.accepted:
            return _Decision(index, checked, None)
        active = index.active_tokens
        if self.max_active_tokens is not None and active > self.max_active_tokens:
            return _Decision(index, checked, "max_active_tokens")
        share = checked.tokens_saved / active if active else 0.0
        if checked.tokens_saved and share >= self.threshold and self.pays(messages, checked):
            return _Decision(index, checked, "threshold")
        return _Decision(index, checked, None)

    def pays(self, messages: Sequence[BaseMessage], checked: Checked) -> bool:
        """Whether committing ``checked`` pays under prompt caching (always, without a price).

        A commit rewrites the history from its first changed message on, so the next call pays
        that tail in full instead of at ``cached_price``: ``(1 - cached_price) x tail``. Each
        later call then pays ``cached_price x saved`` less. The number of calls still to come
        is taken to be the number made so far (model calls in ``messages``), so a commit pays
        when ``cached_price x saved x calls >= (1 - cached_price) x tail``.

        Example:
            >>> from langchain_core.messages import ToolMessage
            >>> from langchain_pacms.lifecycle import HeuristicPlanner
            >>> call = {"name": "cat", "args": {}, "id": "c1"}
            >>> msgs = [HumanMessage("go", id="h"), AIMessage("", tool_calls=[call], id="a"),
            ...         ToolMessage("x " * 400, tool_call_id="c1", id="t"),
            ...         HumanMessage("and now the next part " * 50, id="h2")]
            >>> harness = LifecycleHarness(HeuristicPlanner(), cached_price=0.1)
            >>> checked = harness.check(msgs, harness.index(msgs),
            ...                         [Action("fold", "function:tool:1")])
            >>> harness.pays(msgs, checked)  # one call so far: too early to pay off
            False
            >>> harness.pays([*msgs[:3], *[AIMessage("...", id=f"r{n}") for n in range(9)],
            ...               msgs[3]], checked)
            True
        """
        if self.cached_price is None:
            return True
        new = checked.result.messages
        first = next(
            (
                i
                for i, (a, b) in enumerate(zip(messages, new, strict=False))
                if a.id != b.id or a.content != b.content
            ),
            min(len(messages), len(new)),
        )
        tail = sum(self.token_counter(str(m.content)) for m in new[first:])
        calls = sum(1 for m in messages if isinstance(m, AIMessage))
        price = self.cached_price
        return price * checked.tokens_saved * calls >= (1 - price) * tail

    def _records(
        self, messages: Sequence[BaseMessage], decision: _Decision
    ) -> tuple[list[SidecarRecord], list[SidecarRecord]]:
        audit = [
            SidecarRecord.of(
                a.target,
                transcript_of(messages, decision.index.by_id[a.target].indices),
                decision.index.by_id[a.target].kind,
                decision.index.by_id[a.target].lineage,
                f"{a.op}: {a.reason}",
            )
            for a in decision.checked.accepted
            if a.op != "fold"
        ]
        return list(decision.checked.result.sidecars), audit

    def _commit(
        self, thread_id: str, thread: _Thread, messages: Sequence[BaseMessage], decision: _Decision
    ) -> Commit:
        result = decision.checked.result
        updates: list[BaseMessage] = [RemoveMessage(id=mid) for mid in result.removed]
        updates.extend(result.replaced.values())
        before = decision.index.active_tokens
        commit = Commit(
            thread_id=thread_id,
            messages=result.messages,
            updates=updates,
            actions=decision.checked.accepted,
            rejected=decision.checked.rejected,
            sidecars=result.sidecars,
            tokens_before=before,
            tokens_after=before - decision.checked.tokens_saved,
            reason=str(decision.reason),
            known_ids=decision.index.id_map,
        )
        thread.staged = []
        self.stats.commits += 1
        self.stats.tokens_removed += before - commit.tokens_after
        self.stats.sidecars_written += len(commit.sidecars)
        logger.info(
            "lifecycle commit on %s (%s): %s, %d -> %d tokens",
            thread_id,
            commit.reason,
            Plan("", commit.actions).groups(),
            before,
            commit.tokens_after,
        )
        self._log(commit)
        return commit

    def _log(self, commit: Commit) -> None:
        if self.log is None:
            return
        record = {"timestamp": datetime.now(timezone.utc).isoformat(), **commit.event()}
        try:
            self.log.append(record)
        except OSError as err:
            logger.warning("could not write the lifecycle log %s: %s", self.log.path, err)

    def _steps(
        self,
        messages: Sequence[BaseMessage],
        thread_id: str,
        known_ids: Mapping[str, str] | None,
        config: RunnableConfig | None,
    ) -> Steps[Commit | None]:
        """One harness step, as the I/O calls it makes: the plan, the writes, the event.

        :meth:`step` makes the sync calls, :meth:`astep` awaits the async ones
        (:mod:`langchain_pacms._steps`); an error of a call is raised here, at its ``yield``.
        """
        if not at_boundary(messages, self.boundary):
            return None  # nothing can commit here; staged actions are re-checked at the next one
        thread = self._threads.setdefault(thread_id, _Thread())
        index = self.index(messages, known_ids)
        if len(index.objects) > 1:
            plan = yield Call(self.planner.plan, self.planner.aplan, (index, messages))
            self._stage(thread, messages, index, plan)
        decision = self._decide(thread, messages, index)
        if decision.reason is None:
            return None
        folded, audit = self._records(messages, decision)
        try:
            sidecars = self.sidecars(thread_id)
            yield Call(sidecars.put_many, sidecars.aput_many, (folded,))
            originals = self.audit(thread_id)
            yield Call(originals.put_many, originals.aput_many, (audit,))
        except Exception as err:  # any store failure: nothing is committed, nothing is lost
            self.stats.commit_failures += 1
            logger.warning(
                "lifecycle commit on %s abandoned: sidecar write failed: %s", thread_id, err
            )
            return None
        commit = self._commit(thread_id, thread, messages, decision)
        try:
            yield Call(
                dispatch_custom_event,
                adispatch_custom_event,
                (COMMIT_EVENT, commit.event()),
                {"config": config},
            )
        except RuntimeError:
            pass  # not inside a run: nobody to tell
        except Exception as err:  # a callback handler failed: never break the agent for it
            logger.warning("%s event handler failed: %s", COMMIT_EVENT, err)
        return commit

    # -- public entry points ---------------------------------------------------------------------

    def step(
        self,
        messages: Sequence[BaseMessage],
        *,
        thread_id: str | None = None,
        known_ids: Mapping[str, str] | None = None,
        config: RunnableConfig | None = None,
    ) -> Commit | None:
        """Plan (at a boundary), stage, and commit when it pays.

        Args:
            messages: The thread's current history (not modified).
            thread_id: The thread (sidecar namespace and staging key); ``None`` (default): the
                run's own thread, named after its first message
                (:func:`~langchain_pacms.lifecycle.sidecar.run_thread`).
            known_ids: ``Commit.known_ids`` of this thread's last commit.
            config: The run's config, for the commit event (default: the one in context).

        Returns:
            The :class:`Commit`, or ``None`` when nothing is committed now.
        """
        return drive_calls(self._steps(messages, _thread(thread_id, messages), known_ids, config))

    async def astep(
        self,
        messages: Sequence[BaseMessage],
        *,
        thread_id: str | None = None,
        known_ids: Mapping[str, str] | None = None,
        config: RunnableConfig | None = None,
    ) -> Commit | None:
        """Async twin of :meth:`step` (the planner's ``aplan`` and the store's async writes)."""
        steps = self._steps(messages, _thread(thread_id, messages), known_ids, config)
        return await adrive_calls(steps)

    def reactivate(
        self,
        messages: Sequence[BaseMessage],
        object_id: str,
        *,
        thread_id: str | None = None,
        known_ids: Mapping[str, str] | None = None,
    ) -> list[BaseMessage]:
        """State updates that bring a folded object's exact payload back into the history.

        Args:
            messages: The thread's history.
            object_id: The folded object.
            thread_id: The thread (``None``: the run's own, as for :meth:`step`).
            known_ids: As for :meth:`step`.

        Returns:
            The restored messages (same ids: they replace the stubs in a ``messages`` channel).

        Raises:
            KeyError: If the object or its sidecar is unknown.
            ValueError: If the object is not folded or the sidecar fails its hash check.
        """
        index = self.index(messages, known_ids)
        record = self.sidecars(_thread(thread_id, messages)).get(object_id, _sha(index, object_id))
        return self._restored(messages, index, record)

    async def areactivate(
        self,
        messages: Sequence[BaseMessage],
        object_id: str,
        *,
        thread_id: str | None = None,
        known_ids: Mapping[str, str] | None = None,
    ) -> list[BaseMessage]:
        """Async twin of :meth:`reactivate`."""
        index = self.index(messages, known_ids)
        sidecars = self.sidecars(_thread(thread_id, messages))
        record = await sidecars.aget(object_id, _sha(index, object_id))
        return self._restored(messages, index, record)

    def _restored(
        self, messages: Sequence[BaseMessage], index: ContextIndex, record: SidecarRecord
    ) -> list[BaseMessage]:
        result = restore(messages, index, record, token_counter=self.token_counter)
        return list(result.replaced.values())


def _thread(thread_id: str | None, messages: Sequence[BaseMessage]) -> str:
    """The given thread id, else the run's own thread (see :func:`run_thread`)."""
    if thread_id is not None:
        return thread_id
    return run_thread(messages) if messages else "default"


def _sha(index: ContextIndex, object_id: str) -> str | None:
    """The sha256 an object's fold stub carries (``None`` for an unknown object)."""
    obj = index.by_id.get(object_id)
    return obj.sha256 if obj is not None else None


def transcript_of(messages: Sequence[BaseMessage], indices: Sequence[int]) -> str:
    """An object's messages, whole, as JSON (LangChain message dicts): what an audit keeps.

    A call message keeps its text, its calls and their arguments; ``messages_from_dict`` of the
    parsed JSON gives the messages back.

    Example:
        >>> from langchain_core.messages import messages_from_dict
        >>> msgs = [HumanMessage("hi", id="h1"), AIMessage("yes", id="a1")]
        >>> [m.content for m in messages_from_dict(json.loads(transcript_of(msgs, [1])))]
        ['yes']
    """
    return json.dumps(
        messages_to_dict([messages[i] for i in indices]), ensure_ascii=False, default=str
    )
