"""Fail soft: the recency selection a selector falls back to, and one warning per outage."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.core import Pick, Problem, Strategy, solve
from langchain_pacms.selector.inputs import resolve_inputs
from langchain_pacms.selector.pool import has_words, pool_flags
from langchain_pacms.selector.selection import (
    Candidate,
    CandidateInput,
    EmbeddingError,
    Selection,
    selection_of,
)
from langchain_pacms.tokens import TokenCounter

__all__ = ["FailureStreak", "no_words", "recency_selection", "unscored_selection"]

logger = logging.getLogger(__name__)


class FailureStreak:
    """Logs a failure's warning once per streak of failures, naming ``what`` failed."""

    def __init__(self, what: str = "embedding") -> None:
        self.what = what
        self.failing = False

    def note(self, err: BaseException) -> str:
        """Record a failure (with a warning if it starts a streak); its message."""
        message = f"{type(err).__name__}: {err}"
        if not self.failing:
            logger.warning("%s failed (%s); falling back to recency (lastk)", self.what, message)
        self.failing = True
        return message

    def absorb(self, err: Exception, *, strict: bool) -> str:
        """``err``'s message, noted (raised under ``strict``)."""
        if strict:
            raise err
        return self.note(err)

    def end(self) -> None:
        """End the streak: the next failure logs its warning again."""
        self.failing = False


def no_words(err: Exception, query: str, texts: Sequence[str], *, lexical: bool) -> str | None:
    """The ``info`` flag when ``err`` only means there are no words to score by, else ``None``.

    That is no failure for a query without words (whatever the embedder), nor for a pool without
    words under the built-in ``lexical`` embedder (which gives such a text an all-zero vector).
    """
    if not isinstance(err, EmbeddingError):
        return None
    if err.zero_query and not has_words(query):
        return "query_has_no_words"
    if err.zero_documents and lexical and not any(has_words(t) for t in texts):
        return "pool_has_no_words"
    return None


def unscored_selection(
    cands: Sequence[Candidate],
    tokens: NDArray[np.int64],
    budget: int,
    strategy: str | Strategy,
    *,
    error: str | None,
    timings: dict[str, float],
    started: float,
    no_words: str | None = None,
) -> Selection:
    """The unscored selection: the newest that fit, mandatory first (fell back unless no words).

    ``no_words``: the ``info`` flag of :func:`no_words`, when there was nothing to score by.
    """
    n = len(cands)
    t0 = time.perf_counter()
    if n == 0:
        pick = Pick(np.zeros(0, dtype=np.int64), np.zeros(0))
    else:
        mandatory, positions = pool_flags(cands)
        problem = Problem.build(
            np.zeros((n, 1), dtype=np.float32),
            np.zeros(1, dtype=np.float32),
            tokens=tokens,
            budget=budget,
            mandatory=mandatory,
            positions=positions,
        )
        # recency that skips a too-large newest item instead of stopping
        pick = solve(problem, "lastk", contiguous=False)
        strategy = "lastk"
    timings["solve"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - started
    return selection_of(
        cands,
        tokens,
        budget,
        pick,
        np.zeros(n, dtype=np.float32),
        strategy,
        fell_back=n > 0 and no_words is None,
        error=error,
        timings=timings,
        no_words=no_words,
    )


def recency_selection(
    candidates: Sequence[CandidateInput], budget: int, token_counter: TokenCounter
) -> Selection:
    """The newest candidates that fit ``budget``, mandatory first, scored by nothing.

    What a selector falls back to, computed here: it needs no embedder and no service.

    Example:
        >>> from langchain_pacms.tokens import TokenCounter
        >>> recency_selection(["old note", "new note"], 2, TokenCounter()).kept_ids
        ('1',)
    """
    started = time.perf_counter()
    # the inputs are checked as a selection's (its query is not read: any text will do)
    cands, tokens, allowed = resolve_inputs(candidates, "recency", budget, token_counter)
    timings = {"tokens": time.perf_counter() - started}
    return unscored_selection(
        cands, tokens, allowed, "lastk", error=None, timings=timings, started=started
    )
