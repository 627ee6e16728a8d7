"""A check rehearses once and reuses what it can, with exactly the outcome of the plain algorithm.

The reference below is the check as first written: validate, rehearse the merged actions on a
copy, and when that leaves an invalid history, rehearse each action in turn on top of the ones
kept; then drop the folds and masks that save nothing and rehearse again.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from lifecycle_check_cases import checked_summary, history, random_actions

from langchain_pacms.lifecycle import CommitRule, HeuristicPlanner, LifecycleHarness
from langchain_pacms.lifecycle.actions import Action, apply_actions, provider_problems
from langchain_pacms.lifecycle.objects import NUMBERS_KEY, OBJECT_KEY, ContextIndex, index_messages
from langchain_pacms.lifecycle.validate import (
    Checked,
    Rejection,
    _reason,
    check_actions,
    merge_actions,
)
from langchain_pacms.messages.runs import RUN_KEY


def reference_check(
    messages: Sequence[BaseMessage], index: ContextIndex, actions: Sequence[Action]
) -> Checked:
    rejected = [Rejection(a, r) for a in actions if (r := _reason(index, messages, a))]
    merged, overlaps = merge_actions([a for a in actions if not _reason(index, messages, a)])
    rejected.extend(overlaps)
    before = set(provider_problems(messages))
    result = apply_actions(messages, index, merged)
    if set(provider_problems(result.messages)) - before:
        accepted: list[Action] = []
        for action in merged:
            trial = apply_actions(messages, index, [*accepted, action])
            new = sorted(set(provider_problems(trial.messages)) - before)
            if new:
                rejected.append(Rejection(action, f"would leave an invalid history: {new[0]}"))
            else:
                accepted.append(action)
        merged, result = accepted, apply_actions(messages, index, accepted)
    idle = [a for a in merged if a.op != "prune" and result.saved.get(a.target, 0) <= 0]
    if idle:
        rejected.extend(
            Rejection(a, f"saves nothing (the {a.op}ed text is not smaller)") for a in idle
        )
        merged = [a for a in merged if a not in idle]
        result = apply_actions(messages, index, merged)
    return Checked(tuple(merged), tuple(rejected), result)


_CASES = st.tuples(st.integers(0, 10_000), st.integers(2, 24), st.sampled_from([0.0, 0.06, 0.4]))


@settings(max_examples=60, deadline=None)
@given(_CASES, st.sampled_from(["turn", "step"]), st.booleans())
def test_the_check_equals_the_plain_algorithm(
    case: tuple[int, int, float], latest: str, planned: bool
) -> None:
    seed, spans, turns = case
    msgs = history(seed, spans, turns)
    index = index_messages(msgs, latest=latest)  # type: ignore[arg-type]
    actions = random_actions(seed, [o.id for o in index.objects])
    if planned:
        actions = [*HeuristicPlanner().plan(index, msgs).actions, *actions]
    got = check_actions(msgs, index, actions)
    assert checked_summary(got) == checked_summary(reference_check(msgs, index, actions))


@settings(max_examples=40, deadline=None)
@given(_CASES)
def test_a_check_of_what_a_check_accepted_reuses_its_rehearsal(
    case: tuple[int, int, float],
) -> None:
    seed, spans, turns = case
    msgs = history(seed, spans, turns)
    index = index_messages(msgs, latest="step")
    first = check_actions(msgs, index, random_actions(seed, [o.id for o in index.objects]))
    again = check_actions(msgs, index, first.accepted, prior=first)
    assert checked_summary(again) == checked_summary(check_actions(msgs, index, first.accepted))
    assert again.rejected or again.result is first.result


def test_a_prior_of_other_actions_is_not_reused() -> None:
    msgs = history(3, 8)
    index = index_messages(msgs, latest="step")
    ids = [o.id for o in index.objects if o.kind == "tool" and not o.latest]
    first = check_actions(msgs, index, [Action("fold", ids[0])])
    other = check_actions(msgs, index, [Action("prune", ids[0])], prior=first)
    assert [a.op for a in other.accepted] == ["prune"]
    assert other.result is not first.result


def unstamped(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """``messages`` without the ids and the run name a commit leaves on them (:func:`carry_ids`)."""
    return [
        m.model_copy(
            update={
                "additional_kwargs": {
                    k: v
                    for k, v in m.additional_kwargs.items()
                    if k not in (NUMBERS_KEY, OBJECT_KEY, RUN_KEY)
                }
            }
        )
        if {NUMBERS_KEY, OBJECT_KEY, RUN_KEY} & set(m.additional_kwargs)
        else m
        for m in messages
    ]


@settings(max_examples=25, deadline=None)
@given(_CASES, st.sampled_from([0.0, 0.3]))
def test_a_harness_step_commits_what_checking_the_plan_twice_gives(
    case: tuple[int, int, float], threshold: float
) -> None:
    seed, spans, turns = case
    msgs = history(seed, spans, turns)
    harness = LifecycleHarness(
        HeuristicPlanner(), commit=CommitRule(threshold=threshold, boundary="tool")
    )
    index = harness.index(msgs)
    staged = check_actions(msgs, index, harness.planner.plan(index, msgs).actions)
    decided = check_actions(msgs, index, staged.accepted)
    commit = harness.step(msgs, thread_id="t")
    if commit is None:
        assert harness.staged("t") == decided.accepted
        return
    assert checked_summary(Checked(commit.actions, commit.rejected, decided.result)) == (
        checked_summary(decided)
    )
    # the harness also stamps the id numbers on the first and last messages (carry_numbers)
    assert unstamped(commit.messages) == decided.result.messages
    stamped = [i for i, m in enumerate(commit.messages) if NUMBERS_KEY in m.additional_kwargs]
    assert stamped == sorted({0, len(commit.messages) - 1})
    assert commit.sidecars == decided.result.sidecars
    assert commit.tokens_before - commit.tokens_after == decided.tokens_saved


def _run(body: str, message_id: str | None) -> list[BaseMessage]:
    call = {"name": "bash", "args": {"command": "cat src/app.py"}, "id": "c1"}
    return [
        HumanMessage("fix it", id="h"),
        AIMessage("", tool_calls=[call], id="a"),
        ToolMessage(body, tool_call_id="c1", id=message_id),
        HumanMessage("go on", id="h2"),
    ]


def test_rehearsing_again_reuses_the_rewritten_copies_of_messages_with_ids() -> None:
    msgs = _run("\n".join(f"src/app_{n}.py: x = {n}" for n in range(60)), "t")
    index = index_messages(msgs)
    fold = [Action("fold", "function:tool:1")]
    first, second = (apply_actions(msgs, index, fold) for _ in range(2))
    assert first == second and first.messages[2] is second.messages[2]
    assert first.messages[2] is not msgs[2] and str(msgs[2].content).startswith("src/app_0.py")


def test_a_message_without_an_id_gets_a_new_copy_each_time() -> None:
    # a LangGraph messages channel gives such a message an id in place: it must not be shared
    msgs = _run("\n".join(f"src/app_{n}.py: x = {n}" for n in range(60)), None)
    index = index_messages(msgs)
    fold = [Action("fold", "function:tool:1")]
    first, second = (apply_actions(msgs, index, fold) for _ in range(2))
    assert first == second and first.messages[2] is not second.messages[2]


def test_a_new_message_object_is_rewritten_afresh() -> None:
    short = _run("\n".join(f"src/app_{n}.py: x = {n}" for n in range(60)), "t")
    longer = _run("\n".join(f"src/app_{n}.py: x = {n}" for n in range(90)), "t")
    fold = [Action("fold", "function:tool:1")]
    a = apply_actions(short, index_messages(short), fold)
    b = apply_actions(longer, index_messages(longer), fold)
    assert "60 lines" in str(a.messages[2].content) and "90 lines" in str(b.messages[2].content)
    assert a.sidecars[0].payload == short[2].content and b.sidecars[0].payload == longer[2].content
