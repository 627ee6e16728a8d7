"""``ContextSelector``: candidates + query + budget -> :class:`Selection`, in process."""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.stores import ByteStore
from numpy.typing import NDArray

from langchain_pacms._steps import adrive, drive, method_parameters_of
from langchain_pacms._timeout import check_embed_timeout
from langchain_pacms.blas import blas_threads as limit_blas_threads
from langchain_pacms.budget import BudgetInput
from langchain_pacms.core import COSINE_MATRIX_LIMIT, Problem, Strategy, rejection, solve
from langchain_pacms.embeddings import CachedEmbeddings
from langchain_pacms.embeddings.profile import EmbedderProfile, resolve_profile, unwrap_embeddings
from langchain_pacms.embeddings.sparse import PoolRelevance
from langchain_pacms.selector.caches import DEFAULT_MEMORY_CEILING, cache_ceiling, selector_caches
from langchain_pacms.selector.fallback import FailureStreak, no_words, unscored_selection
from langchain_pacms.selector.inputs import (
    as_int,
    normalise,
    relevant_mask,
    resolve_inputs,
    token_costs,
)
from langchain_pacms.selector.options import check_strategy, resolve_options
from langchain_pacms.selector.pool import Pool, PoolEmbedder, lift, pool_problem, reused_problem
from langchain_pacms.selector.protocol import SelectArguments, select_arguments
from langchain_pacms.selector.selection import (
    Candidate,
    CandidateInput,
    Selection,
    selection_of,
    strategy_label,
)
from langchain_pacms.tokens import TokenCounter

__all__ = ["ContextSelector"]


class ContextSelector:
    """Pick the context an LLM call keeps under a token budget.

    Keeps one warm embedding cache and token counter: create it once and reuse it. A call on
    the last pool's texts (plus new ones) reuses that pool's work, with a fresh selector's picks.

    Args:
        embeddings: Any LangChain ``Embeddings``; default: the built-in offline
            :class:`~langchain_pacms.embeddings.HashedTfidfEmbeddings`.
        profile: How ``pacms`` reads the embedder's cosines. Default: the one the embedder
            declares (``pacms_profile``, found through common wrappers), else the calibrated one.
        memory_ceiling_bytes: Most bytes for the selector's caches; components passed in keep
            their own caps.
        blas_threads: Most BLAS threads for the selector's own matrix products, set only while
            they run (``None``: leave BLAS as it is).
        token_counter: A ``Callable[[str], int]``, an encoding name, or ``None`` for tiktoken's
            ``o200k_base`` built offline.
        strategy: Default strategy: a name (``pacms``, ``topk``, ``lastk``, ``mmr``, ``rag``, or
            a registered one) or a callable.
        strategy_options: Default strategy options (a bad one raises ``ValueError`` here).
        cache_store: A ``ByteStore`` to back the embedding cache.
        strict: Raise on embedding failure instead of falling back to recency.
        embed_timeout: Seconds to wait for embeddings before falling back (``None``: no limit);
            timed calls embed on daemon threads of their own.

    Raises:
        ValueError: For ``embeddings`` that is not a model with ``embed_documents`` and
            ``embed_query`` (a class instead of an instance, a string), or a bad setting.
        TypeError: For a ``profile`` that is not an ``EmbedderProfile``.

    Example:
        >>> selector = ContextSelector(strategy="topk")
        >>> selector.select(["alpha", "beta"], "alpha", ("ratio", 0.5)).kept_ids
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
        _check_embeddings(embeddings)
        ceiling = cache_ceiling(memory_ceiling_bytes)
        threads = None if blas_threads is None else as_int(blas_threads)
        if blas_threads is not None and (threads is None or threads < 1):
            raise ValueError(f"blas_threads must be an int >= 1 or None, got {blas_threads!r}")
        model, cache, self.token_counter = selector_caches(
            embeddings, ceiling=ceiling, cache_store=cache_store, token_counter=token_counter
        )
        profile = profile if profile is not None else resolve_profile(model)
        scorer = unwrap_embeddings(model)
        self.memory_ceiling_bytes = ceiling
        self.strategy = strategy
        self.strategy_options = dict(strategy_options or {})
        check_strategy(strategy, self.strategy_options, profile)
        self.strict = strict
        self._pools = PoolEmbedder(
            cache,
            profile,
            scorer if isinstance(scorer, PoolRelevance) else None,
            timeout=check_embed_timeout(embed_timeout),
            blas_threads=threads,
        )
        self._streak = FailureStreak()
        self._last_pool: Pool | None = None  # the newest pool solved, for the next to reuse

    @property
    def embeddings(self) -> CachedEmbeddings:
        """The selector's embedding cache, around the model it embeds with."""
        return self._pools.embeddings

    @property
    def profile(self) -> EmbedderProfile:
        """The :class:`EmbedderProfile` this selector runs ``pacms`` with.

        Example:
            >>> ContextSelector().profile.name  # the built-in lexical embedder's
            'hashed-tfidf'
        """
        return self._pools.profile

    @property
    def embed_timeout(self) -> float | None:
        """Seconds to wait for embeddings before falling back (``None``: no limit)."""
        return self._pools.timeout

    @property
    def blas_threads(self) -> int | None:
        """Most BLAS threads for the selector's own matrix products (``None``: as BLAS is)."""
        return self._pools.blas_threads

    @property
    def similarity_threshold(self) -> float:
        """The ``pacms`` kernel threshold: :attr:`profile`'s ``similarity_threshold``."""
        return self.profile.similarity_threshold

    @property
    def min_gain(self) -> float:
        """The ``pacms`` absolute gain floor: :attr:`profile`'s ``min_gain``."""
        return self.profile.min_gain

    @property
    def relevance_feedback(self) -> float:
        """The ``pacms`` relevance feedback weight: :attr:`profile`'s ``relevance_feedback``."""
        return self.profile.relevance_feedback

    def __repr__(self) -> str:
        return (
            f"ContextSelector(embeddings={self.embeddings.embeddings!r}, "
            f"profile={self.profile!r}, strategy={strategy_label(self.strategy)!r}, "
            f"strategy_options={self.strategy_options!r}, strict={self.strict!r}, "
            f"embed_timeout={self.embed_timeout!r}, token_counter={self.token_counter.name!r}, "
            f"memory_ceiling_bytes={self.memory_ceiling_bytes!r}, "
            f"blas_threads={self.blas_threads!r})"
        )

    def count_tokens(self, candidates: Sequence[CandidateInput]) -> list[int]:
        """Each candidate's token cost: its own ``tokens``, else its text counted.

        Example:
            >>> ContextSelector().count_tokens(["hello world", Candidate("x", tokens=7)])
            [2, 7]
        """
        return token_costs(normalise(candidates), self.token_counter)

    def resolve_options(
        self, strategy: str | Strategy | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[str | Strategy, dict[str, Any]]:
        """The strategy and options a selection would run (see :mod:`~langchain_pacms.selector.options`).

        Example:
            >>> ContextSelector().resolve_options("pacms", {"gain_floor": 0.1})
            ('pacms', {'gain_floor': 0.1, 'similarity_threshold': 0.85, 'min_gain': 0.01, 'relevance_feedback': 0.6})
        """  # noqa: E501
        return resolve_options(
            self.strategy, self.strategy_options, self.profile, strategy, options
        )

    def resolve(
        self, candidates: Sequence[CandidateInput], query: str, budget: BudgetInput
    ) -> tuple[tuple[Candidate, ...], NDArray[np.int64], int]:
        """What :meth:`select` works on: ``(candidates, tokens, budget)``, the budget in tokens.

        Example:
            >>> _, tokens, budget = ContextSelector().resolve(["hello world", "hi"], "hi", 2)
            >>> tokens.tolist(), budget
            ([2, 1], 2)
        """
        return resolve_inputs(candidates, query, budget, self.token_counter)

    def recency(
        self,
        candidates: Sequence[CandidateInput],
        query: str,
        budget: BudgetInput,
        *,
        error: BaseException | None = None,
    ) -> Selection:
        """The selection :meth:`select` falls back to: the newest candidates that fit the budget.

        ``error`` becomes the selection's ``error``, logged once per streak of failures; it never
        raises for a failure, even under ``strict``.

        Example:
            >>> sel = ContextSelector().recency(["a b c", "d e f", "g h i"], "x", budget=7)
            >>> sel.kept_ids, sel.fell_back, sel.strategy
            (('1', '2'), True, 'lastk')
        """
        started = time.perf_counter()
        cands, tokens, allowed = self.resolve(candidates, query, budget)
        timings = {"tokens": time.perf_counter() - started}
        message = None if error is None else self._streak.note(error)
        return unscored_selection(
            cands, tokens, allowed, "lastk", error=message, timings=timings, started=started
        )

    def note_recovery(self) -> None:
        """End the failure streak: the next fallback logs its warning again.

        Example:
            >>> ContextSelector().note_recovery()
        """
        self._streak.end()

    def reweight_pool(
        self, vectors: NDArray[np.float32], query: NDArray[np.float32]
    ) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """The profile's reweighting of a pool's vectors (IDF over the pool, or none).

        Example:
            >>> selector = ContextSelector()
            >>> docs = selector.embeddings.embed_matrix(["red apples", "green apples"])
            >>> selector.reweight_pool(docs, docs[0])[0].shape == docs.shape
            True
        """
        return self._pools.reweight(vectors, query)

    def pool_relevance(self, texts: Sequence[str], query: str) -> NDArray[np.float32] | None:
        """The embedder's own relevance of each text to the query, or ``None`` (then: the cosine).

        Example:
            >>> ContextSelector().pool_relevance(["red apples", "pears"], "red").round(3)
            array([0.577, 0.   ], dtype=float32)
        """
        return self._pools.relevance(texts, query)

    @method_parameters_of(select_arguments)
    def select(self, *args: Any, **kwargs: Any) -> Selection:  # noqa: D417 (*args: the parameters)
        """Select candidates for ``query`` under a token budget.

        Args:
            candidates: Strings or :class:`Candidate` objects, in chronological order.
            query: Text the kept context should serve (usually the latest user message).
            budget: A :class:`~langchain_pacms.budget.Budget`, a number of tokens, or
                ``("tokens", n)`` / ``("ratio", x)`` (a share of the pool's tokens).
            strategy: This call's strategy, instead of the selector's default.
            relevant_ids: Ids of candidates known to matter: their relevance is raised to the
                pool's highest before the strategy runs.
            **options: Strategy options (e.g. ``relevance_weight=0.3`` for ``pacms``).

        Returns:
            The :class:`Selection`.

        Raises:
            ValueError: For bad input (empty query, bad budget, duplicate ids, non-text content,
                an id in ``relevant_ids`` that no candidate has).

        Example:
            >>> selector = ContextSelector()
            >>> pool = ["blue plums", "red apples"]
            >>> selector.select(pool, "red", budget=3).kept_ids
            ('1',)
            >>> selector.select(pool, "red", budget=3, relevant_ids=["0"]).kept_ids
            ('0',)
        """
        call = select_arguments(*args, **kwargs)
        query = call[1]
        return drive(self._selecting(call), lambda t: self._pools.embed(t, query, self._last_pool))

    @method_parameters_of(select_arguments)
    async def aselect(self, *args: Any, **kwargs: Any) -> Selection:
        """Async twin of :meth:`select` (embeds with the model's async API)."""
        call = select_arguments(*args, **kwargs)
        query = call[1]
        return await adrive(
            self._selecting(call),
            lambda t: self._pools.aembed(t, query, self._last_pool),
            offload=True,
        )

    def _selecting(self, call: SelectArguments) -> Generator[list[str], Pool, Selection]:
        """The steps of :meth:`select` and :meth:`aselect`: they yield the texts to embed."""
        candidates, query, budget, strategy, relevant_ids, options = call
        started = time.perf_counter()
        cands, tokens, allowed = self.resolve(candidates, query, budget)
        lifted = relevant_mask(cands, relevant_ids)
        timings = {"tokens": time.perf_counter() - started}
        name, opts = self.resolve_options(strategy, options)
        error = None
        wordless = None  # the info flag when there are no words to score by (no failure)
        t0 = time.perf_counter()
        texts = [c.text for c in cands]
        pool = self._pools.same(self._last_pool, texts, query)
        if cands and pool is None:
            try:
                pool = yield texts
            except Exception as err:
                wordless = no_words(err, query, texts, lexical=self._pools.lexical)
                if wordless is None:
                    error = self._streak.absorb(err, strict=self.strict)
        timings["embed"] = time.perf_counter() - t0
        if cands and (pool is not None or wordless is not None):
            self._streak.end()
        if pool is None:
            reason = rejection(name, opts, probe=False)  # a name solve would reject
            if reason is not None:
                label = name if isinstance(name, str) else getattr(name, "__name__", "?")
                raise TypeError(f"strategy {label!r}: {reason}")
            return unscored_selection(
                cands,
                tokens,
                allowed,
                name,
                error=error,
                timings=timings,
                started=started,
                no_words=wordless,
            )
        t0 = time.perf_counter()
        with limit_blas_threads(self.blas_threads):
            problem = reused_problem(cands, tokens, allowed, pool)
            if pool.problem is None and len(cands) <= COSINE_MATRIX_LIMIT:
                # the newest pool of at most COSINE_MATRIX_LIMIT candidates is kept
                self._last_pool = replace(pool, problem=problem, base=None)
            if lifted is not None:
                problem = lift(problem, lifted)
            pick = solve(problem, name, **opts)
        timings["solve"] = time.perf_counter() - t0
        timings["total"] = time.perf_counter() - started
        return selection_of(cands, tokens, allowed, pick, problem.relevance, name, timings=timings)

    def prepare(
        self, candidates: Sequence[CandidateInput], query: str, budget: BudgetInput
    ) -> Problem:
        """The :class:`~langchain_pacms.core.Problem` that :meth:`select` would solve.

        Solved with :meth:`resolve_options`'s options, it gives :meth:`select`'s picks. No
        recency fallback: an embedding failure raises ``EmbeddingError``.

        Example:
            >>> from langchain_pacms.core import solve
            >>> problem = ContextSelector().prepare(["red apples", "green pears"], "red", 2)
            >>> solve(problem, "topk").order.tolist()
            [0]
        """
        steps = self._preparing(candidates, query, budget)
        return drive(steps, lambda texts: self._pools.embed(texts, query, self._last_pool))

    async def aprepare(
        self, candidates: Sequence[CandidateInput], query: str, budget: BudgetInput
    ) -> Problem:
        """Async twin of :meth:`prepare`."""
        steps = self._preparing(candidates, query, budget)
        embed = self._pools.aembed
        return await adrive(steps, lambda texts: embed(texts, query, self._last_pool), offload=True)

    def _preparing(
        self, candidates: Sequence[CandidateInput], query: str, budget: BudgetInput
    ) -> Generator[list[str], Pool, Problem]:
        """The steps of :meth:`prepare` and :meth:`aprepare`: they yield the texts to embed."""
        cands, tokens, allowed = self.resolve(candidates, query, budget)
        if not cands:
            raise ValueError("prepare needs at least one candidate")
        pool = yield [c.text for c in cands]
        with limit_blas_threads(self.blas_threads):
            return pool_problem(cands, tokens, allowed, pool)


def _check_embeddings(embeddings: object) -> None:
    """``ValueError`` unless ``embeddings`` is ``None`` or a model with both embed methods."""
    if embeddings is None or isinstance(embeddings, Embeddings):
        return
    if isinstance(embeddings, type):
        raise ValueError(
            f"embeddings must be an embeddings model, got the class {embeddings.__name__} "
            f"(pass an instance: {embeddings.__name__}(...))"
        )
    if not all(callable(getattr(embeddings, m, None)) for m in ("embed_documents", "embed_query")):
        raise ValueError(
            "embeddings must be a LangChain Embeddings (with embed_documents and embed_query), "
            f"got {type(embeddings).__name__}"
        )
