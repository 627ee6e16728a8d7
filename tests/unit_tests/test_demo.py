import json
from collections import Counter

import pytest

from langchain_pacms.cli.main import main
from langchain_pacms.demo import DEFAULT_BUDGET_RATIO, format_table, load_demo_session, run_demo
from langchain_pacms.selector import ContextSelector


def test_session_shape():
    session = load_demo_session()
    assert 150 <= len(session.candidates) <= 170
    assert session.candidates[0].mandatory and session.candidates[-1].mandatory
    assert sum(c.mandatory for c in session.candidates) == 2
    assert session.candidates[-1].text == session.query
    assert [f.name for f in session.facts] == ["pgbouncer port and database", "login role"]
    restated, once = (session.fact_ids(f) for f in session.facts)
    # Both facts are set early; the first is restated many times, the second is said once.
    assert len(restated) >= 10 and len(once) <= 2
    positions = {str(c.id): c.position for c in session.candidates}
    assert max(positions[i] for i in once) < len(session.candidates) // 4


def test_pacms_keeps_both_facts_topk_loses_one_lastk_loses_both():
    rows = {r.strategy: r for r in run_demo()}
    assert rows["pacms"].facts_kept == (True, True)
    assert rows["topk"].facts_kept == (True, False)
    assert rows["lastk"].facts_kept == (False, False)
    for row in rows.values():
        assert row.tokens_kept <= row.budget
        assert row.total == len(load_demo_session().candidates)


def test_topk_spends_the_budget_on_copies():
    session = load_demo_session()
    selector = ContextSelector()
    texts = {str(c.id): c.text for c in session.candidates}

    def copies(strategy: str) -> int:
        sel = selector.select(
            session.candidates,
            session.query,
            budget=("ratio", DEFAULT_BUDGET_RATIO),
            strategy=strategy,
        )
        counts = Counter(texts[i] for i in sel.kept_ids)
        return sum(n - 1 for n in counts.values())

    assert copies("topk") >= 2
    assert copies("pacms") == 0


def test_unknown_strategy_rejected():
    with pytest.raises(ValueError, match="unknown strategies"):
        run_demo(strategies=["nope"])


def test_cli_table_and_json(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "login role" in out and "DROPPED" in out and "times are warm" in out
    assert main(["demo", "--json", "--strategies", "pacms", "topk"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["strategy"] for r in data] == ["pacms", "topk"]
    assert data[0]["facts_kept"] == [True, True] and data[1]["facts_kept"] == [True, False]


@pytest.mark.parametrize(
    "argv",
    [
        ["--budget-ratio", "0"],
        ["--budget-ratio", "-0.5"],
        ["--budget-ratio", "1.5"],
        ["--budget-ratio", "nan"],
        ["--budget-ratio", "lots"],
        ["--strategies", "nope"],
    ],
)
def test_cli_rejects_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument" in err and "Traceback" not in err


def test_format_table_aligns_columns():
    session = load_demo_session()
    lines = format_table(run_demo(strategies=["topk"]), [f.name for f in session.facts])
    lines = lines.splitlines()
    assert lines[0].startswith("strategy") and "login role" in lines[0]
    assert lines[2].startswith("topk") and lines[2].index("DROPPED") == lines[0].index("login role")


def test_the_readme_table_is_what_the_demo_prints(capsys):
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("```\nstrategy  kept")[1].split("```")[0]
    quoted = [line.split()[:9] for line in ("strategy  kept" + block).splitlines()[2:] if line]
    assert main(["demo"]) == 0
    printed = capsys.readouterr().out.splitlines()
    rows = [line.split()[:9] for line in printed if line.split()[:1] in ([q[0]] for q in quoted)]
    # every column but the warm time (machine-dependent) is the run's own
    assert rows == quoted
