"""End-to-end QA accuracy on LongMemEval: select context, let a reader answer, let a judge grade.

This is the harness behind the paper's QA table (section 5.2). For every question and every
strategy:

1. **Pool.** The question's history is padded with ``level`` restatements per filler round
   (:func:`~langchain_pacms.eval.redundancy.inject_redundancy`, seeded with ``seed``), so the
   pool of a question is identical for every strategy and for every run with the same seed.
2. **Select.** One :class:`~langchain_pacms.selector.ContextSelector` is shared by all
   strategies (one embedding cache, one token counter), and each strategy is passed as an
   override. The budget is ``budget_ratio`` times the tokens of the padded pool
   (``budget_base="pool"``) or of the original history (``budget_base="original"``).
3. **Read.** The kept items are rendered in chronological order, grouped by session and dated
   (restatements have no date; they come last, as they do in the pool), followed by the
   question and its date. The reader (any LangChain chat model) is asked to answer
   concisely and to say it does not know when the excerpts lack the answer.
4. **Judge.** :mod:`langchain_pacms.eval.judge` grades the answer with the per-type criterion.

Model calls run concurrently under an :class:`asyncio.Semaphore` (``concurrency``). A call
that raises is retried ``retries`` times with exponential backoff; when the retries are
exhausted the record is a failure (counted, and graded WRONG). An unreadable verdict is
re-asked once and then graded WRONG with ``parse_failed`` set.

Accuracy counts every question, so failures count as wrong; the report shows the number
of failures next to every accuracy.

Example:
    >>> from langchain_ollama import ChatOllama                           # doctest: +SKIP
    >>> from langchain_pacms.eval.longmemeval import iter_questions, sample_questions
    >>> qs = sample_questions(iter_questions("oracle/"), n=100, seed=0)   # doctest: +SKIP
    >>> llm = ChatOllama(model="llama3.1", temperature=0)                 # doctest: +SKIP
    >>> report = run_qa(qs, reader=llm, judge=llm)                        # doctest: +SKIP
    >>> print(report.to_markdown())                                       # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import json
import math
import re
import sys
import threading
import time
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from langchain_pacms.core import get_strategy
from langchain_pacms.embeddings import model_identity
from langchain_pacms.eval.backends import EMBEDDINGS_HELP
from langchain_pacms.eval.judge import ajudge, build_judge_messages, message_text, strip_reasoning
from langchain_pacms.eval.longmemeval import (
    QUESTION_TYPES,
    Question,
    iter_questions,
    resolve_source,
    sample_questions,
)
from langchain_pacms.eval.redundancy import STYLES, PoolItem, inject_redundancy
from langchain_pacms.selector import Candidate, ContextSelector, Selection

__all__ = [
    "BUDGET_BASES",
    "CHECK_PROMPT",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_STRATEGIES",
    "JUDGE_NUM_CTX",
    "READER_SYSTEM_PROMPT",
    "TYPE_ABBREVIATIONS",
    "QARecord",
    "QAReport",
    "acheck_model",
    "add_qa_arguments",
    "arun_qa",
    "auto_num_ctx",
    "build_pool",
    "build_reader_messages",
    "check_model",
    "pool_budget",
    "qa_from_args",
    "read_ids",
    "render_history",
    "run_qa",
]

T = TypeVar("T")
P = ParamSpec("P")

DEFAULT_STRATEGIES: tuple[str, ...] = ("pacms", "topk", "mmr", "lastk")
"""Strategies compared by default (the paper's Table 2 rows)."""

BUDGET_BASES: tuple[str, ...] = ("pool", "original")
"""What ``budget_ratio`` is a fraction of: the padded pool, or the original history."""

TYPE_ABBREVIATIONS: dict[str, str] = {
    "single-session-user": "SSU",
    "single-session-assistant": "SSA",
    "single-session-preference": "SSP",
    "temporal-reasoning": "TR",
    "knowledge-update": "KU",
    "multi-session": "MS",
}
"""Column labels of the question types in :meth:`QAReport.to_markdown`."""

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


def _add(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


# -- records and report ---------------------------------------------------------------------


@dataclass(frozen=True)
class QARecord:
    """The outcome of one (question, strategy) pair.

    Attributes:
        question_id: Upstream question id.
        question_type: Upstream question type.
        is_abstention: True for ``_abs`` questions.
        strategy: Selection strategy.
        correct: The verdict (False for failures and unreadable verdicts).
        verdict_raw: The judge's last raw reply (empty when the judge was not reached).
        parse_failed: No judge reply could be read as a verdict.
        answer: The reader's answer (reasoning blocks removed).
        budget: Token budget of the selection.
        pool_items: Items in the padded pool.
        pool_tokens: Tokens in the padded pool.
        kept_items: Items kept.
        kept_tokens: Tokens kept.
        evidence_total: Evidence rounds in the history.
        evidence_kept: Evidence rounds kept.
        fell_back: The selector fell back to recency (embedding failure).
        tokens_in: Reader prompt tokens, counted with the selector's counter.
        tokens_out: Reader answer tokens, counted the same way.
        usage_in: Reader input tokens reported by the model (None if not reported).
        usage_out: Reader output tokens reported by the model.
        judge_tokens_in: Judge prompt tokens (first attempt), counted.
        judge_tokens_out: Judge reply tokens (all attempts), counted.
        judge_usage_in: Judge input tokens reported by the model (all attempts).
        judge_usage_out: Judge output tokens reported by the model (all attempts).
        judge_attempts: Judge calls that returned a reply (more than 1 after a re-ask).
        retries: Calls retried after an exception (reader and judge together).
        error: ``"<stage>: <exception>"`` when the pair failed (stage ``select``,
            ``reader`` or ``judge``), else None.
        seconds: Wall time of the pair, selection excluded.
    """

    question_id: str
    question_type: str
    is_abstention: bool
    strategy: str
    correct: bool
    verdict_raw: str = ""
    parse_failed: bool = False
    answer: str = ""
    budget: int = 0
    pool_items: int = 0
    pool_tokens: int = 0
    kept_items: int = 0
    kept_tokens: int = 0
    evidence_total: int = 0
    evidence_kept: int = 0
    fell_back: bool = False
    tokens_in: int = 0
    tokens_out: int = 0
    usage_in: int | None = None
    usage_out: int | None = None
    judge_tokens_in: int = 0
    judge_tokens_out: int = 0
    judge_usage_in: int | None = None
    judge_usage_out: int | None = None
    judge_attempts: int = 0
    retries: int = 0
    error: str | None = None
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        """True when a call failed after all retries (or the selection raised)."""
        return self.error is not None


def _pct(correct: int, n: int) -> float | None:
    return 100.0 * correct / n if n else None


def _fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _fmt_int(value: int | None) -> str:
    return "–" if value is None else f"{value:,}"


@dataclass
class QAReport:
    """Records of a QA run plus the summaries the paper reports.

    Attributes:
        records: One :class:`QARecord` per (question, strategy), in question then strategy
            order.
        strategies: The strategies, in the order they were run.
        config: Run settings (level, budget, style, models, seed, ...).
        elapsed: Wall time of the run in seconds.
    """

    records: list[QARecord]
    strategies: tuple[str, ...]
    config: dict[str, Any] = field(default_factory=dict)
    elapsed: float = 0.0

    def question_types(self) -> list[str]:
        """Question types present, in upstream order (unknown types last, sorted)."""
        present = {r.question_type for r in self.records}
        known = [t for t in QUESTION_TYPES if t in present]
        return known + sorted(present - set(QUESTION_TYPES))

    def _select(
        self, strategy: str, question_type: str | None = None, abstention: bool | None = None
    ) -> list[QARecord]:
        return [
            r
            for r in self.records
            if r.strategy == strategy
            and (question_type is None or r.question_type == question_type)
            and (abstention is None or r.is_abstention == abstention)
        ]

    def accuracy(
        self,
        strategy: str,
        question_type: str | None = None,
        *,
        abstention: bool | None = None,
    ) -> float | None:
        """Accuracy in percent (failures count as wrong), or None if nothing matches.

        Args:
            strategy: The strategy.
            question_type: Restrict to one question type.
            abstention: Restrict to abstention (True) or answerable (False) questions.
        """
        rows = self._select(strategy, question_type, abstention)
        return _pct(sum(r.correct for r in rows), len(rows))

    def summary(self) -> dict[str, Any]:
        """Per-strategy counts, accuracies, failures, recall and token totals."""
        out: dict[str, Any] = {}
        for s in self.strategies:
            rows = self._select(s)
            per_type = {}
            for t in self.question_types():
                sub = self._select(s, t)
                per_type[t] = {
                    "n": len(sub),
                    "correct": sum(r.correct for r in sub),
                    "accuracy": _pct(sum(r.correct for r in sub), len(sub)),
                }
            abs_rows = self._select(s, abstention=True)
            with_evidence = [r for r in rows if r.evidence_total and not r.is_abstention]
            tokens: dict[str, int | None] = {
                "reader_in": sum(r.tokens_in for r in rows),
                "reader_out": sum(r.tokens_out for r in rows),
                "judge_in": sum(r.judge_tokens_in for r in rows),
                "judge_out": sum(r.judge_tokens_out for r in rows),
                "reader_usage_in": None,
                "reader_usage_out": None,
                "judge_usage_in": None,
                "judge_usage_out": None,
            }
            for r in rows:
                for key, value in (
                    ("reader_usage_in", r.usage_in),
                    ("reader_usage_out", r.usage_out),
                    ("judge_usage_in", r.judge_usage_in),
                    ("judge_usage_out", r.judge_usage_out),
                ):
                    tokens[key] = _add(tokens[key], value)
            out[s] = {
                "n": len(rows),
                "correct": sum(r.correct for r in rows),
                "accuracy": _pct(sum(r.correct for r in rows), len(rows)),
                "per_type": per_type,
                "abstention": {
                    "n": len(abs_rows),
                    "correct": sum(r.correct for r in abs_rows),
                    "accuracy": _pct(sum(r.correct for r in abs_rows), len(abs_rows)),
                },
                "failures": sum(r.failed for r in rows),
                "parse_failures": sum(r.parse_failed for r in rows),
                "retries": sum(r.retries for r in rows),
                "fell_back": sum(r.fell_back for r in rows),
                "evidence_recall": (
                    sum(r.evidence_kept / r.evidence_total for r in with_evidence)
                    / len(with_evidence)
                    if with_evidence
                    else None
                ),
                "mean_prompt_tokens": (
                    sum(r.tokens_in for r in rows) / len(rows) if rows else None
                ),
                "tokens": tokens,
            }
        return out

    def totals(self) -> dict[str, Any]:
        """Counts and tokens over the whole run."""
        tok_keys = ("reader_in", "reader_out", "judge_in", "judge_out")
        usage_keys = ("reader_usage_in", "reader_usage_out", "judge_usage_in", "judge_usage_out")
        summary = self.summary()
        totals: dict[str, Any] = {
            "questions": len({r.question_id for r in self.records}),
            "records": len(self.records),
            "failures": sum(r.failed for r in self.records),
            "parse_failures": sum(r.parse_failed for r in self.records),
            "retries": sum(r.retries for r in self.records),
        }
        for key in tok_keys:
            totals[f"tokens_{key}"] = sum(s["tokens"][key] for s in summary.values())
        for key in usage_keys:
            value: int | None = None
            for s in summary.values():
                value = _add(value, s["tokens"][key])
            totals[key] = value
        return totals

    def to_dict(self) -> dict[str, Any]:
        """Config, summary, totals and every record, JSON-ready."""
        return {
            "config": dict(self.config),
            "strategies": list(self.strategies),
            "question_types": self.question_types(),
            "elapsed_seconds": self.elapsed,
            "totals": self.totals(),
            "summary": self.summary(),
            "records": [asdict(r) for r in self.records],
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        """The report as JSON (see :meth:`to_dict`)."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def to_markdown(self) -> str:
        """A table like the paper's Table 2: strategies as rows, overall and per type as columns.

        Accuracies are percentages (failures count as wrong). ``Abs.`` is the abstention
        subset (those questions also count in their type's column). ``Recall`` is the mean
        evidence-round recall of the selections (answerable questions with evidence).
        When ``pacms`` is one of several strategies, Δ rows give its lead in points.
        """
        types = self.question_types()
        summary = self.summary()
        cfg = self.config
        lines = ["## LongMemEval QA accuracy (%)", ""]
        desc = []
        if cfg.get("reader"):
            desc.append(f"reader `{cfg['reader']}`")
        if cfg.get("judge"):
            desc.append(f"judge `{cfg['judge']}`")
        if "level" in cfg:
            desc.append(f"R={cfg['level']} ({cfg.get('style', 'recap')})")
        if "budget_ratio" in cfg:
            desc.append(
                f"budget {100 * cfg['budget_ratio']:g}% of {cfg.get('budget_base', 'pool')} tokens"
            )
        desc.append(f"{len({r.question_id for r in self.records})} questions")
        if "seed" in cfg:
            desc.append(f"seed {cfg['seed']}")
        lines += [" · ".join(desc), ""]
        has_abs = any(r.is_abstention for r in self.records)
        header = ["Strategy", "Overall"] + [TYPE_ABBREVIATIONS.get(t, t) for t in types]
        if has_abs:
            header.append("Abs.")
        header += ["Recall", "Failed"]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
        for s in self.strategies:
            row = summary[s]
            cells = [s, _fmt(row["accuracy"])]
            cells += [_fmt(row["per_type"][t]["accuracy"]) for t in types]
            if has_abs:
                cells.append(_fmt(row["abstention"]["accuracy"]))
            cells += [_fmt(row["evidence_recall"], 3), str(row["failures"])]
            lines.append("| " + " | ".join(cells) + " |")
        if "pacms" in self.strategies and len(self.strategies) > 1:
            base = summary["pacms"]
            for s in self.strategies:
                if s == "pacms":
                    continue
                other = summary[s]

                def delta(a: float | None, b: float | None) -> str:
                    return "–" if a is None or b is None else f"{a - b:+.1f}"

                cells = [f"Δ (pacms − {s})", delta(base["accuracy"], other["accuracy"])]
                cells += [
                    delta(base["per_type"][t]["accuracy"], other["per_type"][t]["accuracy"])
                    for t in types
                ]
                if has_abs:
                    cells.append(
                        delta(base["abstention"]["accuracy"], other["abstention"]["accuracy"])
                    )
                cells += ["", ""]
                lines.append("| " + " | ".join(cells) + " |")
        counts = summary[self.strategies[0]] if self.strategies else None
        if counts:
            parts = [f"{TYPE_ABBREVIATIONS.get(t, t)} {counts['per_type'][t]['n']}" for t in types]
            if has_abs:
                parts.append(f"Abs. {counts['abstention']['n']}")
            lines += ["", "Questions per column: " + ", ".join(parts) + "."]
        lines += [
            "",
            "Tokens: counted with the selector's counter; model-reported usage where the "
            "model reports it (– when it does not).",
            "",
            "| Strategy | Mean prompt tokens | Reader in/out | Reader usage in/out "
            "| Judge in/out | Judge usage in/out | Parse failures | Retries |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]

        def pair(a: int | None, b: int | None) -> str:
            return "–" if a is None and b is None else f"{_fmt_int(a)}/{_fmt_int(b)}"

        for s in self.strategies:
            row = summary[s]
            tok = row["tokens"]
            lines.append(
                f"| {s} | {_fmt(row['mean_prompt_tokens'], 0)} "
                f"| {pair(tok['reader_in'], tok['reader_out'])} "
                f"| {pair(tok['reader_usage_in'], tok['reader_usage_out'])} "
                f"| {pair(tok['judge_in'], tok['judge_out'])} "
                f"| {pair(tok['judge_usage_in'], tok['judge_usage_out'])} "
                f"| {row['parse_failures']} | {row['retries']} |"
            )
        return "\n".join(lines) + "\n"

    def save(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``qa_report.json``, ``qa_report.md`` and ``qa_records.jsonl`` to ``out_dir``.

        Args:
            out_dir: Output folder (created if needed; existing files are overwritten).

        Returns:
            The written paths, keyed ``json``, ``markdown`` and ``records``.
        """
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {
            "json": out / "qa_report.json",
            "markdown": out / "qa_report.md",
            "records": out / "qa_records.jsonl",
        }
        paths["json"].write_text(self.to_json() + "\n", encoding="utf-8")
        paths["markdown"].write_text(self.to_markdown(), encoding="utf-8")
        paths["records"].write_text(
            "".join(json.dumps(asdict(r), ensure_ascii=False) + "\n" for r in self.records),
            encoding="utf-8",
        )
        return paths


# -- running --------------------------------------------------------------------------------


_LOOPS = threading.local()


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on this thread's event loop, made on first use and kept.

    Async model clients (``ChatOllama``'s, for one) pool connections that belong to the loop
    that opened them. With a new loop per call, as ``asyncio.run`` makes, a second run with
    the same model finds those connections dead ("Event loop is closed") and its first calls
    fail. Whatever ends the run (an error, Ctrl-C), the tasks it leaves are cancelled before
    this returns, as ``asyncio.run`` does. The loop is closed when its thread is gone (the main
    thread's when the interpreter exits).

    Raises:
        RuntimeError: When this thread is already running an event loop.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        coro.close()
        raise RuntimeError("called from a running event loop: await the async function instead")
    loop = getattr(_LOOPS, "loop", None)
    if loop is None or loop.is_closed():
        loop = _LOOPS.loop = asyncio.new_event_loop()
        weakref.finalize(threading.current_thread(), loop.close)
    try:
        return loop.run_until_complete(coro)
    finally:
        left = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))


def _blocking(afn: Callable[P, Coroutine[Any, Any, T]], name: str, doc: str) -> Callable[P, T]:
    """A function ``name`` (documented by ``doc``) that runs ``afn`` with :func:`_run_sync`.

    It takes exactly ``afn``'s arguments; ``inspect.signature`` shows ``afn``'s parameters (it
    follows ``__wrapped__``), so the sync and async entry points cannot drift apart.
    """

    @functools.wraps(afn)
    def blocking(*args: P.args, **kwargs: P.kwargs) -> T:
        return _run_sync(afn(*args, **kwargs))

    blocking.__name__ = blocking.__qualname__ = name
    blocking.__doc__ = doc
    return blocking


class _Exhausted(Exception):
    """A call kept failing; carries the last error and the number of retries made."""

    def __init__(self, error: BaseException, retries: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.retries = retries


# Client errors that may pass: timeout, conflict, too early, rate limit.
_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})


def _status_code(err: BaseException) -> int | None:
    """The HTTP status an SDK error carries (its ``status_code`` or its response's), if any."""
    for holder in (err, getattr(err, "response", None)):
        status = getattr(holder, "status_code", None)
        if isinstance(status, int):
            return status
    return None


def _permanent(err: BaseException) -> bool:
    """True for an HTTP client error that a retry would only repeat (e.g. 404 model not found).

    Example:
        >>> class NotFound(Exception):
        ...     status_code = 404
        >>> class RateLimited(Exception):
        ...     status_code = 429
        >>> _permanent(NotFound()), _permanent(RateLimited()), _permanent(TimeoutError())
        (True, False, False)
    """
    status = _status_code(err)
    return status is not None and 400 <= status < 500 and status not in _TRANSIENT_STATUS


_MAX_RETRY_AFTER = 120.0  # seconds: the longest server-requested wait that is honoured


def _retry_delay(err: BaseException, attempt: int, backoff: float) -> float:
    """Seconds to wait before retry ``attempt + 1``.

    That is ``backoff * 2**attempt``, or longer when the error's HTTP response asks for it
    (``Retry-After``, in seconds, honoured up to two minutes).

    Example:
        >>> class RateLimited(Exception):
        ...     class response:
        ...         headers = {"retry-after": "20"}
        >>> _retry_delay(RateLimited(), 0, 1.0), _retry_delay(ValueError(), 2, 1.0)
        (20.0, 4.0)
    """
    delay = backoff * 2**attempt
    headers: Any = getattr(getattr(err, "response", None), "headers", None)
    try:
        asked = float(headers.get("retry-after"))  # SDK responses' headers ignore case
    except (AttributeError, TypeError, ValueError):
        return delay
    return max(delay, min(asked, _MAX_RETRY_AFTER))


async def _with_retries(
    make: Callable[[], Awaitable[T]],
    *,
    sem: asyncio.Semaphore,
    retries: int,
    backoff: float,
    timeout: float | None,
) -> tuple[T, int]:
    """Run ``make()`` under ``sem``; retry on exceptions with exponential backoff.

    An HTTP client error (a 4xx status other than 408, 409, 425 and 429, such as a model that
    does not exist) is not retried: it would fail the same way. A server that says how long
    to wait (``Retry-After``, as rate limits do) is waited for, up to two minutes.

    Returns:
        The result and the number of retries it took.

    Raises:
        _Exhausted: After ``retries`` retries all failed, or at once for a client error.
    """
    attempt = 0
    while True:
        try:
            async with sem:
                coro = make()
                result = await (asyncio.wait_for(coro, timeout) if timeout else coro)
            return result, attempt
        except asyncio.CancelledError:
            raise
        except Exception as err:
            if attempt >= retries or _permanent(err):
                raise _Exhausted(err, attempt) from err
            if backoff > 0:
                await asyncio.sleep(_retry_delay(err, attempt, backoff))
            attempt += 1


def _err(stage: str, err: BaseException) -> str:
    return f"{stage}: {type(err).__name__}: {err}"


def _model_name(model: Any) -> str:
    for attr in ("model", "model_name", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return f"{type(model).__name__}:{value}"
    return type(model).__name__


class _Progress:
    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done, self.bar = total, 0, None
        self.enabled = enabled
        self.started = time.perf_counter()
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:  # pragma: no cover - tqdm is in the eval extra
                pass
            else:
                self.bar = tqdm(total=total, desc="qa", unit="answer", file=sys.stderr)

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
        return await _with_retries(
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
        except _Exhausted as exc:
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
        except _Exhausted as exc:
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
                        cands, q.question, budget_tokens=budget, strategy=s, **options.get(s, {})
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


run_qa = _blocking(
    arun_qa,
    "run_qa",
    """Synchronous wrapper of :func:`arun_qa`, with the same arguments.

    Every call from one thread runs on that thread's own event loop, which stays open, so the
    same models can be used for run after run (see :func:`_run_sync`). Call :func:`arun_qa`
    directly from code that already runs an event loop.

    Returns:
        The :class:`QAReport`.

    Raises:
        ValueError: For an unknown strategy, style or budget base, or bad numbers.
        RuntimeError: When called from a running event loop.
    """,
)


# -- CLI helpers ----------------------------------------------------------------------------


def add_qa_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``pacms eval longmemeval qa`` options to ``parser``.

    Args:
        parser: The sub-command parser.

    Returns:
        The same parser.
    """
    parser.add_argument(
        "--data",
        default=None,
        help="LongMemEval data dir (with oracle/ and the S archive), or a folder/archive/JSON "
        "of questions (default: $PACMS_LONGMEMEVAL_DIR or ../shared/data/longmemeval)",
    )
    parser.add_argument(
        "--split",
        choices=("oracle", "s"),
        default="s",
        help="which split to read from a data dir (default: s)",
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--n", type=int, default=100, help="questions to sample (default: 100)")
    size.add_argument("--all", action="store_true", help="use every question")
    parser.add_argument(
        "--ids",
        default=None,
        help="file of question ids to use instead of sampling (one per line, or a JSON list), "
        "e.g. to pin the recall run's questions",
    )
    parser.add_argument("--seed", type=int, default=0, help="sample and injection seed")
    parser.add_argument("--level", type=int, default=2, help="redundancy level R (default: 2)")
    parser.add_argument(
        "--budget", type=float, default=0.45, help="budget ratio in (0, 1] (default: 0.45)"
    )
    parser.add_argument("--style", choices=STYLES, default="recap", help="restatement style")
    parser.add_argument(
        "--budget-base",
        choices=BUDGET_BASES,
        default="pool",
        help="budget is a fraction of the padded pool or of the original history",
    )
    parser.add_argument(
        "--strategies",
        default=",".join(DEFAULT_STRATEGIES),
        help="comma-separated strategies (default: %(default)s)",
    )
    parser.add_argument(
        "--reader",
        required=True,
        help="reader model spec: ollama:<model> (e.g. ollama:llama3.1), any <provider>:<model> "
        "LangChain's init_chat_model knows (e.g. openai:gpt-4o-mini; needs langchain and the "
        "provider's package), python:<module>:<name>, or fake:<reply> for a dry run",
    )
    parser.add_argument(
        "--judge", default=None, help="judge model spec (default: same as --reader)"
    )
    parser.add_argument(
        "--embeddings",
        default="default",
        help=f"embeddings spec: {EMBEDDINGS_HELP} (default: %(default)s)",
    )
    parser.add_argument(
        "--cache-dir", default=None, help="on-disk embedding cache folder (default: none)"
    )
    parser.add_argument(
        "--ollama-url", default=None, help="Ollama server (default: $OLLAMA_HOST or Ollama's)"
    )
    parser.add_argument(
        "--num-ctx",
        type=int,
        default=0,
        help="context window of an ollama: reader (default 0: sized from the largest budget); "
        f"an ollama: judge that is not the reader gets {JUDGE_NUM_CTX}",
    )
    parser.add_argument(
        "--temperature",
        type=_temperature,
        default=0.0,
        metavar="T",
        help="sampling temperature of ollama: and <provider>: models (default: 0); 'none' "
        "leaves it to the model, for models that reject the parameter",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=DEFAULT_MAX_TOKENS,
        metavar="N",
        help="cap on each reply of ollama: (num_predict) and <provider>: (max_tokens) models, "
        "so a model caught in a loop cannot hold a call forever; leave room for a reasoning "
        f"model's thinking (default: {DEFAULT_MAX_TOKENS}; 0: no cap)",
    )
    parser.add_argument("--concurrency", type=int, default=4, help="model calls in flight")
    parser.add_argument("--retries", type=int, default=2, help="retries per failed call")
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds per model call (default: none)"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="output folder (default: results/qa/<reader>_judge-<judge>_<split>_<style>_"
        "<budget base>_R<level>_b<budget>_seed<seed>); answers are appended to its "
        "qa_records.jsonl as they come in",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="go on with the run saved in the output folder (e.g. after Ctrl-C): its answers "
        "are kept and only the missing or failed (question, strategy) pairs are run; the "
        "settings and the question sample must match",
    )
    parser.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="skip the test prompt sent to the reader and the judge before the run (it finds "
        "a missing model, a server that is down or a missing key before hundreds of calls do)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


RUN_FILE = "qa_run.json"
"""Settings of a CLI run, saved in its output folder so that ``--resume`` can check them."""
RECORDS_FILE = "qa_records.jsonl"
"""Answers of a CLI run, one JSON record per line, appended as they come in."""


def load_partial_run(out: str | Path, settings: Mapping[str, Any]) -> list[QARecord]:
    """Read the answers an earlier CLI run left in ``out``, to go on with it.

    Records of failed pairs (``error`` set) and a last line cut short by an interruption are
    dropped, so those pairs run again.

    Args:
        out: The run's output folder.
        settings: The settings of the run about to start; they must equal the saved ones.

    Returns:
        The reusable records (empty when ``out`` holds no answers).

    Raises:
        ValueError: If ``out`` holds answers without saved settings, or other settings.
    """
    folder = Path(out)
    records_path = folder / RECORDS_FILE
    if not records_path.exists():
        return []
    run_path = folder / RUN_FILE
    if not run_path.exists():
        raise ValueError(f"{folder} holds answers but no {RUN_FILE}; use another --out")
    saved = json.loads(run_path.read_text(encoding="utf-8"))
    differ = sorted(k for k in {*saved, *settings} if saved.get(k) != settings.get(k))
    if differ:
        detail = "; ".join(f"{k}: {saved.get(k)!r} there, {settings.get(k)!r} now" for k in differ)
        raise ValueError(f"{folder} holds a run with other settings ({detail}); use another --out")
    records = []
    for line in records_path.read_text(encoding="utf-8").splitlines():
        try:
            record = QARecord(**json.loads(line))
        except (ValueError, TypeError):
            continue  # empty, or cut short when the run was stopped
        if record.error is None:
            records.append(record)
    return records


def read_ids(path: str | Path) -> list[str]:
    """Read question ids from a file: a JSON list, or one id per line (``#`` comments).

    Args:
        path: The file.

    Returns:
        The ids, in file order, without duplicates.

    Raises:
        OSError: If the file cannot be read.
        ValueError: If it holds no ids.
    """
    text = Path(path).read_text(encoding="utf-8")
    stripped = text.strip()
    if stripped.startswith("["):
        ids = [str(x) for x in json.loads(stripped)]
    else:
        ids = [ln.split("#", 1)[0].strip() for ln in text.splitlines()]
    ids = list(dict.fromkeys(i for i in ids if i))
    if not ids:
        raise ValueError(f"no question ids in {path}")
    return ids


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-") or "model"


def auto_num_ctx(
    questions: Sequence[Question],
    count: Callable[[str], int],
    *,
    level: int,
    budget_ratio: float,
    style: str = "recap",
    budget_base: str = "pool",
    seed: int = 0,
) -> int:
    """A context window that fits the largest reader prompt of a run, with headroom.

    Reader prompts hold at most the budget plus a few hundred tokens of instructions; the
    budget is counted with the selector's tokenizer, and a local model's tokenizer can need
    more tokens for the same text, so the largest budget is scaled by 1.3 and padded by
    1024 tokens, then rounded up to a multiple of 4096 (at least 8192).

    Args:
        questions: The run's questions.
        count: The selector's token counter.
        level: Redundancy level.
        budget_ratio: Budget ratio.
        style: Restatement style.
        budget_base: Budget base.
        seed: Injection seed.

    Returns:
        The window size in tokens (for Ollama's ``num_ctx``).
    """
    largest = max(
        (
            pool_budget(
                build_pool(q, level, style=style, seed=seed), count, budget_ratio, budget_base
            )
            for q in questions
        ),
        default=0,
    )
    need = math.ceil(1.3 * largest) + 1024
    return max(8192, 4096 * math.ceil(need / 4096))


def _temperature(text: str) -> float | None:
    """``--temperature``: a number >= 0, or ``none`` to leave the model's own default."""
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'none', got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"temperature must be >= 0, got {text!r}")
    return value


JUDGE_NUM_CTX = 8192
"""``num_ctx`` of an ``ollama:`` judge that is not also the reader (its prompts are short)."""

DEFAULT_MAX_TOKENS = 2048
"""Default cap on a reply's tokens (``--max-tokens``): far above a LongMemEval answer or a
verdict, with room for a reasoning model's thinking."""

CHECK_PROMPT = "Reply with the single word OK."
"""The test prompt the CLI sends to each model before a run (skipped with ``--no-check``)."""


async def acheck_model(model: Any, *, retries: int = 2, timeout: float | None = None) -> str | None:
    """Send :data:`CHECK_PROMPT` to a chat model, with the run's retry rules.

    A run makes hundreds of calls; this one call finds a model that does not exist, a server
    that is down or a missing key before any of them (and before a working reader's answers
    are spent on a judge that cannot grade them). The reply's content is not checked.

    Run it on the event loop the run will use (:func:`check_model` and :func:`run_qa` share
    their thread's loop): an async client's pooled connections belong to one loop.

    Args:
        model: A LangChain chat model.
        retries: Retries after a failed call (HTTP client errors are not retried).
        timeout: Seconds per call (None: no limit).

    Returns:
        None if the model answered, else the error, as ``"<type>: <message>"``.

    Example:
        >>> import asyncio
        >>> from langchain_core.language_models import FakeListChatModel
        >>> asyncio.run(acheck_model(FakeListChatModel(responses=["OK"]))) is None
        True
    """
    try:
        await _with_retries(
            lambda: model.ainvoke([HumanMessage(CHECK_PROMPT)]),
            sem=asyncio.Semaphore(1),
            retries=retries,
            backoff=1.0,
            timeout=timeout,
        )
    except _Exhausted as failed:
        return f"{type(failed.error).__name__}: {failed.error}"
    return None


def check_model(model: Any, *, retries: int = 2, timeout: float | None = None) -> str | None:
    """Sync twin of :func:`acheck_model`.

    Example:
        >>> from langchain_core.language_models import FakeListChatModel
        >>> class Down(FakeListChatModel):
        ...     async def ainvoke(self, *args, **kwargs):
        ...         raise ConnectionError("refused")
        >>> check_model(FakeListChatModel(responses=["OK"])) is None
        True
        >>> check_model(Down(responses=[]), retries=0)
        'ConnectionError: refused'
    """
    return _run_sync(acheck_model(model, retries=retries, timeout=timeout))


def _most_common_error(records: Sequence[QARecord]) -> str:
    errors = Counter(r.error for r in records if r.error)
    if not errors:
        return ""
    error, count = errors.most_common(1)[0]
    return f"; the most common error ({count} of {len(records)} answers): {error}"


def _check_backends(
    args: argparse.Namespace,
    models: Mapping[str, Any],
    judge_spec: str,
    emb_spec: str,
    selector: ContextSelector,
) -> str | None:
    """Try each model and the embedder once before a run; return the first problem, if any.

    ``fake:``, ``python:`` and the built-in embedders run in this process and are not tried.
    """
    for spec in dict.fromkeys((args.reader, judge_spec)):
        if spec.strip().partition(":")[0].lower() in ("fake", "python"):
            continue
        role = " and ".join(
            name for name, s in (("reader", args.reader), ("judge", judge_spec)) if s == spec
        )
        if not args.quiet:
            print(f"checking the {role} {spec} ...", file=sys.stderr)
        problem = check_model(models[spec], retries=args.retries, timeout=args.timeout)
        if problem:
            hint = "; for a model that takes no temperature, --temperature none" * (
                "temperature" in problem.lower()
            )
            return f"the {role} {spec} did not answer a test prompt: {problem}{hint}"
    from langchain_pacms.eval import backends  # looked up per call, so tests can swap it

    return backends.check_embeddings(emb_spec, selector.embeddings)


def qa_from_args(args: argparse.Namespace) -> int:
    """Run ``pacms eval longmemeval qa`` from parsed arguments.

    Model specs are resolved with ``langchain_pacms.eval.backends``, looked up at call time.
    For ``ollama:`` specs the models get ``temperature`` (default 0), ``seed``, ``num_ctx``
    (default: :func:`auto_num_ctx`, so long prompts are not cut by Ollama's small default
    window) and ``num_predict`` (``--max-tokens``); other ``<provider>:<model>`` specs get
    ``temperature`` and ``max_tokens``; ``fake:`` and ``python:`` models are built as they
    are. A ``temperature`` of ``None`` (``--temperature none``) and a ``--max-tokens`` of 0
    are not passed at all.

    Args:
        args: Namespace built by a parser that went through :func:`add_qa_arguments`.

    Returns:
        Exit code: 0 on success, 1 if every reader/judge call failed, 2 for bad input, 130
        when stopped with Ctrl-C.
    """
    try:
        return _qa_command(args)
    except KeyboardInterrupt:  # before the run (a run stopped midway is handled inside)
        print("\ninterrupted before any answer was asked for", file=sys.stderr)
        return 130


def _qa_command(args: argparse.Namespace) -> int:
    strategies = tuple(s.strip() for s in str(args.strategies).split(",") if s.strip())
    try:  # before anything is built or written
        for name in strategies:
            get_strategy(name)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        source = resolve_source(args.data, args.split)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from langchain_pacms.eval import backends  # looked up per call, so tests can swap it

    judge_spec = args.judge or args.reader
    ollama_url = getattr(args, "ollama_url", None)
    emb_spec = getattr(args, "embeddings", None) or "default"
    temperature = getattr(args, "temperature", 0.0)
    sampling: dict[str, Any] = {} if temperature is None else {"temperature": temperature}
    num_ctx = getattr(args, "num_ctx", None) or None
    max_tokens = getattr(args, "max_tokens", DEFAULT_MAX_TOKENS)
    if max_tokens < 0:
        print(f"error: --max-tokens must be >= 0, got {max_tokens}", file=sys.stderr)
        return 2

    def is_ollama(spec: str) -> bool:
        return spec.strip().lower().startswith("ollama:")

    def build(spec: str) -> Any:
        kind = spec.strip().partition(":")[0].lower()
        if kind in ("fake", "python"):
            return backends.chat_model_from_spec(spec)
        if kind != "ollama":
            cap: dict[str, Any] = {"max_tokens": max_tokens} if max_tokens else {}
            return backends.chat_model_from_spec(spec, **sampling, **cap)
        # The window is sized for the reader's prompts; a judge of its own reads short ones
        # (a larger window would only hold memory, or make Ollama reload a shared model).
        window = num_ctx if spec == args.reader else JUDGE_NUM_CTX
        cap = {"num_predict": max_tokens} if max_tokens else {}
        return backends.chat_model_from_spec(
            spec, ollama_url=ollama_url, seed=args.seed, num_ctx=window, **sampling, **cap
        )

    # Build the models before the (slow) data load, so a bad spec fails fast. An ollama: reader
    # without --num-ctx is only checked here: its window is sized from the questions below.
    models: dict[str, Any] = {}
    try:
        for spec in dict.fromkeys((args.reader, judge_spec)):
            if is_ollama(spec) and num_ctx is None and spec == args.reader:
                backends.chat_model_from_spec(spec)
            else:
                models[spec] = build(spec)
        selector = backends.selector_from_spec(
            emb_spec, cache_dir=getattr(args, "cache_dir", None), ollama_url=ollama_url
        )
    except Exception as err:
        print(f"error: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(f"loading questions from {source} ...", file=sys.stderr)
    ids_file = getattr(args, "ids", None)
    try:
        if ids_file:
            wanted = read_ids(ids_file)
            questions = sorted(iter_questions(source, ids=wanted), key=lambda q: q.question_id)
            missing = sorted(set(wanted) - {q.question_id for q in questions})
            if missing:
                print(f"warning: {len(missing)} ids not found in {source}", file=sys.stderr)
        else:
            questions = sample_questions(
                iter_questions(source), None if args.all else args.n, seed=args.seed
            )
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not questions:
        print("error: no questions selected", file=sys.stderr)
        return 2

    try:
        if num_ctx is None and is_ollama(args.reader):
            num_ctx = auto_num_ctx(
                questions,
                selector.token_counter,
                level=args.level,
                budget_ratio=args.budget,
                style=args.style,
                budget_base=args.budget_base,
                seed=args.seed,
            )
        for spec in dict.fromkeys((args.reader, judge_spec)):
            if spec not in models:
                models[spec] = build(spec)
    except Exception as err:
        print(f"error: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    reader, judge = models[args.reader], models[judge_spec]
    if getattr(args, "check", True):
        problem = _check_backends(args, models, judge_spec, emb_spec, selector)
        if problem:
            print(f"error: {problem} (--no-check skips this test)", file=sys.stderr)
            return 2
    meta = {
        "reader": args.reader,
        "judge": judge_spec,
        "embeddings": emb_spec,
        "split": args.split,
        "source": str(source),
        "sample_n": None if args.all or ids_file else args.n,
        "ids_file": str(ids_file) if ids_file else None,
        "num_ctx": num_ctx,
        "temperature": temperature,
        "max_tokens": max_tokens or None,
    }
    settings = {
        "reader": args.reader,
        "judge": judge_spec,
        "embeddings": emb_spec,
        # What the spec builds, which can change between versions (ollama: task prefixes).
        "embeddings_identity": model_identity(selector.embeddings.embeddings),
        "split": args.split,
        "source": str(source),
        "style": args.style,
        "budget_base": args.budget_base,
        "level": args.level,
        "budget": args.budget,
        "seed": args.seed,
        "temperature": temperature,
        "max_tokens": max_tokens or None,
        # The sample itself, so that a resumed run answers the questions it started with.
        "questions": len(questions),
        "question_ids_sha256": hashlib.sha256(
            "\n".join(sorted(q.question_id for q in questions)).encode()
        ).hexdigest(),
    }
    out = (
        Path(args.out)
        if args.out
        else Path("results")
        / "qa"
        / (
            f"{_slug(args.reader)}_judge-{_slug(judge_spec)}_{args.split}_{args.style}_"
            f"{args.budget_base}_R{args.level}_b{round(100 * args.budget)}_seed{args.seed}"
        )
    )
    resume = bool(getattr(args, "resume", False))
    try:
        done = load_partial_run(out, settings) if resume else []
        out.mkdir(parents=True, exist_ok=True)
        (out / RUN_FILE).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        sink = (out / RECORDS_FILE).open("a" if resume else "w", encoding="utf-8")
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if done and not args.quiet:
        print(f"resuming: {len(done)} answers kept from {out / RECORDS_FILE}", file=sys.stderr)

    def keep(record: QARecord) -> None:
        sink.write(json.dumps(asdict(record), ensure_ascii=False) + "\n")
        sink.flush()

    try:
        report = run_qa(
            questions,
            strategies=strategies,
            level=args.level,
            budget_ratio=args.budget,
            style=args.style,
            budget_base=args.budget_base,
            reader=reader,
            judge=judge,
            selector=selector,
            concurrency=args.concurrency,
            retries=args.retries,
            seed=args.seed,
            progress=not args.quiet,
            timeout=args.timeout,
            meta=meta,
            done=done,
            on_record=keep,
        )
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"\ninterrupted: the answers so far are in {out / RECORDS_FILE}; run the same "
            "command with --resume to go on",
            file=sys.stderr,
        )
        return 130
    finally:
        sink.close()
    paths = report.save(out)
    print(report.to_markdown())
    print(f"saved: {', '.join(str(p) for p in paths.values())}", file=sys.stderr)
    totals = report.totals()
    if totals["records"] and totals["failures"] == totals["records"]:
        print(
            "error: every reader/judge call failed; is the model reachable?"
            + _most_common_error(report.records),
            file=sys.stderr,
        )
        return 1
    if totals["failures"]:
        print(
            f"warning: {totals['failures']} answers failed and count as wrong"
            + _most_common_error(report.records),
            file=sys.stderr,
        )
    return 0
