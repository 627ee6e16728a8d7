import pytest

from langchain_pacms import Candidate, ContextSelector, available_strategies


def test_builtin_strategies_registered():
    assert {"pacms", "topk", "lastk", "mmr", "rag"} <= set(available_strategies())


def test_relevant_fact_kept_under_tight_budget():
    pool = ["The staging DB listens on port 6543.", "Lunch was great.", "CI is flaky again."]
    sel = ContextSelector().select(pool, "Which port does the staging DB use?", budget_tokens=12)
    assert sel.kept_ids == ("0",)
    assert sel.tokens_kept <= sel.budget == 12
    assert sel.tokens_dropped == sel.tokens_total - sel.tokens_kept


def test_duplicate_ids_rejected():
    with pytest.raises(ValueError, match="duplicate candidate id"):
        ContextSelector().select([Candidate("a", id="x"), Candidate("b", id="x")], "q",
                                 budget_tokens=5)


def test_integrations_are_exported_lazily():
    import subprocess
    import sys

    code = (
        "import sys, langchain_pacms as lp;"
        "assert 'langchain_pacms.integrations.graph' not in sys.modules;"
        "hook = lp.create_pacms_hook(budget_tokens=100);"
        "assert callable(hook.invoke);"
        "assert lp.PACMSCompressor.__name__ == 'PACMSCompressor';"
        "assert 'PACMSMiddleware' in lp.__all__"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    with pytest.raises(AttributeError, match="no attribute"):
        _ = __import__("langchain_pacms").not_a_thing
