"""Values memoised per message object are read afresh once a field is assigned anew."""

from __future__ import annotations

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langchain_pacms.lifecycle import HeuristicPlanner, PlannerTuning, fold_variants, index_messages
from langchain_pacms.messages import by_message, by_messages


def test_a_memoised_value_follows_a_field_assigned_anew():
    seen: list[str] = []

    def text(m: BaseMessage) -> str:
        seen.append(str(m.content))
        return str(m.content)

    memo = by_message(text)
    m = HumanMessage("first")
    assert memo(m) == memo(m) == "first" and seen == ["first"]  # the second call is a hit
    m.content = "second"
    assert memo(m) == "second"
    m.additional_kwargs = {"note": 1}
    assert memo(m) == "second" and seen == ["first", "second", "second"]
    call = AIMessage("", tool_calls=[{"name": "ls", "args": {}, "id": "c1"}])
    pair = by_messages[int](8)
    assert pair((call,), "k", lambda: 1) == 1 and pair((call,), "k", lambda: 2) == 1
    call.tool_calls = [{"name": "cat", "args": {}, "id": "c1", "type": "tool_call"}]
    assert pair((call,), "k", lambda: 3) == 3


def _loop(task: str) -> list[BaseMessage]:
    call = {"name": "bash", "args": {"command": "ls src"}, "id": "c1"}
    msgs: list[BaseMessage] = [
        HumanMessage(task),
        AIMessage("", tool_calls=[call]),
        ToolMessage("\n".join(f"src/pkg/mod{i}.py" for i in range(8)), tool_call_id="c1"),
    ]
    for k in range(2, 6):
        step = {"name": "wc", "args": {"n": k}, "id": f"c{k}"}
        msgs += [AIMessage("", tool_calls=[step]), ToolMessage(f"{k} lines", tool_call_id=f"c{k}")]
    return msgs


def test_a_message_edited_by_assignment_is_folded_and_planned_afresh():
    msgs = _loop("fix the import in src/pkg/mod3.py")
    shown = str(fold_variants(msgs)[1].messages[1].content)
    assert "src/pkg/mod3.py" not in shown  # the task shows it: the stub leaves it out
    planner = HeuristicPlanner(tuning=PlannerTuning(keep_above=0.6))
    planner.plan(index_messages(msgs, latest="step"), msgs)
    msgs[0].content = "fix the import"  # the task no longer shows the path
    assert "src/pkg/mod3.py" in str(fold_variants(msgs)[1].messages[1].content)
    fresh = HeuristicPlanner(tuning=PlannerTuning(keep_above=0.6))
    index = index_messages(msgs, latest="step")
    assert planner.plan(index, msgs).actions == fresh.plan(index, msgs).actions


def test_an_entry_goes_once_its_message_is_collected():
    import gc

    memo = by_message(lambda m: str(m.content).upper())
    pairs = by_messages[str](64)
    kept = HumanMessage("kept")
    for k in range(20):
        m = HumanMessage(f"message {k}")
        assert memo(m) == f"MESSAGE {k}"
        assert pairs((m, kept), "k", lambda m=m: str(m.content)) == f"message {k}"
    del m
    gc.collect()
    assert memo(kept) == "KEPT"  # a call forgets the entries of collected messages first
    assert len(memo._memo) == 1
    assert pairs((kept,), "k", lambda: "kept") == "kept" and len(pairs._memo) == 1


def test_threads_purging_at_once_do_not_fail():
    import gc
    from concurrent.futures import ThreadPoolExecutor

    memo = by_message(lambda m: len(str(m.content)))

    def work(k: int) -> int:
        total = 0
        for j in range(300):
            total += memo(HumanMessage(f"{k} {j}"))  # each message dies at once: purges race
            if j % 50 == 0:
                gc.collect()
        return total

    with ThreadPoolExecutor(4) as pool:
        assert all(n > 0 for n in pool.map(work, range(8)))


def test_a_purge_whose_queue_another_thread_emptied_does_not_fail():
    from collections import deque

    class Emptied(deque):  # type: ignore[type-arg]
        """A queue that another thread empties right after the first key is taken."""

        def popleft(self):  # type: ignore[no-untyped-def]
            key = super().popleft()
            self.clear()
            return key

    memo = by_message(lambda m: str(m.content))
    memo._dead = Emptied([1, 2, 3])
    assert memo(HumanMessage("after")) == "after" and not memo._dead
