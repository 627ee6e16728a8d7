"""The judge's strict definition: re-shown values still count, and paths match by suffix."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from pacms_bench.dependency_judge import cut_dependencies, future_dependencies, restated
from pacms_bench.lifecycle_report import write_report
from pacms_bench.replay_cuts import evaluate_cuts
from pacms_bench.traces import TraceSession


def test_a_value_a_later_tool_output_shows_again_still_counts() -> None:
    prefix = [("user", "fix the crash"), ("tool", "src/pkg/core.py\nsrc/pkg/util.py")]
    rest = [
        ("assistant", "grep -rl parse ."),
        ("tool", "src/pkg/core.py"),  # re-derived: it took the agent a call
        ("assistant", "cat src/pkg/core.py"),
    ]
    assert cut_dependencies(prefix, rest) == {"src/pkg/core.py"}
    assert cut_dependencies(prefix, rest, definition="rederivable_excluded") == set()


def test_a_value_the_user_states_again_is_no_dependency_by_either_definition() -> None:
    prefix = [("user", "change my flight"), ("tool", "reservations: ZFA04Y, K1NW8N")]
    rest = [("user", "it is ZFA04Y"), ("assistant", '{"reservation_id": "ZFA04Y"}')]
    assert cut_dependencies(prefix, rest) == set()
    assert restated({"ZFA04Y"}, rest, by=("user",)) == {"ZFA04Y"}


def test_a_path_matches_by_its_suffix_on_slash_boundaries() -> None:
    listing = ["/testbed/tests/test_x.py\n/testbed/tests/test_y.py"]
    later = ["pytest tests/test_x.py -q", "sed -n 1,9p test_y.py", "cat x.py est_y.py"]
    # x.py and est_y.py end those paths but not on a ``/``: no match
    assert future_dependencies(listing, later) == {"tests/test_x.py", "test_y.py"}
    assert future_dependencies(listing, later, suffixes=False) == set()
    prefix = [("user", "fix the tests"), ("tool", listing[0])]
    rest = [("assistant", text) for text in later]
    assert cut_dependencies(prefix, rest) == {"tests/test_x.py", "test_y.py"}
    assert cut_dependencies(prefix, rest, definition="rederivable_excluded") == set()


def test_a_suffix_the_prompt_gives_is_no_dependency() -> None:
    prefix = [("user", "tests/test_x.py fails"), ("tool", "/testbed/tests/test_x.py")]
    assert cut_dependencies(prefix, [("assistant", "pytest tests/test_x.py")]) == set()


def test_an_unknown_definition_is_refused() -> None:
    with pytest.raises(ValueError, match="definition"):
        cut_dependencies([], [], definition="lenient")  # type: ignore[arg-type]


_TEXTS = st.lists(
    st.sampled_from(
        [
            "/testbed/src/a.py",
            "src/a.py",
            "a.py",
            "/testbed/src/b_2.py",
            "HAT039",
            "ZFA04Y",
            "20240521",
            "ok",
        ]
    ),
    max_size=4,
).map(" ".join)
_ROLES = st.sampled_from(["user", "assistant", "tool"])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["user", "tool"]), _TEXTS), max_size=5),
    st.lists(st.tuples(_ROLES, _TEXTS), max_size=6),
)
def test_the_strict_definition_holds_every_rederivable_excluded_dependency(
    prefix: list[tuple[str, str]], rest: list[tuple[str, str]]
) -> None:
    lenient = cut_dependencies(prefix, rest, definition="rederivable_excluded")
    strict = cut_dependencies(prefix, rest)
    assert lenient <= strict
    used = " ".join(text for role, text in rest if role == "assistant")
    assert all(d in used for d in strict)


def session() -> TraceSession:
    """A listing of full paths first; then the agent opens each file by a relative path."""
    listing = "\n".join(f"/testbed/src/mod_{k}.py" for k in range(9))
    msgs = [HumanMessage("fix the crash", id="h")]
    for k in range(9):
        command = "ls -d /testbed/src/*" if k == 0 else f"cat src/mod_{k}.py"
        msgs.append(
            AIMessage(
                "",
                id=f"a{k}",
                tool_calls=[{"name": "bash", "args": {"command": command}, "id": f"c{k}"}],
            )
        )
        body = listing if k == 0 else "\n".join(f"x{j} = {j * k}" for j in range(120))
        msgs.append(ToolMessage(body, tool_call_id=f"c{k}", id=f"t{k}"))
    msgs.append(AIMessage("done", id="end"))
    return TraceSession("mini-swe", "suffix-fixture", tuple(msgs))


def test_the_replay_reports_the_strict_column_first_and_the_earlier_one_beside_it(
    tmp_path,
) -> None:
    row = evaluate_cuts([session()], "tool-prune-keep3").row()
    # the relative opens depend on the pruned listing strictly; matched whole, on nothing
    assert row["cuts_with_dependencies"] == row["cuts"] - 1
    assert row["strict_no_impact"] < 0.5 < row["strict_rederivable_excluded"] == 1.0
    low, high = row["strict_rederivable_excluded_ci"]
    assert low <= row["strict_rederivable_excluded"] <= high
    rows = {"tool-prune-keep3": row}
    report = {
        "datasets": {
            "mini-swe": {
                "sessions_test": 1,
                "heuristic_settings": {},
                "policies": rows,
                "cost": {"none": 1.0},
                "cost_vs_none": {},
            }
        }
    }
    text = write_report(report, tmp_path)[1].read_text()
    header = next(line for line in text.splitlines() if line.startswith("| policy | cuts"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    strict_at = columns.index("strict no-impact [95% CI]")
    assert columns[strict_at + 1] == "strict, re-derivable excluded [95% CI]"
