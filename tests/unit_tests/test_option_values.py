"""Strategy option values and candidate numbers outside what the core can hold are refused."""

from __future__ import annotations

from typing import Any

import pytest

from langchain_pacms import Candidate, ContextSelector

POOL = ["alpha beta gamma", "port 6543 staging", "staging port", "lunch menu today"]


@pytest.mark.parametrize(
    ("strategy", "options", "needle"),
    [
        ("pacms", {"cost_exponent": 1e308}, "cost_exponent must be in"),
        ("pacms", {"cost_exponent": float("nan")}, "cost_exponent must be in"),
        ("pacms", {"cost_exponent": True}, "cost_exponent must be in"),
        ("pacms", {"calibrate": "no"}, "calibrate must be True or False"),
        ("pacms", {"density": "yes"}, "density must be True or False"),
        ("lastk", {"contiguous": "no"}, "contiguous must be True or False"),
    ],
)
def test_a_bad_option_value_is_refused_when_the_selector_is_built(
    strategy: str, options: dict[str, Any], needle: str
):
    with pytest.raises(ValueError, match=needle):
        ContextSelector(strategy=strategy, strategy_options=options)


@pytest.mark.parametrize("exponent", [-4, -1, -1.0, 0, 2, 4])
def test_a_negative_or_integer_cost_exponent_in_range_selects(exponent: float):
    selector = ContextSelector()
    as_float = selector.select(POOL, "staging port", 6, cost_exponent=float(exponent))
    picked = selector.select(POOL, "staging port", 6, cost_exponent=exponent)
    assert (picked.pick_order, picked.gains) == (as_float.pick_order, as_float.gains)


@pytest.mark.parametrize(
    ("field", "value"),
    [("tokens", 2**62), ("tokens", 2**70), ("position", 2**70), ("position", -(2**70))],
)
def test_numbers_past_the_core_s_integers_are_refused(field: str, value: int):
    pool = [Candidate("alpha one", mandatory=True, **{field: value}), "beta two"]
    with pytest.raises(ValueError, match=f"invalid {field}"):
        ContextSelector().select(pool, "alpha", 4)


def test_a_pool_whose_tokens_add_up_past_int64_is_refused():
    pool = [Candidate(f"item {i}", tokens=2**53) for i in range(2**9 + 1)]
    with pytest.raises(ValueError, match="add up to"):
        ContextSelector().select(pool, "item", 4)
    big = ContextSelector().select(
        [Candidate("a", tokens=2**52), Candidate("b", tokens=2**52)], "a", 2**53
    )
    assert big.tokens_total == 2**53 and big.tokens_kept == 2**53
