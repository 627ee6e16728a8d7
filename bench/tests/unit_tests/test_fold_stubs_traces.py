"""Fold stubs on a recorded agent run (the per-call selection of the lifecycle replay)."""

from __future__ import annotations

import pytest
from langgraph.store.memory import InMemoryStore

from langchain_pacms import ContextSelector
from langchain_pacms.integrations import (
    Budget,
    SelectionConfig,
    SelectionRunner,
    ToolLoopOptions,
)
from langchain_pacms.messages import sent_tokens
from pacms_bench.traces import default_traces_dir, load_tau_bench

TRACES = default_traces_dir()


@pytest.mark.skipif(not TRACES.is_dir(), reason=f"agent traces not at {TRACES}")
def test_a_round_that_left_room_unused_shrinks_below_what_it_kept():
    # a recorded run where the sent messages kept exceeding the budget by a token: shrinking
    # the room by the excess alone picked the same spans again until only the mandatory part
    # was left (1,795 of 2,646 tokens)
    sessions, _ = load_tau_bench(TRACES / "tau-bench-airline-gpt4o" / "gpt-4o-airline.json")
    session = next(s for s in sessions if s.name == "task26-trial1")
    selector = ContextSelector()
    config = SelectionConfig(
        budget=Budget(ratio=0.7),
        tool_loop=ToolLoopOptions(sidecar_store=InMemoryStore()),
        selector=selector,
    )
    runner = SelectionRunner(config, source="test")
    out = runner.run(list(session.messages[:32]), config={"configurable": {"thread_id": "t"}})
    selection = runner.last_selection
    sent = selection.info["tokens_sent"]
    assert sent == sent_tokens(out, selector.token_counter) and sent <= selection.budget
    assert selection.info["rounds"] <= 3
    assert not all(c.mandatory for c in selection.kept)
