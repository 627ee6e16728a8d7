"""The lifecycle's own locator rules: what a fold stub and a mask keep in view."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage
from pacms_fakes import fold, tool_round

import langchain_pacms.messages.locators as locators_module
from langchain_pacms.lifecycle import Action, apply_actions, index_messages
from langchain_pacms.messages.locators import (
    find_locators,
    locator_budget,
    locator_lines,
    stub_locators,
)

RESERVATION = json.dumps(
    {
        "reservation_id": "ZFA04Y",
        "user_id": "mia_li_3668",
        "cabin": "economy",
        "flights": [{"flight_number": "HAT136", "date": "2024-05-20", "price": 1245}],
        "payment_id": "credit_card_4421486",
        "seats": 12,
    }
)


def test_ranks_put_paths_and_ids_before_quoted_values_and_numbers() -> None:
    found = find_locators('ran 1920 tests in 3.5 s; see "Gold plan" at src/app.py, id HAT039')
    assert found == ["src/app.py", "HAT039", "Gold plan", "1920", "3.5"]


def test_json_values_are_locators_and_json_keys_are_not() -> None:
    found = find_locators(RESERVATION, limit=100)
    assert {
        "ZFA04Y",
        "mia_li_3668",
        "economy",
        "HAT136",
        "2024-05-20",
        "1245",
        "credit_card_4421486",
    } <= set(found)
    assert not {"reservation_id", "cabin", "flights", "price", "12"} & set(found)


def test_closing_tags_and_short_counts_are_not_locators() -> None:
    found = find_locators("<returncode>0</returncode><output>12 files in /srv/app</output>")
    assert found == ["/srv/app"]


def test_a_locator_inside_one_already_taken_is_not_repeated() -> None:
    assert find_locators("pkg/v3.5.1/setup.py then 3.5") == ["pkg/v3.5.1/setup.py"]


def test_limit_and_character_budget_are_kept() -> None:
    text = " ".join(f"file_{n}.py" for n in range(100))
    assert len(find_locators(text, limit=5)) == 5
    within = find_locators(text, limit=1000, budget=60)
    assert sum(len(t) + 2 for t in within) <= 60 and within == [f"file_{n}.py" for n in range(5)]


def test_the_stub_budget_grows_with_the_payload_between_bounds() -> None:
    sizes = [0, 500, 1_250, 5_000, 10_000, 100_000]
    budgets = [locator_budget(n) for n in sizes]
    assert budgets == sorted(budgets) and budgets[0] == 500 and budgets[-1] == 4_000
    assert list(stub_locators("digest", RESERVATION).locators) == find_locators(
        RESERVATION, limit=10**6, budget=locator_budget(len(RESERVATION))
    )


def test_locator_lines_keep_new_handles_once_within_budget() -> None:
    log = "\n".join(
        ["ok"] * 5
        + ["FAIL tests/test_a.py::t1", "ok", "FAIL tests/test_a.py::t1", "ERROR E016 in pkg/b.py"]
    )
    assert locator_lines(log, 200) == ["FAIL tests/test_a.py::t1", "ERROR E016 in pkg/b.py"]
    assert locator_lines(log, 30) == ["FAIL tests/test_a.py::t1"]


@given(
    st.text(alphabet=st.sampled_from(list("ab1_/.-\"' :{}\n")), max_size=300),
    st.integers(min_value=0, max_value=200),
)
def test_every_locator_occurs_verbatim_is_unique_and_fits(text: str, budget: int) -> None:
    found = find_locators(text, limit=50, budget=budget)
    assert len(found) == len(set(found)) <= 50
    assert all(t in text for t in found)
    assert sum(len(t) + 2 for t in found) <= budget


def _tool_history(payload: str) -> list:
    return [
        HumanMessage("help", id="h"),
        *tool_round("get_reservation", {"id": "ZFA04Y"}, payload),
        HumanMessage("ok", id="h2"),
    ]


def test_a_fold_stub_carries_the_payloads_values() -> None:
    msgs = _tool_history(RESERVATION)
    folded = fold(msgs)
    stub = folded.messages[2].content
    assert all(v in stub for v in ("HAT136", "credit_card_4421486", "2024-05-20", "economy"))
    assert "get_reservation(" not in stub  # the call is just before it, not repeated
    assert folded.sidecars[0].payload == RESERVATION


def test_a_mask_keeps_the_elided_lines_that_hold_locators() -> None:
    log = "\n".join(
        [f"step {n} ok" for n in range(300)]
        + ["Traceback in src/core/io.py"]
        + [f"step {n} ok" for n in range(300)]
    )
    msgs = _tool_history(log)
    masked = apply_actions(msgs, index_messages(msgs), [Action("mask", "function:tool:1")])
    text = masked.messages[2].content
    assert "Traceback in src/core/io.py" in text and "kept 1 line with locators" in text
    assert len(text) < len(log) / 4


def test_the_locator_rules_import_nothing_from_the_judge() -> None:
    tree = ast.parse(Path(locators_module.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any((m or "").startswith("pacms_bench") for m in imported)


def test_the_locator_memo_holds_a_bounded_number_of_characters(monkeypatch):
    from langchain_pacms.messages import locators

    assert locators._MEMO.max_bytes == locators._MEMO_CHARS  # the shipped memo is capped too
    memo = locators.LruMemo(8192, max_bytes=200_000, weigh=locators._memo_chars)
    monkeypatch.setattr(locators, "_MEMO", memo)
    for i in range(30):  # long human messages, as a pasted log: each about 50,000 characters
        locators.durable_locators([f"see src/app_{i}.py " + "word " * 10_000])
    assert 0 < memo.nbytes <= 200_000 and len(memo) < 30
    assert locators.durable_locators(["see src/app_29.py"]) >= {"src/app_29.py"}
