"""An embedder that declares no profile gets one calibrated on each pool's own cosines.

``pacms`` with ``calibrate=True`` reads its thresholds and relevance on the pool's scale, keeps
relevance order when every candidate is near every other, and says which in ``info``; a
declared profile is used as declared.
"""

from __future__ import annotations

import numpy as np
import pytest
from pacms_fakes import TableEmbeddings

from langchain_pacms import ContextSelector
from langchain_pacms.core import Problem, solve
from langchain_pacms.core.calibration import (
    POOL_MEAN_COSINE_LIMIT,
    pool_mean_cosine,
    pool_threshold,
)
from langchain_pacms.embeddings import HashedTfidfEmbeddings
from langchain_pacms.embeddings.profile import CALIBRATED_PROFILE, EmbedderProfile

DIM = 48


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def _topics_with_copies(seed: int, common: float) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """40 topics, each an original plus (for the first 20) three near-copies of it, all
    sharing a ``common`` direction; the query is topic 0's direction.

    Returns the vectors, the query and the topic of each row.
    """
    rng = np.random.default_rng(seed)
    topics = _unit(rng.normal(size=(40, DIM)))
    shared = np.zeros(DIM)
    shared[0] = 1.0
    rows, topic = [], []
    for t in range(40):
        for copy in range(4 if t < 20 else 1):
            noise = 0.02 * rng.normal(size=DIM) if copy else 0.0
            rows.append(topics[t] + noise)
            topic.append(t)
    vectors = _unit(common * shared + (1 - common) * _unit(np.array(rows)))
    query = _unit(common * shared + (1 - common) * (topics[0] + 0.6 * topics[25]))
    return vectors, query, topic


def _problem(vectors: np.ndarray, query: np.ndarray, budget: int) -> Problem:
    return Problem.build(vectors, query, tokens=np.full(len(vectors), 10), budget=budget)


@pytest.mark.parametrize("seed", range(4))
def test_on_an_isotropic_pool_the_thresholds_are_the_dense_ones(seed: int) -> None:
    vectors, query, _ = _topics_with_copies(seed, common=0.0)
    problem = _problem(vectors, query, budget=200)
    mean = pool_mean_cosine(problem)
    assert abs(mean) < 0.1
    pick = solve(problem, "pacms", similarity_threshold=0.85, calibrate=True)
    assert pick.info["coverage"] == "meaningful"
    assert pick.info["similarity_threshold"] == pytest.approx(pool_threshold(0.85, mean))
    assert pick.info["similarity_threshold"] == pytest.approx(0.85, abs=0.015)


@pytest.mark.parametrize("seed", range(4))
def test_a_high_mean_cosine_pool_keeps_what_top_k_keeps_and_skips_copies(seed: int) -> None:
    # a common direction puts every cosine high: at the dense 0.85 every pair is a
    # near-copy, coverage rewards central rows and the topic the query names is lost
    vectors, query, topic = _topics_with_copies(seed, common=0.75)
    problem = _problem(vectors, query, budget=40)
    assert pool_mean_cosine(problem) > 0.6
    cosines = vectors @ vectors.T
    assert float(np.median(cosines)) > 0.85
    top = solve(problem, "topk").order.tolist()
    calibrated = solve(problem, "pacms", similarity_threshold=0.85, calibrate=True)
    kept = calibrated.order.tolist()
    assert 0 in {topic[j] for j in kept} and 25 in {topic[j] for j in kept}
    assert {topic[j] for j in top} <= {topic[j] for j in kept}
    # one row per topic: the copies of topic 0 are passed over while other topics fit
    assert len({topic[j] for j in kept}) == len(kept)
    assert calibrated.info["similarity_threshold"] > 0.9


def test_a_pool_where_every_candidate_is_near_every_other_keeps_relevance_order() -> None:
    rng = np.random.default_rng(3)
    vectors = _unit(np.array([1.0] + [0.0] * (DIM - 1)) + 0.02 * rng.normal(size=(60, DIM)))
    problem = Problem.build(vectors, vectors[7], tokens=rng.integers(5, 30, size=60), budget=300)
    assert pool_mean_cosine(problem) >= POOL_MEAN_COSINE_LIMIT
    pick = solve(problem, "pacms", similarity_threshold=0.85, calibrate=True)
    assert pick.info["coverage"] == "meaningless"
    assert pick.order.tolist() == solve(problem, "topk").order.tolist()
    uncalibrated = solve(problem, "pacms", similarity_threshold=0.85)
    assert "coverage" not in uncalibrated.info


def test_the_selector_shows_and_uses_the_calibrated_profile() -> None:
    vectors, query, topic = _topics_with_copies(0, common=0.75)
    table = {f"row {i}": v.tolist() for i, v in enumerate(vectors)} | {"q": query.tolist()}
    selector = ContextSelector(TableEmbeddings(table), token_counter=lambda text: 10)
    assert selector.profile == CALIBRATED_PROFILE
    assert selector.profile.calibration == "pool"
    assert selector.resolve_options("pacms")[1]["calibrate"] is True
    chosen = selector.select(list(table)[:-1], "q", budget=40)
    assert chosen.info["coverage"] == "meaningful" and chosen.info["pool_mean_cosine"] > 0.6
    assert chosen.tokens_kept == 40
    assert {topic[int(i)] for i in chosen.kept_ids} >= {0, 25}
    # a profile given to the selector wins, and is not calibrated
    declared = ContextSelector(
        TableEmbeddings(table), token_counter=lambda text: 10, profile=EmbedderProfile()
    )
    assert "calibrate" not in declared.resolve_options("pacms")[1]
    assert "coverage" not in declared.select(list(table)[:-1], "q", budget=40).info


def test_a_declared_profile_is_not_calibrated() -> None:
    selector = ContextSelector()
    assert selector.profile == HashedTfidfEmbeddings.pacms_profile
    assert selector.profile.calibration is None
    assert "calibrate" not in selector.resolve_options("pacms")[1]
    chosen = selector.select(
        ["red apples", "green pears", "red apples again"], "red", budget=("ratio", 0.5)
    )
    assert "pool_mean_cosine" not in chosen.info


def test_a_bad_calibration_is_rejected() -> None:
    with pytest.raises(ValueError, match="calibration"):
        EmbedderProfile(calibration="sometimes")
