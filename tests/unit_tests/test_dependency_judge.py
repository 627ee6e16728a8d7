"""Dependency judge rules on small handmade sessions."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

import langchain_pacms.eval.dependency_judge as judge_module
from langchain_pacms.eval.dependency_judge import (
    Dependency,
    extract_values,
    future_dependencies,
    judge_view,
)


def call(n: str, **args: object) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "f", "args": args, "id": n, "type": "tool_call"}])


def out(n: str, text: str) -> ToolMessage:
    return ToolMessage(text, tool_call_id=n)


SESSION = [
    SystemMessage("policy: refunds go to credit_card_1111"),
    HumanMessage("I am mia_li_3668, change reservation"),
    call("1", user_id="mia_li_3668"),
    out("1", '{"reservations": ["ZFA04Y", "K1NW8N"], "payment": "credit_card_4421486"}'),
    call("2", reservation_id="ZFA04Y"),
    out("2", '{"flight": "HAT136", "date": "2024-05-20", "price": 1245}'),
    call("3", flight_number="HAT136", date="2024-05-20", payment_id="credit_card_4421486"),
    out("3", '{"ok": true, "new": "K1NW8N"}'),
    call("4", reservation_id="K1NW8N", refund="credit_card_1111"),
]


def test_values_come_from_tool_outputs_not_prompts() -> None:
    deps = {d.value: d for d in future_dependencies(SESSION, 5)}
    # the user id came from the user, the refund card from the system prompt, and K1NW8N is
    # shown again by output 7 before call 8 uses it: none are dependencies
    assert set(deps) == {"HAT136", "2024-05-20", "credit_card_4421486"}
    assert deps["credit_card_4421486"].source == 3
    assert deps["HAT136"].source == 5
    assert deps["HAT136"].consumer == 6


def test_a_value_shown_again_after_the_cut_is_not_a_dependency() -> None:
    # K1NW8N is in output 3 again before call 4 uses it
    deps = {d.value for d in future_dependencies(SESSION, 3)}
    assert "K1NW8N" not in deps
    assert deps == {"credit_card_4421486", "ZFA04Y"}


def test_values_first_seen_after_the_cut_are_not_dependencies() -> None:
    assert {d.value for d in future_dependencies(SESSION, 3)}.isdisjoint({"HAT136"})


def test_visibility_strict_and_with_recovery() -> None:
    deps = future_dependencies(SESSION, 5)
    full = judge_view(deps, SESSION[:6])
    assert full.strict and full.with_recovery and full.recovery_calls == 0
    view = [*SESSION[:3], out("1", "[folded: see sidecar A]"), SESSION[4], out("2", "[pruned]")]
    v = judge_view(deps, view, {"A": SESSION[3].content, "B": SESSION[5].content})
    assert not v.strict
    assert set(v.missing) == {"HAT136", "2024-05-20", "credit_card_4421486"}
    assert v.with_recovery
    assert v.recovery_calls == 2
    lost = judge_view(deps, view, {"A": SESSION[3].content})
    assert not lost.with_recovery
    assert lost.recoverable == ("credit_card_4421486",)
    assert lost.recovery_calls == 1


def test_greedy_cover_uses_one_sidecar_when_it_holds_everything() -> None:
    deps = [Dependency("a/b.py", 1, 4), Dependency("x/y.py", 2, 5)]
    v = judge_view(deps, [], {"one": "a/b.py", "both": "a/b.py x/y.py"})
    assert v.recovery_calls == 1


def test_shell_values() -> None:
    text = "./astropy/wcs/wcs.py:1220: def _array_converter(self, func, sax, *args):\nrc=0"
    assert {"./astropy/wcs/wcs.py", "_array_converter"} - extract_values(text) == {
        "_array_converter"
    }
    session = [
        HumanMessage("fix wcs"),
        call("1", command="grep -rn array_converter ."),
        out("1", text),
        call("2", command="sed -n '1200,1300p' astropy/wcs/wcs.py"),
    ]
    assert [d.value for d in future_dependencies(session, 2)] == ["astropy/wcs/wcs.py"]


def test_masked_view_keeps_only_head_and_tail() -> None:
    body = "A" * 50 + " secret/path.py " + "B" * 50
    deps = [Dependency("secret/path.py", 1, 2)]
    masked = out("1", body[:20] + " ... [masked] ... " + body[-20:])
    assert not judge_view(deps, [masked]).strict


def test_judge_imports_nothing_from_lifecycle_or_planners() -> None:
    tree = ast.parse(Path(judge_module.__file__).read_text())
    names = [
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in (n.names if isinstance(n, ast.Import) else [n])  # type: ignore[attr-defined]
    ]
    assert not [m for m in names if m and m.startswith("langchain_pacms")]


@given(st.text(alphabet="abc/._-0123456789 \n", max_size=80))
def test_every_extracted_value_occurs_verbatim(text: str) -> None:
    assert all(v in text and len(v) >= 4 for v in extract_values(text))
