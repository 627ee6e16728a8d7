"""Reused tool results count as relevant: ``relevant_ids`` in the selector, ``lift_reused`` in
the hook and the middleware."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from pacms_fakes import slow_examples
from test_messages import SELECTOR, call

from langchain_pacms import Candidate, ContextSelector
from langchain_pacms.integrations import ToolLoopOptions, create_pacms_hook
from langchain_pacms.messages import MessageMemo, sent_tokens

POOL = ["blue plums", "red apples"]
IN_TURN = ToolLoopOptions(keep_latest_turn=False)
NOT_LIFTED = ToolLoopOptions(keep_latest_turn=False, lift_reused=False)


# -- the selector --------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["pacms", "topk", "mmr"])
def test_a_named_candidate_is_as_relevant_as_the_best_one(strategy):
    selector = ContextSelector()
    plain = selector.select(POOL, "red", budget=3, strategy=strategy)
    lifted = selector.select(POOL, "red", budget=3, strategy=strategy, relevant_ids=["0"])
    assert plain.kept_ids == ("1",) and plain.relevance["0"] == 0.0
    # a tie with the best one, broken by position: the named candidate goes first
    assert lifted.relevance["0"] == pytest.approx(lifted.relevance["1"])
    assert lifted.relevance["1"] > 0
    assert lifted.kept_ids == ("0",)


def test_relevant_ids_in_the_async_twin_and_without_effect_on_recency():
    selector = ContextSelector()
    picked = asyncio.run(selector.aselect(POOL, "red", budget=3, relevant_ids=["0"]))
    assert picked.kept_ids == ("0",)
    newest = selector.select(POOL, "red", budget=3, strategy="lastk", relevant_ids=["0"])
    assert newest.kept_ids == ("1",)


@pytest.mark.parametrize(("ids", "error"), [(["9"], "names no candidate"), ("0", "not one string")])
def test_bad_relevant_ids_fail(ids, error):
    with pytest.raises(ValueError, match=error):
        ContextSelector().select(POOL, "red", budget=3, relevant_ids=ids)


# -- the hook ------------------------------------------------------------------------------------
def _loop() -> list[BaseMessage]:
    """A fix-the-app task: an early ticket whose id a later call took up, then app searches."""
    msgs: list[BaseMessage] = [SystemMessage("You fix bugs."), HumanMessage("fix src/app.py")]
    outputs = [
        "ticket TCK4821 opened by the night shift " + "queue " * 75,
        *(f"src/app.py part {k}: def handler(): app port " + "app " * 60 for k in range(1, 4)),
    ]
    commands = [
        "tickets --open",
        "grep -n handler src/app.py",
        "grep -n TCK4821 src/app.py",
        "grep -n port src/app.py",
        "python -m pytest",
    ]
    for k, out in enumerate([*outputs, "1 passed"]):
        msgs += [
            AIMessage(f"step {k}", tool_calls=[call("bash", f"c{k}", cmd=commands[k])]),
            ToolMessage(out, tool_call_id=f"c{k}"),
        ]
    return msgs


def _kept_calls(out: list[BaseMessage]) -> list[str]:
    return [m.tool_call_id for m in out if isinstance(m, ToolMessage)]


@pytest.mark.parametrize("strategy", ["pacms", "topk"])
def test_the_hook_keeps_a_record_a_later_call_used_over_one_that_matches_the_task(strategy):
    msgs = _loop()
    mandatory = sent_tokens(msgs[:2] + msgs[-2:], SELECTOR.token_counter)
    room = sent_tokens(msgs[2:4], SELECTOR.token_counter) + 4  # one earlier span fits
    budget = mandatory + room
    lifted = create_pacms_hook(budget, strategy=strategy, selector=SELECTOR, tool_loop=IN_TURN)
    plain = create_pacms_hook(budget, strategy=strategy, selector=SELECTOR, tool_loop=NOT_LIFTED)
    out = lifted.invoke({"messages": msgs})["llm_input_messages"]
    assert _kept_calls(out) == ["c0", "c4"]
    assert lifted.last_selection.info["lifted"] == 1
    assert sent_tokens(out, SELECTOR.token_counter) <= budget
    out = plain.invoke({"messages": msgs})["llm_input_messages"]
    assert "c0" not in _kept_calls(out) and len(_kept_calls(out)) == 2
    assert plain.last_selection.info["lifted"] == 0


def test_an_id_the_task_states_is_no_sign_of_reuse():
    msgs = _loop()
    msgs[1] = HumanMessage("fix src/app.py for ticket TCK4821")
    hook = create_pacms_hook(10_000, selector=SELECTOR, tool_loop=IN_TURN)
    hook.invoke({"messages": msgs})
    assert hook.last_selection.info["lifted"] == 0


def _reads(commands: list[str]) -> list[BaseMessage]:
    """A task about ports, then one tool span per shell command and a test run."""
    msgs: list[BaseMessage] = [SystemMessage("You fix bugs."), HumanMessage("fix the port")]
    for k, cmd in enumerate([*commands, "python -m pytest"]):
        out = "1 failed" if cmd.startswith("python") else f"{cmd}: port " + "port " * 40
        if cmd.startswith("sed") or cmd.startswith("cat"):
            out = "def helper(): return 1 " + "helper " * 40
        msgs += [
            AIMessage(f"step {k}", tool_calls=[call("bash", f"c{k}", cmd=cmd)]),
            ToolMessage(out, tool_call_id=f"c{k}"),
        ]
    return msgs


def test_the_hook_keeps_the_newest_read_of_a_file_over_a_search_that_matches_the_task():
    msgs = _reads(["sed -n 1,40p src/util.py", "grep -rn port src"])
    mandatory = sent_tokens(msgs[:2] + msgs[-2:], SELECTOR.token_counter)
    budget = mandatory + sent_tokens(msgs[2:4], SELECTOR.token_counter) + 4
    by_similarity = {"keep_latest_turn": False, "cover_values": False}
    lifted = create_pacms_hook(
        budget, selector=SELECTOR, tool_loop=ToolLoopOptions(**by_similarity)
    )
    plain = create_pacms_hook(
        budget, selector=SELECTOR, tool_loop=ToolLoopOptions(lift_reused=False, **by_similarity)
    )
    assert _kept_calls(lifted.invoke({"messages": msgs})["llm_input_messages"]) == ["c0", "c2"]
    assert lifted.last_selection.info["lifted"] == 1
    assert _kept_calls(plain.invoke({"messages": msgs})["llm_input_messages"]) == ["c1", "c2"]
    # covering values (the default) keeps the read too: it names a path, the search nothing
    for tool_loop in (IN_TURN, NOT_LIFTED):
        hook = create_pacms_hook(budget, selector=SELECTOR, tool_loop=tool_loop)
        assert _kept_calls(hook.invoke({"messages": msgs})["llm_input_messages"]) == ["c0", "c2"]


def test_a_read_the_agent_made_again_is_not_the_newest():
    from langchain_pacms.messages import latest_reads

    msgs = _reads(["cat src/util.py", "nl src/app.py", "sed -n 5,9p src/util.py"])
    assert sorted(latest_reads(msgs, [2, 4, 6])) == [4, 6]
    assert sorted(latest_reads(msgs, [2, 4])) == [4]  # the newest read of util.py is elsewhere
    hook = create_pacms_hook(10_000, selector=SELECTOR, tool_loop=IN_TURN)
    hook.invoke({"messages": msgs})
    assert hook.last_selection.info["lifted"] == 2


def test_read_paths_names_the_files_a_call_reads_and_nothing_else():
    from langchain_pacms.messages import read_paths

    def paths(cmd: str) -> frozenset[str]:
        return read_paths(AIMessage("", tool_calls=[call("bash", "c1", cmd=cmd)]))

    assert paths("cat ./a.py b.txt") == {"a.py", "b.txt"}
    assert paths("nl -ba src/x.py | sed -n '10,20p'") == {"src/x.py"}
    assert paths("grep -n port src/x.py") == frozenset()
    assert paths("sed -i 's/a/b/' src/x.py") == frozenset()  # an edit, not a read
    assert paths("python -m pytest") == frozenset()
    assert read_paths(ToolMessage("cat a.py", tool_call_id="c1")) == frozenset()


def test_lift_reused_must_be_a_bool():
    with pytest.raises(ValueError, match="lift_reused must be True or False"):
        ToolLoopOptions(lift_reused="yes")  # type: ignore[arg-type]


def test_the_memo_finds_a_message_values_once_and_again_after_an_edit():
    memo = MessageMemo()
    msg = ToolMessage("see docs/api.md", tool_call_id="c1")
    first = memo.values(msg)
    assert first == {"docs/api.md"} and memo.values(msg) is first
    msg.content = "see docs/other.md"
    assert memo.values(msg) == {"docs/other.md"}


WORDS = ["red", "blue", "apples", "plums", "port", "db", "ticket", "HAT039", "log", "shift"]


@slow_examples(60)
@given(
    texts=st.lists(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join),
        min_size=1,
        max_size=12,
    ),
    data=st.data(),
)
def test_lifting_keeps_the_budget_and_the_mandatory_part(texts, data):
    n = len(texts)
    mandatory = data.draw(st.sets(st.integers(0, n - 1), max_size=2))
    lifted = data.draw(st.sets(st.integers(0, n - 1)))
    strategy = data.draw(st.sampled_from(["pacms", "topk", "mmr", "lastk", "rag"]))
    budget = data.draw(st.integers(1, 40))
    pool = [Candidate(t, id=str(i), mandatory=i in mandatory) for i, t in enumerate(texts)]
    sel = SELECTOR.select(
        pool,
        "red port",
        budget=budget,
        strategy=strategy,
        relevant_ids=[str(i) for i in lifted],
    )
    kept = set(sel.kept_ids)
    assert {str(i) for i in mandatory} <= kept
    if not sel.over_budget:
        assert sel.tokens_kept <= budget
    top = max(sel.relevance.values())
    assert all(sel.relevance[str(i)] == pytest.approx(top) for i in lifted)


def test_a_repeated_call_over_the_same_pool_reuses_the_lifted_problem():
    from langchain_pacms.selector.pool import lift as _lift

    problem = ContextSelector().prepare(POOL, "red", budget=3)
    mask = np.array([True, False])
    first, again = _lift(problem, mask), _lift(problem.with_budget(5), mask)
    assert first.relevance[0] == first.relevance[1] == problem.relevance.max()
    assert again.scores is first.scores and again.budget == 5  # built once, costs its own
    other = _lift(problem, np.array([False, True]))
    assert other.scores is not first.scores and other.relevance[0] == problem.relevance[0]
