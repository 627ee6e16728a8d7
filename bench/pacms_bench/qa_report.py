"""QA records and their report: accuracy by strategy and question type, tokens, files.

:class:`QARecord` is the outcome of one (question, strategy) pair; :class:`QAReport` gathers
them into the accuracy table, the token and failure totals, and the files a run saves.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pacms_bench.longmemeval import QUESTION_TYPES

__all__ = ["TYPE_ABBREVIATIONS", "QARecord", "QAReport"]

TYPE_ABBREVIATIONS: dict[str, str] = {
    "single-session-user": "SSU",
    "single-session-assistant": "SSA",
    "single-session-preference": "SSP",
    "temporal-reasoning": "TR",
    "knowledge-update": "KU",
    "multi-session": "MS",
}
"""Column labels of the question types in :meth:`QAReport.to_markdown`."""


def _add(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


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
