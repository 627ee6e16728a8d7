"""End-to-end QA accuracy on LongMemEval: select context, let a reader answer, let a judge grade.

This is the harness behind the paper's QA table (section 5.2). For every question and every
strategy:

1. **Pool.** The question's history is padded with ``level`` restatements per filler round
   (:func:`~pacms_bench.redundancy.inject_redundancy`, seeded with ``seed``), so the
   pool of a question is identical for every strategy and for every run with the same seed.
2. **Select.** One :class:`~langchain_pacms.ContextSelector` is shared by all
   strategies (one embedding cache, one token counter), and each strategy is passed as an
   override. The budget is ``budget_ratio`` times the tokens of the padded pool
   (``budget_base="pool"``) or of the original history (``budget_base="original"``).
3. **Read.** The kept items are rendered in chronological order, grouped by session and dated
   (restatements have no date; they come last, as they do in the pool), followed by the
   question and its date. The reader (any LangChain chat model) is asked to answer
   concisely and to say it does not know when the excerpts lack the answer.
4. **Judge.** :mod:`pacms_bench.judge` grades the answer with the per-type criterion.

Model calls run concurrently under an :class:`asyncio.Semaphore` (``concurrency``). A call
that raises is retried ``retries`` times with exponential backoff; when the retries are
exhausted the record is a failure (counted, and graded WRONG). An unreadable verdict is
re-asked once and then graded WRONG with ``parse_failed`` set.

Accuracy counts every question, so failures count as wrong; the report shows the number
of failures next to every accuracy.

Example:
    >>> from langchain_ollama import ChatOllama                           # doctest: +SKIP
    >>> from pacms_bench.longmemeval import iter_questions, sample_questions
    >>> qs = sample_questions(iter_questions("oracle/"), n=100, seed=0)   # doctest: +SKIP
    >>> llm = ChatOllama(model="llama3.1", temperature=0)                 # doctest: +SKIP
    >>> report = run_qa(qs, reader=llm, judge=llm)                        # doctest: +SKIP
    >>> print(report.to_markdown())                                       # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from langchain_pacms import Candidate, ContextSelector, Selection
from langchain_pacms.core import get_strategy
from pacms_bench._calls import Exhausted, sync_twin, with_retries
from pacms_bench.judge import ajudge, build_judge_messages, message_text, strip_reasoning
from pacms_bench.longmemeval import (
    Question,
)
from pacms_bench.progress import progress_bar
from pacms_bench.qa_report import TYPE_ABBREVIATIONS, QARecord, QAReport, _add
from pacms_bench.redundancy import STYLES, PoolItem, inject_redundancy

__all__ = [
    "BUDGET_BASES",
    "DEFAULT_STRATEGIES",
    "READER_SYSTEM_PROMPT",
    "TYPE_ABBREVIATIONS",
    "QARecord",
    "QAReport",
    "arun_qa",
    "build_pool",
    "build_reader_messages",
    "pool_budget",
    "render_history",
    "run_qa",
]

T = TypeVar("T")
P = ParamSpec("P")

DEFAULT_STRATEGIES: tuple[str, ...] = ("pacms", "topk", "mmr", "lastk")
"""Strategies compared by default (the paper's Table 2 rows)."""

BUDGET_BASES: tuple[str, ...] = ("pool", "original")
"""What ``budget_ratio`` is a fraction of: the padded pool, or the original history."""

READER_SYSTEM_PROMPT = (
    "You are a personal assistant with a long-term memory of your earlier conversations "
    "with this user. You are shown excerpts of those conversations, oldest first, each "
    "session with its date; some parts may be missing and some may be repeated as recaps. "
    "Answer the user's question from these excerpts, taking the current date into account "
    "for anything that depends on time. If the user's information changed over time, use "
    "the most recent version. Answer concisely: give the answer itself, without restating "
    "the question. If the question asks for a suggestion or advice, give one that fits what "
    "the excerpts say about the user. If it asks for a fact that the excerpts do not "
    "contain, say that you don't know instead of guessing."
)
"""System message of every reader call."""

_NO_CONTEXT = "(No excerpts of earlier conversations are available.)"


# -- pool, budget, prompt -------------------------------------------------------------------


def build_pool(
    question: Question, level: int, *, style: str = "recap", seed: int = 0
) -> list[PoolItem]:
    """Return the redundancy-padded pool of ``question`` (see ``inject_redundancy``).

    Args:
        question: The question whose ``rounds`` form the history.
        level: Restatements per filler round (R).
        style: ``"recap"`` or ``"full"``.
        seed: Seed of the injection; the same seed is used for every question.

    Returns:
        The pool, originals first (chronological), then the shuffled restatements.
    """
    return inject_redundancy(question.rounds, level, style=style, seed=seed)


def pool_budget(
    pool: Sequence[PoolItem], count: Callable[[str], int], ratio: float, base: str = "pool"
) -> int:
    """Token budget for ``pool``: ``floor(ratio * tokens)``, at least 1.

    Args:
        pool: The padded pool.
        count: Token counter (use the selector's, so budget and selection agree).
        ratio: Fraction in ``(0, 1]``.
        base: ``"pool"`` counts every item; ``"original"`` counts only the original rounds
            (not the restatements).

    Returns:
        The budget in tokens.

    Raises:
        ValueError: For a ratio outside ``(0, 1]`` or an unknown base.
    """
    if base not in BUDGET_BASES:
        raise ValueError(f"budget_base must be one of {BUDGET_BASES}, got {base!r}")
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
        raise ValueError(f"budget_ratio must be in (0, 1], got {ratio!r}")
    items = pool if base == "pool" else [p for p in pool if not p.is_restatement]
    return max(1, math.floor(ratio * sum(count(p.text) for p in items)))


def render_history(question: Question, kept: Iterable[PoolItem]) -> str:
    """Render kept pool items for the reader, oldest first.

    Original rounds are grouped under one header per session (with the session date; the
    session id is never shown, since upstream ids reveal which sessions hold evidence).
    Gaps between kept rounds of one session are marked ``[...]``. Restatements have no
    date of their own; they follow in pool order under a separate header.

    Args:
        question: The question the pool was built from (for round dates and sessions).
        kept: The kept items, in any order.

    Returns:
        The history text, or a note that nothing was kept.
    """
    by_index = {r.index: r for r in question.rounds}
    items = sorted(kept, key=lambda p: p.position)
    blocks: list[str] = []
    session: int | None = None
    last_index: int | None = None
    lines: list[str] = []

    def flush() -> None:
        if lines:
            blocks.append("\n".join(lines))
            lines.clear()

    recaps = [p for p in items if p.is_restatement]
    for item in items:
        if item.is_restatement:
            continue
        rnd = by_index.get(item.source_index)
        if rnd is None:  # not a round of this question: show the text as is
            flush()
            blocks.append(item.text)
            session = last_index = None
            continue
        if rnd.session_index != session:
            flush()
            session = rnd.session_index
            lines.append(f"### Session of {rnd.date}" if rnd.date else "### Session (undated)")
        elif last_index is not None and rnd.index != last_index + 1:
            lines.append("[...]")
        last_index = rnd.index
        if rnd.user:
            lines.append(f"User: {rnd.user}")
        if rnd.assistant:
            lines.append(f"Assistant: {rnd.assistant}")
    flush()
    if recaps:
        blocks.append(
            "### Recaps of earlier exchanges (undated)\n" + "\n".join(f"- {p.text}" for p in recaps)
        )
    return "\n\n".join(blocks) if blocks else _NO_CONTEXT


def build_reader_messages(question: Question, kept: Iterable[PoolItem]) -> list[BaseMessage]:
    """Build the reader prompt: instructions, the kept history, then the dated question.

    Args:
        question: The question to answer.
        kept: The kept pool items.

    Returns:
        ``[SystemMessage, HumanMessage]``.
    """
    body = (
        "Excerpts of our earlier conversations:\n\n"
        f"{render_history(question, kept)}\n\n"
        "---\n"
        f"Current date: {question.question_date}\n"
        f"Question: {question.question}\n\n"
        "Answer concisely from the excerpts above. If the question asks for a fact they do "
        "not contain, say that you don't know."
    )
    return [SystemMessage(content=READER_SYSTEM_PROMPT), HumanMessage(content=body)]


def _messages_text(messages: Sequence[BaseMessage]) -> str:
    return "\n\n".join(message_text(m) for m in messages)


def _usage(reply: Any) -> tuple[int | None, int | None]:
    meta = getattr(reply, "usage_metadata", None)
    if not meta:
        return None, None
    get = meta.get if isinstance(meta, Mapping) else lambda k: getattr(meta, k, None)
    i, o = get("input_tokens"), get("output_tokens")
    return (int(i) if i is not None else None, int(o) if o is not None else None)


def _err(stage: str, err: BaseException) -> str:
    return f"{stage}: {type(err).__name__}: {err}"


def _model_name(model: Any) -> str:
    for attr in ("model", "model_name", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return f"{type(model).__name__}:{value}"
    return type(model).__name__


class _Progress:
    """A tqdm bar on a terminal; elsewhere (a log file, a pipe) a line every ten answers."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done = total, 0
        self.enabled = enabled
        self.started = time.perf_counter()
        self.bar = progress_bar(total, enabled, desc="qa", unit="answer")

    def update(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        elif self.enabled and (self.done % 10 == 0 or self.done == self.total):
            elapsed = time.perf_counter() - self.started
            print(f"qa: {self.done}/{self.total} ({elapsed:.0f}s)", file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


async def arun_qa(
    questions: Iterable[Question],
    *,
    strategies: Sequence[str] = DEFAULT_STRATEGIES,
    level: int = 2,
    budget_ratio: float = 0.45,
    style: str = "recap",
    budget_base: str = "pool",
    reader: Any,
    judge: Any,
    selector: ContextSelector | None = None,
    concurrency: int = 4,
    retries: int = 2,
    seed: int = 0,
    progress: bool = True,
    backoff: float = 1.0,
    timeout: float | None = None,
    parse_retries: int = 1,
    strategy_options: Mapping[str, Mapping[str, Any]] | None = None,
    meta: Mapping[str, Any] | None = None,
    done: Iterable[QARecord] = (),
    on_record: Callable[[QARecord], None] | None = None,
) -> QAReport:
    """Run the QA evaluation (async core of :func:`run_qa`).

    Args:
        questions: The questions (e.g. a :func:`sample_questions` sample).
        strategies: Strategy names, each passed to the selector as an override.
        level: Restatements per filler round (R).
        budget_ratio: Budget as a fraction of the ``budget_base`` tokens, in ``(0, 1]``.
        style: Restatement style, ``"recap"`` or ``"full"``.
        budget_base: ``"pool"`` (padded pool tokens) or ``"original"`` (original history).
        reader: LangChain chat model that answers (``ainvoke`` is used).
        judge: LangChain chat model that grades (``ainvoke`` is used).
        selector: Selector shared by all strategies (default: ``ContextSelector()``, the
            offline hashed TF-IDF embeddings and the o200k token counter).
        concurrency: Maximum model calls in flight (also questions being selected at once).
        retries: Retries per model call after an exception.
        seed: Seed of the redundancy injection.
        progress: Show a progress bar on stderr.
        backoff: First retry delay in seconds; doubled on each further retry.
        timeout: Per-call timeout in seconds (None: no limit); a timeout counts as a failure
            of that attempt.
        parse_retries: Re-asks after an unreadable verdict.
        strategy_options: Extra options per strategy, e.g. ``{"mmr": {"lambda_mult": 0.5}}``.
        meta: Extra entries for ``QAReport.config`` (e.g. model specs).
        done: Records of an earlier, interrupted run with the same settings. Their
            (question, strategy) pairs are not run again and they join the report; records
            of other questions or strategies are ignored.
        on_record: Called with each new record as soon as it is complete (e.g. to append
            it to a file, so an interrupted run keeps its answers).

    Returns:
        The :class:`QAReport`.

    Raises:
        ValueError: For an unknown strategy, style or budget base, or bad numbers.
    """
    qs = list(questions)
    strategies = tuple(strategies)
    if not strategies:
        raise ValueError("strategies is empty")
    if len(set(strategies)) != len(strategies):
        raise ValueError(f"duplicate strategies in {strategies}")
    for name in strategies:
        get_strategy(name)
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    if budget_base not in BUDGET_BASES:
        raise ValueError(f"budget_base must be one of {BUDGET_BASES}, got {budget_base!r}")
    if not (isinstance(budget_ratio, (int, float)) and 0 < budget_ratio <= 1):
        raise ValueError(f"budget_ratio must be in (0, 1], got {budget_ratio!r}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if retries < 0 or parse_retries < 0:
        raise ValueError("retries and parse_retries must be >= 0")
    if len({q.question_id for q in qs}) != len(qs):
        raise ValueError("questions must have distinct question ids")
    sel = selector if selector is not None else ContextSelector()
    count = sel.token_counter
    options = {k: dict(v) for k, v in (strategy_options or {}).items()}
    wanted = {(q.question_id, s) for q in qs for s in strategies}
    prior = {(r.question_id, r.strategy): r for r in done}
    prior = {pair: r for pair, r in prior.items() if pair in wanted}
    call_sem = asyncio.Semaphore(concurrency)
    question_sem = asyncio.Semaphore(concurrency)
    bar = _Progress(len(wanted) - len(prior), progress)
    started = time.perf_counter()

    async def call_model(model: Any, messages: list[BaseMessage]) -> tuple[Any, int]:
        # Reader and judge calls share one limit, timeout and retry policy.
        return await with_retries(
            lambda: model.ainvoke(messages),
            sem=call_sem,
            retries=retries,
            backoff=backoff,
            timeout=timeout,
        )

    async def answer(
        q: Question, pool: list[PoolItem], selection: Selection, strategy: str
    ) -> QARecord:
        t0 = time.perf_counter()
        by_id = {p.id: p for p in pool}
        kept = [by_id[i] for i in selection.kept_ids]
        base: dict[str, Any] = {
            "question_id": q.question_id,
            "question_type": q.question_type,
            "is_abstention": q.is_abstention,
            "strategy": strategy,
            "budget": selection.budget,
            "pool_items": len(pool),
            "pool_tokens": selection.tokens_total,
            "kept_items": len(kept),
            "kept_tokens": selection.tokens_kept,
            "evidence_total": sum(p.is_evidence for p in pool),
            "evidence_kept": sum(p.is_evidence for p in kept),
            "fell_back": selection.fell_back,
        }
        messages = build_reader_messages(q, kept)
        base["tokens_in"] = count(_messages_text(messages))
        try:
            reply, n_retry = await call_model(reader, messages)
        except Exhausted as exc:
            return QARecord(
                correct=False,
                retries=exc.retries,
                error=_err("reader", exc.error),
                seconds=time.perf_counter() - t0,
                **base,
            )
        raw_answer = message_text(reply)
        answer_text = strip_reasoning(raw_answer)
        usage_in, usage_out = _usage(reply)
        base.update(
            answer=answer_text, tokens_out=count(raw_answer), usage_in=usage_in, usage_out=usage_out
        )
        if raw_answer.strip() and not answer_text:
            # Reasoning with no answer after it (cut off by a length limit). Graded, the
            # reasoning would often pass: it tends to name the reference value.
            return QARecord(
                correct=False,
                retries=n_retry,
                error="reader: the reply holds reasoning but no answer",
                seconds=time.perf_counter() - t0,
                **base,
            )
        base["judge_tokens_in"] = count(
            _messages_text(build_judge_messages(q, q.answer, answer_text))
        )
        # Each judge call (the first and every re-ask) gets its own timeout and retries; the
        # replies are kept here, so their usage counts even if a later call fails.
        judge_replies: list[Any] = []
        judge_retries = 0

        async def call_judge(msgs: list[BaseMessage]) -> Any:
            nonlocal judge_retries
            reply, n = await call_model(judge, msgs)
            judge_retries += n
            judge_replies.append(reply)
            return reply

        def judge_usage() -> dict[str, Any]:
            j_in: int | None = None
            j_out: int | None = None
            for msg in judge_replies:
                i, o = _usage(msg)
                j_in, j_out = _add(j_in, i), _add(j_out, o)
            return {
                "judge_tokens_out": sum(count(message_text(m)) for m in judge_replies),
                "judge_usage_in": j_in,
                "judge_usage_out": j_out,
                "judge_attempts": len(judge_replies),
            }

        try:
            result = await ajudge(
                judge, q, q.answer, answer_text, parse_retries=parse_retries, invoke=call_judge
            )
        except Exhausted as exc:
            return QARecord(
                correct=False,
                retries=n_retry + judge_retries + exc.retries,
                error=_err("judge", exc.error),
                seconds=time.perf_counter() - t0,
                **judge_usage(),
                **base,
            )
        return QARecord(
            correct=result.correct,
            verdict_raw=result.raw,
            parse_failed=result.parse_failed,
            retries=n_retry + judge_retries,
            seconds=time.perf_counter() - t0,
            **judge_usage(),
            **base,
        )

    async def run_question(q: Question) -> list[QARecord]:
        todo = [s for s in strategies if (q.question_id, s) not in prior]
        if not todo:
            return [prior[(q.question_id, s)] for s in strategies]
        async with question_sem:
            pool = build_pool(q, level, style=style, seed=seed)
            cands = [
                Candidate(text=p.text, id=p.id, position=p.position, kind="turn") for p in pool
            ]
            budget = pool_budget(pool, count, budget_ratio, budget_base)
            selections: dict[str, Selection | BaseException] = {}
            for s in todo:  # sequential: the first call warms the embedding cache
                try:
                    selections[s] = await sel.aselect(
                        cands, q.question, budget=budget, strategy=s, **options.get(s, {})
                    )
                except Exception as err:
                    selections[s] = err

            async def one(s: str) -> QARecord:
                chosen = selections[s]
                if isinstance(chosen, Selection) and chosen.fell_back and s != "lastk":
                    # Recency stood in for the strategy: its answer would be lastk's.
                    chosen = RuntimeError(f"embedding failed, so recency stood in ({chosen.error})")
                if isinstance(chosen, BaseException):
                    rec = QARecord(
                        question_id=q.question_id,
                        question_type=q.question_type,
                        is_abstention=q.is_abstention,
                        strategy=s,
                        correct=False,
                        pool_items=len(pool),
                        budget=budget,
                        evidence_total=sum(p.is_evidence for p in pool),
                        error=_err("select", chosen),
                    )
                else:
                    rec = await answer(q, pool, chosen, s)
                bar.update()
                if on_record is not None:
                    on_record(rec)
                return rec

            new = dict(zip(todo, await asyncio.gather(*(one(s) for s in todo))))
            return [new[s] if s in new else prior[(q.question_id, s)] for s in strategies]

    try:
        per_question = await asyncio.gather(*(run_question(q) for q in qs))
    finally:
        bar.close()
    records = [r for recs in per_question for r in recs]
    config: dict[str, Any] = {
        "level": level,
        "style": style,
        "budget_ratio": budget_ratio,
        "budget_base": budget_base,
        "seed": seed,
        "concurrency": concurrency,
        "retries": retries,
        "parse_retries": parse_retries,
        "timeout": timeout,
        "n_questions": len(qs),
        "resumed_records": len(prior),
        "reader": _model_name(reader),
        "judge": _model_name(judge),
        "embeddings": type(sel.embeddings.embeddings).__name__
        if hasattr(sel.embeddings, "embeddings")
        else type(sel.embeddings).__name__,
        "token_counter": sel.token_counter.name,
        # What each strategy ran with, as the selector resolved it (pacms: the embedder's
        # kernel threshold and gain floor unless given).
        "strategy_options": {s: sel.resolve_options(s, options.get(s, {}))[1] for s in strategies},
    }
    config.update(meta or {})
    return QAReport(records, strategies, config, time.perf_counter() - started)


run_qa = sync_twin(
    arun_qa,
    "run_qa",
    """Synchronous wrapper of :func:`arun_qa`, with the same arguments.

    Every call from one thread runs on that thread's own event loop, which stays open, so the
    same models can be used for run after run (see
    :func:`~pacms_bench._calls.run_sync`). Call :func:`arun_qa`
    directly from code that already runs an event loop.

    Returns:
        The :class:`QAReport`.

    Raises:
        ValueError: For an unknown strategy, style or budget base, or bad numbers.
        RuntimeError: When called from a running event loop.
    """,
)
