"""Evidence-round recall under redundancy and budget: the study's Table 1, as a sweep.

For every question (a ``recall_only`` sample: no abstention questions, at least one evidence
round) and every redundancy level ``R``:

1. **Pool.** The history is padded with ``R`` restatements per filler round by
   :func:`~pacms_bench.redundancy.inject_redundancy` (``style``, ``seed``; the same seed
   for every question). Originals come first in chronological order, the shuffled restatements
   after them (the most recent part of the pool). Restatements are never evidence.
2. **Budgets.** Each budget is a fraction of a *budget base*: ``"pool"`` (the tokens of the
   padded pool, the study's reading: the budget grows with ``R``) or ``"original"`` (the tokens
   of the original history: the budget stays fixed while the pool grows). The budget in tokens
   is ``max(1, floor(base * fraction))``, exactly as ``ContextSelector`` computes it.
3. **Select.** Every strategy runs under every budget, with the plain question text as query.
4. **Score.** Evidence-round recall ``= |kept evidence rounds| / |evidence rounds|``.

Same numbers as the selector:
    The harness reaches the engine only through the selector's public API: token costs from
    :meth:`ContextSelector.count_tokens <langchain_pacms.ContextSelector.count_tokens>`,
    the problem from :meth:`ContextSelector.prepare
    <langchain_pacms.ContextSelector.prepare>` (the step
    :meth:`~langchain_pacms.ContextSelector.select` runs before its strategy:
    embedding, vector checks, the profile's pool reweighting), the options from
    :meth:`~langchain_pacms.ContextSelector.resolve_options`, and the picks from
    :func:`langchain_pacms.core.solve`. So each cell equals what
    ``selector.select(pool_texts, question, budget=..., strategy=...)`` keeps (a unit
    test checks this).

Where the time goes, and what is shared:
    Per question, each distinct text is counted once and embedded once (all levels share the
    original rounds; later levels read their vectors from the selector's embedding cache);
    per ``(question, R)`` the problem is prepared once and every ``(budget, strategy)`` runs
    on it. Each budget's problem comes from
    :meth:`~langchain_pacms.core.Problem.with_budget`, so what a strategy derives from the
    candidates alone (the cosine matrix and coverage kernel of ``pacms``, the ``mmr``
    ranking) is computed once per ``(question, R)``, not once per budget.
    ``link_budgets=False`` prepares every budget's problem afresh, exactly as ``select``
    does. OpenBLAS is limited to one thread while sweeping (``blas_threads``): the ``mmr``
    ranking is a long chain of matrix-vector products, which run several times slower with
    two BLAS threads on two cores.

Result cache:
    With ``cache_dir`` every computed cell is stored
    (:class:`~pacms_bench.recall_cache.ResultCache`, keyed by the code, the embedder, the
    tokenizer, the question's content and the cell's settings), so a rerun reads its cells back
    in seconds, and adding a strategy column computes only that column. Each
    code/embedder/tokenizer combination has a folder of its own, and
    :meth:`~pacms_bench.recall_cache.ResultCache.prune` deletes the others.

Modules:
    This one runs the sweep; :mod:`pacms_bench.recall_config` holds the strategy specs, the
    configuration and the rows, :mod:`pacms_bench.recall_cache` the result cache and the code
    fingerprints, :mod:`pacms_bench.recall_report` the tables and the plot.

Example:
    >>> from pacms_bench.longmemeval import iter_questions      # doctest: +SKIP
    >>> from pacms_bench.recall_config import RecallConfig      # doctest: +SKIP
    >>> qs = load_questions("../shared/data/longmemeval/oracle", n=12)   # doctest: +SKIP
    >>> report = run_recall(qs, RecallConfig.create(levels=(0, 2)))       # doctest: +SKIP
    >>> print(report.to_markdown())                                      # doctest: +SKIP
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from langchain_pacms import Candidate
from langchain_pacms.blas import blas_setup, blas_threads, set_blas_threads
from langchain_pacms.core import solve
from pacms_bench.longmemeval import Question, iter_questions, sample_questions
from pacms_bench.progress import progress_bar
from pacms_bench.recall_cache import ResultCache, code_fingerprint, machine_info, question_digest
from pacms_bench.recall_config import (
    ROW_FIELDS,
    QuestionResult,
    RecallConfig,
    RecallRow,
    budget_tokens,
    column_options,
)
from pacms_bench.recall_report import RecallReport
from pacms_bench.redundancy import PoolItem, inject_redundancy

__all__ = ["blas_threads", "load_questions", "run_recall", "sweep_question"]


# -- one question -------------------------------------------------------------------------------


def sweep_question(
    question: Question,
    selector: Any,
    config: RecallConfig,
    *,
    link_budgets: bool = True,
    cache: ResultCache | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> QuestionResult:
    """Run every ``(R, budget, strategy)`` cell of one question.

    Args:
        question: The question (must have at least one evidence round).
        selector: A :class:`~langchain_pacms.ContextSelector`; its embeddings, token counter
            and pool reweighting are used.
        config: The sweep configuration.
        link_budgets: Link each level's budgets with ``Problem.with_budget`` so that what a
            strategy derives from the candidates alone is computed once per level (see the
            module docstring); ``False`` prepares every budget's problem afresh.
        cache: Result cache; cells found there are not recomputed, new cells are stored.
        options: The options each column runs with, by label, as
            :func:`~pacms_bench.recall_config.column_options` gives them for ``selector``
            (resolved here when not given; a sweep resolves them once for all its questions).

    Returns:
        The question's rows, in ``(R, budget, strategy)`` order, and its timings.

    Raises:
        ValueError: If the question has no evidence round, or the embeddings disagree in size.
    """
    if not question.evidence_indices:
        raise ValueError(f"question {question.question_id!r} has no evidence round")
    timings: dict[str, float] = {}
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    cells = [
        (level, budget, spec)
        for level in config.levels
        for budget in config.budgets
        for spec in config.strategies
    ]
    # The options each column runs with, as ContextSelector.select would resolve them (pacms
    # gets the embedder's kernel threshold and gain floor unless the spec sets them).
    if options is None:
        options = column_options(selector, config)
    done: dict[tuple[int, float, str], RecallRow] = {}
    keys: dict[tuple[int, float, str], str] = {}
    if cache is not None:
        qdigest = question_digest(question)
        keys = {
            (lv, b, sp.label): cache.key(qdigest, config, lv, b, sp.name, options[sp.label])
            for lv, b, sp in cells
        }
        found = cache.store.mget(list(keys.values()))
        for (lv, b, label), raw in zip(keys, found):
            if raw is not None:
                values = json.loads(raw)
                values[ROW_FIELDS.index("strategy")] = label
                done[(lv, b, label)] = RecallRow(**dict(zip(ROW_FIELDS, values)))
        timings["cache_read"] = time.perf_counter() - t0
    cached = set(done)
    levels = [
        lv
        for lv in config.levels
        if any((lv, b, sp.label) not in done for b in config.budgets for sp in config.strategies)
    ]
    n_texts = hits = misses = 0
    if levels:
        result = _compute(question, selector, config, options, levels, done, link_budgets, timings)
        n_texts, hits, misses = result
        if cache is not None:
            cache.store.mset(
                [
                    (key, json.dumps(done[cell].values()).encode("utf-8"))
                    for cell, key in keys.items()
                    if cell in done and cell not in cached
                ]
            )
    rows = [done[(lv, b, sp.label)] for lv, b, sp in cells]
    timings["cpu"] = time.process_time() - cpu0
    return QuestionResult(
        question_id=question.question_id,
        rows=rows,
        timings=timings,
        n_texts=n_texts,
        cache_hits=hits,
        cache_misses=misses,
        cached_cells=len(cached),
    )


def _compute(
    question: Question,
    selector: Any,
    config: RecallConfig,
    options: Mapping[str, Mapping[str, Any]],
    levels: Sequence[int],
    done: dict[tuple[int, float, str], RecallRow],
    link_budgets: bool,
    timings: dict[str, float],
) -> tuple[int, int, int]:
    """Fill ``done`` with every missing cell of ``levels``; return bookkeeping counts."""
    t0 = time.perf_counter()
    pools: dict[int, list[PoolItem]] = {
        level: inject_redundancy(question.rounds, level, style=config.style, seed=config.seed)
        for level in levels
    }
    texts = list(
        dict.fromkeys(
            [r.text for r in question.rounds] + [p.text for pool in pools.values() for p in pool]
        )
    )
    counts = dict(zip(texts, selector.count_tokens(texts)))
    original_tokens = sum(counts[r.text] for r in question.rounds)
    timings["prepare"] = timings.get("prepare", 0.0) + time.perf_counter() - t0
    embeddings = selector.embeddings
    hits0, misses0 = getattr(embeddings, "hits", 0), getattr(embeddings, "misses", 0)
    for level in levels:
        pool = pools[level]
        t1 = time.perf_counter()
        candidates = [
            Candidate(p.text, id=str(i), position=p.position, tokens=counts[p.text])
            for i, p in enumerate(pool)
        ]
        tokens = np.array([counts[p.text] for p in pool], dtype=np.int64)
        pool_tokens = int(tokens.sum())
        base = pool_tokens if config.budget_base == "pool" else original_tokens
        evidence = np.array([p.is_evidence for p in pool], dtype=bool)
        n_evidence = int(evidence.sum())
        budgets = [budget_tokens(base, b) for b in config.budgets]
        # The selector's own preparation (embedding, checks, reweighting, problem), as select
        # runs it; after the first level most vectors come from its embedding cache.
        problem = selector.prepare(candidates, question.question, budget=budgets[0])
        timings["build"] = timings.get("build", 0.0) + time.perf_counter() - t1
        for fraction, btok in zip(config.budgets, budgets):
            # Linked by with_budget, one level's problems share the budget-independent work
            # (the cosine matrix, the coverage kernel, the mmr ranking).
            prob = (
                problem.with_budget(btok)
                if link_budgets
                else selector.prepare(candidates, question.question, budget=btok)
            )
            for spec in config.strategies:
                if (level, fraction, spec.label) in done:
                    continue
                t2 = time.perf_counter()
                pick = solve(prob, spec.name, **options[spec.label])
                key = f"solve:{spec.label}"
                timings[key] = timings.get(key, 0.0) + time.perf_counter() - t2
                kept = pick.order
                kept_evidence = int(evidence[kept].sum())
                done[(level, fraction, spec.label)] = RecallRow(
                    question_id=question.question_id,
                    type=question.question_type,
                    R=level,
                    budget=fraction,
                    strategy=spec.label,
                    recall=kept_evidence / n_evidence,
                    kept_evidence=kept_evidence,
                    n_evidence=n_evidence,
                    kept_tokens=int(tokens[kept].sum()),
                    budget_tokens=btok,
                    pool_tokens=pool_tokens,
                    n_candidates=len(pool),
                    n_kept=int(kept.size),
                )
    return (
        len(texts),
        getattr(embeddings, "hits", 0) - hits0,
        getattr(embeddings, "misses", 0) - misses0,
    )


# -- running a sweep ------------------------------------------------------------------------------

_WORKER: dict[str, Any] = {}


def _init_worker(
    factory: Callable[[], Any],
    config: RecallConfig,
    share: bool,
    threads: int | None,
    cache: ResultCache | None,
    options: Mapping[str, Mapping[str, Any]],
) -> None:  # pragma: no cover - runs in child processes
    _WORKER.update(selector=factory(), config=config, share=share, cache=cache, options=options)
    if threads is not None:
        set_blas_threads(threads)


def _work(question: Question) -> QuestionResult:  # pragma: no cover - runs in child processes
    return sweep_question(
        question,
        _WORKER["selector"],
        _WORKER["config"],
        link_budgets=_WORKER["share"],
        cache=_WORKER["cache"],
        options=_WORKER["options"],
    )


def run_recall(
    questions: Sequence[Question],
    config: RecallConfig | None = None,
    *,
    selector: Any = None,
    selector_factory: Callable[[], Any] | None = None,
    workers: int = 1,
    blas_threads_limit: int | None = 1,
    link_budgets: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = False,
    meta: Mapping[str, Any] | None = None,
) -> RecallReport:
    """Run the recall sweep over ``questions``.

    Args:
        questions: Questions to sweep (each needs an evidence round; use
            :func:`load_questions` or ``sample_questions(..., recall_only=True)``).
        config: The sweep (default:
            :meth:`~pacms_bench.recall_config.RecallConfig.create` with the defaults).
        selector: The selector to use in this process (default: built by
            ``selector_factory``, else a default ``ContextSelector``).
        selector_factory: Picklable zero-argument callable that builds a selector; required
            for ``workers > 1`` (each worker process builds its own).
        workers: Worker processes (1 runs in this process).
        blas_threads_limit: OpenBLAS threads during the sweep (None leaves it alone).
        link_budgets: Link the budgets of each ``(question, R)`` (see :func:`sweep_question`).
        cache_dir: Keep computed cells in a :class:`~pacms_bench.recall_cache.ResultCache`
            under this folder and reuse them (None: compute everything).
        progress: Show a progress bar on stderr (only when stderr is a terminal).
        meta: Extra metadata stored in the report.

    Returns:
        The :class:`~pacms_bench.recall_report.RecallReport`.

    Raises:
        ValueError: For ``workers < 1``, ``workers > 1`` without ``selector_factory``, or a
            question without evidence.
    """
    from langchain_pacms.embeddings import model_identity

    config = config or RecallConfig.create()
    questions = list(questions)
    for q in questions:
        if not q.evidence_indices:
            raise ValueError(f"question {q.question_id!r} has no evidence round")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if workers > 1 and selector_factory is None:
        raise ValueError("workers > 1 needs a picklable selector_factory")
    if selector is None:
        if selector_factory is not None:
            selector = selector_factory()
        else:
            from langchain_pacms import ContextSelector

            selector = ContextSelector()
    fingerprint = code_fingerprint()  # before the run: the code the workers import
    options = column_options(selector, config)
    with blas_threads(blas_threads_limit):  # what the sweep (and each worker) will run with
        blas = blas_setup()
    cache = None
    if cache_dir is not None:
        cache = replace(ResultCache.for_selector(cache_dir, selector), blas=blas)
    started = time.perf_counter()
    load_before = _loadavg()
    bar = progress_bar(len(questions), progress, desc="recall", unit="q")
    results: list[QuestionResult] = []
    try:
        if workers == 1 or len(questions) <= 1:
            with blas_threads(blas_threads_limit):
                for q in questions:
                    results.append(
                        sweep_question(
                            q,
                            selector,
                            config,
                            link_budgets=link_budgets,
                            cache=cache,
                            options=options,
                        )
                    )
                    if bar is not None:
                        bar.update(1)
        else:
            assert selector_factory is not None  # checked above
            ctx = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(
                max_workers=min(workers, len(questions)),
                mp_context=ctx,
                initializer=_init_worker,
                initargs=(
                    selector_factory,
                    config,
                    link_budgets,
                    blas_threads_limit,
                    cache,
                    options,
                ),
            ) as pool:
                futures = [pool.submit(_work, q) for q in questions]
                try:
                    for fut in concurrent.futures.as_completed(futures):
                        results.append(fut.result())
                        if bar is not None:
                            bar.update(1)
                except BaseException:
                    # Report at once: the questions already running finish (their cells
                    # are cached), the queued ones are dropped.
                    pool.shutdown(wait=True, cancel_futures=True)
                    raise
    finally:
        if bar is not None:
            bar.close()
    runtime = time.perf_counter() - started

    order = {q.question_id: i for i, q in enumerate(questions)}
    results.sort(key=lambda r: order[r.question_id])
    timings: dict[str, float] = {}
    for r in results:
        for k, v in r.timings.items():
            timings[k] = timings.get(k, 0.0) + v
    inner = getattr(selector.embeddings, "embeddings", selector.embeddings)
    store = getattr(selector.embeddings, "store", None)
    info: dict[str, Any] = {
        "n_questions": len(questions),
        "question_types": dict(sorted(_count(q.question_type for q in questions).items())),
        "embeddings": model_identity(inner),
        "pool_reweighting": selector.profile.idf_reweighting,
        "embedder_profile": selector.profile.name,
        "tokenizer": getattr(selector.token_counter, "name", "custom"),
        "strategy_options": options,
        "embedding_cache": repr(store) if store is not None else "memory",
        "cache_hits": sum(r.cache_hits for r in results),
        "cache_misses": sum(r.cache_misses for r in results),
        "distinct_texts": sum(r.n_texts for r in results),
        "workers": workers,
        "blas_threads": blas_threads_limit,
        "blas": blas,
        "link_budgets": link_budgets,
        "result_cache": None if cache is None else str(cache.folder),
        "cached_cells": sum(r.cached_cells for r in results),
        "code_fingerprint": fingerprint,
        "runtime_seconds": round(runtime, 3),
        "load_average": {"start": load_before, "end": _loadavg()},
        "timings_seconds": {k: round(v, 3) for k, v in sorted(timings.items())},
        "machine": machine_info(),
    }
    info.update(meta or {})
    rows = [row for r in results for row in r.rows]
    return RecallReport(rows=rows, config=config, meta=info)


def _loadavg() -> list[float] | None:
    """1/5/15-minute load averages (other processes compete for the cores), if known."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):  # pragma: no cover - not on every platform
        return None


def _count(items: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


# -- data ---------------------------------------------------------------------------------------


def load_questions(
    source: str | os.PathLike[str],
    *,
    n: int | None = 100,
    seed: int = 0,
    ids: Sequence[str] | None = None,
) -> list[Question]:
    """Load the recall sample: ``sample_questions(..., recall_only=True)``.

    Args:
        source: Folder, archive or JSON file (see
            :func:`~pacms_bench.longmemeval.resolve_source`).
        n: Sample size (None: every eligible question).
        seed: Sampling seed.
        ids: Take exactly these question ids instead of a sample (ineligible ones are dropped).

    Returns:
        The questions, sorted by id.
    """
    if ids:
        return sample_questions(iter_questions(source, ids=ids), None, seed, recall_only=True)
    return sample_questions(iter_questions(source), n, seed, recall_only=True)
