"""Per-call selection as a replay policy, with and without fold stubs."""

from __future__ import annotations

import dataclasses
import json

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.store.memory import InMemoryStore
from test_lifecycle_replay import session

from langchain_pacms import ContextSelector
from langchain_pacms.integrations import Budget, SelectionConfig, SelectionRunner, ToolLoopOptions
from langchain_pacms.lifecycle import check_actions, index_messages
from langchain_pacms.messages import LIFECYCLE_KEY, sent_tokens
from langchain_pacms.tokens import TokenCounter
from pacms_bench.replay_cuts import evaluate_cuts
from pacms_bench.replay_policies import POLICIES, SELECTION
from pacms_bench.replay_tokens import message_tokens
from pacms_bench.selection_replay import (
    SELECTION_LIFE,
    SELECTION_STUBS,
    behind_lifecycle,
    is_selection,
    selection_policy,
)
from pacms_bench.traces import TraceSession


@pytest.mark.parametrize(
    "bad",
    ["select:pacms@0", "select:pacms@1.5", "select:@0.5", "select+stub:pacms@0.5", "select:pacms"],
)
def test_bad_policy_names_fail(bad):
    with pytest.raises(ValueError, match="share in"):
        selection_policy(bad)


def test_the_replay_runs_every_strategy_with_and_without_stubs():
    assert set(SELECTION_STUBS) < set(SELECTION) and set(SELECTION_LIFE) < set(SELECTION)
    assert all(is_selection(p) for p in SELECTION)
    assert {p.split(":")[0] for p in SELECTION} == {"select", "select+stubs", "life+select"}
    assert [behind_lifecycle(p) for p in ("life+select:mmr@0.5", "select+stubs:mmr@0.5")] == [
        True,
        False,
    ]


def test_stubs_are_sent_within_the_share_and_their_payloads_are_exact():
    counter = TokenCounter()
    messages = list(session(12).messages)[:-1]
    policy = selection_policy("select+stubs:pacms@0.3", counter)
    view, sidecars = policy(messages)
    stubs = [m for m in view if LIFECYCLE_KEY in m.additional_kwargs and isinstance(m, ToolMessage)]
    assert stubs and len(sidecars) == len(stubs)
    originals = {m.tool_call_id: m.content for m in messages if isinstance(m, ToolMessage)}
    for stub in stubs:
        object_id = stub.additional_kwargs[LIFECYCLE_KEY]["object"]
        # the calls carry text, so it is folded with the results
        assert json.loads(sidecars[object_id])["results"] == originals[stub.tool_call_id]
        assert f'recover_context("{object_id}")' in stub.content
    assert sent_tokens(view, counter) <= 0.3 * sent_tokens(messages, counter)
    plain, none = selection_policy("select:pacms@0.3", counter)(messages)
    assert none == {} and not any(LIFECYCLE_KEY in m.additional_kwargs for m in plain)


def _reading_the_first_file_again() -> TraceSession:
    """A 12-step session whose last call reads again the file its first call read."""
    base = session(12)
    reuse = AIMessage(
        "back to the first file",
        id="again",
        tool_calls=[{"name": "bash", "args": {"command": "cat src/mod_1.py"}, "id": "again"}],
    )
    return dataclasses.replace(base, messages=(*base.messages, reuse))


def test_a_stub_keeps_an_old_path_visible_where_plain_selection_drops_it():
    run = _reading_the_first_file_again()
    # at 40% every stub fits beside the newest span (at 30% only the newest stubs do)
    plain = evaluate_cuts([run], "select:pacms@0.4").row()
    stubs = evaluate_cuts([run], "select+stubs:pacms@0.4").row()
    assert plain["cuts"] == stubs["cuts"] > 0 and stubs["pruning_mean"] > 0.5
    assert plain["strict_no_impact"] < stubs["strict_no_impact"] == 1.0


FOLDING = {
    "fold_min_tokens": 60,
    "mask_min_tokens": 60,
    "keep_above": 1.0,
    "keep_recent": 0,
    "keep_file_views": False,
}


def _folded_prefix(counter: TokenCounter) -> tuple[list[BaseMessage], list[BaseMessage]]:
    """A 12-step session's prefix, and that prefix after the heuristic's :data:`FOLDING` folds."""
    prefix = list(session(12).messages)[:-1]
    index = index_messages(prefix, token_counter=counter, latest="step")
    plan = POLICIES["heuristic"](**FOLDING)(prefix, index, counter)
    return prefix, check_actions(prefix, index, plan, token_counter=counter).result.messages


def test_selection_behind_the_lifecycle_takes_its_share_of_the_prefix_before_the_folds():
    counter = TokenCounter()
    prefix, folded = _folded_prefix(counter)
    share = message_tokens(folded, counter) / message_tokens(prefix, counter)
    policy = selection_policy("life+select:pacms@0.5", counter)
    # the folds already left less than the share: the selection keeps the whole view
    assert share < 0.5
    kept, _ = policy(folded, base=prefix)
    assert [m.id for m in kept] == [m.id for m in folded]
    # a share below what the folds left: the selection fits the view into it
    tight = dataclasses.replace(policy, ratio=share / 2)
    view, _ = tight(folded, base=prefix)
    assert message_tokens(view, counter) <= share / 2 * message_tokens(prefix, counter) + 1
    assert message_tokens(view, counter) < message_tokens(folded, counter)


@pytest.mark.parametrize("kept", [0.13, 0.16, 0.19, 0.22])
def test_the_budget_holds_when_folded_spans_show_their_left_out_locators_again(kept):
    # the lifecycle's stubs list again the locators that only dropped messages show, so the
    # floor of folded spans sends more than it was priced at; the next round takes fewer
    counter = TokenCounter()
    prefix, folded = _folded_prefix(counter)
    budget = int(kept * sent_tokens(prefix, counter))
    config = SelectionConfig(
        budget=Budget(tokens=budget),
        tool_loop=ToolLoopOptions(sidecar_store=InMemoryStore()),
        selector=ContextSelector(token_counter=counter),
    )
    runner = SelectionRunner(config)
    view = runner.run(folded)
    selection = runner.last_selection
    assert selection.info["stub_floor"] is True
    assert sent_tokens(view, counter) == selection.info["tokens_sent"] <= budget
    assert selection.over_budget is False
    assert any(m.id != o.id for m, o in zip(view, folded, strict=False))  # something went
    # the room between the round that fit and the one that did not is searched: shrinking by
    # the excess alone sent 85% of the budget at 0.13 and 0.16
    assert selection.info["tokens_sent"] >= 0.9 * budget


def test_the_lifecycle_row_judges_the_folds_payloads_as_recoverable():
    run = _reading_the_first_file_again()
    row = evaluate_cuts([run], "life+select:pacms@0.5", settings=FOLDING).row()
    folds = evaluate_cuts([run], "heuristic", settings=FOLDING).row()
    assert row["cuts"] == folds["cuts"] > 0
    assert row["pruning_mean"] >= max(folds["pruning_mean"], 0.5) - 0.02
    assert row["no_impact_with_recovery"] == 1.0
    with pytest.raises(TypeError):
        evaluate_cuts([run], "life+select:pacms@0.5", settings={"no_such_option": 1})
