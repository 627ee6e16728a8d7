import json

import pytest

from langchain_pacms.cli.main import main
from langchain_pacms.demo import format_table, load_demo_session, run_demo


def test_session_shape():
    session = load_demo_session()
    assert 140 <= len(session.candidates) <= 160
    assert session.candidates[0].mandatory and session.candidates[-1].mandatory
    assert sum(c.mandatory for c in session.candidates) == 2
    assert session.candidates[-1].text == session.query
    assert set(session.fact_ids) <= {c.id for c in session.candidates}


@pytest.mark.parametrize("ratio", [0.1, 0.2])
def test_pacms_keeps_fact_lastk_drops_it(ratio):
    rows = {r.strategy: r for r in run_demo(budget_ratio=ratio)}
    assert rows["pacms"].fact_kept
    assert not rows["lastk"].fact_kept
    for row in rows.values():
        assert row.tokens_kept <= row.budget
        assert row.total == 150


def test_unknown_strategy_rejected():
    with pytest.raises(ValueError, match="unknown strategies"):
        run_demo(strategies=["nope"])


def test_cli_table_and_json(capsys):
    assert main(["demo", "--budget-ratio", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "re-asked fact" in out and "DROPPED" in out
    assert main(["demo", "--json", "--strategies", "pacms", "lastk"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["strategy"] for r in data] == ["pacms", "lastk"]
    assert data[0]["fact_kept"] is True and data[1]["fact_kept"] is False


def test_format_table_aligns_columns():
    lines = format_table(run_demo(strategies=["topk"])).splitlines()
    assert lines[0].startswith("strategy") and lines[2].startswith("topk")
