"""Per-call selection as a replay policy, with and without fold stubs."""

from __future__ import annotations

import dataclasses

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from test_lifecycle_replay import session

from langchain_pacms.eval.lifecycle_replay import SELECTION, evaluate_cuts
from langchain_pacms.eval.selection_replay import SELECTION_STUBS, is_selection, selection_policy
from langchain_pacms.integrations.messages import sent_tokens
from langchain_pacms.lifecycle.objects import LIFECYCLE_KEY
from langchain_pacms.tokens import TokenCounter


@pytest.mark.parametrize("bad", ["select:pacms@0", "select:pacms@1.5", "select:@0.5",
                                 "select+stub:pacms@0.5", "select:pacms"])
def test_bad_policy_names_fail(bad):
    with pytest.raises(ValueError, match="share in"):
        selection_policy(bad)


def test_the_replay_runs_every_strategy_with_and_without_stubs():
    assert set(SELECTION_STUBS) < set(SELECTION)
    assert all(is_selection(p) for p in SELECTION)
    assert {p.split(":")[0] for p in SELECTION} == {"select", "select+stubs"}


def test_stubs_are_sent_within_the_share_and_their_payloads_are_exact():
    counter = TokenCounter()
    messages = list(session(12).messages)[:-1]
    policy = selection_policy("select+stubs:pacms@0.3", counter)
    view, sidecars = policy(messages)
    stubs = [m for m in view if LIFECYCLE_KEY in m.additional_kwargs]
    assert stubs and len(sidecars) == len(stubs)
    originals = {m.tool_call_id: m.content for m in messages if isinstance(m, ToolMessage)}
    for stub in stubs:
        object_id = stub.additional_kwargs[LIFECYCLE_KEY]["object"]
        assert sidecars[object_id] == originals[stub.tool_call_id]
        assert f'recover_context("{object_id}")' in stub.content
    assert sent_tokens(view, counter) <= 0.3 * sent_tokens(messages, counter)
    plain, none = selection_policy("select:pacms@0.3", counter)(messages)
    assert none == {} and not any(LIFECYCLE_KEY in m.additional_kwargs for m in plain)


def test_a_stub_keeps_an_old_path_visible_where_plain_selection_drops_it():
    base = session(12)
    reuse = AIMessage("back to the first file", id="again", tool_calls=[
        {"name": "bash", "args": {"command": "cat src/mod_1.py"}, "id": "again"}])
    run = dataclasses.replace(base, messages=(*base.messages, reuse))
    plain = evaluate_cuts([run], "select:pacms@0.3").row()
    stubs = evaluate_cuts([run], "select+stubs:pacms@0.3").row()
    assert plain["cuts"] == stubs["cuts"] > 0 and stubs["pruning_mean"] > 0.5
    assert plain["strict_no_impact"] < stubs["strict_no_impact"] == 1.0
