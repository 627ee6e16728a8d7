"""The lifecycle harness: plan, rehearse and validate, stage, store, then commit when it pays."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Literal

from langchain_core.callbacks import adispatch_custom_event, dispatch_custom_event
from langchain_core.messages import AIMessage, BaseMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore

from langchain_pacms._steps import Call, Steps, adrive_calls, drive_calls, method_parameters_of
from langchain_pacms.lifecycle.actions import Action, ActionResult, restore
from langchain_pacms.lifecycle.boundary import at_boundary, boundary_in_force
from langchain_pacms.lifecycle.commit import COMMIT_EVENT, Commit, HarnessStats, transcript_of
from langchain_pacms.lifecycle.fold import SidecarRecord
from langchain_pacms.lifecycle.graph_store import GraphStore
from langchain_pacms.lifecycle.heuristic import HeuristicPlanner
from langchain_pacms.lifecycle.objects import OBJECT_KEY, ContextIndex, carry_ids, index_messages
from langchain_pacms.lifecycle.plan import Plan, Planner
from langchain_pacms.lifecycle.sidecar import AUDIT_NAMESPACE, SidecarStore
from langchain_pacms.lifecycle.tuning import CommitRule, Masking
from langchain_pacms.lifecycle.validate import Checked, Rejection, check_actions, merge_actions
from langchain_pacms.messages.payload import LIFECYCLE_KEY
from langchain_pacms.messages.report import SelectionLog
from langchain_pacms.messages.runs import DEFAULT_THREAD, run_thread
from langchain_pacms.messages.text import content_text
from langchain_pacms.tokens import TokenCounter, resolve_token_counter

__all__ = ["LifecycleHarness", "reactivate_arguments", "step_arguments"]

logger = logging.getLogger(__name__)

_DETAILS = re.compile(r"'[^']*'|\d+")  # quoted values and numbers in a reason


def _rejection_key(reason: str) -> str:
    """What ``stats.rejections`` counts ``reason`` under: its text before any ``": "`` detail.

    Quoted values and numbers become ``*``, so an error carrying a request id or a model's
    made-up op adds no key of its own.

    Example:
        >>> _rejection_key("model raised RuntimeError: 429, request id req_0042")
        'model raised RuntimeError'
        >>> _rejection_key("all 3 target ids are unknown (not in the index)")
        'all * target ids are unknown (not in the index)'
    """
    return _DETAILS.sub("*", reason.split(": ", 1)[0])[:120]


@dataclass
class _Thread:
    staged: list[Action] = field(default_factory=list)
    checked: tuple[ContextIndex, Checked] | None = None  # this step's plan, checked on its index
    # what each staged action's target was when planned: its messages' ids and its payload hash
    planned_on: dict[str, tuple[tuple[str, ...], str]] = field(default_factory=dict)

    def still_planned(self, index: ContextIndex) -> list[Action]:
        """The staged actions whose targets are still the objects they were planned on.

        An object id is a position until a commit names it: after the history is edited or
        forked, the same id can name another object, and an action staged on it must go.
        """
        kept = []
        for action in self.staged:
            obj = index.by_id.get(action.target)
            if obj is not None and self.planned_on.get(action.target) == (obj.lineage, obj.sha256):
                kept.append(action)
        return kept


_StepArguments = tuple[Sequence[BaseMessage], str, Mapping[str, str] | None, RunnableConfig | None]
_ReactivateArguments = tuple[Sequence[BaseMessage], str, str, Mapping[str, str] | None]


def step_arguments(
    messages: Sequence[BaseMessage],
    *,
    thread_id: str | None = None,
    known_ids: Mapping[str, str] | None = None,
    config: RunnableConfig | None = None,
) -> _StepArguments:
    """The parameters of :meth:`LifecycleHarness.step` and ``astep`` (the thread resolved).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> step_arguments([HumanMessage("hi", id="h1")], thread_id="t")[1]
        't'
    """
    return messages, _thread(thread_id, messages), known_ids, config


def reactivate_arguments(
    messages: Sequence[BaseMessage],
    object_id: str,
    *,
    thread_id: str | None = None,
    known_ids: Mapping[str, str] | None = None,
) -> _ReactivateArguments:
    """The parameters of :meth:`LifecycleHarness.reactivate` and its twin (the thread resolved).

    Example:
        >>> reactivate_arguments([], "obj-1", thread_id="t")
        ([], 'obj-1', 't', None)
    """
    return messages, object_id, _thread(thread_id, messages), known_ids


class LifecycleHarness:
    """Rehearse, validate, stage and commit a planner's lifecycle actions.

    Args:
        planner: Any :class:`~langchain_pacms.lifecycle.plan.Planner` (default
            ``HeuristicPlanner()``, the setting the lifecycle results measure).
        store: The LangGraph ``BaseStore`` for sidecars (default: a
            :class:`~langchain_pacms.lifecycle.graph_store.GraphStore`, the store of the graph
            each step runs in, else an in-process ``InMemoryStore``; ``SqliteStore`` or
            ``PostgresStore`` persist).
        commit: When to commit (default ``CommitRule()``).
        masking: What a mask keeps (default ``Masking()``).
        token_counter: Counter, encoding name or ``None`` (``o200k_base``); share the selector's.
        log: Append one JSONL record per commit to this file.

    Raises:
        TypeError: If ``planner`` is no ``Planner``, ``store`` no ``BaseStore``, ``commit`` no
            ``CommitRule`` or ``masking`` no ``Masking``.

    Example:
        >>> harness = LifecycleHarness()
        >>> harness.planner.name, harness.commit.boundary, harness.masking.head
        ('heuristic', 'auto', 400)
    """

    def __init__(
        self,
        planner: Planner | None = None,
        *,
        store: BaseStore | None = None,
        commit: CommitRule | None = None,
        masking: Masking | None = None,
        token_counter: Any = None,
        log: str | os.PathLike[str] | None = None,
    ) -> None:
        planner = HeuristicPlanner() if planner is None else planner
        if not isinstance(planner, Planner):
            raise TypeError(
                f"planner must have name, plan() and aplan(); got {type(planner).__name__}"
            )
        for name, given, kind in (
            ("store", store, BaseStore),
            ("commit", commit, CommitRule),
            ("masking", masking, Masking),
        ):
            if given is not None and not isinstance(given, kind):
                raise TypeError(f"{name} must be a {kind.__name__}, got {type(given).__name__}")
        self.planner = planner
        self.store: BaseStore = store if store is not None else GraphStore()
        self.commit = commit if commit is not None else CommitRule()
        self.masking = masking if masking is not None else Masking()
        self.token_counter: TokenCounter = resolve_token_counter(token_counter)
        self.log = SelectionLog(log) if log is not None else None
        self.stats = HarnessStats()
        self._threads: dict[str, _Thread] = {}

    def __repr__(self) -> str:
        return (
            f"LifecycleHarness(planner={self.planner.name!r}, commit={self.commit!r}, "
            f"store={type(self.store).__name__})"
        )

    def sidecars(self, thread_id: str, messages: Sequence[BaseMessage] = ()) -> SidecarStore:
        """The sidecar store of one thread (what the recovery tool reads).

        Given the history that writes or reads, as :meth:`SidecarStore.of_history`.
        """
        return SidecarStore.of_history(self.store, thread_id, messages)

    def audit(self, thread_id: str) -> SidecarStore:
        """The audit records of one thread: the originals of masked and pruned objects."""
        return SidecarStore(self.store, thread_id, namespace=AUDIT_NAMESPACE)

    def staged(self, thread_id: str) -> tuple[Action, ...]:
        """The actions staged for a thread and not yet committed."""
        return tuple(self._threads.get(thread_id, _Thread()).staged)

    def index(
        self, messages: Sequence[BaseMessage], known_ids: Mapping[str, str] | None = None
    ) -> ContextIndex:
        """Index ``messages`` with the harness's counter (``latest="step"`` at a tool boundary)."""
        tool = boundary_in_force(messages, self.commit.boundary) == "tool"
        latest: Literal["turn", "step"] = "step" if tool else "turn"
        return index_messages(
            messages, token_counter=self.token_counter, known_ids=known_ids, latest=latest
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
            masking=self.masking,
            prior=prior,
        )

    def _stage(
        self, thread: _Thread, messages: Sequence[BaseMessage], index: ContextIndex, plan: Plan
    ) -> tuple[Rejection, ...]:
        """Stage ``plan``'s valid actions; return the actions the planner dropped itself."""
        if not plan.ok:
            key = f"plan rejected: {_rejection_key(str(plan.rejected))}"
            self.stats.add(plans=1, plans_rejected=1, rejections=[key])
            logger.info("lifecycle planner %s made no plan: %s", plan.planner, plan.rejected)
            return ()
        checked = self.check(messages, index, plan.actions)
        rejected = (*plan.dropped, *checked.rejected)
        self.stats.add(
            plans=1,
            actions_accepted=len(checked.accepted),
            actions_rejected=len(rejected),
            rejections=[_rejection_key(r.reason) for r in rejected],
        )
        thread.staged, _ = merge_actions(thread.still_planned(index), checked.accepted)
        for action in checked.accepted:
            obj = index.by_id[action.target]
            thread.planned_on[action.target] = (obj.lineage, obj.sha256)
        thread.checked = (index, checked)
        return plan.dropped

    def _decide(
        self, thread: _Thread, messages: Sequence[BaseMessage], index: ContextIndex
    ) -> tuple[Checked, str | None]:
        """The staged actions checked again, and why they commit now (``None``: they do not)."""
        staged, thread.checked = thread.checked, None
        # when nothing else is staged, this step's check of the plan rehearsed what is staged
        prior = staged[1] if staged is not None and staged[0] is index else None
        checked = self.check(messages, index, thread.still_planned(index), prior)
        thread.staged = list(checked.accepted)  # staged actions that no longer apply go
        thread.planned_on = {a.target: thread.planned_on[a.target] for a in thread.staged}
        active, rule = index.active_tokens, self.commit
        if not checked.accepted:
            return checked, None
        if rule.max_active_tokens is not None and active > rule.max_active_tokens:
            return checked, "max_active_tokens"
        share = checked.tokens_saved / active if active else 0.0
        if checked.tokens_saved and share >= rule.threshold and self.pays(messages, checked):
            return checked, "threshold"
        return checked, None

    def pays(self, messages: Sequence[BaseMessage], checked: Checked) -> bool:
        """Whether committing ``checked`` pays under prompt caching (always, without a price).

        With the rule's ``cached_price`` p: ``p x saved x calls >= (1 - p) x tail``, where ``tail``
        is what the next call pays uncached and ``calls`` the model calls made so far.
        """
        price = self.commit.cached_price
        if price is None:
            return True
        new, first = checked.result.messages, 0  # ``first``: the first message the edit changes
        for a, b in zip(messages, new):
            if a.id != b.id or a.content != b.content:
                break
            first += 1
        tail = sum(self.token_counter(content_text(m.content)) for m in new[first:])
        calls = sum(1 for m in messages if isinstance(m, AIMessage))
        return price * checked.tokens_saved * calls >= (1 - price) * tail

    def _commit(
        self,
        thread_id: str,
        index: ContextIndex,
        checked: Checked,
        reason: str,
        dropped: tuple[Rejection, ...],
    ) -> Commit:
        """Commit ``checked``; ``dropped``: what this step's planner dropped itself."""
        result, before = checked.result, index.active_tokens
        updates: list[BaseMessage] = [RemoveMessage(id=mid) for mid in result.removed]
        updates.extend(result.replaced.values())
        commit = Commit(
            thread_id=thread_id,
            messages=result.messages,
            updates=updates,
            actions=checked.accepted,
            rejected=(*dropped, *checked.rejected),
            sidecars=result.sidecars,
            tokens_before=before,
            tokens_after=before - checked.tokens_saved,
            reason=reason,
            known_ids=index.id_map,
        )
        self.stats.add(
            commits=1,
            tokens_removed=before - commit.tokens_after,
            sidecars_written=len(commit.sidecars),
        )
        logger.info(
            "lifecycle commit on %s (%s): %s, %d -> %d tokens",
            thread_id,
            commit.reason,
            Plan("", commit.actions).groups(),
            before,
            commit.tokens_after,
        )
        if self.log is not None:
            record = {"timestamp": datetime.now(timezone.utc).isoformat(), **commit.event()}
            try:
                self.log.append(record)
            except (OSError, ValueError) as err:  # the commit stands: only its log line is lost
                logger.warning("could not write the lifecycle log %s: %s", self.log.path, err)
        return commit

    def _steps(self, call: _StepArguments) -> Steps[Commit | None]:
        """One harness step as the I/O calls it makes (driven by :meth:`step` and :meth:`astep`)."""
        messages, thread_id, known_ids, config = call
        if not at_boundary(messages, self.commit.boundary):
            return None  # nothing can commit here; staged actions are re-checked at the next one
        thread = self._threads.setdefault(thread_id, _Thread())
        try:
            index = self.index(messages, known_ids)
            dropped: tuple[Rejection, ...] = ()
            if len(index.objects) > 1:
                plan = yield Call(self.planner.plan, self.planner.aplan, (index, messages))
                dropped = self._stage(thread, messages, index, plan)
            checked, reason = self._decide(thread, messages, index)
            if reason is None:
                return None
            # the originals of masked and pruned objects go to the audit namespace
            gone = [index.by_id[a.target] for a in checked.accepted if a.op != "fold"]
            notes = [f"{a.op}: {a.reason}" for a in checked.accepted if a.op != "fold"]
            audit = [
                SidecarRecord.of(o.id, transcript_of(messages, o.indices), o.kind, o.lineage, note)
                for o, note in zip(gone, notes)
            ]
            try:
                sidecars = self.sidecars(thread_id, messages)
                yield Call(sidecars.put_many, sidecars.aput_many, (list(checked.result.sidecars),))
                originals = self.audit(thread_id)
                yield Call(originals.put_many, originals.aput_many, (audit,))
            except Exception as err:  # any store failure: nothing is committed, nothing is lost
                self.stats.add(commit_failures=1)
                logger.warning(
                    "lifecycle commit on %s abandoned: sidecar write failed: %s", thread_id, err
                )
                return None
            thread.staged = []
            result = _kept_names(messages, index, checked.result)
            checked = replace(checked, result=result)
            commit = self._commit(thread_id, index, checked, reason, dropped)
            try:
                event = (COMMIT_EVENT, commit.event())
                yield Call(dispatch_custom_event, adispatch_custom_event, event, {"config": config})
            except RuntimeError:
                pass  # not inside a run: nobody to tell
            except Exception as err:  # a callback handler failed: never break the agent for it
                logger.warning("%s event handler failed: %s", COMMIT_EVENT, err)
            return commit
        finally:  # a thread with nothing staged keeps no state here
            if not thread.staged and thread.checked is None:
                self._threads.pop(thread_id, None)

    @method_parameters_of(step_arguments)
    def step(self, *args: Any, **kwargs: Any) -> Commit | None:  # noqa: D417 (*args: the parameters)
        """Plan (at a boundary), stage, and commit when it pays.

        Args:
            messages: The thread's current history (not modified).
            thread_id: The thread (sidecar namespace and staging key; ``None``: the run's own).
            known_ids: ``Commit.known_ids`` of this thread's last commit.
            config: The run's config, for the commit event (default: the one in context).

        Returns:
            The :class:`Commit`, or ``None`` when nothing is committed now.

        Raises:
            TypeError: If ``thread_id`` is neither a string nor ``None``.
            ValueError: If ``thread_id`` is empty.
        """
        return drive_calls(self._steps(step_arguments(*args, **kwargs)))

    @method_parameters_of(step_arguments)
    async def astep(self, *args: Any, **kwargs: Any) -> Commit | None:
        """Async twin of :meth:`step` (the planner's ``aplan`` and the store's async writes)."""
        return await adrive_calls(self._steps(step_arguments(*args, **kwargs)), offload=True)

    def _reactivating(self, call: _ReactivateArguments) -> Steps[list[BaseMessage]]:
        messages, object_id, thread_id, known_ids = call
        index = self.index(messages, known_ids)
        obj = index.by_id.get(object_id)  # its stub's sha256 names the payload
        if obj is not None and obj.state != "folded":  # no sidecar to look for
            raise ValueError(f"{object_id} is {obj.state}, not folded: nothing to restore")
        sidecars = self.sidecars(thread_id, messages)
        args = (index.carried_id(object_id), obj.sha256 if obj is not None else None)
        record = yield Call(sidecars.get, sidecars.aget, args)
        # under the name the index gives it (merged runs' folds are named apart)
        record = replace(record, object_id=object_id)
        result = restore(messages, index, record, token_counter=self.token_counter)
        turn = messages[index.latest_index].id if index.latest_index >= 0 else None
        # its id goes with it (no fold mark names it now); in view until the next user turn:
        # no step folds it again in this one
        held = {
            OBJECT_KEY: object_id,
            **({LIFECYCLE_KEY: {"reactivated": turn}} if turn is not None else {}),
        }
        return [
            m.model_copy(update={"additional_kwargs": {**m.additional_kwargs, **held}})
            for m in result.replaced.values()
        ]

    @method_parameters_of(reactivate_arguments)
    def reactivate(self, *args: Any, **kwargs: Any) -> list[BaseMessage]:  # noqa: D417 (*args: the parameters)
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
            TypeError: If ``thread_id`` is neither a string nor ``None``.
            ValueError: If the object is not folded, the sidecar fails its hash check or
                ``thread_id`` is empty.
        """
        return drive_calls(self._reactivating(reactivate_arguments(*args, **kwargs)))

    @method_parameters_of(reactivate_arguments)
    async def areactivate(self, *args: Any, **kwargs: Any) -> list[BaseMessage]:
        """Async twin of :meth:`reactivate`."""
        return await adrive_calls(
            self._reactivating(reactivate_arguments(*args, **kwargs)), offload=True
        )


def _kept_names(
    messages: Sequence[BaseMessage], index: ContextIndex, result: ActionResult
) -> ActionResult:
    """``result`` still naming its run and keeping its objects' id numbers.

    The new history holds its objects' ids and the run's name (:func:`carry_ids`): a commit that
    prunes the messages the run is named after (:func:`run_thread`), or a caller that passes
    back the messages without the state's ``pacms_lifecycle_ids``, keeps both, so the payloads
    folded before stay recoverable and no id names another round. A run without a thread id
    keeps its sidecars under that name; in a thread, the name tells the records of the thread's
    runs apart (the branches of a fork keep one name, so their records are told apart by the
    messages each was folded after).
    """
    kept = carry_ids(messages, result.messages, index, run_thread(messages))
    changed = {m.id: m for m, was in zip(kept, result.messages) if m is not was and m.id}
    if not changed:
        return result
    return replace(result, messages=kept, replaced={**result.replaced, **changed})


def _thread(thread_id: str | None, messages: Sequence[BaseMessage]) -> str:
    """The given thread id, else the run's own thread (see :func:`run_thread`).

    Raises:
        TypeError: If ``thread_id`` is neither a string nor ``None``.
        ValueError: If ``thread_id`` is empty.
    """
    if thread_id is None:
        return run_thread(messages) if messages else DEFAULT_THREAD
    if not isinstance(thread_id, str):
        raise TypeError(f"thread_id must be a string or None, got {type(thread_id).__name__}")
    if not thread_id:
        raise ValueError("thread_id must be a non-empty string (None: the run's own thread)")
    return thread_id
