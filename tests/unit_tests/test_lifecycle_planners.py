"""The heuristic and LLM planners on realistic histories (pure data, no LangGraph)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.fake_chat_models import (
    FakeMessagesListChatModel,
    GenericFakeChatModel,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from pacms_fakes import classic, span_messages
from pydantic import Field

from langchain_pacms import ContextSelector
from langchain_pacms.lifecycle import (
    CommitRule,
    LifecycleHarness,
    LLMPlanner,
    Plan,
    Planner,
    apply_actions,
    index_messages,
    provider_problems,
)
from langchain_pacms.messages import payload_of, run_thread

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "agent-traces"


# -- building realistic histories ---------------------------------------------------------------
def code_body(path: str, functions: int = 120) -> str:
    lines = [f"# {path}"]
    for i in range(functions):
        lines.append(f"def helper_{i}(value):\n    return value * {i} + len({path!r})")
    return "\n".join(lines)


def log_text(cases: int = 120, build: str = "") -> str:
    lines = ["============================= test session starts ==============", "collected items"]
    lines += [f"tests/test_m{i % 7}.py::test_case_{i} PASSED  [{i % 100}%]" for i in range(cases)]
    lines += [
        "FAILED tests/test_config.py::test_port - AssertionError: 8081 != 8080",
        "Traceback (most recent call last):",
        '  File "src/app/config.py", line 12, in parse_port',
        f"=== 1 failed, {cases} passed in 3.21 seconds {build}===",
    ]
    return "\n".join(lines)


class History:
    """A message list with readable builders and unique ids."""

    def __init__(self, system: str = "You are a careful coding agent.") -> None:
        self.messages: list[BaseMessage] = [SystemMessage(system, id="sys")]
        self.n = 0

    def _id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def user(self, text: str) -> History:
        self.messages.append(HumanMessage(text, id=self._id("h")))
        return self

    def say(self, text: str) -> History:
        self.messages.append(AIMessage(text, id=self._id("r")))
        return self

    def call(self, name: str, result: str, **args: Any) -> History:
        cid = self._id("c")
        call = {"name": name, "args": args, "id": cid}
        self.messages.append(AIMessage("", tool_calls=[call], id=f"a-{cid}"))
        self.messages.append(ToolMessage(result, tool_call_id=cid, id=f"t-{cid}"))
        return self

    def filler(self, count: int) -> History:
        for i in range(count):
            self.call("list_dir", f"README.md\nsetup.cfg {i}", path=f"dir{self.n}")
        return self


def tool_id_of(messages: list[BaseMessage], call_id: str) -> str:
    """The object id of the tool object whose call has ``call_id``."""
    index = index_messages(messages)
    for obj in index.objects:
        if f"a-{call_id}" in obj.lineage:
            return obj.id
    raise AssertionError(call_id)


def plan_of(messages: list[BaseMessage], **options: Any) -> Plan:
    planner = classic(**{"keep_recent": 0, **options})
    return planner.plan(index_messages(messages), messages)


def ops(plan: Plan) -> dict[str, str]:
    return {a.target: a.op for a in plan.actions}


def ask(h: History, question: str, fillers: int = 2) -> tuple[Plan, str]:
    """``fillers`` filler calls and ``question`` after ``h``: the plan, and the object id of the
    first call's result."""
    h.filler(fillers).user(question)
    return plan_of(h.messages), tool_id_of(h.messages, "c2")


def assert_applies_cleanly(messages: list[BaseMessage], plan: Plan) -> None:
    index = index_messages(messages)
    result = apply_actions(messages, index, plan.actions)
    assert provider_problems(result.messages) == []
    latest = {mid for o in index.objects if o.latest for mid in o.lineage}
    kept = {m.id: m for m in result.messages}
    for message in messages:  # the latest turn and the system prompt are byte-identical
        if message.id in latest or message.type == "system":
            assert kept[message.id] == message


# -- heuristic planner --------------------------------------------------------------------------
def test_repeated_read_prunes_the_older_copy_only():
    h = History().user("Fix the port parsing in src/app/config.py")
    h.call("read_file", code_body("src/app/config.py"), path="src/app/config.py")
    h.call("read_file", code_body("src/app/config.py"), path="src/app/config.py")
    h.filler(2).user("What does parse_port return?")
    plan = plan_of(h.messages)
    first, second = (tool_id_of(h.messages, c) for c in ("c2", "c3"))
    assert ops(plan)[first] == "prune"
    assert ops(plan).get(second) != "prune"
    (action,) = [a for a in plan.actions if a.target == first]
    assert action.reason == f"superseded by {second}: the same call runs again later"
    assert_applies_cleanly(h.messages, plan)


def test_a_later_whole_file_read_by_another_tool_supersedes_a_ranged_read():
    h = History().user("Look at the config module")
    h.call("bash", code_body("src/app/config.py", 30), command="sed -n '1,80p' src/app/config.py")
    h.call("bash", code_body("src/app/config.py"), command="cat src/app/config.py")
    h.user("thanks")
    plan = plan_of(h.messages)
    ranged = tool_id_of(h.messages, "c2")
    assert ops(plan)[ranged] == "prune"
    assert "src/app/config.py is read again later" in plan.actions[0].reason
    # the other way round, a ranged read never supersedes a whole one
    h2 = History().user("Look at the config module")
    h2.call("bash", code_body("src/app/config.py"), command="cat src/app/config.py")
    h2.call("bash", code_body("src/app/config.py", 30), command="sed -n '1,80p' src/app/config.py")
    h2.user("thanks")
    assert ops(plan_of(h2.messages)).get(tool_id_of(h2.messages, "c2")) != "prune"


def test_shell_commands_are_classified_like_the_tools_they_stand_for():
    h = History().user("Fix the bug in astropy/wcs/wcs.py")
    h.call("bash", code_body("astropy/wcs/wcs.py", 200), command="cat astropy/wcs/wcs.py")
    h.call("bash", log_text(150), command="cd /testbed && python reproduce.py 2>&1")
    h.call("bash", code_body("astropy/io/fits.py", 200), command="nl -ba astropy/io/fits.py")
    h.call("bash", "", command="sed -i 's/int(/float(/' astropy/wcs/wcs.py")
    h.filler(2).user("Did the fix work?")
    plan = plan_of(h.messages)
    read, run, other = (tool_id_of(h.messages, c) for c in ("c2", "c3", "c4"))
    assert ops(plan) == {read: "fold", run: "mask", other: "fold"}
    reasons = {a.target: a.reason for a in plan.actions}
    assert "astropy/wcs/wcs.py is edited later" in reasons[read]
    assert "edited later" not in reasons[other]


def test_a_read_command_names_its_files_whatever_their_extension():
    h = History().user("Decode the capture")
    h.call("bash", "0110" * 400, command="cat capture.mpeg")
    h.call("bash", "0110" * 400, command="nl capture.mpeg")
    plan, first = ask(h, "What does it say?")
    assert ops(plan)[first] == "prune"
    assert "capture.mpeg is read again later" in plan.actions[0].reason


def test_big_stable_file_read_is_folded_not_masked():
    h = History().user("Summarise the helpers in src/app/helpers.py")
    h.call("read_file", code_body("src/app/helpers.py", 200), path="src/app/helpers.py")
    plan, read = ask(h, "Now write the changelog entry for the release.", fillers=3)
    assert ops(plan) == {read: "fold"}
    assert plan.actions[0].reason.startswith("large stable body (")
    assert_applies_cleanly(h.messages, plan)


def test_long_test_log_is_masked_but_a_small_one_is_left():
    h = History().user("Run the test suite")
    h.call("shell", log_text(120), command="pytest -q")
    h.call("shell", log_text(3), command="pytest -q -k port")
    plan, log = ask(h, "Write the release notes.")
    assert ops(plan) == {log: "mask"}
    assert "noisy output" in plan.actions[0].reason
    result = apply_actions(h.messages, index_messages(h.messages), plan.actions)
    masked = result.replaced["t-c2"]
    assert "elided by mask" in masked.content and masked.content.startswith("=====")
    assert_applies_cleanly(h.messages, plan)


def test_a_log_whose_values_later_calls_use_is_folded_not_masked():
    h = History().user("Run the build")
    h.call("shell", log_text(120, build="build_id=bld_7f3a91c2 "), command="make build")
    h.call("fetch_artifact", "artifact ok", build="bld_7f3a91c2")
    plan, log = ask(h, "Is the artifact signed?")
    assert ops(plan)[log] == "fold"
    assert "later calls use bld_7f3a91c2" in plan.actions[0].reason


def test_live_handle_blocks_prune_when_the_newer_copy_lacks_the_value():
    h = History().user("Find the open ticket for the port bug")
    h.call("search_tickets", "TICKET-4821 port parsing broken\n" * 200, query="port")
    h.call("open_ticket", "Ticket details: owner alice", ticket="TICKET-4821")
    h.call("search_tickets", "no results\n" * 300, query="port")  # same call, other content
    plan, first = ask(h, "Who owns it?")
    assert ops(plan).get(first) != "prune"
    assert ops(plan).get(first) == "fold"


def test_read_of_a_file_edited_later_is_never_masked():
    h = History().user("Fix the port parser")
    log_like = log_text(150)  # a body that reads like a log, from a tool of unknown kind
    h.call("inspect", log_like, path="src/app/config.py")
    h.call("edit_file", "ok", path="src/app/config.py", old="8081", new="8080")
    plan, inspected = ask(h, "Done?")
    assert ops(plan).get(inspected) != "mask"
    # the same output whose path is never edited is masked
    h2 = History().user("Fix the port parser")
    h2.call("inspect", log_like, path="src/app/config.py")
    h2.filler(3).user("Done?")
    assert ops(plan_of(h2.messages)).get(tool_id_of(h2.messages, "c2")) == "mask"


def test_editable_read_is_folded_with_a_reason_that_says_so():
    h = History().user("Fix the port parser")
    h.call("read_file", code_body("src/app/config.py", 200), path="src/app/config.py")
    h.call("write_file", "written", path="src/app/config.py", content="PORT = 8080\n")
    plan, read = ask(h, "Changelog?")
    (action,) = [a for a in plan.actions if a.target == read]
    assert action.op == "fold" and "src/app/config.py is edited later" in action.reason


def test_keep_file_views_keeps_the_latest_whole_read_of_each_file():
    h = History().user("Fix the port parser in src/app/config.py")
    h.call("bash", code_body("src/app/config.py", 200), command="cat src/app/config.py")
    h.call("bash", code_body("src/app/util.py", 200), command="cat src/app/util.py")
    h.call("bash", code_body("src/app/config.py", 60), command="sed -n '1,80p' src/app/config.py")
    h.call("bash", "", command="sed -i 's/8081/8080/' src/app/config.py")
    h.call("bash", code_body("src/app/util.py", 200), command="cat src/app/util.py")
    h.filler(2).user("Done?")
    config, util, ranged, util_again = (tool_id_of(h.messages, c) for c in ("c2", "c3", "c4", "c6"))
    kept = ops(plan_of(h.messages, keep_file_views=True))
    # the latest whole view of each file stays, even one edited since; a ranged read does not
    # count as a view, and an older view of a file read again is still superseded
    assert config not in kept and util_again not in kept
    assert kept[ranged] == "fold" and kept[util] == "prune"
    # without the option the same views are folded
    plain = ops(plan_of(h.messages))
    assert plain[config] == "fold" and plain[util_again] == "fold" and plain[util] == "prune"


def test_max_stubs_keeps_the_newest_stubs_and_prunes_the_older_ones():
    h = History().user("Review the modules")
    for name in ("a", "b", "c", "d", "e"):
        h.call("read_file", code_body(f"src/{name}.py", 200), path=f"src/{name}.py")
    h.user("Summarise src/e.py")
    reads = [tool_id_of(h.messages, f"c{i}") for i in range(2, 7)]
    assert all(ops(plan_of(h.messages, keep_above=1.0))[r] == "fold" for r in reads)
    plan = plan_of(h.messages, keep_above=1.0, max_stubs=2)
    assert [ops(plan)[r] for r in reads] == ["prune"] * 3 + ["fold"] * 2
    assert {a.reason for a in plan.actions if a.op == "prune"} == {
        "an older stub than the newest 2 (max_stubs)"
    }
    assert_applies_cleanly(h.messages, plan)
    # on a later round the stubs already in view count too: the older ones are pruned
    index = index_messages(h.messages)
    folded = apply_actions(h.messages, index, plan_of(h.messages, keep_above=1.0).actions)
    later = classic(keep_recent=0, keep_above=1.0, max_stubs=1).plan(
        index_messages(folded.messages), folded.messages
    )
    assert ops(later) == {r: "prune" for r in reads[:4]}
    after = apply_actions(folded.messages, index_messages(folded.messages), later.actions)
    assert provider_problems(after.messages) == []
    stubs = [o.id for o in index_messages(after.messages).objects if o.state == "folded"]
    assert stubs == [reads[4]]
    assert set(ops(plan_of(h.messages, keep_above=1.0, max_stubs=0)).values()) == {"prune"}


def audit_keys(audit, object_id):
    items = audit.store.search(audit.namespace, filter={"object_id": object_id}, limit=100)
    return [i.key for i in items]


def test_max_stubs_in_the_harness_loop_bounds_the_stubs_and_keeps_every_payload():
    harness = LifecycleHarness(
        classic(keep_recent=0, keep_above=1.0, max_stubs=2), commit=CommitRule(boundary="tool")
    )
    h = History().user("Review every module")
    history: list[BaseMessage] = list(h.messages)
    known: dict[str, str] = {}
    payloads: dict[str, str] = {}
    for name in "abcdefg":
        h.messages = history
        h.call("read_file", code_body(f"src/{name}.py", 150), path=f"src/{name}.py")
        history = list(h.messages)
        index = index_messages(history)
        payloads.update(
            {
                o.id: payload_of(history, o.indices)
                for o in index.objects
                if o.kind == "tool" and o.state == "active"
            }
        )
        commit = harness.step(history, known_ids=known)
        if commit is not None:
            history, known = list(commit.messages), dict(commit.known_ids)
        states = [o.state for o in harness.index(history, known).objects if o.kind == "tool"]
        assert states.count("folded") + states.count("masked") <= 2
        assert provider_problems(history) == []
    assert len(payloads) == 7
    sidecars = harness.sidecars(run_thread(history))  # no thread id: the run's own thread
    folded_once = [i for i in payloads if i in set(sidecars.list_ids())]
    assert len(folded_once) >= 5  # the older reads were folded before they were pruned
    in_view = {o.id for o in harness.index(history, known).objects}
    assert [i for i in folded_once if i not in in_view]  # some of them are pruned by now
    for object_id in folded_once:
        assert sidecars.get(object_id).payload == payloads[object_id]
    # every original is in the history or the store: folded ones as sidecars, masked and
    # pruned ones in the audit records
    audit = harness.audit(run_thread(history))
    whole = {o.id for o in harness.index(history, known).objects if o.state == "active"}
    for object_id, payload in payloads.items():
        if object_id not in folded_once and object_id not in whole:
            versions = [span_messages(audit.get(k).payload) for k in audit_keys(audit, object_id)]
            assert any(m.content == payload for v in versions for m in v), object_id


def test_user_instructions_are_never_pruned_or_masked_and_the_first_never_touched():
    huge = "Constraint: never change the public API. " * 900  # ~8,000 tokens
    h = History().user(huge).say("ok").user(huge + " again").say("ok")
    h.filler(2).user("go on")
    plan = plan_of(h.messages)
    index = index_messages(h.messages)
    users = [o.id for o in index.objects if o.kind == "user"]
    assert users[0] not in ops(plan)
    assert ops(plan).get(users[1]) == "fold"  # very large, old, not the first
    assert all(a.op == "fold" for a in plan.actions if a.target in users)
    assert plan_of(h.messages, user_fold_min_tokens=100_000).actions == ()


def test_latest_turn_system_prompt_and_recent_objects_are_never_targeted():
    h = History(system="policy " * 3000).user("Start")
    h.call("read_file", code_body("a.py", 300), path="a.py")
    h.call("read_file", "Release notes for the spring sprint.\n" * 900, path="b.py")
    h.user("Now the latest question about a.py")
    h.call("read_file", code_body("a.py", 300), path="a.py")  # repeat inside the latest turn
    h.call("shell", log_text(200), command="pytest")
    index = index_messages(h.messages)
    latest = {o.id for o in index.objects if o.latest}
    for keep_recent in (0, 1, 2):
        plan = classic(keep_recent=keep_recent).plan(index, h.messages)
        targets = set(ops(plan))
        assert not targets & latest
        assert "system:1" not in targets
        assert ("function:tool:2" in targets) == (keep_recent == 0)
    # the old read of a.py is superseded by the one in the latest turn
    assert ops(classic(keep_recent=1).plan(index, h.messages)) == {"function:tool:1": "prune"}


def test_without_a_user_message_the_last_object_is_still_protected():
    h = History()
    h.call("shell", log_text(200), command="pytest")
    h.call("shell", log_text(200), command="pytest")
    h.messages.insert(1, HumanMessage("go", id="first"))
    msgs = h.messages[:1] + h.messages[2:]  # no user message at all
    index = index_messages(msgs)
    assert not any(o.latest for o in index.objects)
    plan = classic(keep_recent=0).plan(index, msgs)
    assert index.objects[-1].id not in ops(plan)


class KeywordEmbeddings(Embeddings):
    """Unit vectors over a few keywords: relevance is which topic a text is about."""

    topics = ("billing", "network", "storage")

    def _vec(self, text: str) -> list[float]:
        counts = [float(text.lower().count(t)) + 0.01 for t in self.topics]
        return counts

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)


class BrokenEmbeddings(KeywordEmbeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise RuntimeError("embedding server down")


def relevance_history() -> History:
    h = History().user("Look at both services")
    h.call("read_file", "billing invoice billing\n" * 400, path="billing.txt")
    h.call("read_file", "network route network\n" * 400, path="network.txt")
    h.filler(2).user("Explain the billing invoice totals")
    return h


def test_relevance_from_the_selector_keeps_what_the_recent_turns_are_about():
    h = relevance_history()
    index = index_messages(h.messages)
    selector = ContextSelector(KeywordEmbeddings())
    plan = classic(selector, keep_recent=0).plan(index, h.messages)
    billing, network = (tool_id_of(h.messages, c) for c in ("c2", "c3"))
    assert ops(plan) == {network: "fold"}
    assert billing not in ops(plan)
    # the word-overlap fallback (no selector) reaches the same verdict here
    assert ops(classic(keep_recent=0).plan(index, h.messages)) == {network: "fold"}


def test_embedding_failure_falls_back_to_word_overlap_and_says_so():
    h = relevance_history()
    index = index_messages(h.messages)
    selector = ContextSelector(BrokenEmbeddings())
    plan = classic(selector, keep_recent=0).plan(index, h.messages)
    assert plan.ok and "embedding failed, RuntimeError: embedding server down" in plan.summary
    assert ops(plan) == {tool_id_of(h.messages, "c3"): "fold"}


def test_aplan_equals_plan_and_planning_is_deterministic():
    h = relevance_history()
    index = index_messages(h.messages)
    planner = classic(ContextSelector(KeywordEmbeddings()), keep_recent=0)
    first = planner.plan(index, h.messages)
    assert planner.plan(index, h.messages) == first  # warm cache, same answer
    assert (
        classic(ContextSelector(KeywordEmbeddings()), keep_recent=0).plan(index, h.messages)
        == first
    )
    assert asyncio.run(planner.aplan(index, h.messages)) == first
    assert isinstance(planner, Planner) and first.planner == "heuristic"


def test_a_history_loaded_again_gets_the_same_plan_from_content_memos():
    # a checkpointer hands the next run new message objects with the same contents: the
    # planner's per-object memos miss, the locator memo (by payload hash) serves them
    h = History().user("Summarise the helpers")
    for k in range(4):
        path = f"src/app/helpers_{k}.py"
        h.call("read_file", code_body(path, 200), path=path)
    h.call("shell", log_text(120, build="build_id=bld_7f3a91c2 "), command="make build")
    h.call("fetch_artifact", "artifact ok", build="bld_7f3a91c2")
    first, _ = ask(h, "Now write the changelog entry for the release.", fillers=3)
    assert {a.op for a in first.actions} == {"fold"} and len(first.actions) == 5
    planner = classic(keep_recent=0)
    assert planner.plan(index_messages(h.messages), h.messages) == first
    loaded = [m.model_copy() for m in h.messages]
    assert planner.plan(index_messages(loaded), loaded) == first
    # the same ids over other contents: what a fresh planner sees, not the remembered plan
    edited = [
        m.model_copy(update={"content": m.content.replace("helpers", "parsers")})
        if isinstance(m, ToolMessage)
        else m
        for m in h.messages
    ]
    fresh = classic(keep_recent=0).plan(index_messages(edited), edited)
    assert planner.plan(index_messages(edited), edited) == fresh


def test_summary_is_one_line_with_counts():
    h = History().user("Fix it")
    h.call("read_file", code_body("a.py"), path="a.py")
    h.call("read_file", code_body("a.py"), path="a.py")
    h.call("shell", log_text(150), command="pytest")
    h.filler(1).user("next")
    plan = plan_of(h.messages)
    assert "\n" not in plan.summary
    assert plan.summary.startswith("1 prune, 1 fold, 1 mask on ")
    assert all(a.reason for a in plan.actions)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"fold_min_tokens": 0}, ValueError),
        ({"mask_min_tokens": "300"}, TypeError),
        ({"keep_recent": -1}, ValueError),
        ({"keep_above": 0}, ValueError),
        ({"recency_half_life": 0}, ValueError),
        ({"selector": object()}, TypeError),
        ({"keep_file_views": 1}, TypeError),
        ({"fold_calls": "yes"}, TypeError),
        ({"max_stubs": -1}, ValueError),
        ({"max_stubs": 2.0}, TypeError),
    ],
)
def test_bad_options_are_named(options: dict[str, Any], error: type[Exception]):
    with pytest.raises(error, match=next(iter(options))):
        classic(**options)


ACTIONS = st.sampled_from(["read", "reread", "log", "small", "say", "user", "edit"])


@settings(max_examples=40, deadline=None)
@given(st.lists(ACTIONS, min_size=1, max_size=25), st.integers(0, 3), st.none() | st.integers(0, 3))
def test_any_history_gives_a_safe_plan_that_applies_cleanly(
    steps: list[str], keep: int, max_stubs: int | None
):
    h = History().user("Start the task; do not touch the public API.")
    files = ["a.py", "b.py", "c.py"]
    for n, step in enumerate(steps):
        path = files[n % 3]
        if step in ("read", "reread"):
            h.call("read_file", code_body(path, 150), path=files[0] if step == "reread" else path)
        elif step == "log":
            h.call("shell", log_text(150), command="pytest")
        elif step == "small":
            h.call("calc", str(n), expression=f"{n}+1")
        elif step == "say":
            h.say("Progress note. " * 400)
        elif step == "user":
            h.user(f"Next instruction {n}")
        else:
            h.call("edit_file", "ok", path=path, old="x", new="y")
    index = index_messages(h.messages)
    plan = classic(keep_recent=keep, max_stubs=max_stubs).plan(index, h.messages)
    assert plan.ok and len({a.target for a in plan.actions}) == len(plan.actions)
    for action in plan.actions:
        obj = index.by_id[action.target]
        assert not obj.latest and obj.kind != "system"
        if obj.kind == "user":
            assert action.op == "fold"
        if obj.kind == "assistant":
            assert action.op in (("fold",) if max_stubs is None else ("fold", "prune"))
    if max_stubs is not None:  # user folds are outside the horizon: they are never pruned
        shrunk = [
            a
            for a in plan.actions
            if a.op in ("fold", "mask") and index.by_id[a.target].kind != "user"
        ]
        assert len(shrunk) <= max_stubs
    assert_applies_cleanly(h.messages, plan)


# -- a real trace -------------------------------------------------------------------------------
def tau_messages(session: dict[str, Any]) -> list[BaseMessage]:
    """One tau-bench session (OpenAI chat format) as LangChain messages."""
    out: list[BaseMessage] = []
    for n, m in enumerate(session["traj"]):
        mid = f"m{n}"
        if m["role"] == "system":
            out.append(SystemMessage(m["content"], id=mid))
        elif m["role"] == "user":
            out.append(HumanMessage(m["content"], id=mid))
        elif m["role"] == "assistant":
            calls = [
                {
                    "name": c["function"]["name"],
                    "args": json.loads(c["function"]["arguments"]),
                    "id": c["id"],
                }
                for c in m.get("tool_calls") or []
            ]
            out.append(AIMessage(m.get("content") or "", tool_calls=calls, id=mid))
        elif m["role"] == "tool":
            out.append(ToolMessage(m["content"], tool_call_id=m["tool_call_id"], id=mid))
    return out


def test_real_tau_bench_trace_gives_a_valid_non_empty_plan():
    path = TRACES / "tau-bench-airline-gpt4o" / "gpt-4o-airline.json"
    if not path.exists():
        pytest.skip(f"agent traces not found at {path} (see shared/data/agent-traces/SOURCE.md)")
    sessions = json.loads(path.read_text())
    session = next(s for s in sessions if s["task_id"] == 33 and s["trial"] == 0)
    messages = tau_messages(session)
    # cut at the last user message that follows 15 or more tool calls: a replay cut point
    cut = next(
        i
        for i in range(len(messages) - 1, 0, -1)
        if messages[i].type == "human"
        and sum(isinstance(m, ToolMessage) for m in messages[:i]) >= 15
    )
    history = messages[: cut + 1]
    index = index_messages(history)
    planner = classic(fold_min_tokens=250, mask_min_tokens=250)
    plan = planner.plan(index, history)
    assert plan.ok and plan.actions, plan.summary
    assert all(a.reason for a in plan.actions)
    for action in plan.actions:
        obj = index.by_id[action.target]
        assert obj.kind == "tool" and not obj.latest and obj.state == "active"
    result = apply_actions(history, index, plan.actions)
    assert provider_problems(result.messages) == []
    assert result.tokens_after < result.tokens_before
    # ids a later call reuses (reservations, flights, payments) are never masked away, and a
    # pruned search is one that runs again later with the same arguments
    ids = re.compile(r"\b[A-Z0-9]{6}\b|\bHAT\d{3}\b|\b(?:credit_card|gift_card|certificate)_\d+")
    for action in plan.actions:
        obj = index.by_id[action.target]
        later = " ".join(o.signature for o in index.objects[obj.position + 1 :])
        if action.op == "mask":
            assert not set(ids.findall(obj.text.split("\n", 1)[-1])) & set(ids.findall(later))
        if action.op == "prune":
            assert obj.signature in later


# -- LLM planner --------------------------------------------------------------------------------
class RecordingModel(GenericFakeChatModel):
    """A fake chat model that records what it was sent."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)
    tags: list[list[str]] = Field(default_factory=list)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Any:
        self.seen.append(list(messages))
        self.tags.append(list(run_manager.tags if run_manager else []))
        return super()._generate(messages, stop, run_manager, **kw)


class ToolCallingFake(RecordingModel):
    """A fake that supports tools, so ``with_structured_output`` takes the tool path."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


class RaisingModel(FakeMessagesListChatModel):
    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("rate limited")


def llm_history() -> History:
    h = History().user("Fix the port parser; keep the public API.")
    h.call("read_file", code_body("src/app/config.py", 200), path="src/app/config.py")
    h.call("shell", log_text(150), command="pytest -q")
    h.call("read_file", code_body("src/app/config.py", 200), path="src/app/config.py")
    h.user("Now update the changelog.")
    h.call("read_file", "# Changelog\n", path="CHANGELOG.md")
    return h


def reply(*actions: tuple[str, str], summary: str = "tidy the old reads") -> str:
    return json.dumps(
        {
            "summary": summary,
            "actions": [{"op": op, "target": t, "reason": f"{op} it"} for op, t in actions],
        }
    )


def llm_plan(*replies: Any, model: type[GenericFakeChatModel] = RecordingModel) -> Plan:
    h = llm_history()
    planner = LLMPlanner(model(messages=iter(replies)))
    return planner.plan(index_messages(h.messages), h.messages)


def test_llm_valid_json_plan():
    plan = llm_plan(reply(("prune", "function:tool:1"), ("mask", "function:tool:2")))
    assert plan.ok and plan.planner == "llm"
    assert plan.summary == "tidy the old reads"
    assert [(a.op, a.target, a.reason) for a in plan.actions] == [
        ("prune", "function:tool:1", "prune it"),
        ("mask", "function:tool:2", "mask it"),
    ]
    h = llm_history()
    assert_applies_cleanly(h.messages, plan)


def test_llm_json_in_a_code_fence_or_prose_is_read():
    fenced = "```json\n" + reply(("fold", "function:tool:1")) + "\n```"
    assert llm_plan(fenced).groups() == {"fold": ["function:tool:1"]}
    prose = "Here is my plan:\n" + reply(("fold", "function:tool:1")) + "\nDone."
    assert llm_plan(prose).groups() == {"fold": ["function:tool:1"]}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("I would fold the first read.", "no readable plan"),
        ('{"summary": "x", "actions": [', "no readable plan"),
        ('{"summary": "x", "actions": "fold everything"}', "'actions' list"),
        ("[1, 2]", "'actions' list"),
    ],
)
def test_llm_malformed_output_is_a_rejection(text: str, why: str):
    plan = llm_plan(text)
    assert not plan.ok and plan.actions == () and why in (plan.rejected or "")


def test_llm_all_unknown_ids_reject_the_plan():
    plan = llm_plan(reply(("fold", "function:tool:77"), ("prune", "conversation:user:9")))
    assert not plan.ok
    assert plan.rejected == "all 2 target ids are unknown (not in the index)"


def test_llm_invalid_actions_are_dropped_with_reasons():
    plan = llm_plan(
        reply(
            ("fold", "function:tool:1"),
            ("fold", "function:tool:99"),  # hallucinated
            ("shrink", "function:tool:2"),  # unknown op
            ("prune", "system:1"),
            ("prune", "function:tool:4"),  # the latest turn
            ("prune", "conversation:user:1"),  # user instructions
            ("mask", "function:tool:1"),  # second action on one object
        )
    )
    assert plan.ok and plan.groups() == {"fold": ["function:tool:1"]}
    for why in (
        "function:tool:99: unknown id",
        "function:tool:2: unknown op 'shrink'",
        "system:1: the system prompt",
        "function:tool:4: part of the latest turn",
        "conversation:user:1: a user message is only ever folded",
        "dropped 6",
    ):
        assert why in plan.summary
    only_bad = llm_plan(reply(("prune", "system:1"), ("mask", "conversation:user:2")))
    assert not only_bad.ok and (only_bad.rejected or "").startswith("no usable action: ")


def test_llm_two_actions_on_one_object_keep_the_most_conservative():
    """As the harness merges plans: a fold beats a mask beats a prune, in any order."""
    plan = llm_plan(
        reply(
            ("prune", "function:tool:1"),
            ("fold", "function:tool:1"),
            ("mask", "function:tool:2"),
            ("fold", "function:tool:2"),
            ("prune", "function:tool:3"),
            ("mask", "function:tool:3"),
        )
    )
    assert plan.groups() == {
        "fold": ["function:tool:1", "function:tool:2"],
        "mask": ["function:tool:3"],
    }
    assert "overlaps fold of the same object (fold kept)" in plan.summary


def test_llm_span_scope_is_read_and_checked():
    text = json.dumps(
        {
            "summary": "fold the old reads with their calls",
            "actions": [
                {"op": "fold", "target": "function:tool:1", "scope": "span"},
                {"op": "fold", "target": "function:tool:2"},
                {"op": "mask", "target": "function:tool:3", "scope": "span"},
                {"op": "fold", "target": "conversation:user:1", "scope": "everything"},
            ],
        }
    )
    plan = llm_plan(text)
    assert [(a.target, a.scope) for a in plan.actions] == [
        ("function:tool:1", "span"),
        ("function:tool:2", "output"),
    ]
    assert "function:tool:3: scope 'span' is for a fold of a tool call only" in plan.summary
    assert "conversation:user:1: unknown scope 'everything'" in plan.summary
    assert_applies_cleanly(llm_history().messages, plan)


def test_llm_empty_plan_is_valid():
    plan = llm_plan(reply(summary="nothing worth changing"))
    assert plan.ok and plan.actions == () and plan.summary == "nothing worth changing"


def test_llm_raising_model_is_a_rejection_sync_and_async():
    h = llm_history()
    index = index_messages(h.messages)
    planner = LLMPlanner(RaisingModel(responses=[]))
    for plan in (planner.plan(index, h.messages), asyncio.run(planner.aplan(index, h.messages))):
        assert not plan.ok and plan.rejected == "model raised RuntimeError: rate limited"


def test_llm_runs_on_the_side_with_a_compact_view():
    h = llm_history()
    before = [m.model_copy() for m in h.messages]
    model = RecordingModel(messages=iter([reply(("fold", "function:tool:1"))]))
    LLMPlanner(model).plan(index_messages(h.messages), h.messages)
    assert h.messages == before  # the agent's messages are untouched
    ((system, human),) = model.seen
    assert "nostream" in model.tags[0]  # LangGraph's messages stream leaves the call out
    assert system.type == "system" and "Never target the system prompt" in system.content
    assert '"actions"' in system.content  # the output schema is stated
    view = human.content
    assert "function:tool:1 | tool | " in view and " | active | read_file(" in view
    assert "Protected, never targets: system:1, conversation:user:2, function:tool:4" in view
    assert "[conversation:user:2] Now update the changelog." in view
    assert len(view) < 3_000  # compact: previews, not bodies
    assert all(len(line) < 400 for line in view.splitlines())


def test_llm_view_lists_the_largest_objects_when_over_max_objects():
    h = llm_history()
    view = LLMPlanner(RecordingModel(messages=iter([])), max_objects=2).view(
        index_messages(h.messages)
    )
    listed = [line.split(" | ")[0] for line in view.splitlines() if " | tool | " in line]
    assert listed == ["function:tool:1", "function:tool:3"]  # in order, the two largest
    assert "(2 smaller objects not shown)" in view


def test_llm_structured_output_path():
    args = {
        "summary": "prune the stale read",
        "actions": [{"op": "prune", "target": "function:tool:1", "reason": "read again"}],
    }
    call = AIMessage("", tool_calls=[{"name": "PlanSchema", "args": args, "id": "p1"}])
    h = llm_history()
    planner = LLMPlanner(ToolCallingFake(messages=iter([call])))
    assert planner.structured
    plan = planner.plan(index_messages(h.messages), h.messages)
    assert plan.ok and plan.groups() == {"prune": ["function:tool:1"]}
    # an op outside the schema fails pydantic parsing; the raw call is read and the action dropped
    bad = {
        "summary": "s",
        "actions": [
            {"op": "shrink", "target": "function:tool:1"},
            {"op": "fold", "target": "function:tool:3"},
        ],
    }
    call = AIMessage("", tool_calls=[{"name": "PlanSchema", "args": bad, "id": "p2"}])
    plan = LLMPlanner(ToolCallingFake(messages=iter([call]))).plan(
        index_messages(h.messages), h.messages
    )
    assert plan.groups() == {"fold": ["function:tool:3"]} and "unknown op 'shrink'" in plan.summary
    # no tool call at all: JSON in the text is still read
    text = AIMessage(reply(("fold", "function:tool:2")))
    plan = LLMPlanner(ToolCallingFake(messages=iter([text]))).plan(
        index_messages(h.messages), h.messages
    )
    assert plan.groups() == {"fold": ["function:tool:2"]}


def test_llm_aplan_matches_plan():
    h = llm_history()
    index = index_messages(h.messages)
    text = reply(("fold", "function:tool:1"), ("mask", "function:tool:2"))
    sync = LLMPlanner(RecordingModel(messages=iter([text]))).plan(index, h.messages)
    planner = LLMPlanner(FakeMessagesListChatModel(responses=[AIMessage(text)]))
    assert asyncio.run(planner.aplan(index, h.messages)) == sync
    assert isinstance(planner, Planner)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"model": "gpt"}, TypeError, "model"),
        ({"max_objects": 0}, ValueError, "max_objects"),
        ({"max_objects": 2.5}, TypeError, "max_objects"),
        ({"name": ""}, ValueError, "name"),
    ],
)
def test_llm_bad_options(kwargs: dict[str, Any], error: type[Exception], match: str):
    options = {"model": FakeMessagesListChatModel(responses=[]), **kwargs}
    with pytest.raises(error, match=match):
        LLMPlanner(**options)
