from __future__ import annotations

import json
import random
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

from langchain_pacms import ContextSelector, HashedTfidfEmbeddings
from langchain_pacms.core import CoverageObjective, Problem, solve
from langchain_pacms.selector import DENSE_SIMILARITY_THRESHOLD
from pacms_bench.backends import selector_from_spec
from pacms_bench.cli import main, source_label
from pacms_bench.longmemeval import Question, Round, default_data_dir, iter_questions
from pacms_bench.recall import blas_setup, blas_threads, load_questions, run_recall, sweep_question
from pacms_bench.recall_cache import ResultCache, question_digest
from pacms_bench.recall_config import (
    ROW_FIELDS,
    RecallConfig,
    RecallRow,
    StrategySpec,
    budget_tokens,
    parse_strategy_spec,
)
from pacms_bench.recall_report import RecallReport
from pacms_bench.redundancy import inject_redundancy

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lme_mini"


def recall_argv(
    out: Path, *options: str, cache_dir: Path | None = None, data: Path = FIXTURES
) -> list[str]:
    """The ``pacms-bench longmemeval recall`` arguments that read ``data`` and write ``out``.

    Each of ``options`` is split on spaces.
    """
    argv = ["longmemeval", "recall", "--data", str(data), "--out", str(out)]
    argv += [word for option in options for word in option.split()]
    return argv if cache_dir is None else [*argv, "--cache-dir", str(cache_dir)]


_WORDS = [
    "garden",
    "kitchen",
    "laptop",
    "river",
    "concert",
    "budget",
    "invoice",
    "python",
    "recipe",
    "violin",
    "marathon",
    "passport",
    "museum",
    "battery",
    "harbor",
    "sunset",
    "ticket",
    "printer",
    "tomato",
    "hiking",
    "spreadsheet",
    "guitar",
    "mortgage",
    "piano",
    "camera",
    "bakery",
    "puzzle",
    "lantern",
    "meadow",
    "canyon",
]


def _round(i: int, user: str, assistant: str, evidence: bool = False) -> Round:
    return Round(
        index=i,
        session_id=f"s{i // 4}",
        session_index=i // 4,
        date=f"2023/05/{1 + i // 4:02d} (Mon) 10:00",
        user=user,
        assistant=assistant,
        is_evidence=evidence,
    )


def _synthetic_question(n: int = 30, evidence: tuple[int, ...] = (3, 11, 24)) -> Question:
    """Varied filler rounds plus evidence rounds that mention the bicycle."""
    rng = random.Random(7)
    rounds = []
    for i in range(n):
        words = rng.sample(_WORDS, 8)
        user = f"I keep thinking about my {words[0]} and the {words[1]} near the {words[2]}."
        reply = (
            f"Good point about the {words[3]}; maybe plan the {words[4]} "
            f"around the {words[5]} and the {words[6]} {words[7]}."
        )
        if i in evidence:
            user = f"My bicycle is painted teal now, and the {words[0]} matches it."
        rounds.append(_round(i, user, reply, i in evidence))
    return Question(
        question_id="synthetic",
        question_type="single-session-user",
        question="What colour is my bicycle?",
        answer="teal",
        question_date="2023/06/01 (Thu) 10:00",
        rounds=tuple(rounds),
    )


def _fixture_questions() -> list[Question]:
    return load_questions(FIXTURES, n=None)


# -------------------------------------------------------------------------- strategy specs


def test_parse_plain_and_variant_specs() -> None:
    assert parse_strategy_spec("topk") == StrategySpec("topk", "topk", {})
    spec = parse_strategy_spec(" pacms:relevance_weight=0.5,cost_exponent=0 ")
    assert spec.label == "pacms:relevance_weight=0.5,cost_exponent=0"
    assert spec.name == "pacms"
    assert spec.options == {"relevance_weight": 0.5, "cost_exponent": 0}
    assert isinstance(spec.options["cost_exponent"], int)
    spec = parse_strategy_spec("pacms:relevance_weight=auto,fill=false,density_threshold=none")
    assert spec.options == {"relevance_weight": "auto", "fill": False, "density_threshold": None}
    assert parse_strategy_spec("mmr:lambda_mult=0.7,").options == {"lambda_mult": 0.7}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (":k=1", "no strategy name"),
        ("pacms:relevance_weight", "not key=value"),
        ("rag:k=1,k=2", "given twice"),
    ],
)
def test_bad_spec_syntax(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_strategy_spec(spec)


def test_config_rejects_unknown_strategy_and_option() -> None:
    with pytest.raises(ValueError, match="unknown strategy"):
        RecallConfig.create(strategies=["nope"])
    with pytest.raises(ValueError, match="pacms:bogus=1"):
        RecallConfig.create(strategies=["pacms:bogus=1"])
    with pytest.raises(ValueError, match="lambda_mult"):
        RecallConfig.create(strategies=["mmr:lambda_mult=3"])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"levels": [-1]},
        {"levels": [0, 0]},
        {"budgets": [0.0]},
        {"budgets": [1.5]},
        {"style": "nope"},
        {"budget_base": "nope"},
        {"strategies": ["topk", "topk"]},
        {"strategies": []},
    ],
)
def test_config_validation(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        RecallConfig.create(**kwargs)


def test_config_round_trips_through_dict() -> None:
    cfg = RecallConfig.create(
        levels=(2, 0),
        budgets=(0.3,),
        strategies=["rag:k=2", "lastk"],
        style="full",
        budget_base="original",
        seed=5,
    )
    assert RecallConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert cfg.labels == ("rag:k=2", "lastk")


# -------------------------------------------------------------------------- recall itself


def _flat_selector() -> ContextSelector:
    return ContextSelector(token_counter=lambda text: 10)


def test_recall_on_a_crafted_pool() -> None:
    rounds = (
        _round(0, "My bicycle is red.", "Nice colour.", evidence=True),
        _round(1, "Any pasta recipe ideas?", "Try carbonara."),
        _round(2, "The weather is grey today.", "Take an umbrella."),
        _round(3, "I repainted my bicycle blue.", "Blue bicycles look great.", evidence=True),
    )
    q = Question(
        "crafted",
        "knowledge-update",
        "What colour is my bicycle?",
        "blue",
        "2023/06/01 (Thu) 10:00",
        rounds,
    )
    cfg = RecallConfig.create(levels=(0, 2), budgets=(0.25, 0.5, 1.0), strategies=["lastk", "topk"])
    rows = {(r.R, r.budget, r.strategy): r for r in sweep_question(q, _flat_selector(), cfg).rows}
    assert len(rows) == 2 * 3 * 2
    # R=0: 4 items x 10 tokens. Half the budget: lastk keeps rounds 2 and 3, topk both bicycles.
    assert rows[(0, 0.5, "lastk")].recall == 0.5
    assert rows[(0, 0.5, "lastk")].kept_evidence == 1
    assert rows[(0, 0.5, "topk")].recall == 1.0
    assert rows[(0, 0.5, "topk")].budget_tokens == 20
    assert rows[(0, 0.25, "topk")].recall == 0.5
    # R=2: two restatements per filler round fill the recent end; lastk keeps only those.
    r2 = rows[(2, 0.5, "lastk")]
    assert (r2.n_candidates, r2.pool_tokens, r2.budget_tokens) == (8, 80, 40)
    assert r2.recall == 0.0 and r2.n_kept == 4
    # Restatements never count as evidence, and the full budget keeps everything.
    assert {r.n_evidence for r in rows.values()} == {2}
    assert rows[(2, 1.0, "lastk")].recall == 1.0
    assert rows[(2, 1.0, "lastk")].kept_tokens == 80


def test_budget_base_original_keeps_the_budget_fixed() -> None:
    q = _synthetic_question()
    cfg = RecallConfig.create(
        levels=(0, 4), budgets=(0.2,), strategies=["topk"], budget_base="original"
    )
    rows = sweep_question(q, _flat_selector(), cfg).rows
    assert [r.budget_tokens for r in rows] == [60, 60]  # 20% of 30 rounds x 10 tokens
    assert rows[1].pool_tokens > rows[0].pool_tokens
    assert budget_tokens(7, 0.05) == 1


def test_question_without_evidence_is_rejected() -> None:
    q = Question("x", "single-session-user", "q?", "a", "", (_round(0, "hi", "hello"),))
    with pytest.raises(ValueError, match="no evidence"):
        sweep_question(q, _flat_selector(), RecallConfig.create(levels=(0,)))
    with pytest.raises(ValueError, match="no evidence"):
        run_recall([q])


# -------------------------------------------------------------------- equality with select()


def _assert_rows_match_select(
    question: Question, rows: list[RecallRow], cfg: RecallConfig, selector: ContextSelector
) -> None:
    specs = {s.label: s for s in cfg.strategies}
    for row in rows:
        pool = inject_redundancy(question.rounds, row.R, style=cfg.style, seed=cfg.seed)
        spec = specs[row.strategy]
        sel = selector.select(
            [p.text for p in pool],
            question.question,
            budget=row.budget_tokens,
            strategy=spec.name,
            **dict(spec.options),
        )
        kept = [pool[int(i)] for i in sel.kept_ids]
        assert not sel.fell_back
        assert sel.tokens_total == row.pool_tokens
        if cfg.budget_base == "pool" and row.strategy == cfg.labels[0]:
            ratio_sel = selector.select(
                [p.text for p in pool],
                question.question,
                budget=("ratio", row.budget),
                strategy="lastk",
            )
            assert ratio_sel.budget == row.budget_tokens
        got = (sum(p.is_evidence for p in kept), sel.tokens_kept, len(kept))
        assert got == (row.kept_evidence, row.kept_tokens, row.n_kept), row


@pytest.mark.parametrize("linked", [True, False])
@pytest.mark.parametrize(("style", "base"), [("recap", "pool"), ("full", "original")])
def test_rows_equal_selector_select(linked: bool, style: str, base: str) -> None:
    selector = ContextSelector()
    cfg = RecallConfig.create(
        levels=(0, 2, 3),
        budgets=(0.05, 0.2, 0.45, 0.7),
        strategies=[
            "topk",
            "mmr",
            "lastk",
            "pacms",
            "rag",
            "pacms:relevance_weight=0.5,cost_exponent=0",
            "mmr:lambda_mult=0.7",
        ],
        style=style,
        budget_base=base,
    )
    for q in [*_fixture_questions(), _synthetic_question()]:
        result = sweep_question(q, selector, cfg, link_budgets=linked)
        assert len(result.rows) == 3 * 4 * 7
        _assert_rows_match_select(q, result.rows, cfg, selector)


def test_sweep_builds_each_coverage_kernel_once_per_level(monkeypatch: pytest.MonkeyPatch) -> None:
    # Budgets change nothing in the kernel, so one level with three budgets and two coverage
    # settings (pacms, pacms_paper) must build two weight matrices, not six.
    builds: list[int] = []
    weights = CoverageObjective._weights

    def counted(self: CoverageObjective, problem: Problem, *args: Any) -> Any:
        builds.append(problem.n)
        return weights(self, problem, *args)

    monkeypatch.setattr(CoverageObjective, "_weights", counted)
    cfg = RecallConfig.create(
        levels=(2,), budgets=(0.05, 0.2, 0.45), strategies=["pacms", "pacms_paper", "topk"]
    )
    question = _synthetic_question()
    result = sweep_question(question, ContextSelector(), cfg)
    assert len(result.rows) == 9
    pool = {row.n_candidates for row in result.rows}
    assert len(pool) == 1 and pool.pop() > 2
    # (Checking each column's options solves a two-item problem once; those builds are not
    # the pool's.)
    assert [n for n in builds if n > 2] == [result.rows[0].n_candidates] * 2


class _UndeclaredLexical(Embeddings):
    """The lexical vectors without the lexical embedder's threshold or pool reweighting."""

    def __init__(self) -> None:
        self.inner = HashedTfidfEmbeddings()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


def test_rows_use_the_embedders_threshold_like_select() -> None:
    # An embedder without a declared threshold gets the dense default in select(); the sweep
    # must run pacms with the same value, or its rows would not be what select() keeps.
    selector = ContextSelector(_UndeclaredLexical())
    assert selector.similarity_threshold == DENSE_SIMILARITY_THRESHOLD
    cfg = RecallConfig.create(
        levels=(0, 3),
        budgets=(0.05, 0.2, 0.45),
        strategies=["pacms", "pacms:similarity_threshold=0.3"],
        style="full",
    )
    rows = []
    for q in [*_fixture_questions(), _synthetic_question()]:
        result = sweep_question(q, selector, cfg)
        _assert_rows_match_select(q, result.rows, cfg, selector)
        rows += result.rows
    picks = {(r.question_id, r.R, r.budget, r.strategy): (r.n_kept, r.kept_tokens) for r in rows}
    assert any(
        n != picks[(qid, level, budget, "pacms:similarity_threshold=0.3")]
        for (qid, level, budget, label), n in picks.items()
        if label == "pacms"
    ), "the two thresholds should differ somewhere, or this test proves nothing"
    report = run_recall([_synthetic_question()], cfg, selector=selector)
    assert report.meta["strategy_options"] == {
        "pacms": {
            "similarity_threshold": DENSE_SIMILARITY_THRESHOLD,
            "min_gain": 0.0,
            "relevance_feedback": 0.0,
            "calibrate": True,
        },
        "pacms:similarity_threshold=0.3": {
            "similarity_threshold": 0.3,
            "min_gain": 0.0,
            "relevance_feedback": 0.0,
            "calibrate": True,
        },
    }


def test_linked_budgets_rank_mmr_once_with_the_same_picks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from langchain_pacms.core import mmr

    calls: list[float] = []
    real = mmr.MmrRanking

    def counting(vectors: Any, query: Any, lambda_mult: float = 0.5, **kw: Any) -> Any:
        calls.append(lambda_mult)
        return real(vectors, query, lambda_mult, **kw)

    monkeypatch.setattr(mmr, "MmrRanking", counting)
    rng = np.random.default_rng(3)
    vectors = rng.random((40, 12)).astype(np.float32)
    query = rng.random(12).astype(np.float32)
    tokens = rng.integers(1, 30, 40)
    mandatory = np.zeros(40, dtype=bool)
    mandatory[[5, 17]] = True
    base = Problem.build(vectors, query, tokens=tokens, budget=100, mandatory=mandatory)
    budgets = (60, 100, 250, 2000)  # above the two mandatory items (at most 58 tokens)
    for lam in (0.5, 0.7):
        for budget in budgets:
            fresh = solve(replace(base, budget=budget), "mmr", lambda_mult=lam)
            linked = solve(base.with_budget(budget), "mmr", lambda_mult=lam)
            assert linked.order.tolist() == fresh.order.tolist()
    # Fresh problems rank every time; the linked ones once per lambda.
    assert len(calls) == 2 * len(budgets) + 2


def test_a_sweep_resolves_column_options_once(monkeypatch: pytest.MonkeyPatch) -> None:
    selector = ContextSelector()
    calls: list[str] = []
    resolve = selector.resolve_options

    def counting(strategy: Any, options: Any) -> Any:
        calls.append(str(strategy))
        return resolve(strategy, options)

    monkeypatch.setattr(selector, "resolve_options", counting)
    cfg = RecallConfig.create(levels=(0,), budgets=(0.2,), strategies=["topk", "pacms"])
    qs = [*_fixture_questions(), _synthetic_question()]
    assert len(qs) > 1
    report = run_recall(qs, cfg, selector=selector)
    assert sorted(calls) == ["pacms", "topk"]
    assert report.meta["strategy_options"]["pacms"]["similarity_threshold"] == 0.85
    # Options given to one question are the ones its columns run with.
    forced = {"topk": {}, "pacms": {"similarity_threshold": 0.6, "min_gain": 0.5}}
    rows = sweep_question(qs[-1], selector, cfg, options=forced).rows
    default = sweep_question(qs[-1], selector, cfg).rows
    assert rows[0] == default[0] and rows[1] != default[1]


def test_workers_give_the_same_rows() -> None:
    qs = [*_fixture_questions(), _synthetic_question()]
    cfg = RecallConfig.create(levels=(0, 2), budgets=(0.2, 0.45))
    one = run_recall(qs, cfg, selector=ContextSelector())
    two = run_recall(qs, cfg, selector_factory=selector_from_spec, workers=2)
    assert one.rows == two.rows
    assert two.meta["workers"] == 2
    with pytest.raises(ValueError, match="selector_factory"):
        run_recall(qs, cfg, selector=ContextSelector(), workers=2)


def test_blas_threads_context_is_harmless() -> None:
    with blas_threads(1):
        assert float(np.ones((64, 64), np.float32).dot(np.ones(64, np.float32))[0]) == 64.0
    with blas_threads(None):
        pass


# -------------------------------------------------------------------------- report outputs


def _report(values: dict[tuple[int, float, str], list[float]]) -> RecallReport:
    labels = sorted({k[2] for k in values})
    cfg = RecallConfig.create(
        levels=sorted({k[0] for k in values}),
        budgets=sorted({k[1] for k in values}),
        strategies=labels,
        check_strategies=False,
    )
    rows = []
    for (level, budget, label), recalls in values.items():
        for i, rec in enumerate(recalls):
            rows.append(
                RecallRow(
                    f"q{i}",
                    "multi-session",
                    level,
                    budget,
                    label,
                    rec,
                    int(rec * 4),
                    4,
                    10,
                    10,
                    100,
                    20,
                    2,
                )
            )
    return RecallReport(rows, cfg, {"n_questions": 2, "embeddings": "e", "tokenizer": "t"})


def test_markdown_marks_best_bold_and_second_underlined() -> None:
    report = _report(
        {
            (0, 0.2, "lastk"): [0.5, 0.5],
            (0, 0.2, "mmr"): [1.0, 0.5],
            (0, 0.2, "topk"): [1.0, 1.0],
            (2, 0.2, "lastk"): [0.25, 0.25],
            (2, 0.2, "mmr"): [0.25, 0.25],
            (2, 0.2, "topk"): [0.5, 0.5],
            (4, 0.2, "lastk"): [0.5, 0.5],
            (4, 0.2, "mmr"): [0.5, 0.5],
            (4, 0.2, "topk"): [0.5, 0.5],
        }
    )
    md = report.to_markdown()
    assert "**Budget = 20%**" in md
    assert "| R | lastk | mmr | topk |" in md
    assert "| 0 | 0.500 | <u>0.750</u> | **1.000** |" in md
    assert "| 2 | <u>0.250</u> | <u>0.250</u> | **0.500** |" in md  # ties share a mark
    assert "| 4 | 0.500 | 0.500 | 0.500 |" in md  # all equal: nothing marked
    assert report.mean_recall(0, 0.2, "mmr") == 0.75


def test_json_shape_and_round_trip(tmp_path: Path) -> None:
    qs = _fixture_questions()
    cfg = RecallConfig.create(levels=(0, 2), budgets=(0.1, 0.7), strategies=["topk", "pacms"])
    report = run_recall(qs, cfg, meta={"command": "test"})
    data = json.loads(report.to_json())
    assert set(data) == {"meta", "config", "summary", "columns", "rows"}
    assert data["columns"] == list(ROW_FIELDS)
    assert len(data["rows"]) == len(qs) * 2 * 2 * 2
    assert all(len(r) == len(ROW_FIELDS) for r in data["rows"])
    row = dict(zip(data["columns"], data["rows"][0]))
    assert row["question_id"] == qs[0].question_id and row["type"] == qs[0].question_type
    assert 0.0 <= row["recall"] <= 1.0
    meta = data["meta"]
    for key in (
        "embeddings",
        "tokenizer",
        "runtime_seconds",
        "machine",
        "code_fingerprint",
        "command",
        "timings_seconds",
    ):
        assert key in meta
    assert meta["tokenizer"] == "o200k_base"
    assert len(data["summary"]) == 2 * 2 * 2
    assert {"budget", "R", "strategy", "mean_recall", "sem", "n"} == set(data["summary"][0])
    paths = report.save(tmp_path, "r")
    again = RecallReport.load(paths["json"])
    assert again.rows == report.rows and again.config == report.config
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_draws_budgets_in_ascending_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.axes import Axes

    drawn: list[list[float]] = []
    plot = Axes.plot

    def record(self: Axes, xs: list[float], *args: Any, **kwargs: Any) -> Any:
        drawn.append(list(xs))
        return plot(self, xs, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", record)
    report = _report({(0, b, "topk"): [b, b] for b in (0.7, 0.05, 0.2)})
    report = replace(report, config=replace(report.config, budgets=(0.7, 0.05, 0.2)))
    report.save_plot(tmp_path / "p.png")
    assert drawn == [[5.0, 20.0, 70.0]]
    # The tables keep the order the budgets were given in.
    md = report.to_markdown()
    assert md.index("Budget = 70%") < md.index("Budget = 5%") < md.index("Budget = 20%")


def test_save_without_matplotlib_keeps_json_and_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails as if not installed
    report = _report({(0, 0.2, "topk"): [1.0, 0.5]})
    (tmp_path / "r.png").write_bytes(b"an older run's plot")
    paths = report.save(tmp_path, "r", title="t")
    assert set(paths) == {"json", "md"} and not (tmp_path / "r.png").exists()
    assert RecallReport.load(paths["json"]).rows == report.rows
    assert paths["md"].read_text().startswith("## t")
    assert "no plot written" in caplog.text and "pip install matplotlib" in caplog.text


def test_budget_digits_survive_in_headings_and_command(tmp_path: Path) -> None:
    report = _report({(0, 0.1234567, "topk"): [1.0, 0.5], (0, 0.07, "topk"): [1.0, 1.0]})
    md = report.to_markdown()
    assert "**Budget = 12.34567%**" in md and "**Budget = 7%**" in md
    close = _report({(0, 0.123456789012345, "topk"): [1.0], (0, 0.1234567890124, "topk"): [1.0]})
    close_md = close.to_markdown()
    assert "12.3456789012345%" in close_md and "12.34567890124%" in close_md
    out = tmp_path / "out"
    argv = recall_argv(
        out,
        "--all --levels 0 --budgets 0.1234567 0.07 --strategies topk",
        "--name d --quiet",
        "--result-cache off",
    )
    assert main(argv) == 0
    command = json.loads((out / "d.json").read_text())["meta"]["command"]
    assert "--budgets 0.1234567 0.07 --strategies" in command
    assert command.endswith("--workers 1 --blas-threads 1")


# ------------------------------------------------------------------------------ data + CLI


def test_load_questions_drops_ineligible() -> None:
    assert [q.question_id for q in load_questions(FIXTURES, n=None)] == ["fx_ssa", "fx_ssu"]
    assert [q.question_id for q in load_questions(FIXTURES, ids=["fx_ssu", "fx_ku_abs"])] == [
        "fx_ssu"
    ]


def test_cli_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(
        recall_argv(
            out,
            "--all --levels 0 2 --budgets 0.2 0.7",
            "--strategies topk lastk pacms:relevance_weight=0.5 --name mini --quiet",
            cache_dir=tmp_path / "c",
        )
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "**Budget = 20%**" in printed and "pacms:relevance_weight=0.5" in printed
    data = json.loads((out / "mini.json").read_text())
    assert len(data["rows"]) == 2 * 2 * 2 * 3
    command = data["meta"]["command"]
    assert command.startswith("pacms-bench longmemeval recall --split s")
    assert f"--cache-dir {tmp_path / 'c'} --cache auto" in command
    assert "--ollama-url" not in command and "--out" not in command
    assert data["meta"]["embedding_cache"] == "memory"  # lexical: no disk cache by default
    assert [p.name for p in (tmp_path / "c").iterdir()] == ["recall-cells"]  # result cache only
    assert (out / "mini.md").read_text().startswith("## Evidence-round recall")
    assert (out / "mini.png").read_bytes()[:4] == b"\x89PNG"


def test_source_label_names_a_split_only_for_its_official_files() -> None:
    assert source_label(Path("d") / "longmemeval_s_cleaned.json") == ("s", "s")
    assert source_label(Path("d") / "oracle") == ("oracle", "oracle")
    # Not the S split: a user's file whose name merely starts like one.
    assert source_label(Path("d") / "longmemeval_sample.json") == (None, "longmemeval_sample")


def test_source_labels_keep_distinct_sources_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    labels = [source_label(Path("d") / name)[1] for name in ("lme.v1", "lme.v2", "lme.v1.json")]
    assert labels == ["lme.v1", "lme.v2", "lme.v1"]
    assert source_label(Path("d") / "qs.tar.xz") == (None, "qs")
    assert source_label(Path("d") / "qs.TGZ") == (None, "qs")
    assert source_label(Path("d") / ".json") == (None, "json")  # a name that is all suffix
    here = tmp_path / "my questions"
    here.mkdir()
    monkeypatch.chdir(here)
    assert source_label(Path(".")) == (None, "my-questions")
    (here / "sub").mkdir()
    monkeypatch.chdir(here / "sub")
    assert source_label(Path("..")) == source_label(Path("./..")) == (None, "my-questions")


def test_cli_default_names_keep_runs_apart(tmp_path: Path) -> None:
    base = recall_argv(
        tmp_path, "--levels 0 --budgets 0.5 --strategies topk --quiet --result-cache off"
    )
    assert main([*base, "--all"]) == 0
    assert main([*base, "--ids", "fx_ssu"]) == 0
    ids = {
        name: json.loads((tmp_path / f"{name}.json").read_text())["meta"]["n_questions"]
        for name in ("recall-lme_mini-all-recap-pool", "recall-lme_mini-ids-recap-pool")
    }
    assert ids == {"recall-lme_mini-all-recap-pool": 2, "recall-lme_mini-ids-recap-pool": 1}
    assert not (tmp_path / "recall-lme_mini-recap-pool.json").exists()
    # A folder given directly is named by itself, not by the (ignored) --split.
    meta = json.loads((tmp_path / "recall-lme_mini-all-recap-pool.json").read_text())["meta"]
    assert meta["split"] is None and meta["source"] == str(FIXTURES)
    assert (
        (tmp_path / "recall-lme_mini-all-recap-pool.md")
        .read_text()
        .startswith("## Evidence-round recall: lme_mini")
    )


def test_cli_disk_cache_on(tmp_path: Path) -> None:
    args = recall_argv(
        tmp_path,
        "--all --levels 0 --budgets 0.5 --strategies topk --quiet --cache on --result-cache off",
        cache_dir=tmp_path / "c",
    )
    assert main(args) == 0
    first = json.loads((tmp_path / "recall-lme_mini-all-recap-pool.json").read_text())["meta"]
    assert first["cache_misses"] > 0 and first["cache_hits"] == 0
    assert main(args) == 0
    second = json.loads((tmp_path / "recall-lme_mini-all-recap-pool.json").read_text())["meta"]
    assert second["cache_misses"] == 0 and second["cache_hits"] == first["cache_misses"]
    assert first["cached_cells"] == second["cached_cells"] == 0


def test_cli_result_cache_reuses_cells(tmp_path: Path) -> None:
    base = recall_argv(
        tmp_path, "--all --levels 0 2 --budgets 0.2 0.5 --quiet --name r", cache_dir=tmp_path / "c"
    )
    assert main([*base, "--strategies", "topk", "mmr"]) == 0
    first = json.loads((tmp_path / "r.json").read_text())
    assert first["meta"]["cached_cells"] == 0
    assert main([*base, "--strategies", "topk", "mmr", "pacms:cost_exponent=0"]) == 0
    second = json.loads((tmp_path / "r.json").read_text())
    assert second["meta"]["cached_cells"] == 2 * 2 * 2 * 2  # only the new column is computed
    assert main([*base, "--strategies", "topk", "mmr", "pacms:cost_exponent=0"]) == 0
    third = json.loads((tmp_path / "r.json").read_text())
    assert third["meta"]["cached_cells"] == 2 * 2 * 2 * 3
    assert third["meta"]["cache_misses"] == 0  # nothing embedded
    assert third["rows"] == second["rows"]
    assert [r[:5] for r in first["rows"]] == [
        r[:5] for r in third["rows"] if r[4] != ("pacms:cost_exponent=0")
    ]
    # Another BLAS thread count can tip a near-tie, so its cells are computed anew.
    if third["meta"]["blas"] is None:
        pytest.skip("no OpenBLAS loaded: the thread count cannot be set or read")
    assert third["meta"]["blas"].endswith(" x1")
    assert main([*base, "--strategies", "topk", "--blas-threads", "2"]) == 0
    fourth = json.loads((tmp_path / "r.json").read_text())
    assert fourth["meta"]["blas"].endswith(" x2") and fourth["meta"]["cached_cells"] == 0


def test_result_cache_prune_keeps_only_its_namespace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = recall_argv(
        tmp_path,
        "--all --levels 0 --budgets 0.5 --strategies topk --name r",
        cache_dir=tmp_path / "c",
    )
    assert main([*base, "--quiet"]) == 0
    cells = tmp_path / "c" / "recall-cells"
    (current,) = list(cells.iterdir())
    kept = sorted(p for p in current.rglob("*") if p.is_file())
    assert kept and json.loads((tmp_path / "r.json").read_text())["meta"]["result_cache"] == (
        str(current)
    )
    # Cells of another embedder, and a shard folder of an older flat layout.
    smaller = HashedTfidfEmbeddings(dim=256)  # another model identity: another namespace
    other = ResultCache.for_selector(tmp_path / "c", ContextSelector(smaller))
    other.store.mset([("k1", b"x" * 10), ("k2", b"y" * 5)])
    (cells / "ab").mkdir()
    (cells / "ab" / "cdef").write_bytes(b"z" * 7)
    assert len(list(cells.iterdir())) == 3
    stale = [
        getattr(p.stat(), "st_blocks", 0) * 512 or p.stat().st_size
        for p in cells.rglob("*")
        if p.is_file() and current not in p.parents
    ]
    cache = ResultCache.for_selector(tmp_path / "c", ContextSelector())
    assert cache.folder == current
    assert len(stale) == 3 and cache.prune() == (3, sum(stale))
    assert list(cells.iterdir()) == [current]
    assert sorted(p for p in current.rglob("*") if p.is_file()) == kept
    assert cache.prune() == (0, 0)
    # The CLI flag prunes before the run, and the run still reads its own cells back.
    ResultCache.for_selector(tmp_path / "c", ContextSelector(smaller)).store.mset([("k3", b"w")])
    assert main([*base, "--prune-result-cache"]) == 0
    assert "removed 1 cells" in capsys.readouterr().err
    assert list(cells.iterdir()) == [current]
    assert json.loads((tmp_path / "r.json").read_text())["meta"]["cached_cells"] == len(kept)
    assert ResultCache.for_selector(tmp_path / "none", ContextSelector()).prune() == (0, 0)


def test_result_cache_tells_custom_tokenizers_apart(tmp_path: Path) -> None:
    def count(text: str) -> int:
        return len(text.split())

    words = ContextSelector(token_counter=count)

    def count(text: str) -> int:  # the same name, another counter
        return len(text)

    chars = ContextSelector(token_counter=count)
    assert words.token_counter.name == chars.token_counter.name == "count"
    assert (
        ResultCache.for_selector(tmp_path, words).namespace
        != ResultCache.for_selector(tmp_path, chars).namespace
    )
    again = ContextSelector(token_counter=lambda text: len(text.split()))
    assert (
        ResultCache.for_selector(tmp_path, again).namespace
        != ResultCache.for_selector(tmp_path, words).namespace
    )  # the name differs


def test_result_cache_keys(tmp_path: Path) -> None:
    selector = ContextSelector()
    cache = ResultCache.for_selector(tmp_path, selector)
    q = _synthetic_question()
    cfg = RecallConfig.create(levels=(0, 2), budgets=(0.1, 0.5), strategies=["topk", "rag"])
    fresh = sweep_question(q, selector, cfg, cache=cache)
    again = sweep_question(q, selector, cfg, cache=cache)
    assert again.rows == fresh.rows and again.cached_cells == 8 and fresh.cached_cells == 0
    # Labels are not keys: the same name and options share cells, and the new label is kept.
    alias = RecallConfig.create(levels=(0, 2), budgets=(0.1, 0.5), strategies=["rag:", "topk:"])
    aliased = sweep_question(q, selector, alias, cache=cache)
    assert aliased.cached_cells == 8 and {r.strategy for r in aliased.rows} == {"rag:", "topk:"}
    explicit = RecallConfig.create(levels=(0,), budgets=(0.1,), strategies=["rag:k=4"])
    assert sweep_question(q, selector, explicit, cache=cache).cached_cells == 0
    # Changed content, style or another embedder miss.
    edited = replace(q, rounds=(replace(q.rounds[0], user="changed"), *q.rounds[1:]))
    assert question_digest(edited) != question_digest(q)
    assert sweep_question(edited, selector, cfg, cache=cache).cached_cells == 0
    other = ResultCache.for_selector(tmp_path, ContextSelector(HashedTfidfEmbeddings(dim=256)))
    assert other.namespace != cache.namespace
    # Another BLAS kernel or thread count: the same namespace, other keys.
    keys = {
        replace(cache, blas=blas).key("d", cfg, 0, 0.1, "topk", {})
        for blas in (None, "Haswell x1", "Haswell x2", "SkylakeX x1")
    }
    assert len(keys) == 4
    assert cache.blas == blas_setup()  # the setup in effect, also for direct sweep_question use
    with blas_threads(1):
        assert ResultCache.for_selector(tmp_path, selector).blas == blas_setup()
    # Same model identity, another declared pacms threshold or gain floor: the pacms cells
    # are keyed by the options they run with, so they miss, while the other columns still hit.
    plain = RecallConfig.create(levels=(0,), budgets=(0.1, 0.5), strategies=["pacms", "topk"])
    assert sweep_question(q, selector, plain, cache=cache).cached_cells == 2  # topk, from above
    assert sweep_question(q, selector, plain, cache=cache).cached_cells == 4
    for name, value in (("similarity_threshold", 0.9), ("min_gain", 0.05)):
        profile = replace(HashedTfidfEmbeddings.pacms_profile, **{name: value})
        other_selector = ContextSelector(profile=profile)
        assert ResultCache.for_selector(tmp_path, other_selector).namespace == cache.namespace
        result = sweep_question(q, other_selector, plain, cache=cache)
        assert result.cached_cells == 2  # the topk cells only
        assert {r.strategy for r in result.rows} == {"pacms", "topk"}
    full = RecallConfig.create(
        levels=(0, 2), budgets=(0.1, 0.5), strategies=["topk", "rag"], style="full"
    )
    assert sweep_question(q, selector, full, cache=cache).cached_cells == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--embeddings", "bogus:1"], "cannot build embeddings from 'bogus:1'"),
        (["--strategies", "nope"], "unknown strategy"),
        (["--data", "/nonexistent/lme"], "no LongMemEval"),
    ],
)
def test_cli_errors(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base = recall_argv(tmp_path, "--all --quiet")
    assert main(base + extra) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--workers", "0"], "--workers: must be >= 1, got 0"),
        (["--blas-threads", "-1"], "--blas-threads: must be >= 0, got -1"),
        (["--n", "0"], "--n: must be >= 1, got 0"),
        (["--workers", "two"], "--workers: expected an integer, got 'two'"),
    ],
)
def test_cli_rejects_bad_counts_before_any_work(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = recall_argv(tmp_path, *extra, data=tmp_path / "absent")
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "loading questions" not in err


def test_cli_ids_names_the_ids_it_cannot_use(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = recall_argv(
        tmp_path,
        "--levels 0 --budgets 0.5 --strategies topk --result-cache off --no-check",
        "--ids fx_ssu fx_ku_abs fx_typo fx_other",
    )
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"warning: 2 ids not found in {FIXTURES}: fx_other, fx_typo" in err
    assert "1 ids left out: abstention questions or no evidence round" in err
    data = json.loads((tmp_path / "recall-lme_mini-ids-recap-pool.json").read_text())
    assert {row[0] for row in data["rows"]} == {"fx_ssu"}
    # Only unknown ids: nothing to sweep.
    assert main([*argv[:-4], "fx_typo"]) == 2
    assert "no eligible questions" in capsys.readouterr().err


def test_cli_help_explains_the_terms(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["longmemeval", "recall", "--help"])
    text = capsys.readouterr().out
    for phrase in ("recall =", "R (redundancy level)", "--budget-base", "PACMS_LONGMEMEVAL_DIR"):
        assert phrase in text
    assert main([]) == 2


# ------------------------------------------------------------------------------ real data


@pytest.mark.data
def test_three_real_oracle_questions() -> None:
    data = default_data_dir()
    if data is None or not (data / "oracle").is_dir():
        pytest.skip(
            "LongMemEval data not found (set PACMS_LONGMEMEVAL_DIR or place it at "
            "../shared/data/longmemeval)"
        )
    questions = load_questions(data / "oracle", n=3, seed=0)
    assert len(questions) == 3
    selector = ContextSelector()
    cfg = RecallConfig.create(levels=(0, 2), budgets=(0.2, 0.45))
    report = run_recall(questions, cfg, selector=selector)
    assert len(report.rows) == 3 * 2 * 2 * 5
    assert all(0.0 <= r.recall <= 1.0 and r.kept_tokens <= r.budget_tokens for r in report.rows)
    for q in questions:
        rows = [r for r in report.rows if r.question_id == q.question_id and r.R == 2]
        _assert_rows_match_select(q, rows, cfg, selector)
    assert {q.question_id for q in iter_questions(data / "oracle", ids=[questions[0].question_id])}
