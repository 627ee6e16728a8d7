"""The recall sweep's report: mean tables, JSON, markdown tables and the plot."""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from pacms_bench.recall_config import ROW_FIELDS, RecallConfig, RecallRow

__all__ = ["RecallReport"]

logger = logging.getLogger(__name__)


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
