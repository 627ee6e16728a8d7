"""Numbers, flags and strategies are checked alike: numpy scalars accepted, bools are not
numbers, and every rejection names the bad value (and the candidate that holds it)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from langchain_pacms import Candidate, ContextSelector
from langchain_pacms.core import Pick, Problem
from langchain_pacms.embeddings import HashedTfidfEmbeddings

POOL = ["red apples in the shop", "green pears on the tree", "red cars on the road"]


def select(cands: list[Any], **kwargs: Any) -> Any:
    return ContextSelector(strategy="topk").select(cands, "red", **kwargs)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("position", float("nan"), r"candidate 'x' has invalid position nan"),
        ("position", 2.0, r"candidate 'x' has invalid position 2\.0"),
        ("position", True, r"candidate 'x' has invalid position True"),
        ("mandatory", "no", r"candidate 'x' has mandatory='no'; expected a bool"),
        ("mandatory", 1, r"candidate 'x' has mandatory=1; expected a bool"),
        ("tokens", True, r"candidate 'x' has invalid tokens True"),
        ("tokens", np.int64(-1), r"candidate 'x' has invalid tokens np\.int64\(-1\)"),
    ],
)
def test_a_bad_candidate_field_is_named_with_the_candidate(field: str, value: Any, message: str):
    bad = Candidate("red", id="x", **{field: value})
    with pytest.raises(ValueError, match=message):
        select(["blue", bad], budget=5)


def test_a_candidate_without_an_id_is_named_by_its_index():
    with pytest.raises(ValueError, match="candidate '1' has invalid position nan"):
        select(["blue", Candidate("red", position=float("nan"))], budget=5)


def test_numpy_scalars_are_accepted_as_the_python_values():
    cands = [
        Candidate("red apples", id="a", tokens=np.int64(2), position=np.int32(5)),
        Candidate("green pears", id="b", mandatory=np.True_, position=np.int64(1)),
    ]
    sel = select(cands, budget=np.int64(9))
    plain = select(
        [
            Candidate("red apples", id="a", tokens=2, position=5),
            Candidate("green pears", id="b", mandatory=True, position=1),
        ],
        budget=9,
    )
    assert sel.kept_ids == plain.kept_ids == ("a", "b") and sel.tokens == plain.tokens
    for c in sel.candidates:
        assert type(c.position) is int and type(c.mandatory) is bool
    assert type(sel.candidates[0].tokens) is int
    assert (
        select(POOL, budget=("ratio", np.float32(0.5))).budget
        == select(POOL, budget=("ratio", 0.5)).budget
    )


@pytest.mark.parametrize("ratio", [True, np.True_, "0.5", float("nan"), 0, 1.5])
def test_a_budget_ratio_must_be_a_number_in_range(ratio: Any):
    with pytest.raises(ValueError, match=r"Budget\(ratio=...\) must be a number in"):
        select(POOL, budget=("ratio", ratio))


def test_numeric_settings_take_numpy_integers_and_refuse_bools():
    selector = ContextSelector(memory_ceiling_bytes=np.int64(2**20), blas_threads=np.int32(1))
    assert type(selector.memory_ceiling_bytes) is int and selector.memory_ceiling_bytes == 2**20
    assert type(selector.blas_threads) is int and selector.blas_threads == 1
    with pytest.raises(ValueError, match="blas_threads"):
        ContextSelector(blas_threads=True)


def test_an_unknown_strategy_fails_at_construction_listing_the_registered_ones():
    with pytest.raises(ValueError, match=r"unknown strategy 'topkk'.*lastk.*topk"):
        ContextSelector(strategy="topkk")
    with pytest.raises(ValueError, match="strategy must be a strategy name or a callable"):
        ContextSelector(strategy=3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("strategy", "options", "message"),
    [
        (
            "pacms",
            {"relevence_weight": 0.3},
            r"unknown option 'relevence_weight'.*relevance_weight",
        ),
        ("topk", {"k": 3}, r"strategy 'topk' rejected strategy_options \{'k': 3\}.*nothing"),
        ("rag", {"lambda_mult": 0.5}, r"unknown option 'lambda_mult'; it accepts: k"),
        ("mmr", {"lambda_mult": 3}, r"lambda_mult must be in \[0, 1\], got 3"),
    ],
)
def test_strategy_options_fail_at_construction(strategy: str, options: dict, message: str):
    with pytest.raises(ValueError, match=message):
        ContextSelector(strategy=strategy, strategy_options=options)


def test_a_strategy_callable_is_checked_with_its_options():
    def first(problem: Problem, *, count: int = 1) -> Pick:
        return Pick(np.arange(count, dtype=np.int64), np.zeros(problem.n))

    assert ContextSelector(strategy=first, strategy_options={"count": 1}).strategy is first
    with pytest.raises(
        ValueError, match=r"strategy 'first'.*unknown option 'k'; it accepts: count"
    ):
        ContextSelector(strategy=first, strategy_options={"k": 1})


def test_a_remote_selector_leaves_the_strategy_to_its_service():
    pytest.importorskip("httpx")
    from langchain_pacms.remote import RemoteSelector

    assert RemoteSelector(strategy="served_elsewhere").strategy == "served_elsewhere"


@settings(max_examples=80, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 30), st.integers(-5, 50), st.booleans(), st.booleans()),
        min_size=1,
        max_size=8,
    ),
    budget=st.integers(1, 80),
)
def test_numpy_and_python_values_select_alike(
    rows: list[tuple[int, int, bool, bool]], budget: int
) -> None:
    def pool(as_numpy: bool) -> list[Candidate]:
        wrap_int = np.int64 if as_numpy else int
        wrap_bool = np.bool_ if as_numpy else bool
        return [
            Candidate(
                f"item {i} red" if i % 2 else f"item {i} blue",
                id=f"c{i}",
                tokens=wrap_int(tokens),
                position=wrap_int(position),
                mandatory=wrap_bool(mandatory and flag),
            )
            for i, (tokens, position, mandatory, flag) in enumerate(rows)
        ]

    numpy_sel = select(pool(True), budget=np.int64(budget))
    python_sel = select(pool(False), budget=budget)
    assert numpy_sel.kept_ids == python_sel.kept_ids
    assert numpy_sel.to_dict() == {
        **python_sel.to_dict(),
        "timings": numpy_sel.to_dict()["timings"],
    }


class _Duck:
    """Not an ``Embeddings`` subclass, but with both methods: still accepted."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, float(len(t))] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, float(len(text))]


@pytest.mark.parametrize(
    ("embeddings", "message"),
    [
        (HashedTfidfEmbeddings, "got the class HashedTfidfEmbeddings"),
        ("nomic-embed-text", "got str"),
        (len, "got builtin_function_or_method"),
        (3, "got int"),
    ],
)
def test_a_selector_refuses_what_cannot_embed(embeddings: Any, message: str):
    # before the fix: a class or a function was accepted and every selection fell back; a str
    # raised "vars() argument must have __dict__ attribute"
    with pytest.raises(ValueError, match=message):
        ContextSelector(embeddings)


def test_a_selector_takes_a_duck_typed_model():
    assert not ContextSelector(_Duck()).select(["a", "bb"], "a", 5).fell_back
