"""Fold stubs and masks keep the values a later step copies exactly, as the payload writes them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import BaseMessage, HumanMessage
from pacms_fakes import tool_round

from langchain_pacms.lifecycle import HeuristicPlanner, check_actions, index_messages
from langchain_pacms.messages.locators import find_locators, stub_locators


def test_a_quoted_sentence_keeps_its_final_period_and_spaces() -> None:
    body = (
        'def _is_call(node):\n    """Catch calls to str.format()."""\n'
        '    msg = ("pass arrays=None and pass "\n           "values directly, e.g., ")\n'
    )
    stub = str(stub_locators("sha-quoted", body))
    assert "Catch calls to str.format()." in stub
    assert "pass arrays=None and pass " in stub
    assert "values directly, e.g., " in stub


@settings(max_examples=100, deadline=None)
@given(st.text(st.characters(whitelist_categories=("L", "N", "Zs", "Po")), min_size=2, max_size=40))
def test_a_quoted_literal_is_found_as_written(literal: str) -> None:
    literal = literal.replace('"', "")
    if len(literal) < 2 or literal[0].isspace() or literal[0] == ":" or "\n" in literal:
        return
    found = find_locators(f'x = "{literal}"\n', limit=50)
    assert literal in found or any(literal in t for t in found)


def _shell_run(outputs: list[tuple[str, str]]) -> list[BaseMessage]:
    msgs: list[BaseMessage] = [HumanMessage("fix the parser", id="h")]
    for k, (command, output) in enumerate(outputs):
        msgs += tool_round("bash", {"command": command}, output, k)
    return msgs


def test_the_planner_leaves_a_short_path_listing_in_view() -> None:
    listing = "\n".join(f"./src/pkg/parser/grammar/module_{k}.py" for k in range(30))
    prose = "\n".join(f"step {k}: the value was computed and stored for later" for k in range(60))
    msgs = _shell_run(
        [("find . -name '*.py' | head -30", listing), ("python run.py", prose), ("ls", "a b")]
    )
    index = index_messages(msgs, latest="step")
    plan = HeuristicPlanner().plan(index, msgs)
    assert "function:tool:1" not in {a.target for a in plan.actions}
    assert any(a.target == "function:tool:2" for a in plan.actions)  # the log is still managed
    kept = check_actions(msgs, index, plan.actions).result.messages
    view = "\n".join(str(m.content) for m in kept)
    assert all(line in view for line in listing.splitlines())


def test_a_number_in_scientific_notation_is_one_locator() -> None:
    found = find_locators("if abs(denom) < 1e-12 or tol > 2.5E+3: raise", limit=10)
    assert "1e-12" in found and "2.5E+3" in found
