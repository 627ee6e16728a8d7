"""Hypothesis properties of every strategy, through `core.solve` and through `ContextSelector`."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import Embeddings

from langchain_pacms import Candidate, ContextSelector
from langchain_pacms.core import Problem, solve
from langchain_pacms.selector import EmbeddingError

STRATEGIES = ["pacms", "pacms_paper", "topk", "lastk", "mmr", "rag"]
OPTIONS: dict[str, list[dict[str, Any]]] = {
    "pacms": [
        {},
        {"relevance_weight": 0.4},
        {"relevance_weight": 1.0},
        {"cost_exponent": 0.0},
        {"similarity_threshold": 0.0, "density": False},
        {"guarantee": 0.0},
        {"cost_exponent": 1.0, "guarantee": 1.0},
        {"fill": False},
    ],
    "pacms_paper": [{}],
    "topk": [{}],
    "lastk": [{}, {"contiguous": False}],
    "mmr": [{}, {"lambda_mult": 0.0}, {"lambda_mult": 0.8}],
    "rag": [{}, {"k": 1}, {"k": 50}],
}
PROPS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass
class Instance:
    vectors: np.ndarray
    query: np.ndarray
    tokens: np.ndarray
    budget: int
    mandatory: np.ndarray
    positions: np.ndarray
    strategy: str
    options: dict[str, Any]


@st.composite
def instances(draw: st.DrawFn, *, allow_bad_vectors: bool = True) -> Instance:
    n = draw(st.integers(0, 24))
    d = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, d))
    if n and draw(st.booleans()):
        vectors = np.round(vectors)  # ties, duplicates, zero rows
    if n and draw(st.booleans()):
        vectors[rng.integers(0, n, max(1, n // 4))] = vectors[rng.integers(0, n, max(1, n // 4))]
    specials = [0.0, np.nan, np.inf, -np.inf] if allow_bad_vectors else [0.0]
    for _ in range(draw(st.integers(0, 3)) if n else 0):
        row = int(rng.integers(0, n))
        value = draw(st.sampled_from(specials))
        vectors[row] = 0.0 if value == 0.0 else vectors[row]
        if value != 0.0:
            vectors[row, int(rng.integers(0, d))] = value
    query = draw(
        st.sampled_from(["random", "zero", "nan"] if allow_bad_vectors else ["random", "zero"])
    )
    q = rng.standard_normal(d)
    if query == "zero":
        q[:] = 0.0
    elif query == "nan":
        q[0] = np.nan
    tokens = rng.integers(0, draw(st.sampled_from([2, 30, 400])), n)
    mandatory = rng.random(n) < draw(st.sampled_from([0.0, 0.1, 0.4]))
    ratio = draw(st.sampled_from([0.001, 0.1, 0.3, 0.6, 1.0, 2.0]))
    budget = max(1, int(ratio * int(tokens.sum())))
    positions = rng.permutation(n) if draw(st.booleans()) else np.arange(n)
    strategy = draw(st.sampled_from(STRATEGIES))
    options = draw(st.sampled_from(OPTIONS[strategy]))
    return Instance(vectors, q, tokens, budget, mandatory, positions, strategy, options)


def build(inst: Instance) -> Problem:
    return Problem.build(
        inst.vectors,
        inst.query,
        tokens=inst.tokens,
        budget=inst.budget,
        mandatory=inst.mandatory,
        positions=inst.positions,
    )


def check_pick_invariants(inst: Instance, order: list[int], over_budget: bool) -> None:
    mandatory = set(np.flatnonzero(inst.mandatory).tolist())
    mandatory_tokens = int(inst.tokens[list(mandatory)].sum()) if mandatory else 0
    assert len(order) == len(set(order))
    assert mandatory <= set(order)
    if mandatory_tokens > inst.budget:
        assert over_budget
        assert set(order) == mandatory
    else:
        assert not over_budget
        assert int(inst.tokens[order].sum()) <= inst.budget


# --------------------------------------------------------------------------------------------
# core.solve
# --------------------------------------------------------------------------------------------


@PROPS
@given(instances())
def test_solve_invariants(inst: Instance):
    before = copy.deepcopy(inst)
    p = build(inst)
    frozen = {k: getattr(p, k).copy() for k in ("vectors", "query", "tokens", "mandatory")}
    pick = solve(p, inst.strategy, **inst.options)
    order = pick.order.tolist()
    check_pick_invariants(inst, order, pick.over_budget)
    # Mandatory items come first in the pick order.
    k = int(inst.mandatory.sum())
    assert set(order[:k]) == set(np.flatnonzero(inst.mandatory).tolist())
    # No NaN in relevance; every non-mandatory kept item has a finite score.
    assert np.isfinite(p.relevance).all()
    assert (p.relevance >= 0).all() and (p.relevance <= 1.0 + 1e-6).all()
    assert pick.scores.shape == (p.n,)
    for j in order[k:]:
        assert np.isfinite(pick.scores[j])
    # Determinism: the same problem again, and a freshly built one.
    again = solve(p, inst.strategy, **inst.options)
    rebuilt = solve(build(inst), inst.strategy, **inst.options)
    for other in (again, rebuilt):
        assert other.order.tolist() == order
        np.testing.assert_array_equal(other.scores, pick.scores)
    # Inputs (and the problem's own arrays) are never mutated.
    for name in ("vectors", "query", "tokens", "mandatory", "positions"):
        np.testing.assert_array_equal(getattr(inst, name), getattr(before, name))
    for name, value in frozen.items():
        np.testing.assert_array_equal(getattr(p, name), value)


@PROPS
@given(instances(), st.lists(st.sampled_from([0.001, 0.1, 0.3, 0.6, 1.0, 2.0]), max_size=4))
def test_budget_sweep_through_with_budget_equals_fresh_problems(
    inst: Instance, ratios: list[float]
):
    # Problems linked by with_budget share budget-independent work (the coverage kernel); the
    # picks must be exactly those of problems built from scratch at each budget.
    linked = build(inst)
    total = int(inst.tokens.sum())
    for ratio in ratios:
        budget = max(1, int(ratio * total))
        linked = linked.with_budget(budget)
        fresh = build(Instance(**{**vars(inst), "budget": budget}))
        # A second coverage setting on the same linked problems must not reuse the first's.
        for name, options in ((inst.strategy, inst.options), ("pacms_paper", {})):
            shared = solve(linked, name, **options)
            alone = solve(fresh, name, **options)
            assert shared.order.tolist() == alone.order.tolist()
            assert shared.over_budget == alone.over_budget
            np.testing.assert_array_equal(shared.scores, alone.scores)


@PROPS
@given(instances(allow_bad_vectors=False), st.sampled_from(STRATEGIES))
def test_lastk_window_and_topk_are_maximal(inst: Instance, name: str):
    # Whatever is left out does not fit: for topk any dropped item is larger than what is left,
    # and lastk keeps a contiguous window of the newest non-mandatory items.
    p = build(inst)
    pick = solve(p, name)
    if pick.over_budget:
        return
    left = p.budget - int(p.tokens[pick.order].sum())
    dropped = [j for j in range(p.n) if j not in set(pick.order.tolist())]
    if name == "topk":
        assert all(int(p.tokens[j]) > left for j in dropped)
    if name == "lastk":
        newest_first = [j for j in p.recency_order().tolist() if not p.mandatory[j]]
        kept_free = [j for j in pick.order.tolist() if not p.mandatory[j]]
        assert newest_first[: len(kept_free)] == kept_free
        # The fallback's walk skips what does not fit: what it drops is too big for what is left.
        skipping = solve(p, "lastk", contiguous=False)
        left = p.budget - int(p.tokens[skipping.order].sum())
        kept_now = set(skipping.order.tolist())
        assert all(int(p.tokens[j]) > left for j in range(p.n) if j not in kept_now)
        assert set(pick.order.tolist()) <= kept_now


# --------------------------------------------------------------------------------------------
# ContextSelector
# --------------------------------------------------------------------------------------------


class TableEmbeddings(Embeddings):
    """Returns the vector registered for each text (zeros for unknown texts)."""

    def __init__(self, table: dict[str, np.ndarray], dim: int) -> None:
        self.table = table
        self.dim = dim
        self.cache_identity = f"table-{id(self)}"

    def _one(self, text: str) -> list[float]:
        return list(map(float, self.table.get(text, np.zeros(self.dim))))

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


def selector_inputs(inst: Instance) -> tuple[list[Candidate], TableEmbeddings]:
    n, d = inst.vectors.shape
    table = {f"text {i}": inst.vectors[i] for i in range(n)}
    table["the query"] = inst.query
    candidates = [
        Candidate(
            text=f"text {i}",
            id=f"c{i}",
            kind="memory" if i % 3 else "turn",
            position=int(inst.positions[i]),
            mandatory=bool(inst.mandatory[i]),
            tokens=int(inst.tokens[i]),
        )
        for i in range(n)
    ]
    return candidates, TableEmbeddings(table, d)


def unscorable(inst: Instance) -> bool:
    """Vectors the selector refuses: NaN or inf anywhere, a zero query, all-zero documents."""
    vectors, query = inst.vectors.astype(np.float32), inst.query.astype(np.float32)
    return len(vectors) > 0 and bool(
        not np.isfinite(vectors).all()
        or not np.isfinite(query).all()
        or not query.any()
        or not vectors.any()
    )


@PROPS
@given(instances())
def test_selector_invariants(inst: Instance):
    candidates, embeddings = selector_inputs(inst)
    snapshot = copy.deepcopy(candidates)
    selector = ContextSelector(embeddings, strict=True)
    if unscorable(inst):
        # NaN, inf or all-zero vectors are an embedding failure: raise under strict, else recency.
        with pytest.raises(EmbeddingError):
            selector.select(
                candidates,
                "the query",
                budget=inst.budget,
                strategy=inst.strategy,
                **inst.options,
            )
        sel = ContextSelector(embeddings).select(
            candidates,
            "the query",
            budget=inst.budget,
            strategy=inst.strategy,
            **inst.options,
        )
        assert sel.fell_back and sel.strategy == "lastk" and "EmbeddingError" in str(sel.error)
        assert sel.over_budget or sel.tokens_kept <= inst.budget
        assert all(c.id in sel.kept_ids for c in candidates if c.mandatory)
        assert candidates == snapshot
        return
    sel = selector.select(
        candidates, "the query", budget=inst.budget, strategy=inst.strategy, **inst.options
    )
    ids = [c.id for c in candidates]
    index = {cid: i for i, cid in enumerate(ids)}
    order = [index[cid] for cid in sel.pick_order]
    check_pick_invariants(inst, order, sel.over_budget)
    # kept_ids are in original order and match the pick.
    assert list(sel.kept_ids) == [cid for cid in ids if cid in set(sel.kept_ids)]
    assert set(sel.kept_ids) == set(sel.pick_order)
    assert sel.tokens_kept == sum(sel.tokens[c] for c in sel.kept_ids)
    assert sel.tokens_kept + sel.tokens_dropped == sel.tokens_total == int(inst.tokens.sum())
    assert not sel.fell_back and sel.strategy == inst.strategy
    # No NaN anywhere in what the inspector draws.
    assert all(np.isfinite(v) for v in sel.relevance.values())
    assert all(np.isfinite(v) for v in sel.gains.values())
    assert set(sel.relevance) == set(ids)
    # Deterministic: same selector again, and a new selector.
    for other in (
        selector.select(
            candidates,
            "the query",
            budget=inst.budget,
            strategy=inst.strategy,
            **inst.options,
        ),
        ContextSelector(embeddings).select(
            candidates,
            "the query",
            budget=inst.budget,
            strategy=inst.strategy,
            **inst.options,
        ),
    ):
        assert other.kept_ids == sel.kept_ids
        assert other.pick_order == sel.pick_order
        assert dict(other.gains) == dict(sel.gains)
        assert dict(other.relevance) == dict(sel.relevance)
    # The caller's candidates are untouched.
    assert candidates == snapshot
    # The selection agrees with core.solve on the same arrays.
    # (the embeddings cache stores float32, so compare against float32 inputs)
    p = Problem.build(
        inst.vectors.astype(np.float32),
        inst.query.astype(np.float32),
        tokens=inst.tokens,
        budget=inst.budget,
        mandatory=inst.mandatory,
        positions=inst.positions,
    )
    # ...with the options the selector resolves (pacms gets the embedder's kernel threshold).
    name, options = selector.resolve_options(inst.strategy, inst.options)
    direct = solve(p, name, **options)
    assert [ids[j] for j in direct.order.tolist()] == list(sel.pick_order)
