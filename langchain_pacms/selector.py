"""``ContextSelector``: candidates + query + budget -> :class:`Selection`.

This is the one place where text becomes vectors (through a cached LangChain ``Embeddings``) and
token counts (through one :class:`~langchain_pacms.tokens.TokenCounter`); the numeric work is
done by :mod:`langchain_pacms.core`. Every strategy sees the same vectors and the same counts, so
differences between strategies are policy, not plumbing.

Example:
    >>> from langchain_pacms import ContextSelector
    >>> selector = ContextSelector()              # offline defaults
    >>> sel = selector.select(
    ...     ["The staging DB listens on port 6543.", "Lunch was great.", "CI is flaky again."],
    ...     query="Which port does the staging DB use?",
    ...     budget_tokens=12,
    ... )
    >>> sel.kept_ids
    ('0',)
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Collection, Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.stores import ByteStore
from numpy.typing import NDArray

from langchain_pacms._steps import adrive, drive
from langchain_pacms._timeout import call_with_timeout, check_embed_timeout, timeout_error
from langchain_pacms.blas import blas_threads as limit_blas_threads
from langchain_pacms.core import (
    COSINE_MATRIX_LIMIT,
    Pick,
    Problem,
    Strategy,
    get_strategy,
    rejection,
    solve,
)
from langchain_pacms.embeddings import CachedEmbeddings, HashedTfidfEmbeddings
from langchain_pacms.embeddings.profile import (
    DENSE_SIMILARITY_THRESHOLD,
    EmbedderProfile,
    idf_reweight,
    resolve_profile,
    unwrap_embeddings,
)
from langchain_pacms.embeddings.sparse import WORDS, PoolRelevance
from langchain_pacms.errors import PACMSError
from langchain_pacms.tokens import TokenCounter, resolve_token_counter

__all__ = [
    "DEFAULT_MEMORY_CEILING",
    "DENSE_SIMILARITY_THRESHOLD",
    "EMBEDDING_SHARE",
    "SPARSE_ROWS_SHARE",
    "Candidate",
    "CandidateInput",
    "ContextSelector",
    "EmbedderProfile",
    "EmbeddingError",
    "Selection",
    "Verdict",
    "relevant_mask",
]

logger = logging.getLogger(__name__)

DEFAULT_MEMORY_CEILING = 256 * 2**20
"""Default ``memory_ceiling_bytes`` of a selector: 256 MiB for its vectors and token counts."""

EMBEDDING_SHARE = 0.75
"""Share of ``memory_ceiling_bytes`` for the embedding cache; the token memo gets the rest."""

SPARSE_ROWS_SHARE = 0.125
"""Share of ``memory_ceiling_bytes`` for the sparse rows of the built-in embedder a selector
builds itself (taken from the token memo's share)."""

Kind = Literal["system", "memory", "turn", "tool", "document"]
KINDS: frozenset[str] = frozenset({"system", "memory", "turn", "tool", "document"})


@dataclass(frozen=True)
class Candidate:
    """One selectable unit of context.

    Attributes:
        text: The text that is scored and counted.
        id: Stable identifier; defaults to the candidate's index in the pool.
        kind: ``system``, ``memory``, ``turn``, ``tool`` or ``document``.
        position: Chronological position (larger is newer); defaults to the pool index.
        mandatory: Always kept (system prompts, the latest user turn).
        tokens: Token cost; counted with the selector's counter when ``None``.
        metadata: Free-form data carried through to the :class:`Selection`.
        source: What the candidate came from (a ``Document``, messages, a store item).
    """

    text: str
    id: str | None = None
    kind: str = "turn"
    position: int | None = None
    mandatory: bool = False
    tokens: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    source: Any = field(default=None, compare=False, repr=False)


CandidateInput = Candidate | str


@dataclass(frozen=True)
class Verdict:
    """One candidate's outcome, as the inspector and the selection log show it."""

    id: str
    kind: str
    position: int
    tokens: int
    mandatory: bool
    kept: bool
    relevance: float
    gain: float | None
    pick_rank: int | None


@dataclass(frozen=True)
class Selection:
    """The result of one selection.

    Attributes:
        candidates: The normalised candidates, in their original order.
        kept_ids: Ids kept, in original (chronological input) order.
        pick_order: Ids kept, in the order the strategy picked them (mandatory first).
        relevance: Per-candidate relevance ``max(0, cos(candidate, query))`` (0 when fell back).
        gains: Per-candidate score at pick time (marginal gain for ``pacms``); absent if dropped.
        tokens: Per-candidate token counts.
        tokens_total: Tokens in the whole pool.
        tokens_kept: Tokens in the kept candidates.
        tokens_dropped: ``tokens_total - tokens_kept``.
        budget: The token budget used.
        strategy: Strategy that produced the pick (``lastk`` when it fell back).
        over_budget: The mandatory candidates alone exceed the budget (then only they are kept).
        fell_back: Embedding failed and recency was used instead.
        error: What went wrong when it fell back.
        timings: Seconds spent per phase (``tokens``, ``embed``, ``solve``, ``total``).
        info: Strategy diagnostics. ``info["query_has_no_words"]`` is ``True`` when the query
            has no words (``"👍"``, ``"???"``) and its embedding is all zero: there is nothing
            to score by, so the selection keeps the newest candidates that fit (``lastk``, as
            a fallback does, mandatory ones first), but nothing failed: ``fell_back`` is
            false, there is no ``error`` or warning, and ``strict=True`` does not raise.
    """

    candidates: tuple[Candidate, ...]
    kept_ids: tuple[str, ...]
    pick_order: tuple[str, ...]
    relevance: Mapping[str, float]
    gains: Mapping[str, float]
    tokens: Mapping[str, int]
    tokens_total: int
    tokens_kept: int
    tokens_dropped: int
    budget: int
    strategy: str
    over_budget: bool = False
    fell_back: bool = False
    error: str | None = None
    timings: Mapping[str, float] = field(default_factory=dict)
    info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kept(self) -> list[Candidate]:
        """Kept candidates in original order."""
        keep = set(self.kept_ids)
        return [c for c in self.candidates if c.id in keep]

    @property
    def dropped_ids(self) -> tuple[str, ...]:
        """Ids not kept, in original order."""
        keep = set(self.kept_ids)
        return tuple(c.id for c in self.candidates if c.id not in keep)  # type: ignore[misc]

    def verdicts(self) -> list[Verdict]:
        """One :class:`Verdict` per candidate, in original order."""
        rank = {cid: i for i, cid in enumerate(self.pick_order)}
        return [
            Verdict(
                id=str(c.id),
                kind=c.kind,
                position=int(c.position or 0),
                tokens=self.tokens[str(c.id)],
                mandatory=c.mandatory,
                kept=str(c.id) in rank,
                relevance=self.relevance.get(str(c.id), 0.0),
                gain=self.gains.get(str(c.id)),
                pick_rank=rank.get(str(c.id)),
            )
            for c in self.candidates
        ]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary with every candidate's verdict (no candidate text)."""
        return {
            "strategy": self.strategy,
            "budget": self.budget,
            "tokens_total": self.tokens_total,
            "tokens_kept": self.tokens_kept,
            "tokens_dropped": self.tokens_dropped,
            "kept": len(self.kept_ids),
            "dropped": len(self.candidates) - len(self.kept_ids),
            "over_budget": self.over_budget,
            "fell_back": self.fell_back,
            "error": self.error,
            "timings": dict(self.timings),
            "info": dict(self.info),
            "candidates": [v.__dict__ for v in self.verdicts()],
        }


def _normalise(candidates: Sequence[CandidateInput]) -> tuple[Candidate, ...]:
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence):
        raise ValueError("candidates must be a sequence of str or Candidate")
    placed = _placed_all(candidates)
    if placed is not None:
        return placed
    out: list[Candidate] = []
    seen: set[str] = set()
    for index, item in enumerate(candidates):
        cand = Candidate(text=item) if isinstance(item, str) else item
        if not isinstance(cand, Candidate):
            raise ValueError(
                f"candidate {index} is {type(item).__name__}; expected str or Candidate"
            )
        if not isinstance(cand.text, str):
            raise ValueError(
                f"candidate {index} has non-string text ({type(cand.text).__name__}); "
                "reduce rich content to text before selecting"
            )
        if cand.kind not in KINDS:
            raise ValueError(
                f"candidate {index} has unknown kind {cand.kind!r}; use one of {sorted(KINDS)}"
            )
        cid = str(index) if cand.id is None else str(cand.id)
        if cid in seen:
            raise ValueError(f"duplicate candidate id {cid!r}")
        seen.add(cid)
        tokens = None if cand.tokens is None else _as_int(cand.tokens)
        if cand.tokens is not None and (tokens is None or tokens < 0):
            raise ValueError(f"candidate {cid!r} has invalid tokens {cand.tokens!r}")
        position = index if cand.position is None else _as_int(cand.position)
        if position is None:
            raise ValueError(
                f"candidate {cid!r} has invalid position {cand.position!r}; expected an int"
            )
        mandatory = _as_bool(cand.mandatory)
        if mandatory is None:
            raise ValueError(f"candidate {cid!r} has mandatory={cand.mandatory!r}; expected a bool")
        if (
            cand.id is not cid
            or type(cand.position) is not int
            or type(cand.mandatory) is not bool
            or (cand.tokens is not None and type(cand.tokens) is not int)
        ):
            cand = _placed(cand, cid, position, mandatory, tokens)
        out.append(cand)
    return tuple(out)


def _as_int(value: object) -> int | None:
    """``value`` as an ``int`` when it is an integer (Python's or numpy's, not a bool).

    Example:
        >>> _as_int(np.int64(3)), _as_int(True), _as_int(2.0)
        (3, None, None)
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return None
    return int(value)


def _as_number(value: object) -> int | float | None:
    """``value`` when it is a real number (Python's or numpy's, as Python's), not a bool.

    Example:
        >>> _as_number(np.float32(0.5)), _as_number(2), _as_number(True), _as_number("1")
        (0.5, 2, None, None)
    """
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _as_bool(value: object) -> bool | None:
    """``value`` as a ``bool`` when it is one (Python's or numpy's), else ``None``.

    Example:
        >>> _as_bool(np.True_), _as_bool("no"), _as_bool(1)
        (True, None, None)
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    return None


def _placed_all(candidates: Sequence[CandidateInput]) -> tuple[Candidate, ...] | None:
    """The common case at once: plain candidates with ids and positions, all of them valid.

    ``None`` when any candidate needs a default or may be invalid: :func:`_normalise` then
    walks them one by one (and names the first bad one).
    """
    if not all(type(c) is Candidate for c in candidates):
        return None
    cands: Sequence[Candidate] = candidates  # type: ignore[assignment]
    ids = [c.id for c in cands]
    if (
        not all(type(i) is str for i in ids)
        or len(set(ids)) != len(ids)
        or not all(type(c.text) is str for c in cands)
        or not {c.kind for c in cands} <= KINDS
        or not all(type(c.position) is int for c in cands)
        or not all(type(c.mandatory) is bool for c in cands)
        or not all(c.tokens is None or (type(c.tokens) is int and c.tokens >= 0) for c in cands)
    ):
        return None
    return tuple(cands)


def _placed(
    cand: Candidate, cid: str, position: int, mandatory: bool, tokens: int | None
) -> Candidate:
    """``cand`` with these fields set (a direct call for plain candidates: cheaper)."""
    if type(cand) is not Candidate:
        return replace(cand, id=cid, position=position, mandatory=mandatory, tokens=tokens)
    return Candidate(
        cand.text, cid, cand.kind, position, mandatory, tokens, cand.metadata, cand.source
    )


def _resolve_budget(total: int, budget_tokens: int | None, budget_ratio: float | None) -> int:
    if (budget_tokens is None) == (budget_ratio is None):
        raise ValueError("pass exactly one of budget_tokens or budget_ratio")
    if budget_tokens is not None:
        tokens = _as_int(budget_tokens)
        if tokens is None:
            raise ValueError(f"budget_tokens must be an int, got {budget_tokens!r}")
        if tokens <= 0:
            raise ValueError(f"budget_tokens must be > 0, got {budget_tokens}")
        return tokens
    ratio = _as_number(budget_ratio)
    if ratio is None or not 0 < ratio <= 1:
        raise ValueError(f"budget_ratio must be in (0, 1], got {budget_ratio!r}")
    return max(1, math.floor(total * ratio))


class EmbeddingError(PACMSError, ValueError):
    """An embedder returned vectors that cannot be scored (wrong shape, NaN, inf or all zero).

    The selector treats it as an embedding failure: it falls back to recency and flags the
    selection, or raises under ``strict=True``. An all-zero embedding of a query without words
    is not a failure there (see :class:`Selection`).

    Args:
        message: What is wrong.
        zero_query: The query's embedding is all zero (and nothing checked before it failed).

    Attributes:
        zero_query: As given.
    """

    def __init__(self, message: str, *, zero_query: bool = False) -> None:
        super().__init__(message)
        self.zero_query = zero_query


def _has_words(query: str) -> bool:
    """Whether ``query`` has a word: a run of letters or digits, as the built-in embedder reads.

    Example:
        >>> _has_words("port 6543?"), _has_words("\N{THUMBS UP SIGN} ???")
        (True, False)
    """
    return WORDS.search(query) is not None


def _checked_vectors(
    vectors: NDArray[np.float32], query_vec: NDArray[np.float32], *, others: bool = False
) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """``(vectors, query_vec)`` unchanged, or :class:`EmbeddingError` when they cannot be scored.

    ``others``: the pool has other rows, already checked, so these may all be zero. An
    all-zero query is flagged ``zero_query``, whatever the documents are.

    Example:
        >>> _checked_vectors(np.ones((2, 3), np.float32), np.full(3, np.nan, np.float32))
        Traceback (most recent call last):
        ...
        langchain_pacms.selector.EmbeddingError: the query embedding holds NaN or inf
    """
    if vectors.size and vectors.shape[1] != query_vec.shape[0]:
        raise EmbeddingError("query and document embeddings differ in dimension")
    bad = ~np.isfinite(vectors).all(axis=1) if vectors.size else np.zeros(0, dtype=bool)
    if bad.any():
        raise EmbeddingError(
            f"{int(bad.sum())} document embedding(s) hold NaN or inf "
            f"(first: row {int(bad.argmax())})"
        )
    if not np.isfinite(query_vec).all():
        raise EmbeddingError("the query embedding holds NaN or inf")
    if not query_vec.any():
        raise EmbeddingError("the query embedding is all zero", zero_query=True)
    if vectors.size and not others:
        zero = ~vectors.any(axis=1)
        if zero.all():
            raise EmbeddingError(f"all {vectors.shape[0]} document embeddings are all zero")
    return vectors, query_vec


def _used_features(
    vectors: NDArray[np.float32], query_vec: NDArray[np.float32]
) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.int64] | None]:
    """The vectors without the features that are zero in all of them and in the query.

    Sparse lexical vectors (the built-in embedder's 4,096 hashed features) use a few hundred
    features over a pool; dropping the rest leaves every dot product, norm and document
    frequency of the pool as it was (up to rounding: sums skip zero terms) and makes every
    later step cheaper. Dense vectors, and pools that use most features, pass through. The
    third value is the kept features (``None`` when nothing was dropped).

    Example:
        >>> docs = np.array([[1, 0, 0, 2], [0, 0, 0, 3]], np.float32)
        >>> vectors, q, kept = _used_features(docs, np.array([1, 0, 0, 0], np.float32))
        >>> vectors.tolist(), q.tolist(), kept.tolist()
        ([[1.0, 2.0], [0.0, 3.0]], [1.0, 0.0], [0, 3])
    """
    if not vectors.size or vectors.shape[1] != query_vec.shape[0]:
        return vectors, query_vec, None
    used = vectors.any(axis=0)
    used |= query_vec != 0  # NaN and inf are not 0: checks after this still see them
    return _kept(used, vectors, query_vec)


def _kept(
    used: NDArray[np.bool_], vectors: NDArray[np.float32], query_vec: NDArray[np.float32]
) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.int64] | None]:
    """``vectors`` and ``query_vec`` on the ``used`` features, unless they are most of them."""
    if 2 * int(used.sum()) > used.size:
        return vectors, query_vec, None
    return np.compress(used, vectors, axis=1), query_vec[used], np.flatnonzero(used)


def _grown(
    last: _Pool,
    where: NDArray[np.int64],
    fresh: NDArray[np.float32],
    query_vec: NDArray[np.float32],
) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.int64] | None]:
    """What :func:`_used_features` gives for a pool whose rows partly come from the last pool.

    Row ``i`` of the pool is row ``where[i]`` of the last pool's compacted vectors when
    ``where[i] >= 0``; the other rows are ``fresh``, in order. The last pool's rows are zero
    outside its kept features, so the union of the features used is known without the full
    matrix, and every value is copied as it is: the result is the same array as compacting the
    whole pool stacked from the cache.
    """
    assert last.raw is not None and last.features is not None
    dim = last.dim
    if query_vec.shape[0] != dim or (fresh.size and fresh.shape[1] != dim):
        raise EmbeddingError("query and document embeddings differ in dimension")
    old = where >= 0
    old_rows = last.raw[where[old]]
    used = np.zeros(dim, dtype=bool)
    used[last.features[old_rows.any(axis=0)]] = True
    if fresh.size:
        used |= fresh.any(axis=0)
    used |= query_vec != 0
    full = np.zeros((where.shape[0], dim), dtype=np.float32)
    if 2 * int(used.sum()) <= dim:  # still sparse: build only the used columns
        cols = np.flatnonzero(used)
        full = full[:, : cols.shape[0]]
        at = np.searchsorted(cols, last.features)  # every kept feature of the last pool ...
        known = at < cols.shape[0]
        known[known] = cols[at[known]] == last.features[known]  # ... that this pool uses
        block = np.zeros((old_rows.shape[0], cols.shape[0]), dtype=np.float32)
        block[:, at[known]] = old_rows[:, known]
        full[old] = block
        if fresh.size:
            full[~old] = fresh[:, cols]
        return full, query_vec[cols], cols
    block = np.zeros((old_rows.shape[0], dim), dtype=np.float32)
    block[:, last.features] = old_rows
    full[old] = block
    if fresh.size:
        full[~old] = fresh
    return full, query_vec, None


def _flags(cands: Sequence[Candidate]) -> tuple[NDArray[np.bool_], NDArray[np.int64]]:
    """The mandatory mask and the positions of a normalised pool."""
    return (
        np.array([c.mandatory for c in cands], dtype=bool),
        np.array([int(c.position or 0) for c in cands], dtype=np.int64),
    )


def relevant_mask(cands: Sequence[Candidate], ids: Collection[str]) -> NDArray[np.bool_] | None:
    """Which candidates ``ids`` names, for :meth:`ContextSelector.select`'s ``relevant_ids``.

    Args:
        cands: The pool.
        ids: Candidate ids (a collection, not one string).

    Returns:
        One flag per candidate, or ``None`` when ``ids`` is empty.

    Raises:
        ValueError: For a single string or an id no candidate has.

    Example:
        >>> relevant_mask([Candidate("a", id="x"), Candidate("b", id="y")], ["y"]).tolist()
        [False, True]
    """
    if isinstance(ids, str):
        raise ValueError("relevant_ids must be a collection of candidate ids, not one string")
    wanted = {str(i) for i in ids}
    if not wanted:
        return None
    have = [str(c.id) for c in cands]
    mask = np.array([cid in wanted for cid in have], dtype=bool)
    unknown = wanted.difference(have)
    if unknown:
        raise ValueError(f"relevant_ids names no candidate: {sorted(unknown)[:5]}")
    return mask


def _lift(problem: Problem, lifted: NDArray[np.bool_]) -> Problem:
    """``problem`` with the ``lifted`` candidates raised to its highest relevance.

    The lifted problem is kept in the pool's shared memo (as relevance feedback keeps its
    own), so an agent's repeated call over the same pool reuses its coverage kernel.
    """

    def build() -> Problem:
        rel = problem.relevance
        return problem.with_relevance(np.where(lifted, rel.max(), rel))

    base = problem.shared(("relevant_ids", lifted.tobytes()), build)
    return base.with_costs(
        tokens=problem.tokens,
        budget=problem.budget,
        mandatory=problem.mandatory,
        positions=problem.positions,
    )


def _problem(
    cands: Sequence[Candidate], tokens: NDArray[np.int64], budget: int, pool: _Pool
) -> Problem:
    """The :class:`~langchain_pacms.core.Problem` of a normalised pool."""
    mandatory, positions = _flags(cands)
    return Problem.build(
        pool.vectors,
        pool.query_vec,
        tokens=tokens,
        budget=budget,
        mandatory=mandatory,
        positions=positions,
        relevance=pool.relevance,
    )


_Lent = tuple["_Pool", NDArray[np.int64]]  # the last pool, and each text's row there (or -1)


@dataclass(frozen=True)
class _Pool:
    """One pool's embedded vectors (checked and reweighted), and its problem once built.

    For sparse vectors it also keeps the pool's vectors as the embedder gave them on the
    features the pool uses (``raw`` on ``features``, before reweighting), so that the next
    pool takes the rows of the texts it shares with this one from here (see :func:`_grown`).
    Dense vectors are taken over when the next pool starts with this one's texts: only the new
    texts are embedded, and ``base`` (this pool's problem) gives the next problem its rows and
    cosines (:meth:`~langchain_pacms.core.Problem.grown`).
    ``relevance`` is the embedder's own pool relevance, when it offers one
    (:class:`~langchain_pacms.embeddings.sparse.PoolRelevance`).
    """

    texts: tuple[str, ...]
    query: str
    embeddings: Embeddings | None  # the model that embedded them
    vectors: NDArray[np.float32]
    query_vec: NDArray[np.float32]
    problem: Problem | None = None
    raw: NDArray[np.float32] | None = None
    features: NDArray[np.int64] | None = None
    dim: int = 0  # the embedder's dimension
    relevance: NDArray[np.float32] | None = None
    base: Problem | None = None  # the last pool's problem, when this pool is it plus new rows


class ContextSelector:
    """Pick the context an LLM call keeps under a token budget.

    Holds one warm embedding cache and one token counter for its whole life; create it once and
    reuse it across turns. It also keeps its last pool: a call on the same texts reuses its
    similarities, and with a dense embedder a call on the last texts plus new ones (an agent's
    next turn, any query) embeds only the new texts and computes only their similarities
    (:meth:`~langchain_pacms.core.Problem.grown`); the picks are those of a fresh selector.

    Args:
        embeddings: Any LangChain ``Embeddings`` (``OllamaEmbeddings(model="nomic-embed-text")``
            reproduces the original PACMS setup); default: the built-in offline
            :class:`~langchain_pacms.embeddings.HashedTfidfEmbeddings`.
        profile: The :class:`EmbedderProfile` that ``pacms`` runs with (near-duplicate
            threshold, gain floor, pool IDF reweighting). Default: the one the embedder
            declares (``pacms_profile``), found once through the common wrappers
            (``CachedEmbeddings``, ``PrefixedEmbeddings``, LangChain's
            ``CacheBackedEmbeddings``), else the calibrated profile (``pacms`` reads each
            pool on its own cosine scale). :attr:`profile` shows it.
        memory_ceiling_bytes: Most bytes the selector keeps for its caches: a share
            :data:`EMBEDDING_SHARE` for the in-memory vectors (each counted as ``4 * dim``
            plus :data:`~langchain_pacms.embeddings.cache.ENTRY_OVERHEAD_BYTES`; about 12,000
            4096-d vectors at the default 256 MiB), a share :data:`SPARSE_ROWS_SHARE` for the
            sparse rows of the built-in embedder when the selector builds it (no
            ``embeddings`` given), and the rest for the token memo (each text counted at its
            own size plus :data:`~langchain_pacms.tokens.MEMO_OVERHEAD_BYTES`); the least
            recently used entries go first. It bounds the caches the selector builds; an
            embedder, ``CachedEmbeddings`` or ``TokenCounter`` passed in keeps its own caps.
        blas_threads: Most BLAS threads for the selector's own matrix products (scoring and
            solving; ``None``: leave BLAS as it is). Its products are small, so one thread is
            faster on a busy machine than many competing for cores. Set with ``threadpoolctl``
            (else OpenBLAS's own setter) for the duration of those products only, and restored
            after them.
        token_counter: A ``Callable[[str], int]``, an encoding name, or ``None`` for tiktoken's
            ``o200k_base`` built offline.
        strategy: Default strategy name (``pacms``, ``topk``, ``lastk``, ``mmr``, ``rag``, or a
            registered one) or a strategy callable.
        strategy_options: Default keyword options for the strategy. The strategy and its
            options are checked here (see :func:`~langchain_pacms.core.rejection`): an unknown
            name, an option the strategy does not take or a bad value raises ``ValueError``
            naming what it accepts.
        cache_store: Optional ``ByteStore`` that backs the embedding cache (then vectors
            live in the store, not in the selector's memory).
        strict: Raise on embedding failure instead of falling back to recency.
        embed_timeout: Seconds to wait for embeddings before falling back (``None``: no limit).
            Each timed call embeds on a daemon thread of its own, so concurrent calls do not
            queue, a stalled model costs only the call that met it (later calls embed the same
            texts afresh), and a stalled thread does not hold the interpreter at exit. The
            built-in embedder without a ``cache_store`` cannot stall: it embeds in the calling
            thread, and the limit bounds its waits for texts other calls are embedding. Async
            calls run blocking model calls on such daemon threads too, never on the event
            loop's default executor.

    Example:
        >>> selector = ContextSelector(strategy="topk")
        >>> selector.select(["alpha", "beta"], "alpha", budget_ratio=0.5).kept_ids
        ('0',)
    """

    def __init__(
        self,
        embeddings: Embeddings | None = None,
        *,
        token_counter: TokenCounter | Any = None,
        strategy: str | Strategy = "pacms",
        strategy_options: Mapping[str, Any] | None = None,
        cache_store: ByteStore | None = None,
        strict: bool = False,
        embed_timeout: float | None = None,
        profile: EmbedderProfile | None = None,
        memory_ceiling_bytes: int = DEFAULT_MEMORY_CEILING,
        blas_threads: int | None = 1,
    ) -> None:
        if profile is not None and not isinstance(profile, EmbedderProfile):
            raise TypeError(f"profile must be an EmbedderProfile, got {type(profile).__name__}")
        ceiling = _as_int(memory_ceiling_bytes)
        if ceiling is None or ceiling <= 0:
            raise ValueError(
                f"memory_ceiling_bytes must be a positive int, got {memory_ceiling_bytes!r}"
            )
        threads = None if blas_threads is None else _as_int(blas_threads)
        if blas_threads is not None and (threads is None or threads < 1):
            raise ValueError(f"blas_threads must be an int >= 1 or None, got {blas_threads!r}")
        self.blas_threads = threads
        vector_bytes = max(1, int(ceiling * EMBEDDING_SHARE))
        row_bytes = 0 if embeddings is not None else int(ceiling * SPARSE_ROWS_SHARE)
        base = embeddings if embeddings is not None else HashedTfidfEmbeddings(rows_bytes=row_bytes)
        self._profile = profile if profile is not None else resolve_profile(base)
        model = unwrap_embeddings(base)
        self._scorer = model if isinstance(model, PoolRelevance) else None
        self.memory_ceiling_bytes = ceiling
        self.embeddings = (
            base
            if isinstance(base, CachedEmbeddings) and cache_store is None
            else CachedEmbeddings(base, store=cache_store, max_bytes=vector_bytes)
        )
        self.token_counter = resolve_token_counter(
            token_counter, max_bytes=max(1, ceiling - vector_bytes - row_bytes)
        )
        self.strategy = strategy
        self.strategy_options = dict(strategy_options or {})
        self._check_strategy()
        self.strict = strict
        self.embed_timeout = check_embed_timeout(embed_timeout)
        self._failing = False
        self._last_pool: _Pool | None = None  # the newest pool solved (see _problem_of)

    @property
    def profile(self) -> EmbedderProfile:
        """The :class:`EmbedderProfile` this selector runs ``pacms`` with.

        Example:
            >>> ContextSelector().profile.name
            'hashed-tfidf'
        """
        return self._profile

    def __repr__(self) -> str:
        strategy = (
            self.strategy
            if isinstance(self.strategy, str)
            else getattr(self.strategy, "__name__", "custom")
        )
        return (
            f"ContextSelector(embeddings={self.embeddings.embeddings!r}, "
            f"profile={self._profile!r}, strategy={strategy!r}, "
            f"strategy_options={self.strategy_options!r}, strict={self.strict!r}, "
            f"embed_timeout={self.embed_timeout!r}, token_counter={self.token_counter.name!r}, "
            f"memory_ceiling_bytes={self.memory_ceiling_bytes!r}, "
            f"blas_threads={self.blas_threads!r})"
        )

    # -- shared preparation ----------------------------------------------------------------
    def _prepare(
        self,
        candidates: Sequence[CandidateInput],
        query: str,
        budget_tokens: int | None,
        budget_ratio: float | None,
    ) -> tuple[tuple[Candidate, ...], NDArray[np.int64], int]:
        if not isinstance(query, str):
            raise ValueError(f"query must be a str, got {type(query).__name__}")
        if not query.strip():
            raise ValueError("query is empty; pass the text the selection should be relevant to")
        cands = _normalise(candidates)
        tokens = np.array(self._costs(cands), dtype=np.int64)
        budget = _resolve_budget(int(tokens.sum()), budget_tokens, budget_ratio)
        return cands, tokens, budget

    def _costs(self, cands: Sequence[Candidate]) -> list[int]:
        counted = iter(self.token_counter.count_many([c.text for c in cands if c.tokens is None]))
        return [next(counted) if c.tokens is None else c.tokens for c in cands]

    def count_tokens(self, candidates: Sequence[CandidateInput]) -> list[int]:
        """Each candidate's token cost, as budgets and selections count it.

        A candidate's own ``tokens`` wins; otherwise its text is counted with
        :attr:`token_counter`.

        Args:
            candidates: Texts or :class:`Candidate` objects.

        Returns:
            One count per candidate, in order.

        Raises:
            ValueError: If a candidate is malformed (as in :meth:`select`).

        Example:
            >>> ContextSelector().count_tokens(["hello world", Candidate("x", tokens=7)])
            [2, 7]
        """
        return self._costs(_normalise(candidates))

    def reweight_pool(
        self, vectors: NDArray[np.float32], query: NDArray[np.float32]
    ) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """The profile's reweighting of one pool, as :meth:`select` applies it before solving.

        With :attr:`EmbedderProfile.idf_reweighting` (the built-in lexical embedder's profile),
        features are weighted by their inverse document frequency in the pool; other
        embedders' vectors pass through. Harnesses that build
        :class:`~langchain_pacms.core.Problem` instances themselves call this to see the
        vectors that :meth:`select` would solve over.

        Args:
            vectors: ``(n, d)`` document embeddings of the pool, from :attr:`embeddings`.
            query: ``(d,)`` query embedding.

        Returns:
            The vectors and the query to solve over.

        Example:
            >>> selector = ContextSelector()
            >>> docs = selector.embeddings.embed_matrix(["red apples", "green apples"])
            >>> query = selector.embeddings.embed_matrix(["red"], kind="query")[0]
            >>> vectors, q = selector.reweight_pool(docs, query)
            >>> vectors.shape == docs.shape
            True
        """
        if self._profile.idf_reweighting and vectors.size:
            with limit_blas_threads(self.blas_threads):
                return idf_reweight(vectors, query)
        return vectors, query

    def _same_pool(self, texts: list[str], query: str) -> _Pool | None:
        """The last pool solved, when ``texts`` and ``query`` are exactly its own."""
        last = self._last_pool
        if (
            last is None
            or last.embeddings is not self.embeddings
            or last.query != query
            or len(last.texts) != len(texts)
            or last.texts != tuple(texts)
        ):
            return None
        return last

    def _problem_of(
        self,
        pool: _Pool,
        cands: Sequence[Candidate],
        tokens: NDArray[np.int64],
        budget: int,
        *,
        remember: bool,
    ) -> Problem:
        """The pool's problem; the last pool's own, with these costs, when it is the same pool.

        A problem over the same texts and query shares the last one's vectors and memo (its
        cosines and coverage kernel), so the picks are exactly those of a fresh problem. A
        pool that is the last one plus new texts (any query) grows the last problem (its
        cosines are carried over where that gives the same bits). Only the newest pool of at
        most :data:`~langchain_pacms.core.COSINE_MATRIX_LIMIT` candidates is kept.
        """
        mandatory, positions = _flags(cands)
        if pool.problem is not None:
            return pool.problem.with_costs(
                tokens=tokens, budget=budget, mandatory=mandatory, positions=positions
            )
        if pool.base is not None:
            problem = pool.base.grown(
                pool.vectors[pool.base.n :],
                pool.query_vec,
                tokens=tokens,
                budget=budget,
                mandatory=mandatory,
                positions=positions,
                relevance=pool.relevance,
            )
        else:
            problem = _problem(cands, tokens, budget, pool)
        if remember and pool.embeddings is not None and len(cands) <= COSINE_MATRIX_LIMIT:
            self._last_pool = replace(pool, problem=problem, base=None)
        return problem

    def _note_failure(self, err: BaseException) -> str:
        message = f"{type(err).__name__}: {err}"
        if not self._failing:
            logger.warning("embedding failed (%s); falling back to recency (lastk)", message)
        self._failing = True
        return message

    def _finish(
        self,
        cands: tuple[Candidate, ...],
        tokens: NDArray[np.int64],
        budget: int,
        vectors: NDArray[np.float32] | None,
        query_vec: NDArray[np.float32] | None,
        strategy: str | Strategy,
        options: Mapping[str, Any],
        error: str | None,
        timings: dict[str, float],
        started: float,
        *,
        pool: _Pool | None = None,
        lifted: NDArray[np.bool_] | None = None,
        wordless: bool = False,
    ) -> Selection:
        n = len(cands)
        if pool is None and vectors is not None and query_vec is not None:
            pool = _Pool((), "", None, vectors, query_vec)
        recency = n > 0 and pool is None
        fell_back = recency and not wordless
        if recency:
            zero = np.zeros(1, dtype=np.float32)
            pool = _Pool((), "", None, np.zeros((n, 1), dtype=np.float32), zero)
            # Recency that keeps what fits: a too-large newest item is skipped, not a stop.
            strategy, options = "lastk", {"contiguous": False}
        if n and not fell_back:
            self._failing = False
        t0 = time.perf_counter()
        if n == 0:
            # Nothing to embed or choose: an empty selection, not a fallback.
            pick = Pick(np.zeros(0, dtype=np.int64), np.zeros(0))
            relevance = np.zeros(0, dtype=np.float32)
        else:
            assert pool is not None
            with limit_blas_threads(self.blas_threads):
                problem = self._problem_of(pool, cands, tokens, budget, remember=not recency)
                if lifted is not None and not recency:
                    problem = _lift(problem, lifted)
                pick = solve(problem, strategy, **options)
                relevance = problem.relevance
        timings["solve"] = time.perf_counter() - t0
        timings["total"] = time.perf_counter() - started
        ids = [str(c.id) for c in cands]
        kept_mask = np.zeros(n, dtype=bool)
        kept_mask[pick.order] = True
        kept_tokens = int(tokens[kept_mask].sum())
        total = int(tokens.sum())
        name = strategy if isinstance(strategy, str) else getattr(strategy, "__name__", "custom")
        order = pick.order.tolist()
        scores = np.asarray(pick.scores, dtype=np.float64)[pick.order]
        info = dict(pick.info or {})
        if wordless:
            info["query_has_no_words"] = True
        return Selection(
            candidates=cands,
            kept_ids=tuple(i for i, k in zip(ids, kept_mask.tolist()) if k),
            pick_order=tuple(ids[j] for j in order),
            relevance=MappingProxyType(dict(zip(ids, relevance.tolist()))),
            gains=MappingProxyType(
                {
                    ids[j]: g
                    for j, g, ok in zip(order, scores.tolist(), np.isfinite(scores).tolist())
                    if ok
                }
            ),
            tokens=MappingProxyType(dict(zip(ids, tokens.tolist()))),
            tokens_total=total,
            tokens_kept=kept_tokens,
            tokens_dropped=total - kept_tokens,
            budget=budget,
            strategy=name,
            over_budget=pick.over_budget,
            fell_back=fell_back,
            error=error,
            timings=MappingProxyType(timings),
            info=MappingProxyType(info),
        )

    @property
    def similarity_threshold(self) -> float:
        """The ``pacms`` kernel threshold: :attr:`profile`'s ``similarity_threshold``.

        Example:
            >>> ContextSelector().similarity_threshold  # the built-in lexical embedder
            0.85
        """
        return self._profile.similarity_threshold

    @property
    def min_gain(self) -> float:
        """The ``pacms`` absolute gain floor: :attr:`profile`'s ``min_gain``.

        Example:
            >>> ContextSelector().min_gain  # the built-in lexical embedder
            0.01
        """
        return self._profile.min_gain

    @property
    def relevance_feedback(self) -> float:
        """The ``pacms`` relevance feedback weight: :attr:`profile`'s ``relevance_feedback``.

        Example:
            >>> ContextSelector().relevance_feedback  # the built-in lexical embedder
            0.6
        """
        return self._profile.relevance_feedback

    def resolve_options(
        self, strategy: str | Strategy | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[str | Strategy, dict[str, Any]]:
        """The strategy and keyword options a selection with these arguments would run.

        Call options are merged over the selector's ``strategy_options`` when the strategy is
        the selector's own. ``pacms`` gets the embedder's :attr:`similarity_threshold`,
        :attr:`min_gain` and :attr:`relevance_feedback` unless they are given, and
        ``calibrate=True`` when :attr:`profile` is calibrated (an embedder that declares no
        profile); every other strategy is left as given.

        Args:
            strategy: A strategy override, or ``None`` for the selector's default.
            options: Options given for the call.

        Returns:
            ``(strategy, options)``, ready for :func:`~langchain_pacms.core.solve`.

        Example:
            >>> ContextSelector().resolve_options("pacms", {"gain_floor": 0.1})
            ('pacms', {'gain_floor': 0.1, 'similarity_threshold': 0.85, 'min_gain': 0.01, 'relevance_feedback': 0.6})
        """  # noqa: E501
        given = dict(options or {})
        if strategy is None or strategy == self.strategy:
            name, opts = self.strategy, {**self.strategy_options, **given}
        else:
            name, opts = strategy, given
        if name == "pacms":
            opts.setdefault("similarity_threshold", self.similarity_threshold)
            opts.setdefault("min_gain", self.min_gain)
            opts.setdefault("relevance_feedback", self.relevance_feedback)
            if self._profile.calibration is not None:
                opts.setdefault("calibrate", True)
        return name, opts

    def _check_strategy(self) -> None:
        """Raise now for an unknown strategy, or options it does not take or rejects."""
        strategy = self.strategy
        if isinstance(strategy, str):
            get_strategy(strategy)  # unknown: raises, listing the registered names
        elif not callable(strategy):
            raise ValueError(f"strategy must be a strategy name or a callable, got {strategy!r}")
        reason = rejection(*self.resolve_options())
        if reason is not None:
            label = strategy if isinstance(strategy, str) else getattr(strategy, "__name__", "?")
            raise ValueError(
                f"strategy {label!r} rejected strategy_options {self.strategy_options!r}: {reason}"
            )

    # -- for selectors that score elsewhere ---------------------------------------------------
    def resolve(
        self,
        candidates: Sequence[CandidateInput],
        query: str,
        *,
        budget_tokens: int | None = None,
        budget_ratio: float | None = None,
    ) -> tuple[tuple[Candidate, ...], NDArray[np.int64], int]:
        """The inputs :meth:`select` works on: candidates, their token costs and the budget.

        Candidates are normalised (ids and positions filled in from the index), costs counted
        as :meth:`count_tokens` does and the budget resolved; bad input raises as in
        :meth:`select`. A selector that scores elsewhere (a
        :class:`~langchain_pacms.remote.RemoteSelector`) sends these, so both sides agree on
        every number.

        Args:
            candidates: Strings or :class:`Candidate` objects, in chronological order.
            query: Text the selection should be relevant to (checked, not used).
            budget_tokens: Absolute token budget.
            budget_ratio: Budget as a fraction of the pool's tokens, in ``(0, 1]``.

        Returns:
            ``(candidates, tokens, budget)``.

        Raises:
            ValueError: For bad input, as in :meth:`select`.

        Example:
            >>> cands, tokens, budget = ContextSelector().resolve(
            ...     ["hello world", "hi"], "hello", budget_ratio=0.5)
            >>> [c.id for c in cands], tokens.tolist(), budget
            (['0', '1'], [2, 1], 1)
        """
        return self._prepare(candidates, query, budget_tokens, budget_ratio)

    def recency(
        self,
        candidates: Sequence[CandidateInput],
        query: str,
        *,
        budget_tokens: int | None = None,
        budget_ratio: float | None = None,
        error: BaseException | None = None,
    ) -> Selection:
        """The selection :meth:`select` falls back to: the newest candidates that fit the budget.

        Recency (``lastk``) that skips a newest item too large for what is left, with
        ``fell_back=True`` for a non-empty pool. ``error`` is what went wrong: it becomes the
        selection's ``error`` and is logged as a warning, once per streak of failures (the
        streak :meth:`select` keeps for embedding failures; :meth:`note_recovery` ends it).
        Under ``strict=True`` the caller should raise instead; this method never does for a
        failure.

        Args:
            candidates: Strings or :class:`Candidate` objects, in chronological order.
            query: Text the selection was for (checked, not used).
            budget_tokens: Absolute token budget.
            budget_ratio: Budget as a fraction of the pool's tokens, in ``(0, 1]``.
            error: The failure that forced the fallback, if any.

        Returns:
            The recency :class:`Selection`.

        Raises:
            ValueError: For bad input, as in :meth:`select`.

        Example:
            >>> sel = ContextSelector().recency(["a b c", "d e f", "g h i"], "x", budget_tokens=7)
            >>> sel.kept_ids, sel.fell_back, sel.strategy
            (('1', '2'), True, 'lastk')
        """
        started = time.perf_counter()
        cands, tokens, budget = self._prepare(candidates, query, budget_tokens, budget_ratio)
        timings = {"tokens": time.perf_counter() - started}
        message = None if error is None else self._note_failure(error)
        return self._finish(
            cands, tokens, budget, None, None, "lastk", {}, message, timings, started
        )

    def note_recovery(self) -> None:
        """End the failure streak: the next fallback logs its warning again.

        :meth:`select` does this after every selection that did not fall back; a selector
        that scores elsewhere calls it after each good answer.

        Example:
            >>> selector = ContextSelector()
            >>> selector.recency(["a"], "q", budget_tokens=1, error=OSError("down")).error
            'OSError: down'
            >>> selector.note_recovery()  # the service answered again: a new outage warns
        """
        self._failing = False

    # -- sync ---------------------------------------------------------------------------------
    def _left(self, deadline: float | None) -> float | None:
        """Seconds left until ``deadline`` (``time.monotonic()``), or ``None`` without one."""
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _deadline(self) -> float | None:
        if self.embed_timeout is None:
            return None
        return time.monotonic() + self.embed_timeout

    def _rows_from_last(self, texts: list[str]) -> tuple[_Lent | None, list[str]]:
        """What the last pool lends this one, and the texts to embed.

        Sparse vectors: the rows of every text the two pools share. Dense vectors: the last
        pool's rows when this pool starts with its texts (and no pool weighting changes them).
        """
        last = self._last_pool
        if last is None or last.embeddings is not self.embeddings:
            return None, texts
        if last.raw is None:
            size = len(last.texts)
            if (
                last.problem is None
                or len(texts) < size
                or self._profile.idf_reweighting
                or self._scorer is not None
                or tuple(texts[:size]) != last.texts
            ):
                return None, texts
            return (last, np.arange(size)), texts[size:]
        index = {t: i for i, t in enumerate(last.texts)}
        where = np.array([index.get(t, -1) for t in texts], dtype=np.int64)
        return (last, where), [t for t, w in zip(texts, where.tolist()) if w < 0]

    def _pooled(
        self,
        texts: list[str],
        query: str,
        lent: _Lent | None,
        fresh: NDArray[np.float32],
        query_vec: NDArray[np.float32],
    ) -> _Pool:
        """The pool's vectors: compacted, checked and reweighted (the sync and async path's)."""
        if lent is not None and lent[0].raw is None:
            return self._appended(texts, query, lent[0], fresh, query_vec)
        if lent is None:
            vectors, q, features = _used_features(fresh, query_vec)
            dim = int(fresh.shape[1]) if fresh.ndim == 2 else 0
        else:
            vectors, q, features = _grown(*lent, fresh, query_vec)
            dim = lent[0].dim
        checked, q_checked = _checked_vectors(vectors, q)
        reweighted, q_reweighted = self.reweight_pool(checked, q_checked)
        return _Pool(
            tuple(texts),
            query,
            self.embeddings,
            reweighted,
            q_reweighted,
            raw=None if features is None else vectors,
            features=features,
            dim=dim,
            relevance=self.pool_relevance(texts, query),
        )

    def _appended(
        self,
        texts: list[str],
        query: str,
        last: _Pool,
        fresh: NDArray[np.float32],
        query_vec: NDArray[np.float32],
    ) -> _Pool:
        """A dense pool that is ``last`` plus the texts embedded as ``fresh`` (checked here)."""
        dim = last.vectors.shape[1]
        if fresh.size:
            fresh, query_vec = _checked_vectors(fresh, query_vec, others=True)
            vectors = np.concatenate([last.vectors, fresh])
        else:  # the same texts under another query: its dimension is checked on one old row
            _checked_vectors(last.vectors[:1], query_vec, others=True)
            vectors = last.vectors
        return _Pool(
            tuple(texts), query, self.embeddings, vectors, query_vec, dim=dim, base=last.problem
        )

    def pool_relevance(self, texts: Sequence[str], query: str) -> NDArray[np.float32] | None:
        """The embedder's own relevance of a pool to the query, if it offers one.

        The built-in embedder scores relevance from sparse rows
        (:meth:`~langchain_pacms.embeddings.HashedTfidfEmbeddings.pool_relevance`); every
        strategy then ranks by it, while the vectors give the similarities between candidates.
        The embedder is found under the common wrappers, as :attr:`profile` is. For other
        embedders (and a built-in one made with ``relevance_buckets=None``) this is
        ``None`` and relevance is the cosine of the vectors with the query.

        Args:
            texts: The pool's texts.
            query: The query.

        Returns:
            ``(len(texts),)`` relevances in ``[0, 1]``, or ``None``.

        Example:
            >>> ContextSelector().pool_relevance(["red apples", "pears"], "red").round(3)
            array([0.577, 0.   ], dtype=float32)
        """
        model = self._scorer
        if model is None:
            return None
        scores = model.pool_relevance(texts, query)
        if scores is None:
            return None
        scores = np.asarray(scores, dtype=np.float32)
        if scores.shape != (len(texts),) or not np.isfinite(scores).all():
            raise EmbeddingError(
                f"{type(model).__name__}.pool_relevance gave {scores.shape} values for "
                f"{len(texts)} texts, or non-finite ones"
            )
        return scores

    def _embed(self, texts: list[str], query: str, deadline: float | None) -> _Pool:
        last, todo = self._rows_from_last(texts)
        fresh = self.embeddings.embed_matrix(todo, timeout=self._left(deadline))
        query_vec = self.embeddings.embed_matrix(
            [query], kind="query", timeout=self._left(deadline)
        )[0]
        return self._pooled(texts, query, last, fresh, query_vec)

    def select(
        self,
        candidates: Sequence[CandidateInput],
        query: str,
        *,
        budget_tokens: int | None = None,
        budget_ratio: float | None = None,
        strategy: str | Strategy | None = None,
        relevant_ids: Collection[str] = (),
        **options: Any,
    ) -> Selection:
        """Select candidates for ``query`` under a token budget.

        Args:
            candidates: Strings or :class:`Candidate` objects, in chronological order.
            query: Text the kept context should serve (usually the latest user message).
            budget_tokens: Absolute token budget.
            budget_ratio: Budget as a fraction of the pool's tokens, in ``(0, 1]``.
            strategy: Override the selector's default strategy for this call.
            relevant_ids: Ids of candidates known to matter whatever their words say (the hook
                passes tool results whose values later tool calls took up): each one's
                relevance is raised to the highest relevance in the pool before the strategy
                runs, so every strategy that reads relevance sees it.
            **options: Strategy options (e.g. ``relevance_weight=0.3`` for ``pacms``,
                ``lambda_mult=0.7`` for ``mmr``).

        Returns:
            The :class:`Selection`.

        Raises:
            ValueError: For bad input (empty query, bad budget, duplicate ids, non-text content,
                an id in ``relevant_ids`` that no candidate has).

        Example:
            >>> selector = ContextSelector()
            >>> pool = ["blue plums", "red apples"]
            >>> selector.select(pool, "red", budget_tokens=3).kept_ids
            ('1',)
            >>> selector.select(pool, "red", budget_tokens=3, relevant_ids=["0"]).kept_ids
            ('0',)
        """
        steps = self._selecting(
            candidates, query, budget_tokens, budget_ratio, strategy, relevant_ids, options
        )
        return drive(steps, lambda texts: self._embed_with_timeout(texts, query))

    def _selecting(
        self,
        candidates: Sequence[CandidateInput],
        query: str,
        budget_tokens: int | None,
        budget_ratio: float | None,
        strategy: str | Strategy | None,
        relevant_ids: Collection[str],
        options: Mapping[str, Any],
    ) -> Generator[list[str], _Pool, Selection]:
        """The steps of :meth:`select` and :meth:`aselect` (see :mod:`langchain_pacms._steps`).

        They yield the texts to embed (unless the last pool is this one) and take back their
        pool; a failed embedding falls back to recency, or is raised under ``strict``.
        """
        started = time.perf_counter()
        cands, tokens, budget = self._prepare(candidates, query, budget_tokens, budget_ratio)
        lifted = relevant_mask(cands, relevant_ids)
        timings = {"tokens": time.perf_counter() - started}
        name, opts = self.resolve_options(strategy, options)
        error = None
        wordless = False
        t0 = time.perf_counter()
        texts = [c.text for c in cands]
        pool = self._same_pool(texts, query)
        if cands and pool is None:
            try:
                pool = yield texts
            except Exception as err:
                if isinstance(err, EmbeddingError) and err.zero_query and not _has_words(query):
                    wordless = True  # nothing to score by: recency, and nothing failed
                elif self.strict:
                    raise
                else:
                    error = self._note_failure(err)
        timings["embed"] = time.perf_counter() - t0
        return self._finish(
            cands,
            tokens,
            budget,
            None,
            None,
            name,
            opts,
            error,
            timings,
            started,
            pool=pool,
            lifted=lifted,
            wordless=wordless,
        )

    @property
    def _cannot_stall(self) -> bool:
        """Whether embedding is the built-in model's in-process work, with no store to wait on.

        Such a call needs no thread of its own to be timed out: it only waits (with the
        deadline) for the texts other calls are embedding.
        """
        cache = self.embeddings
        return cache.store is None and isinstance(cache.embeddings, HashedTfidfEmbeddings)

    def _embed_with_timeout(self, texts: list[str], query: str) -> _Pool:
        deadline = self._deadline()
        if self.embed_timeout is None or self._cannot_stall:
            return self._embed(texts, query, deadline)
        return call_with_timeout(
            lambda: self._embed(texts, query, deadline), self.embed_timeout, what="embedding"
        )

    def prepare(
        self,
        candidates: Sequence[CandidateInput],
        query: str,
        *,
        budget_tokens: int | None = None,
        budget_ratio: float | None = None,
    ) -> Problem:
        """The :class:`~langchain_pacms.core.Problem` that :meth:`select` would solve.

        The same steps as :meth:`select` up to the strategy: candidates normalised, token
        costs counted, the budget resolved, texts and query embedded (with
        :attr:`embed_timeout`), the vectors checked and reweighted by the profile. Solve it
        with :func:`~langchain_pacms.core.solve` and the options of :meth:`resolve_options` to
        get :meth:`select`'s picks; a harness that sweeps budgets links problems with
        :meth:`~langchain_pacms.core.Problem.with_budget`. Unlike :meth:`select` there is no
        recency fallback: an embedding failure raises.

        Args:
            candidates: Strings or :class:`Candidate` objects (at least one).
            query: Text the selection should be relevant to.
            budget_tokens: Absolute token budget.
            budget_ratio: Budget as a fraction of the pool's tokens, in ``(0, 1]``.

        Returns:
            The problem, indexed like ``candidates``.

        Raises:
            ValueError: For bad input, as in :meth:`select`, or no candidates.
            EmbeddingError: If the embedder's vectors cannot be scored.

        Example:
            >>> from langchain_pacms.core import solve
            >>> selector = ContextSelector()
            >>> problem = selector.prepare(["red apples", "green pears"], "red", budget_ratio=0.5)
            >>> name, options = selector.resolve_options("topk")
            >>> solve(problem, name, **options).order.tolist()
            [0]
        """
        steps = self._preparing(candidates, query, budget_tokens, budget_ratio)
        return drive(steps, lambda texts: self._embed_with_timeout(texts, query))

    def _preparing(
        self,
        candidates: Sequence[CandidateInput],
        query: str,
        budget_tokens: int | None,
        budget_ratio: float | None,
    ) -> Generator[list[str], _Pool, Problem]:
        """The steps of :meth:`prepare` and :meth:`aprepare`: they yield the texts to embed."""
        cands, tokens, budget = self._prepare(candidates, query, budget_tokens, budget_ratio)
        if not cands:
            raise ValueError("prepare needs at least one candidate")
        pool = yield [c.text for c in cands]
        with limit_blas_threads(self.blas_threads):
            return _problem(cands, tokens, budget, pool)

    # -- async --------------------------------------------------------------------------------
    async def _aembed(self, texts: list[str], query: str, deadline: float | None) -> _Pool:
        last, todo = self._rows_from_last(texts)
        fresh = await self.embeddings.aembed_matrix(todo, timeout=self._left(deadline))
        query_vec = (
            await self.embeddings.aembed_matrix([query], kind="query", timeout=self._left(deadline))
        )[0]
        return self._pooled(texts, query, last, fresh, query_vec)

    async def _aembed_with_timeout(self, texts: list[str], query: str) -> _Pool:
        if self.embed_timeout is None:
            return await self._aembed(texts, query, None)
        try:
            return await asyncio.wait_for(
                self._aembed(texts, query, self._deadline()), self.embed_timeout
            )
        except asyncio.TimeoutError:  # empty message: say which limit passed
            raise timeout_error("embedding", self.embed_timeout) from None

    async def aselect(
        self,
        candidates: Sequence[CandidateInput],
        query: str,
        *,
        budget_tokens: int | None = None,
        budget_ratio: float | None = None,
        strategy: str | Strategy | None = None,
        relevant_ids: Collection[str] = (),
        **options: Any,
    ) -> Selection:
        """Async twin of :meth:`select` (embeds with the model's async API)."""
        steps = self._selecting(
            candidates, query, budget_tokens, budget_ratio, strategy, relevant_ids, options
        )
        return await adrive(steps, lambda texts: self._aembed_with_timeout(texts, query))

    async def aprepare(
        self,
        candidates: Sequence[CandidateInput],
        query: str,
        *,
        budget_tokens: int | None = None,
        budget_ratio: float | None = None,
    ) -> Problem:
        """Async twin of :meth:`prepare` (embeds with the model's async API).

        Example:
            >>> import asyncio
            >>> selector = ContextSelector()
            >>> problem = asyncio.run(selector.aprepare(["a b", "c"], "a", budget_tokens=2))
            >>> (problem.n, problem.budget)
            (2, 2)
        """
        steps = self._preparing(candidates, query, budget_tokens, budget_ratio)
        return await adrive(steps, lambda texts: self._aembed_with_timeout(texts, query))
