"""``pacms`` picks against a frozen copy of the picks made before blocked similarity.

``tests/fixtures/frozen_picks.json`` holds, for seeded random pools and for the recall
fixture's pools (``tests/fixtures/lme_mini_pools.json``: the LongMemEval fixture's questions at
redundancy levels 0, 2 and 8, as the evaluation builds them, which
``bench/tests/unit_tests/test_frozen_pools.py`` checks; with the built-in embedder), a digest of
the order in which ``solve(problem, "pacms")`` picked, written by the code before the coverage
kernel could be sparse and the diversity fill blocked, in its two ways:
``matrix``, as the pool came (small pools keep the matrix of all cosines, the fill walks its
rows), and ``vectors``, with no cosine matrix kept (as for pools above
``COSINE_MATRIX_LIMIT``: the fill re-scores from the vectors). The two differ on some pools
with exact copies: BLAS rounds the cosine of two identical vectors differently depending on
where it sits in a product, and that decides which copy a tie goes to.

Each pool is solved as it comes (cosine matrix kept; the kernel read from it, sparse when
mostly zero, which changes gains only in their last bits) and must give the frozen ``matrix``
picks, and under a ceiling so small that the kernel is built sparse in row blocks and no matrix
is kept: those picks must be the frozen ``vectors`` picks.

The picks were frozen with OpenBLAS's ``Haswell`` kernel (AVX2, which every x86-64 machine
this runs on has). Other kernels split a product's sums differently, and on pools with exact
copies that can send a tie elsewhere: with the ``SkylakeX`` kernel two diversity-fill cases at
n = 2,000 keep 1,386 rounds instead of 1,387. So where OpenBLAS runs another kernel, the picks
are computed in one subprocess started with ``OPENBLAS_CORETYPE=Haswell``.

Regenerate (only when a change of picks is intended, and explain it in the commit)::

    OPENBLAS_CORETYPE=Haswell PYTHONPATH=. python tests/unit_tests/test_frozen_picks.py --write
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from langchain_pacms import ContextSelector
from langchain_pacms.core import Problem, solve
from langchain_pacms.embeddings import HashedTfidfEmbeddings

ROOT = Path(__file__).resolve().parents[1] / "fixtures"
FROZEN = ROOT / "frozen_picks.json"
POOLS = ROOT / "lme_mini_pools.json"
FROZEN_KERNEL = "Haswell"
BUDGETS = (0.05, 0.1, 0.45, 0.7)
OPTIONS: dict[str, dict[str, Any]] = {
    "default": {},
    "diverse-fill": {"fill": "diverse"},
    "tau0.3": {"similarity_threshold": 0.3, "gain_floor": 0.3, "fill": "diverse"},
    "relevance-fill": {"fill": "relevance"},
}
"""Option sets. ``diverse-fill`` and ``tau0.3`` keep the picks frozen when the default fill was
the diversity fill (those entries were the ``default`` ones then); ``default`` (the distinct
fill since it became the default) was frozen when it did."""


def clustered(n: int, d: int, seed: int) -> Problem:
    """Groups of look-alikes around random centres, a query near one, costs 20-600."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((max(4, n // 40), d))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    spread = rng.uniform(0.6, 1.2, n)[:, None] / np.sqrt(d)
    vectors = centers[rng.integers(0, centers.shape[0], n)] + spread * rng.standard_normal((n, d))
    vectors[rng.random(n) < 0.05] = vectors[0]  # a few exact copies (ties)
    query = centers[0] + rng.standard_normal(d) / np.sqrt(d)
    tokens = np.clip(rng.lognormal(np.log(120), 0.8, n), 20, 600).astype(np.int64)
    return Problem.build(vectors, query, tokens=tokens, budget=int(tokens.sum()))


def random_pools() -> Iterator[tuple[str, Problem]]:
    for n, d, seed in [(150, 16, 1), (600, 48, 2), (2000, 48, 3), (6000, 32, 4)]:
        p = clustered(n, d, seed)
        total = int(p.tokens.sum())
        for share in BUDGETS if n < 6000 else (0.05, 0.45):
            yield (
                f"clustered n={n} d={d} seed={seed} budget={share}",
                p.with_budget(max(1, int(share * total))),
            )


def fixture_pools() -> Iterator[tuple[str, Problem]]:
    from langchain_pacms.selector import Candidate

    # Relevance from the dense vectors, as when the picks were frozen.
    selector = ContextSelector(HashedTfidfEmbeddings(relevance_buckets=None))
    questions = json.loads(POOLS.read_text(encoding="utf-8"))
    for question_id, question in questions.items():
        for level, pool in question["levels"].items():
            cands = [Candidate(t, id=str(i), position=pos) for i, (t, pos) in enumerate(pool)]
            total = sum(selector.count_tokens(cands))
            for share in BUDGETS:
                name = f"lme_mini {question_id} R={level} budget={share}"
                budget = max(1, int(share * total))
                yield name, selector.prepare(cands, question["question"], budget=budget)


def digest(order: np.ndarray) -> str:
    return hashlib.sha256(np.asarray(order, dtype=np.int64).tobytes()).hexdigest()[:16]


def picks(problem: Problem, options: dict[str, Any]) -> dict[str, Any]:
    order = solve(problem, "pacms", **options).order
    return {"n_kept": int(order.size), "first": order[:12].tolist(), "sha": digest(order)}


def cases() -> Iterator[tuple[str, Problem, dict[str, Any]]]:
    for name, problem in [*random_pools(), *fixture_pools()]:
        for label, options in OPTIONS.items():
            if label not in ("default", "diverse-fill") and problem.n > 2000:
                continue
            yield f"{name} {label}", problem, options


def fresh(problem: Problem, **changes: Any) -> Problem:
    """The problem's arrays without its shared results (and with ``changes``)."""
    return dataclasses.replace(problem, **changes)


_FROZEN: dict[str, Any] = json.loads(FROZEN.read_text()) if FROZEN.exists() else {}
_CASES = list(cases()) if _FROZEN else []


def current_picks(case: int, sparse: bool) -> dict[str, Any]:
    """The picks of one case now: as built, or (``sparse``) under a 16-byte ceiling."""
    _, problem, options = _CASES[case]
    if sparse:
        # 16 bytes: the kernel is kept sparse and built one row at a time, and no
        # cosine matrix is kept, so the fill walks from the vectors.
        problem = fresh(problem, similarity_ceiling=16)
        assert not problem.precompute_cosines()
    return picks(fresh(problem), options)


def openblas_kernel() -> str | None:
    """The kernel OpenBLAS runs here (``None``: numpy uses another BLAS)."""
    return next(
        (
            info.get("architecture")
            for info in threadpool_info()
            if info.get("internal_api") == "openblas"
        ),
        None,
    )


def under_frozen_kernel(*args: str) -> str:
    """What this script prints with ``args`` in a subprocess on the frozen kernel."""
    env = {**os.environ, "OPENBLAS_CORETYPE": FROZEN_KERNEL}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT.parents[1]), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, __file__, *args],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    ).stdout


@pytest.fixture(scope="module")
def picks_under_frozen_kernel() -> dict[str, Any] | None:
    """Every case's picks from a subprocess on the frozen kernel, or ``None`` when this
    process runs it already (the picks are then computed here, case by case)."""
    if openblas_kernel() in (FROZEN_KERNEL, None):
        return None
    return json.loads(under_frozen_kernel("--print"))


@pytest.mark.skipif(not _FROZEN, reason="tests/fixtures/frozen_picks.json is missing")
@pytest.mark.parametrize("sparse", [False, True], ids=["as-built", "small-ceiling"])
@pytest.mark.parametrize("case", range(len(_CASES)))
def test_pacms_picks_are_the_frozen_ones(
    case: int, sparse: bool, picks_under_frozen_kernel: dict[str, Any] | None
) -> None:
    name = _CASES[case][0]
    way = "vectors" if sparse else "matrix"
    if picks_under_frozen_kernel is None:
        got = current_picks(case, sparse)
    else:
        got = picks_under_frozen_kernel[name][way]
    assert got == _FROZEN[name][way], name


def test_the_subprocess_runs_the_frozen_kernel() -> None:
    assert under_frozen_kernel("--kernel").split()[-1] in (FROZEN_KERNEL, "None")


def test_every_frozen_case_is_checked() -> None:
    assert sorted(_FROZEN) == sorted(name for name, _, _ in _CASES)


def _freeze() -> dict[str, Any]:
    """Both ways' picks of every case (the ``vectors`` ones with no cosine matrix kept)."""
    from langchain_pacms.core import problem as problem_module

    frozen = {}
    limit = problem_module.COSINE_MATRIX_LIMIT
    for name, p, options in cases():
        frozen[name] = {"matrix": picks(fresh(p), options)}
        problem_module.COSINE_MATRIX_LIMIT = 0
        try:
            frozen[name]["vectors"] = picks(fresh(p), options)
        finally:
            problem_module.COSINE_MATRIX_LIMIT = limit
    return frozen


if __name__ == "__main__" and sys.argv[1:] == ["--kernel"]:
    print(openblas_kernel())
elif __name__ == "__main__" and sys.argv[1:] == ["--print"]:
    print(
        json.dumps(
            {
                _CASES[case][0]: {
                    "matrix": current_picks(case, False),
                    "vectors": current_picks(case, True),
                }
                for case in range(len(_CASES))
            }
        )
    )
elif __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    frozen = _freeze()
    lines = (f"{json.dumps(name)}: {json.dumps(frozen[name])}" for name in sorted(frozen))
    FROZEN.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"wrote {len(frozen)} cases to {FROZEN}")
