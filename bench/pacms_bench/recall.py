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
    With ``cache_dir`` every computed cell is stored (:class:`ResultCache`, keyed by the code,
    the embedder, the tokenizer, the question's content and the cell's settings), so a rerun
    reads its cells back in seconds, and adding a strategy column computes only that column.
    Each code/embedder/tokenizer combination has a folder of its own, and
    :meth:`ResultCache.prune` deletes the others.

Example:
    >>> from pacms_bench.longmemeval import iter_questions      # doctest: +SKIP
    >>> qs = load_questions("../shared/data/longmemeval/oracle", n=12)   # doctest: +SKIP
    >>> report = run_recall(qs, RecallConfig.create(levels=(0, 2)))       # doctest: +SKIP
    >>> print(report.to_markdown())                                      # doctest: +SKIP
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import logging
import math
import multiprocessing
import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

import langchain_pacms
from langchain_pacms import Candidate
from langchain_pacms.blas import blas_setup, blas_threads, set_blas_threads
from langchain_pacms.core import Problem, solve
from pacms_bench.cells import CellFolder
from pacms_bench.longmemeval import Question, iter_questions, sample_questions
from pacms_bench.progress import progress_bar
from pacms_bench.redundancy import STYLES, PoolItem, inject_redundancy

__all__ = [
    "BENCH_ROOT",
    "BUDGET_BASES",
    "DEFAULT_BUDGETS",
    "DEFAULT_LEVELS",
    "DEFAULT_STRATEGIES",
    "LIBRARY_ROOT",
    "ROW_FIELDS",
    "QuestionResult",
    "RecallConfig",
    "RecallReport",
    "RecallRow",
    "ResultCache",
    "StrategySpec",
    "blas_threads",
    "budget_tokens",
    "code_fingerprint",
    "hash_sources",
    "load_questions",
    "machine_info",
    "parse_strategy_spec",
    "question_digest",
    "run_recall",
    "sweep_question",
]

logger = logging.getLogger(__name__)

DEFAULT_LEVELS: tuple[int, ...] = (0, 2, 4, 8)
"""Redundancy levels R of the study."""

DEFAULT_BUDGETS: tuple[float, ...] = (0.05, 0.10, 0.20, 0.45, 0.70)
"""Budget fractions: the study's three (20%, 45%, 70%) plus two tighter ones."""

DEFAULT_STRATEGIES: tuple[str, ...] = ("topk", "mmr", "lastk", "pacms", "rag")
"""Strategies compared by default (the study's four plus ``rag``)."""

BUDGET_BASES: tuple[str, ...] = ("pool", "original")
"""What a budget fraction is a fraction of: the padded pool, or the original history."""

ROW_FIELDS: tuple[str, ...] = (
    "question_id",
    "type",
    "R",
    "budget",
    "strategy",
    "recall",
    "kept_evidence",
    "n_evidence",
    "kept_tokens",
    "budget_tokens",
    "pool_tokens",
    "n_candidates",
    "n_kept",
)
"""Columns of one result row (the JSON's ``columns``)."""


# -- strategy specs ---------------------------------------------------------------------------


def _parse_value(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


@dataclass(frozen=True)
class StrategySpec:
    """One column of the sweep: a registered strategy with fixed options.

    Attributes:
        label: Column label (the spec string as given, e.g. ``pacms:relevance_weight=0.5``).
        name: Registered strategy name.
        options: Keyword options passed to the strategy.
    """

    label: str
    name: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        """Run the strategy once on a two-item problem to reject bad names and options early.

        Raises:
            ValueError: For an unknown strategy, an unknown option or a bad option value.
        """
        problem = Problem.build(np.eye(2), np.array([1.0, 0.0]), tokens=[1, 1], budget=1)
        try:
            solve(problem, self.name, **dict(self.options))
        except (TypeError, ValueError) as err:
            raise ValueError(f"strategy spec {self.label!r}: {err}") from None


def parse_strategy_spec(spec: str | StrategySpec) -> StrategySpec:
    """Parse ``name`` or ``name:key=value,key=value`` into a :class:`StrategySpec`.

    Values are read as ``true``/``false``, ``none``, int, float, else kept as strings (so
    ``fill=diverse`` works). The label is the spec with surrounding blanks removed.

    Args:
        spec: The spec string (or an existing spec, returned as is).

    Returns:
        The parsed spec.

    Raises:
        ValueError: For an empty name, an option without ``=``, or a repeated option.

    Example:
        >>> parse_strategy_spec("pacms:relevance_weight=0.5,cost_exponent=0").options
        {'relevance_weight': 0.5, 'cost_exponent': 0}
    """
    if isinstance(spec, StrategySpec):
        return spec
    label = spec.strip()
    name, sep, rest = label.partition(":")
    name = name.strip()
    if not name:
        raise ValueError(f"strategy spec {spec!r} has no strategy name")
    options: dict[str, Any] = {}
    if sep:
        for part in rest.split(","):
            if not part.strip():
                continue
            key, eq, value = part.partition("=")
            key = key.strip()
            if not eq or not key:
                raise ValueError(
                    f"strategy spec {spec!r}: option {part.strip()!r} is not key=value"
                )
            if key in options:
                raise ValueError(f"strategy spec {spec!r}: option {key!r} given twice")
            options[key] = _parse_value(value)
    return StrategySpec(label=label, name=name, options=options)


# -- configuration and results ------------------------------------------------------------------


@dataclass(frozen=True)
class RecallConfig:
    """What a sweep runs. Build it with :meth:`create`, which validates and parses.

    Attributes:
        levels: Redundancy levels R (restatements per filler round).
        budgets: Budget fractions in ``(0, 1]``.
        strategies: The columns.
        style: Restatement style, ``"recap"`` or ``"full"``.
        budget_base: ``"pool"`` or ``"original"``.
        seed: Seed of the redundancy injection (the same for every question).
    """

    levels: tuple[int, ...]
    budgets: tuple[float, ...]
    strategies: tuple[StrategySpec, ...]
    style: str = "recap"
    budget_base: str = "pool"
    seed: int = 0

    @classmethod
    def create(
        cls,
        *,
        levels: Iterable[int] = DEFAULT_LEVELS,
        budgets: Iterable[float] = DEFAULT_BUDGETS,
        strategies: Iterable[str | StrategySpec] = DEFAULT_STRATEGIES,
        style: str = "recap",
        budget_base: str = "pool",
        seed: int = 0,
        check_strategies: bool = True,
    ) -> RecallConfig:
        """Validate the settings and parse the strategy specs.

        Args:
            levels: Redundancy levels (distinct ints >= 0); kept in the given order.
            budgets: Budget fractions (distinct, in ``(0, 1]``).
            strategies: Strategy names or ``name:key=value,...`` specs (distinct labels).
            style: ``"recap"`` or ``"full"``.
            budget_base: ``"pool"`` or ``"original"``.
            seed: Injection seed.
            check_strategies: Dry-run every spec on a tiny problem (see
                :meth:`StrategySpec.check`).

        Returns:
            The configuration.

        Raises:
            ValueError: For any invalid setting.
        """
        lv = tuple(levels)
        for level in lv:
            if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or level < 0:
                raise ValueError(f"levels must be ints >= 0, got {level!r}")
        bd = tuple(float(b) for b in budgets)
        for b in bd:
            if not 0.0 < b <= 1.0:
                raise ValueError(f"budgets must be fractions in (0, 1], got {b!r}")
        specs = tuple(parse_strategy_spec(s) for s in strategies)
        if not lv or not bd or not specs:
            raise ValueError("levels, budgets and strategies must each be non-empty")
        named: tuple[tuple[str, list[Any]], ...] = (
            ("levels", list(lv)),
            ("budgets", list(bd)),
            ("strategies", [s.label for s in specs]),
        )
        for what, keys in named:
            if len(set(keys)) != len(keys):
                raise ValueError(f"{what} must be distinct, got {keys}")
        if style not in STYLES:
            raise ValueError(f"style must be one of {STYLES}, got {style!r}")
        if budget_base not in BUDGET_BASES:
            raise ValueError(f"budget_base must be one of {BUDGET_BASES}, got {budget_base!r}")
        if check_strategies:
            for spec in specs:
                spec.check()
        return cls(tuple(int(v) for v in lv), bd, specs, style, budget_base, int(seed))

    @property
    def labels(self) -> tuple[str, ...]:
        """Column labels, in order."""
        return tuple(s.label for s in self.strategies)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "levels": list(self.levels),
            "budgets": list(self.budgets),
            "strategies": [
                {"label": s.label, "name": s.name, "options": dict(s.options)}
                for s in self.strategies
            ],
            "style": self.style,
            "budget_base": self.budget_base,
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RecallConfig:
        """Inverse of :meth:`to_dict` (strategies are not dry-run)."""
        specs = [
            StrategySpec(s["label"], s["name"], dict(s.get("options", {})))
            for s in data["strategies"]
        ]
        return cls.create(
            levels=data["levels"],
            budgets=data["budgets"],
            strategies=specs,
            style=data.get("style", "recap"),
            budget_base=data.get("budget_base", "pool"),
            seed=data.get("seed", 0),
            check_strategies=False,
        )


@dataclass(frozen=True)
class RecallRow:
    """One cell of one question: a strategy under one budget at one redundancy level.

    Attributes:
        question_id: LongMemEval question id.
        type: Question type.
        R: Redundancy level.
        budget: Budget fraction.
        strategy: Strategy label.
        recall: ``kept_evidence / n_evidence``.
        kept_evidence: Evidence rounds kept.
        n_evidence: Evidence rounds in the pool.
        kept_tokens: Tokens kept.
        budget_tokens: The budget in tokens.
        pool_tokens: Tokens of the whole padded pool.
        n_candidates: Items in the padded pool.
        n_kept: Items kept.
    """

    question_id: str
    type: str
    R: int
    budget: float
    strategy: str
    recall: float
    kept_evidence: int
    n_evidence: int
    kept_tokens: int
    budget_tokens: int
    pool_tokens: int
    n_candidates: int
    n_kept: int

    def values(self) -> list[Any]:
        """The row as a list in :data:`ROW_FIELDS` order (recall rounded to 6 places)."""
        out = [getattr(self, f) for f in ROW_FIELDS]
        out[ROW_FIELDS.index("recall")] = round(self.recall, 6)
        return out


@dataclass
class QuestionResult:
    """Rows and bookkeeping of one question.

    Attributes:
        question_id: The question.
        rows: Its result rows.
        timings: Seconds per phase (``prepare``: injection and counting; ``build``:
            ``selector.prepare`` per level (embedding, checks, reweighting, the problem);
            ``solve:<label>`` per strategy)
            and ``cpu``, the CPU seconds of this process for the question (less sensitive to
            other load on the machine than the wall-clock phases).
        n_texts: Distinct texts embedded for this question.
        cache_hits: Embedding cache hits while preparing this question.
        cache_misses: Texts the embedding model had to embed.
        cached_cells: Cells read from the result cache instead of computed.
    """

    question_id: str
    rows: list[RecallRow]
    timings: dict[str, float]
    n_texts: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    cached_cells: int = 0


# -- one question -------------------------------------------------------------------------------


def column_options(selector: Any, config: RecallConfig) -> dict[str, dict[str, Any]]:
    """The options every column of ``config`` runs with under ``selector``, by label.

    As ``ContextSelector.resolve_options`` gives them: ``pacms`` gets the embedder's kernel
    threshold, gain floor and relevance feedback unless the column sets them.
    """
    return {
        spec.label: selector.resolve_options(spec.name, spec.options)[1]
        for spec in config.strategies
    }


def budget_tokens(base_tokens: int, fraction: float) -> int:
    """``max(1, floor(base_tokens * fraction))``: the selector's ``budget_ratio`` rule."""
    return max(1, math.floor(base_tokens * fraction))


_TOKENIZER_PROBES = (
    "a",
    "The staging database listens on port 6543, not 5432.",
    "naïve café, 東京 and 🚀: ok?",
    "def f(x):\n    return x ** 2  # squares\n" * 3,
)
"""Texts whose token counts, with the tokenizer's name, key the result cache's tokenizer."""


@dataclass(frozen=True)
class ResultCache(CellFolder):
    """On-disk cache of sweep cells, so reruns and extra columns recompute only what is new.

    One entry per ``(question, R, budget, strategy name + options)`` cell, stored in a
    :class:`~langchain_pacms.embeddings.filestore.LocalByteStore`. Keys include ``namespace``,
    a hash of the selection code (:func:`code_fingerprint` plus this module), the embedder
    identity and the tokenizer (its name and its counts of a few probe texts), and a hash of
    the question's content, so a change to any of
    them misses instead of returning stale numbers. Column labels are not part of the key; the
    strategy name and the options it runs with, as the selector resolves them, are: ``rag:k=4``
    and ``rag:k=4,`` share cells, ``rag`` and ``rag:k=4`` do not (strategy defaults are not
    filled in), and ``pacms`` cells carry the embedder's threshold and gain floor.

    Cells live in ``<root>/recall-cells/<namespace>/``: cells of another code version,
    embedder or tokenizer are never read, and :meth:`prune` removes them.

    The OpenBLAS kernel and thread count are part of every key too: both change how a matrix
    product splits its sums, so results can differ in the last bits and a near-tie can go the
    other way (measured on the 100-question recap table: 10 of 12,000 rows moved between one
    and two threads on one machine, 6 between two machines with one thread each; all of them
    ``pacms_paper`` filler picks at R = 8). Cells computed another way are kept apart in the
    same namespace.

    Attributes:
        root: Cache folder.
        namespace: Hash of code, embedder and tokenizer (see :meth:`for_selector`).
        blas: The BLAS setup the cells are computed with, as :func:`blas_setup` gives it.
    """

    KIND = "recall-cells"

    blas: str | None = None

    @classmethod
    def for_selector(cls, root: str | os.PathLike[str], selector: Any) -> ResultCache:
        """A cache whose namespace covers the code and ``selector``'s embedder and tokenizer.

        Its :attr:`blas` is the BLAS setup in effect now; :func:`run_recall` sets the one its
        sweep runs with.
        """
        from langchain_pacms.embeddings import model_identity

        inner = getattr(selector.embeddings, "embeddings", selector.embeddings)
        counter = selector.token_counter
        parts = [
            code_fingerprint(),
            _file_digest(Path(__file__)),
            model_identity(inner),
            getattr(counter, "name", "custom"),
            # A custom counter's name is only its function's: its counts tell counters apart.
            ",".join(str(counter(text)) for text in _TOKENIZER_PROBES),
        ]
        digest = hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:20]
        return cls(str(Path(root).expanduser()), digest, blas_setup())

    def prune(self) -> tuple[int, int]:
        """Delete the cells of every other namespace under ``root``.

        After a change to the selection code, or with another embedder or tokenizer, the old
        cells are never read again; a 100-question table leaves about 12,000 of them. Folders
        of this namespace are kept, and so is anything outside ``recall-cells``. Do not prune
        while another sweep writes to the same root under another namespace: its folder would
        vanish under it (its store recreates it, but the cells written before are gone).

        Returns:
            ``(files removed, bytes freed)``, counting the disk blocks the files held where the
            platform reports them (cells are small, so this is several times their length).

        Example:
            >>> cache = ResultCache.for_selector(".pacms-cache", selector)  # doctest: +SKIP
            >>> cache.prune()                                               # doctest: +SKIP
            (12000, 49152000)
        """
        return self.prune_others()

    def key(
        self,
        qdigest: str,
        config: RecallConfig,
        level: int,
        budget: float,
        name: str,
        options: Mapping[str, Any],
    ) -> str:
        """The key of one cell: strategy ``name`` run with the resolved ``options``."""
        given = json.dumps(dict(options), sort_keys=True, default=str)
        return (
            f"{qdigest}/{config.style}/{config.seed}/{config.budget_base}/"
            f"R{level}/{budget!r}/{name}/{given}/blas={self.blas}"
        )


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def question_digest(question: Question) -> str:
    """Hash of everything about a question that a cell depends on."""
    digest = hashlib.sha256()
    for part in (question.question_id, question.question_type, question.question):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    for r in question.rounds:
        digest.update(
            f"{r.index}\0{r.date}\0{int(r.is_evidence)}\0{r.user}\0{r.assistant}\0".encode(
                "utf-8", "surrogatepass"
            )
        )
    return digest.hexdigest()[:24]


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
        options: The options each column runs with, by label, as :func:`column_options`
            gives them for ``selector`` (resolved here when not given; a sweep resolves them
            once for all its questions).

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
        config: The sweep (default: :meth:`RecallConfig.create` with the defaults).
        selector: The selector to use in this process (default: built by
            ``selector_factory``, else a default ``ContextSelector``).
        selector_factory: Picklable zero-argument callable that builds a selector; required
            for ``workers > 1`` (each worker process builds its own).
        workers: Worker processes (1 runs in this process).
        blas_threads_limit: OpenBLAS threads during the sweep (None leaves it alone).
        link_budgets: Link the budgets of each ``(question, R)`` (see :func:`sweep_question`).
        cache_dir: Keep computed cells in a :class:`ResultCache` under this folder and reuse
            them (None: compute everything).
        progress: Show a progress bar on stderr (only when stderr is a terminal).
        meta: Extra metadata stored in the report.

    Returns:
        The :class:`RecallReport`.

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


# What decides a pick: parts of the library (folders, modules or globs) and the bench's own pool
# builders.
_PICK_CODE = ("core", "embeddings", "_[!_]*.py", "blas.py", "selector", "tokens.py")
_POOL_CODE = ("longmemeval.py", "redundancy.py")
LIBRARY_ROOT = Path(langchain_pacms.__file__).resolve().parent
"""The folder of the installed ``langchain_pacms`` package (whose source the fingerprints read)."""
BENCH_ROOT = Path(__file__).resolve().parent
"""The folder of the ``pacms_bench`` package."""


def hash_sources(digest: Any, root: Path, parts: Iterable[str]) -> None:
    """Feed ``digest`` the path (from ``root``'s parent) and bytes of each file ``parts`` names.

    A part is a folder (its ``*.py`` files, recursively), a file name or a glob under ``root``;
    parts that name nothing are skipped.

    Example:
        >>> a, b = hashlib.sha256(), hashlib.sha256()
        >>> hash_sources(a, BENCH_ROOT, ["redundancy.py"])
        >>> hash_sources(b, BENCH_ROOT, ["redundancy.py", "no-such-file.py"])
        >>> a.hexdigest() == b.hexdigest()
        True
    """
    for part in parts:
        path = root / part
        files = sorted(path.rglob("*.py")) if path.is_dir() else sorted(root.glob(part))
        for f in files:
            if f.is_file():
                name = f.relative_to(root.parent).as_posix()
                digest.update(name.encode() + b"\0" + f.read_bytes())


def code_fingerprint() -> str:
    """Short sha256 over the source of everything that decides a pick.

    Covers the library's ``core/``, ``embeddings/``, ``selector/``, ``tokens.py`` and the helpers
    they run on (``_*.py``: the memo, the step drivers, timeouts; ``blas.py``: BLAS threads), and
    the LongMemEval loader and injection, so two runs with the same fingerprint (and settings)
    select identically, even from an uncommitted tree.

    Example:
        >>> len(code_fingerprint()), code_fingerprint() == code_fingerprint()
        (16, True)
    """
    digest = hashlib.sha256()
    hash_sources(digest, LIBRARY_ROOT, _PICK_CODE)
    hash_sources(digest, BENCH_ROOT, _POOL_CODE)
    return digest.hexdigest()[:16]


def machine_info() -> dict[str, Any]:
    """Where the run happened: OS, CPU, cores, memory, Python, numpy, package version."""
    cpu = platform.processor() or platform.machine()
    mem = None
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with (
        contextlib.suppress(OSError, ValueError, IndexError),
        open("/proc/meminfo", encoding="utf-8") as fh,
    ):
        for line in fh:
            if line.startswith("MemTotal"):
                mem = round(int(line.split()[1]) / 1024**2, 1)
                break
    try:
        from langchain_pacms import __version__ as version
    except ImportError:  # pragma: no cover
        version = "unknown"
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "memory_gib": mem,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "langchain_pacms": version,
    }


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


# -- report ---------------------------------------------------------------------------------------


def _fmt_budget(fraction: float) -> str:
    """A budget fraction as a percentage, with every digit it has (``0.1234567`` -> ``12.34567%``).

    The digits are those of the fraction's shortest repr, moved two places, so distinct budgets
    never print alike and float noise such as ``0.07 * 100 = 7.000000000000001`` never shows.
    """
    return f"{Decimal(repr(float(fraction))).scaleb(2).normalize():f}%"


@dataclass
class RecallReport:
    """The rows of a sweep with its configuration and metadata.

    Attributes:
        rows: One row per ``(question, R, budget, strategy)``.
        config: The sweep configuration.
        meta: Run metadata (command, embedder, tokenizer, runtime, machine, ...).
    """

    rows: list[RecallRow]
    config: RecallConfig
    meta: dict[str, Any] = field(default_factory=dict)

    def mean_table(self) -> dict[tuple[int, float, str], tuple[float, float, int]]:
        """``(R, budget, label) -> (mean recall, standard error, questions)``."""
        groups: dict[tuple[int, float, str], list[float]] = {}
        for row in self.rows:
            groups.setdefault((row.R, row.budget, row.strategy), []).append(row.recall)
        out = {}
        for key, values in groups.items():
            arr = np.asarray(values, dtype=np.float64)
            sem = float(arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 else 0.0
            out[key] = (float(arr.mean()), sem, int(arr.size))
        return out

    def mean_recall(self, level: int, budget: float, label: str) -> float:
        """Mean recall of one cell (NaN if the cell is empty)."""
        return self.mean_table().get((level, float(budget), label), (math.nan, 0.0, 0))[0]

    def summary(self) -> list[dict[str, Any]]:
        """Per-cell means in ``(budget, R, strategy)`` order, JSON-ready."""
        table = self.mean_table()
        out = []
        for b in self.config.budgets:
            for level in self.config.levels:
                for label in self.config.labels:
                    if (level, b, label) in table:
                        mean, sem, n = table[(level, b, label)]
                        out.append(
                            {
                                "budget": b,
                                "R": level,
                                "strategy": label,
                                "mean_recall": round(mean, 6),
                                "sem": round(sem, 6),
                                "n": n,
                            }
                        )
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``meta``, ``config``, ``summary``, ``columns`` and ``rows``."""
        return {
            "meta": self.meta,
            "config": self.config.to_dict(),
            "summary": self.summary(),
            "columns": list(ROW_FIELDS),
            "rows": [r.values() for r in self.rows],
        }

    def to_json(self) -> str:
        """The JSON text: readable header, one row per line."""
        data = self.to_dict()
        rows = data.pop("rows")
        head = json.dumps(data, indent=2, ensure_ascii=False)
        body = ",\n".join("    " + json.dumps(r, ensure_ascii=False) for r in rows)
        return head[:-2] + ',\n  "rows": [\n' + body + ("\n  ]\n}\n" if rows else "  ]\n}\n")

    @classmethod
    def from_json(cls, text: str) -> RecallReport:
        """Rebuild a report from :meth:`to_json` output (to re-render tables or plots)."""
        data = json.loads(text)
        cols = data["columns"]
        rows = [RecallRow(**dict(zip(cols, values))) for values in data["rows"]]
        return cls(rows=rows, config=RecallConfig.from_dict(data["config"]), meta=data["meta"])

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RecallReport:
        """Read a report written by :meth:`save`."""
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    def to_markdown(self, *, title: str | None = None) -> str:
        """Tables in the layout of the study's Table 1.

        One block per budget, rows R, columns strategies; in every row the best value (as
        shown, 3 decimals) is **bold** and the second best <u>underlined</u> (ties share).
        """
        table = self.mean_table()
        labels = self.config.labels
        meta = self.meta
        n = meta.get("n_questions", len({r.question_id for r in self.rows}))
        lines = [
            f"## {title or 'Evidence-round recall'}",
            "",
            f"{n} questions; style `{self.config.style}`; budget base "
            f"`{self.config.budget_base}`; seed {self.config.seed}; embeddings "
            f"`{meta.get('embeddings', '?')}`; tokenizer `{meta.get('tokenizer', '?')}`. "
            "Bold = best, <u>underline</u> = second best in each row.",
        ]
        for b in self.config.budgets:
            lines += ["", f"**Budget = {_fmt_budget(b)}**", ""]
            lines.append("| R | " + " | ".join(labels) + " |")
            lines.append("|---:|" + "---:|" * len(labels))
            for level in self.config.levels:
                shown = [
                    round(table[(level, b, lb)][0], 3) if (level, b, lb) in table else None
                    for lb in labels
                ]
                distinct = sorted({v for v in shown if v is not None}, reverse=True)
                # A row where every strategy ties marks nothing.
                best = distinct[0] if len(distinct) > 1 else None
                second = distinct[1] if len(distinct) > 1 else None
                cells = []
                for v in shown:
                    if v is None:
                        cells.append("–")
                    elif v == best:
                        cells.append(f"**{v:.3f}**")
                    elif v == second:
                        cells.append(f"<u>{v:.3f}</u>")
                    else:
                        cells.append(f"{v:.3f}")
                lines.append(f"| {level} | " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"

    def save_plot(self, path: str | os.PathLike[str]) -> Path:
        """Recall vs budget, one panel per R, one line per strategy (PNG, Agg canvas)."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        table = self.mean_table()
        levels = self.config.levels
        fig = Figure(figsize=(3.4 * len(levels) + 1.6, 3.6), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(1, len(levels), sharey=True, squeeze=False)[0]
        budgets = sorted(self.config.budgets)  # x rises along a line; tables keep the given order
        xs = [b * 100 for b in budgets]
        markers = "osD^vP*Xh<>"
        for ax, level in zip(axes, levels):
            for i, label in enumerate(self.config.labels):
                ys = [table.get((level, b, label), (math.nan,))[0] for b in budgets]
                ax.plot(xs, ys, marker=markers[i % len(markers)], ms=4, lw=1.4, label=label)
            ax.set_title(f"R = {level}")
            ax.set_xlabel("budget (% of " + self.config.budget_base + " tokens)")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("evidence-round recall")
        handles, names = axes[0].get_legend_handles_labels()
        fig.legend(handles, names, loc="outside right center", fontsize=8)
        n = self.meta.get("n_questions", "?")
        fig.suptitle(f"Evidence-round recall ({n} questions, style {self.config.style})")
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110)
        return out

    def save(
        self, out_dir: str | os.PathLike[str], stem: str = "recall", *, title: str | None = None
    ) -> dict[str, Path]:
        """Write ``<stem>.json``, ``<stem>.md`` and ``<stem>.png`` into ``out_dir``.

        Without matplotlib (the ``eval`` extra) the plot is skipped with a logged warning (and
        an older plot of the same name removed): the JSON and the tables of a finished sweep
        are never lost to a missing plotting library.

        Args:
            out_dir: Output folder (created if missing).
            stem: File name stem.
            title: Heading of the markdown tables (see :meth:`to_markdown`).

        Returns:
            The written paths by kind (``json``, ``md`` and, with matplotlib, ``png``).
        """
        folder = Path(out_dir)
        folder.mkdir(parents=True, exist_ok=True)
        paths = {"json": folder / f"{stem}.json", "md": folder / f"{stem}.md"}
        paths["json"].write_text(self.to_json(), encoding="utf-8")
        paths["md"].write_text(self.to_markdown(title=title), encoding="utf-8")
        png = folder / f"{stem}.png"
        try:
            paths["png"] = self.save_plot(png)
        except ImportError as err:
            png.unlink(missing_ok=True)  # an older run's plot must not pass for this one's
            logger.warning(
                "no plot written (%s); pacms-bench needs matplotlib: pip install matplotlib",
                err,
            )
        return paths
