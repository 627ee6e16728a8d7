"""``pacms`` over the values candidates hold: the facility-location greedy on values per token."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from langchain_pacms.core import Problem, solve
from langchain_pacms.core.kernel import SparseRows
from langchain_pacms.core.objective import CoverageObjective
from langchain_pacms.core.values import VALUE_PRIOR, value_coverage, value_rows

VALUES = [f"v{k}" for k in range(8)]


def problem(tokens, budget, *, relevance=None, mandatory=None) -> Problem:
    n = len(tokens)
    return Problem.build(
        np.eye(max(n, 1), dtype=np.float32)[:n],
        np.zeros(max(n, 1), dtype=np.float32),
        tokens=tokens,
        budget=budget,
        mandatory=mandatory,
        relevance=relevance if relevance is not None else [0.0] * n,
    )


def test_the_greedy_takes_new_values_before_a_more_relevant_repeat():
    # the relevant candidate repeats what the first holds; the third holds two values of its own
    p = problem([5, 5, 5], 10, relevance=[0.2, 0.9, 0.1])
    values = [{"a.py", "42"}, {"a.py", "42"}, {"b.py", "HAT039"}]
    pick = value_coverage(p, values)
    assert pick.order.tolist() == [1, 2]
    assert pick.info["coverage"] == "values" and pick.info["values"] == 4
    # through the strategy, as the tool loop calls it
    assert solve(p, "pacms", values=values).order.tolist() == [1, 2]


def test_the_budget_left_is_filled_in_relevance_order():
    p = problem([2, 2, 2, 2], 6, relevance=[0.1, 0.8, 0.5, 0.3])
    pick = value_coverage(p, [{"x"}, set(), set(), set()])
    assert pick.order.tolist() == [0, 1, 2]  # the one value, then the most relevant that fit
    assert pick.info["filled"] == 2 and pick.scores[1] == 0.0


def test_a_candidate_holding_a_value_with_more_weight_still_gains():
    rows = value_rows(problem([1, 1], 2, relevance=[0.0, 0.5]), [{"a"}, {"a"}])
    objective = CoverageObjective.of_rows(rows)
    assert objective.value([0]) == pytest.approx(VALUE_PRIOR)
    assert objective.value([0, 1]) == pytest.approx(VALUE_PRIOR + 0.5)


@pytest.mark.parametrize(
    ("values", "prior", "error"),
    [([{"a"}], VALUE_PRIOR, "one collection per candidate"), ([{"a"}, {"b"}], 0.0, "prior")],
)
def test_bad_input_is_named(values, prior, error):
    with pytest.raises(ValueError, match=error):
        value_coverage(problem([1, 1], 2), values, prior=prior)


@st.composite
def instances(draw: st.DrawFn):
    n = draw(st.integers(0, 9))
    tokens = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    relevance = draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n))
    mandatory = draw(st.lists(st.booleans(), min_size=n, max_size=n)) if n else []
    values = [set(draw(st.lists(st.sampled_from(VALUES), max_size=4))) for _ in range(n)]
    budget = draw(st.integers(1, max(1, sum(tokens))))
    return tokens, relevance, [m and draw(st.booleans()) for m in mandatory], values, budget


@settings(max_examples=200, deadline=None)
@given(instances())
def test_budget_mandatory_spent_and_within_the_guarantee(inst):
    tokens, relevance, mandatory, values, budget = inst
    p = problem(tokens, budget, relevance=relevance, mandatory=mandatory)
    pick = value_coverage(p, values)
    order = pick.order.tolist()
    must = [j for j, m in enumerate(mandatory) if m]
    assert order[: len(must)] == must and len(set(order)) == len(order)
    used = sum(tokens[j] for j in order)
    if sum(tokens[j] for j in must) > budget:
        assert pick.over_budget and order == must
        return
    assert used <= budget
    # the budget is spent: nothing left out would still fit
    assert all(tokens[j] > budget - used for j in range(len(tokens)) if j not in order)
    assert value_coverage(p, values).order.tolist() == order  # deterministic
    # the classic guarantee of the budgeted greedy with the best-single check: (1 - 1/e) / 2
    objective = CoverageObjective.of_rows(value_rows(p, values))
    free = [j for j in range(len(tokens)) if j not in must]
    room = budget - sum(tokens[j] for j in must)
    best = max(
        objective.value([*must, *subset])
        for size in range(len(free) + 1)
        for subset in itertools.combinations(free, size)
        if sum(tokens[j] for j in subset) <= room
    )
    assert objective.value(order) >= (1 - 1 / math.e) / 2 * best - 1e-6


def test_rows_of_an_empty_pool_and_of_candidates_without_values():
    assert value_rows(problem([], 1), []).shape == (0, 0)
    assert isinstance(value_rows(problem([3], 1), [set()]), SparseRows)
    assert value_coverage(problem([3, 1], 2), [set(), set()]).order.tolist() == [1]


def test_rows_do_not_depend_on_string_hashing():
    import os
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from langchain_pacms.core import Problem\n"
        "from langchain_pacms.core.values import value_rows\n"
        "p = Problem.build(np.eye(3, dtype=np.float32), np.zeros(3, np.float32),"
        " tokens=[1, 1, 1], budget=3)\n"
        "r = value_rows(p, [frozenset('abcdefgh'), frozenset('xyzab'), frozenset('hq')])\n"
        "print(r.indices.tolist())\n"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(seen) == 1
