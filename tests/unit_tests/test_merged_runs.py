"""Histories merged from runs that each numbered their own folds (subagents, ``Send`` fan-out)."""

from __future__ import annotations

from langchain_core.messages import HumanMessage
from langgraph.store.memory import InMemoryStore
from pacms_fakes import call, fold, tool_round

from langchain_pacms.lifecycle import (
    RECOVER_TOOL_NAME,
    Action,
    SidecarStore,
    apply_actions,
    make_recover_tool,
)
from langchain_pacms.lifecycle.harness import LifecycleHarness
from langchain_pacms.lifecycle.objects import index_messages
from langchain_pacms.lifecycle.sidecar import record_key


def _run(tag: str, store: InMemoryStore) -> list:
    """One child run: a task and a tool round, its result folded as ``function:tool:1``."""
    history = [HumanMessage(f"task {tag}", id=f"h{tag}")]
    history += tool_round("grep", {"pattern": tag}, f"{tag}: src/{tag}.py:12\n" * 40, f"{tag}1")
    result = fold(history)
    SidecarStore(store, "merged").put_many(result.sidecars)
    return result.messages


def merged(store: InMemoryStore) -> list:
    return [*_run("alpha", store), *_run("beta", store), HumanMessage("and now?", id="h9")]


def test_an_index_of_merged_runs_names_each_fold_once():
    # before the fix: ValueError('known_ids maps two objects of this history to the same id')
    # from index_messages, so LifecycleMiddleware raised on every later turn
    history = merged(InMemoryStore())
    index = index_messages(history)
    folded = [o for o in index.objects if o.state == "folded"]
    named = tuple(record_key("function:tool:1", o.sha256) for o in folded)
    assert tuple(o.id for o in folded) == named and "function:tool:1" not in index.by_id
    assert index.shared == {"function:tool:1": named}
    commit = LifecycleHarness().step(history, thread_id="merged")  # it raised here
    assert commit is None or commit.messages[-1].content == "and now?"


def test_recover_context_asks_which_fold_an_ambiguous_id_means():
    # before the fix: the tool raised ValueError out of the agent run
    store = InMemoryStore()
    history = merged(store)
    tool = make_recover_tool(store)
    config = {"configurable": {"thread_id": "merged"}}

    def recover(object_id: str):
        request = call(RECOVER_TOOL_NAME, {"object_id": object_id}, "r1")
        return tool.invoke(
            {**request, "args": {**request["args"], "state": {"messages": history}}}, config
        )

    asked = recover("function:tool:1")
    assert asked.status == "error" and "names 2 objects" in asked.content
    ids = [o.id for o in index_messages(history).objects if o.state == "folded"]
    assert all(repr(i) in asked.content for i in ids)
    payloads = [recover(i).content for i in ids]  # each id the error names recovers its own
    assert payloads == ["alpha: src/alpha.py:12\n" * 40, "beta: src/beta.py:12\n" * 40]


def test_an_ambiguous_id_offers_only_the_folded_objects_as_recoverable():
    # a masked object of another run carries the id too: it was listed like a fold, and
    # recovering its key answered that it was masked
    store = InMemoryStore()
    other = [HumanMessage("task gamma", id="hgamma")]
    other += tool_round("grep", {"pattern": "g"}, "gamma: src/g.py:12\n" * 400, "gamma1")
    masked = apply_actions(other, index_messages(other), [Action("mask", "function:tool:1")])
    history = [*merged(store), *masked.messages]
    config = {"configurable": {"thread_id": "merged"}}
    state = {"messages": history}
    answer = make_recover_tool(store).invoke(
        {"object_id": "function:tool:1", "state": state}, config
    )
    (key,) = [o.id for o in index_messages(history).objects if o.state == "masked"]
    assert "names 3 objects" in answer and f"{key!r} (masked, not recoverable)" in answer


def test_the_same_payload_folded_in_three_runs_recovers_under_each_name():
    store = InMemoryStore()
    runs = [_run("same", store) for _ in range(3)]
    history = [*runs[0], *runs[1][1:], *runs[2][1:], HumanMessage("next", id="h9")]
    for n, message in enumerate(history):  # ids apart, as three runs' messages would be
        history[n] = message.model_copy(update={"id": f"{message.id}-{n}"})
    index = index_messages(history)
    (names,) = index.shared.values()
    assert len(names) == 3 and len(set(names)) == 3
    tool = make_recover_tool(store)
    config = {"configurable": {"thread_id": "merged"}}
    state = {"messages": history}
    harness = LifecycleHarness(store=store)
    for name in names:
        got = tool.invoke({"object_id": name, "state": state}, config)
        assert got == "same: src/same.py:12\n" * 40
        (restored,) = harness.reactivate(history, name, thread_id="merged")[-1:]
        assert restored.content == got  # back in place, read under the id its stub carries


def test_the_ambiguity_error_shows_each_fold_by_its_stub_not_by_the_shared_call():
    # both runs made the same long call: each entry read as the call's first 80 characters,
    # so the model could not tell which key was the stub it had seen
    store = InMemoryStore()
    command = {"command": "cd /repo && python -m pytest tests/test_billing.py -x -q --maxfail=1"}

    def run(tag: str) -> list:
        history = [HumanMessage(f"task {tag}", id=f"h{tag}")]
        history += tool_round("bash", command, f"/srv/{tag}/{tag}.py:12 failed\n" * 40, tag)
        result = fold(history)
        SidecarStore(store, "merged").put_many(result.sidecars)
        return result.messages

    history = [*run("alpha"), *run("beta"), HumanMessage("and now?", id="h9")]
    answer = make_recover_tool(store).invoke(
        {"object_id": "function:tool:1", "state": {"messages": history}},
        {"configurable": {"thread_id": "merged"}},
    )
    assert "names 2 objects" in answer
    entries = answer.split("you need: ")[1].split("; '")
    assert len(entries) == 2
    assert "/srv/alpha/alpha.py" in entries[0] and "/srv/beta/beta.py" in entries[1]
