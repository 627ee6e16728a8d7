"""The dependency judge's own rules, on small handmade fixtures."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

import pacms_bench.dependency_judge as judge_module
from pacms_bench.dependency_judge import (
    extract,
    future_dependencies,
    minimal_cover,
    verdict,
)
from pacms_bench.replay_cuts import _judge_inputs

USER_OUT = (
    '{"user_id": "mia_li_3668", "reservations": ["ZFA04Y", "K1NW8N"], '
    '"payment": "credit_card_4421486"}'
)
RES_OUT = '{"flight_number": "HAT136", "date": "2024-05-20", "price": 1245, "cabin": "economy"}'


def test_extract_takes_locators_ids_and_long_numbers_only() -> None:
    text = "see https://x.io/a?q=1, pkg/mod.py:12, setup.py and HAT136; 42 items in 2024 rows of ok"
    assert extract(text) == {"https://x.io/a?q=1", "pkg/mod.py", "setup.py", "HAT136", "2024"}


def test_quoted_values_count_but_json_keys_do_not() -> None:
    assert extract('{"cabin": "economy", "n": "ab"}') == {"economy"}


def test_values_the_prompt_gave_are_not_dependencies() -> None:
    deps = future_dependencies(
        [USER_OUT, RES_OUT],
        [
            '{"reservation_id": "ZFA04Y", "payment_id": "credit_card_4421486"}',
            '{"user_id": "mia_li_3668"}',
        ],
        prompt="I am mia_li_3668 and want to change a flight",
    )
    assert deps == {"ZFA04Y", "credit_card_4421486"}


def test_values_never_in_an_earlier_tool_output_are_not_dependencies() -> None:
    deps = future_dependencies([RES_OUT], ["book HAT999 on 20240601 for credit_card_1"])
    assert deps == set()


def test_strict_recovery_and_recovery_calls() -> None:
    deps = {"ZFA04Y", "credit_card_4421486", "HAT136"}
    full = verdict(deps, USER_OUT + RES_OUT, {})
    assert full.strict and full.with_recovery and full.recovery_calls == 0
    folded = verdict(deps, "[folded: get_user_details] " + RES_OUT, {"function:tool:1": USER_OUT})
    assert not folded.strict and folded.with_recovery
    assert folded.missing == ("ZFA04Y", "credit_card_4421486")
    assert folded.recovery_calls == 1
    lost = verdict(deps, "[cleared] [cleared]", {"function:tool:2": RES_OUT})
    assert not lost.with_recovery
    assert lost.recoverable == ("HAT136",) and lost.recovery_calls == 1
    both = verdict(deps, "", {"a": USER_OUT, "b": RES_OUT})
    assert both.with_recovery and both.recovery_calls == 2


def test_a_masked_output_loses_what_its_middle_held() -> None:
    body = "x" * 300 + " src/deep/module.py " + "y" * 300
    masked = body[:100] + "\n[... masked ...]\n" + body[-100:]
    assert not verdict({"src/deep/module.py"}, masked, {}).strict
    assert verdict({"src/deep/module.py"}, masked, {"o": body}).with_recovery


def test_the_judge_imports_nothing_from_the_package() -> None:
    tree = ast.parse(Path(judge_module.__file__).read_text())
    modules = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    modules += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in modules if m.startswith("langchain_pacms")]


@given(st.text(alphabet="abcXY/._-0123456789 \"'\n", max_size=120))
def test_every_extracted_string_occurs_verbatim(text: str) -> None:
    assert all(t in text and len(t) >= 4 for t in extract(text))


@given(st.sets(st.sampled_from(["a/b.py", "HAT136", "12345", "x/y/z.md"])), st.text(max_size=40))
def test_verdict_partitions_dependencies(deps: set[str], view: str) -> None:
    v = verdict(deps, view, {"s": "a/b.py 12345"})
    assert set(v.missing) <= deps
    assert all(d in view for d in deps - set(v.missing))
    assert set(v.recoverable) <= set(v.missing)
    assert v.recovery_calls == (1 if v.recoverable else 0)


def _call(n: str, command: str) -> AIMessage:
    return AIMessage(
        "",
        tool_calls=[{"name": "bash", "args": {"command": command}, "id": n, "type": "tool_call"}],
        id=f"a{n}",
    )


def test_a_value_shown_again_before_its_use_is_excluded_only_as_rederivable() -> None:
    messages = [
        HumanMessage("fix the bug", id="u"),
        _call("1", "grep -rl foo ."),
        ToolMessage("src/pkg/core.py\nsrc/pkg/util.py", tool_call_id="1", id="t1"),
        _call("2", "grep -rl bar ."),
        ToolMessage("src/pkg/core.py", tool_call_id="2", id="t2"),  # shown again after the cut
        _call("3", "cat src/pkg/core.py && cat src/pkg/util.py"),
    ]
    # cut after t1: core.py is shown again by t2 before call 3 uses it; util.py is not
    assert _judge_inputs(messages, 2, "rederivable_excluded") == {"src/pkg/util.py"}
    # strictly, re-deriving core.py took the agent a call: it still depends on the prefix
    assert _judge_inputs(messages, 2) == {"src/pkg/core.py", "src/pkg/util.py"}
    # a use before the restatement depends on the prefix by either definition
    early = [*messages[:3], _call("9", "head src/pkg/core.py"), *messages[3:]]
    assert "src/pkg/core.py" in _judge_inputs(early, 2, "rederivable_excluded")


def test_json_punctuation_between_quoted_strings_is_no_value() -> None:
    text = '{"flights": [{"flight_number": "HAT136"}], "count": 2, "note": "late"}'
    assert extract(text) == {"HAT136", "late"}


def test_recovery_calls_are_a_minimal_cover_not_the_first_holders() -> None:
    deps = {"HAT136", "ZFA04Y"}
    sidecars = {"a": "HAT136", "b": "ZFA04Y", "c": "ZFA04Y and HAT136"}
    judged = verdict(deps, "", sidecars)
    assert judged.with_recovery and judged.recovery_calls == 1  # "c" alone holds both


@given(
    st.dictionaries(
        st.sampled_from("abcdefgh"),
        st.frozensets(st.sampled_from("uvwxyz"), max_size=4),
        max_size=8,
    )
)
def test_minimal_cover_is_the_smallest_cover(holds: dict[str, frozenset[str]]) -> None:
    from itertools import combinations

    sets = [s for s in holds.values() if s]
    goal = frozenset().union(*sets)
    best = next(
        k
        for k in range(len(sets) + 1)
        if any(frozenset().union(*c) == goal for c in combinations(sets, k))
    )
    assert minimal_cover(holds) == best
    assert minimal_cover(holds, exact_up_to=0) >= best  # greedy: a cover, maybe larger
