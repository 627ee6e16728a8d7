"""The lifecycle replay: trace loaders, the judge, cuts, policies, cost replay and report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_pacms.lifecycle import Action, Plan, index_messages, provider_problems
from langchain_pacms.tokens import TokenCounter
from pacms_bench.dependency_judge import extract, future_dependencies, verdict
from pacms_bench.lifecycle_replay import run_lifecycle_eval
from pacms_bench.lifecycle_report import write_report
from pacms_bench.replay_cache import ReplayCache
from pacms_bench.replay_cost import cost_replay
from pacms_bench.replay_cuts import cut_points, evaluate_cuts, wilson
from pacms_bench.replay_policies import POLICIES, PolicyPlanner
from pacms_bench.traces import (
    TraceSession,
    default_traces_dir,
    load_mini_swe,
    load_tau_bench,
    load_traces,
)

TRACES = default_traces_dir()
TRACE_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "lifecycle_trace.traj.json"


class FoldOld:
    """Folds every tool output but the newest two."""

    name = "fold-old"

    def plan(self, index, messages) -> Plan:
        tools = [o for o in index.objects if o.kind == "tool" and not o.latest]
        return Plan("fold", tuple(Action("fold", o.id, "old") for o in tools[:-2]))

    async def aplan(self, index, messages) -> Plan:
        return self.plan(index, messages)


def session(n: int = 8) -> TraceSession:
    """A coding run: each read lists files, the next step opens the newest one it listed."""
    msgs = [SystemMessage("You are a coder.", id="s"), HumanMessage("fix the crash", id="h")]
    for k in range(n):
        cid = f"c{k}"
        command = "ls src" if k == 0 else f"cat src/mod_{k - 1}.py"
        msgs.append(
            AIMessage(
                f"step {k}",
                id=f"a{k}",
                tool_calls=[{"name": "bash", "args": {"command": command}, "id": cid}],
            )
        )
        body = f"src/mod_{k}.py\n" + "\n".join(f"line {j}: x = {j * k}" for j in range(120))
        msgs.append(ToolMessage(body, tool_call_id=cid, id=f"t{k}"))
    msgs.append(AIMessage("done", id="end"))
    return TraceSession("mini-swe", "fixture", tuple(msgs))


# -- judge ---------------------------------------------------------------------------------------
def test_extract_keeps_exact_locators_and_drops_plain_words():
    found = extract('see /srv/app/main.py, https://x.io/a?b=1, id HAT039 on 20240521 "Gold plan"')
    assert {"/srv/app/main.py", "https://x.io/a?b=1", "HAT039", "20240521", "Gold plan"} <= found
    assert "see" not in found and "on" not in found


def test_dependencies_come_from_tool_outputs_not_from_the_prompt():
    deps = future_dependencies(
        ["found src/a.py and src/b.py; order 88231"],
        ["open src/b.py", "refund 88231 a.py"],
        prompt="fix src/a.py",
    )
    assert deps == {"src/b.py", "88231"}
    judged = verdict(deps, "open src/b.py", {"function:tool:1": "order 88231 ..."})
    assert not judged.strict and judged.with_recovery and judged.recovery_calls == 1
    assert verdict(deps, "", {}).with_recovery is False


def test_wilson_interval():
    assert wilson(0, 0) == (0.0, 0.0)
    low, high = wilson(95, 100)
    assert low < 0.95 < high and high < 1.0
    assert wilson(10, 10)[1] == 1.0


# -- cuts and policies ---------------------------------------------------------------------------
def test_cut_points_after_tool_outputs_with_four_spans():
    msgs = list(session().messages)
    cuts = cut_points(msgs)
    assert cuts and all(isinstance(msgs[i], ToolMessage) for i in cuts)
    assert sum(isinstance(m, ToolMessage) for m in msgs[: cuts[0] + 1]) == 4
    assert len(cut_points(msgs, max_cuts=2, seed=1)) == 2
    assert cut_points(msgs, max_cuts=2, seed=1) == cut_points(msgs, max_cuts=2, seed=1)


@pytest.mark.parametrize(
    "policy",
    [
        "none",
        "heuristic",
        "oldest-fold-50",
        "tool-prune-keep3",
        "tool-mask-then-prune",
        "hybrid-fold-prune",
        "clear-tool-uses",
    ],
)
def test_every_policy_is_judged_on_every_cut(policy):
    result = evaluate_cuts([session()], policy)
    row = result.row()
    assert row["cuts"] == len(cut_points(list(session().messages)))
    # each step opens the file the previous output listed; the last cut's continuation is "done"
    assert row["cuts_with_dependencies"] == row["cuts"] - 1
    assert 0.0 <= row["pruning_mean"] < 1.0
    assert row["strict_ci"][0] <= row["strict_no_impact"] <= row["strict_ci"][1]
    if policy == "none":
        assert row["pruning_mean"] == 0.0 and row["strict_no_impact"] == 1.0
    if policy == "tool-prune-keep3":  # the newest outputs stay: the next step's file is visible
        assert row["pruning_mean"] > 0.0


def test_a_fold_loses_nothing_with_recovery():
    row = evaluate_cuts([session()], "oldest-fold-50").row()
    assert row["pruning_mean"] > 0.2
    assert row["no_impact_with_recovery"] == 1.0


def test_unknown_policy_is_an_error():
    with pytest.raises(ValueError, match="unknown policy"):
        evaluate_cuts([session()], "magic")


def test_cost_replay_commits_and_prices_the_cached_prefix():
    s = session(12)
    none, commits = cost_replay(s, None)
    assert commits == 0 and none > 0
    full_price, _ = cost_replay(s, None, cached_price=1.0)
    assert full_price > none  # caching made the unmanaged run cheaper
    every, commits = cost_replay(s, FoldOld(), threshold=0.0)
    assert commits >= 5
    assert every > none  # a commit on every step breaks the cache every step: it costs more
    uncached, _ = cost_replay(s, FoldOld(), threshold=0.0, cached_price=1.0)
    assert uncached < full_price  # without a cache the same folds are a plain saving


def test_the_cache_aware_rule_skips_commits_that_do_not_pay():
    s = session(12)
    every, commits = cost_replay(s, FoldOld(), threshold=0.0)
    aware, aware_commits = cost_replay(s, FoldOld(), threshold=0.0, cache_aware=True)
    assert 0 < aware_commits < commits
    assert aware < every  # on this session the skipped commits were the ones that cost


def test_report_files(tmp_path):
    report = run_lifecycle_eval([session(12)], max_cuts=3, thresholds=(0.3,))
    data = report["datasets"]["mini-swe"]
    assert set(data["policies"]) >= {"heuristic", "none", "clear-tool-uses"}
    paths = write_report(report, tmp_path)
    assert json.loads(paths[0].read_text())["protocol"]["max_cuts"] == 3
    assert "| heuristic |" in paths[1].read_text()
    assert any(p.suffix == ".png" for p in paths)


# -- loaders on the real data --------------------------------------------------------------------
needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason=f"agent traces not at {TRACES}")


def test_loaders_report_what_they_cannot_read(tmp_path):
    (tmp_path / "bad.traj.json").write_text("{not json")
    sessions, problems = load_mini_swe(tmp_path)
    assert sessions == [] and "unreadable" in problems[0][1]
    assert load_tau_bench(tmp_path / "missing.json")[1][0][1].startswith("unreadable")
    with pytest.raises(ValueError, match="unknown data set"):
        load_traces(tmp_path, ["nope"])


@needs_traces
def test_all_three_sets_load_as_valid_histories_with_ids():
    sessions, problems = load_traces(TRACES)
    counts = {
        d: sum(s.dataset == d and not s.dev_only for s in sessions)
        for d in ("tau-bench", "mini-swe", "swe-agent")
    }
    assert counts == {"tau-bench": 200, "mini-swe": 31, "swe-agent": 21}
    assert [reason for _, reason in problems] == ["no trajectory steps"]  # the history-only file
    for s in sessions:
        assert all(m.id for m in s.messages)
        assert provider_problems(list(s.messages)) == []
    assert sum(s.tool_calls for s in sessions if s.dataset == "mini-swe" and not s.dev_only) == 2312


def test_per_call_selection_policies_keep_about_their_share():
    row = evaluate_cuts([session(12)], "select:pacms@0.5").row()
    assert row["cuts"] > 0 and 0.3 < row["pruning_mean"] < 0.7
    with pytest.raises(ValueError, match="select:<strategy>@<kept share>"):
        evaluate_cuts([session()], "select:pacms@half")


# -- baselines, cost of every policy, cache ------------------------------------------------------
def test_the_hybrid_folds_old_tool_spans_and_prunes_the_middle():
    msgs = list(session(10).messages)
    index = index_messages(msgs, latest="step")
    actions = POLICIES["hybrid-fold-prune"]()(msgs, index, TokenCounter())
    ops = {a.target: a.op for a in actions}
    tools = [o.id for o in index.objects if o.kind == "tool" and not o.latest]
    assert ops[tools[0]] == "fold" and ops[tools[-4]] == "prune"
    assert not set(tools[-3:]) & set(ops)  # the last 3 outputs stay
    row = evaluate_cuts([session(10)], "hybrid-fold-prune").row()
    assert row["recovery_calls"] > 0 or row["no_impact_with_recovery"] >= row["strict_no_impact"]


def test_a_baseline_runs_in_the_harness_loop_and_clear_tool_uses_edits_each_request():
    s = session(12)
    none, _ = cost_replay(s, None)
    cost, commits = cost_replay(
        s, PolicyPlanner("tool-prune-keep3", POLICIES["tool-prune-keep3"]()), threshold=0.0
    )
    assert commits >= 1 and cost != none
    edited, commits = cost_replay(s, None, edit=lambda m: m[:1] + m[-3:])
    assert commits == 0 and edited < cost_replay(s, None, cached_price=1.0)[0]


def timeless(value):
    """``value`` without its timings (they differ between runs)."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if k not in ("seconds", "cost_seconds")}
    return value


def pair() -> list[TraceSession]:
    """Two sessions: one for the development split, one for the test split."""
    return [session(12), TraceSession("mini-swe", "other", session(10).messages)]


def test_the_report_prices_every_baseline(tmp_path):
    report = run_lifecycle_eval(pair(), max_cuts=3, thresholds=(0.3,))
    assert report["datasets"]["mini-swe"]["sessions_test"] == 1
    saved = report["datasets"]["mini-swe"]["cost_vs_none"]
    assert "heuristic@0.3" in saved and "clear-tool-uses" in saved
    for name in ("oldest-fold-50", "tool-prune-keep3", "tool-mask-then-prune", "hybrid-fold-prune"):
        assert {f"{name}@0.0", f"{name}@0.3"} <= set(saved)
    text = write_report(report, tmp_path)[1].read_text()
    assert "| tool-prune-keep3@0.0 |" in text and "rejected actions" in text
    targets = report["targets"]
    # the best is the heuristic's commit rule that saves most (one data set: its own savings)
    cost = targets["cost"]
    rules = [k for k in saved if k.startswith("heuristic@")]
    assert cost["goal"] == 0.25 and saved[cost["best"]] == max(saved[r] for r in rules)
    assert cost["saved"] == pytest.approx(saved[cost["best"]], abs=1e-3)
    mini = targets["mini-swe"]
    assert mini["met"] == (mini["strict"] >= 0.95 and mini["pruning"] >= 0.5)
    # the heuristic cannot be above "none" (100% strict): only real baselines are compared
    assert "none" not in mini["not_dominated"] and "### Targets" in text


def test_a_rerun_reads_every_cell_from_the_cache(tmp_path, monkeypatch):
    import pacms_bench.replay_cost as costs
    import pacms_bench.replay_cuts as cuts

    cache = ReplayCache.create(tmp_path)
    first = run_lifecycle_eval(pair(), max_cuts=3, thresholds=(0.3,), cache=cache)

    def fail(*args, **kwargs):
        raise AssertionError("recomputed a cached cell")

    monkeypatch.setattr(cuts, "_cut_cells", fail)
    monkeypatch.setattr(costs, "cost_replay", fail)
    again = run_lifecycle_eval(pair(), max_cuts=3, thresholds=(0.3,), cache=cache)
    assert timeless(first) == timeless(again)
    other = ReplayCache(str(tmp_path), "older-code")
    other.put("x", [1])
    assert cache.prune() == 1 and other.get("x") is None and cache.get("x") is None


def test_worker_processes_give_the_tables_of_one_process(tmp_path):
    rows = ("select+stubs:pacms@0.5", "life+select:pacms@0.5")  # before and after the choice
    one = run_lifecycle_eval(pair(), max_cuts=3, thresholds=(0.3,), selection=rows)
    cache = ReplayCache.create(tmp_path)
    two = run_lifecycle_eval(
        pair(), max_cuts=3, thresholds=(0.3,), selection=rows, cache=cache, jobs=2
    )
    assert timeless(one) == timeless(two)
    # a row's seconds are its cells' compute time, though the tables only read them back
    policies = two["datasets"]["mini-swe"]["policies"]
    assert all(policies[p]["seconds"] > 0 for p in ("heuristic", *rows))


def test_a_failure_in_a_worker_stops_the_run(tmp_path):
    with pytest.raises(ValueError, match="unknown policy"):
        run_lifecycle_eval(
            pair(),
            max_cuts=3,
            thresholds=(0.3,),
            selection=("no-such",),
            cache=ReplayCache.create(tmp_path),
            jobs=2,
        )


def test_the_cli_runs_on_chosen_sessions_and_resumes_from_its_cache(tmp_path, capsys):
    from pacms_bench.cli import main

    folder = tmp_path / "mini-swe-agent-deepseek-swebench"
    folder.mkdir()
    for name in ("one", "two"):
        shutil.copy(TRACE_FIXTURE, folder / f"{name}.traj.json")
    args = [
        "lifecycle",
        "--data",
        str(tmp_path),
        "--datasets",
        "mini-swe",
        "--sessions",
        "one",
        "--max-cuts",
        "2",
        "--thresholds",
        "0.3",
        "--quiet",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(args) == 0
    report = json.loads((tmp_path / "out" / "lifecycle.json").read_text())
    data = report["datasets"]["mini-swe"]
    assert data["sessions_dev"] + data["sessions_test"] == 1  # only the chosen session
    assert report["result_cache"] and len(report["load_average"]["start"]) == 3
    assert any((tmp_path / "cache" / "lifecycle-cells").rglob("*"))
    assert main(args) == 0
    rerun = json.loads((tmp_path / "out" / "lifecycle.json").read_text())
    assert timeless(rerun["datasets"]) == timeless(report["datasets"])


def test_dominance_is_no_worse_on_both_and_better_on_one():
    from pacms_bench.replay_settings import dominates

    row = lambda strict, pruning: {"strict_no_impact": strict, "pruning_mean": pruning}  # noqa: E731
    assert dominates(row(1.0, 0.3), row(1.0, 0.25))  # equal at 100%, prunes more
    assert not dominates(row(1.0, 0.3), row(1.0, 0.3))
    assert not dominates(row(0.93, 0.36), row(0.955, 0.26))  # prunes more, but less safe


def test_the_replay_fingerprint_covers_every_eval_module_the_replay_imports():
    import ast

    from pacms_bench import replay_cache

    def imports(module: str) -> set[str]:
        source = Path(replay_cache.__file__).with_name(f"{module}.py").read_text(encoding="utf-8")
        return {
            node.module.rsplit(".", 1)[-1]
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pacms_bench.")
        }

    # the replay is lifecycle_replay and the replay_* modules it is made of (the cache's own
    # imports are the fingerprint itself); every module they import must be hashed too
    replay, todo = set(), ["lifecycle_replay"]
    while todo:
        replay.add(module := todo.pop())
        found = {m for m in imports(module) if m.startswith("replay_")}
        todo += found - replay - {"replay_cache"}
    imported = replay.union(*map(imports, replay))
    assert {"selection_replay", "replay_policies", "replay_cuts", "replay_cost"} <= imported
    covered = {Path(part).stem for part in replay_cache._REPLAY_CODE}
    # the progress bar and the report's targets and files decide no cell
    missing = imported - {"progress", "lifecycle_report"} - covered
    assert not missing, f"add to replay_cache._REPLAY_CODE: {sorted(missing)}"


def test_a_baseline_the_default_does_not_dominate_is_met_by_a_dev_chosen_setting():
    from pacms_bench.replay_policies import BASELINES
    from pacms_bench.replay_settings import (
        HEURISTIC_GRID,
        HORIZON_GRID,
        dominates,
        match_baselines,
        matched_name,
    )

    dev = [session(12)]
    mild = HEURISTIC_GRID[0]  # the mildest setting prunes least: baselines prune more
    scored = [
        (None, g, evaluate_cuts(dev, "heuristic", settings=g, max_cuts=3).row())
        for g in HEURISTIC_GRID
    ]
    matched = match_baselines(dev, mild, scored, 3, 0, TokenCounter(), None, lambda: None)
    rows = [row for _, _, row in scored] + [
        evaluate_cuts(dev, "heuristic", settings=g, max_cuts=3).row() for g in HORIZON_GRID
    ]
    mine = rows[0]
    assert matched
    for name in BASELINES[1:]:
        other = evaluate_cuts(dev, name, max_cuts=3).row()
        if dominates(mine, other):
            assert name not in matched
            continue
        m = matched.get(name)
        fits = [r for r in rows if r["pruning_mean"] >= other["pruning_mean"]]
        assert (m is None) == (not fits)
        if m is not None:  # the safest setting among those that prune as much on dev
            assert m["dev"]["pruning"] >= m["baseline_dev"]["pruning"] == other["pruning_mean"]
            assert m["dev"]["strict"] == max(r["strict_no_impact"] for r in fits)
            assert m["settings"] in (*HEURISTIC_GRID, *HORIZON_GRID)
    # the report runs each match on the test split, and the targets read those rows
    report = run_lifecycle_eval(pair(), max_cuts=3, thresholds=(0.3,))
    data, target = report["datasets"]["mini-swe"], report["targets"]["mini-swe"]
    assert all(matched_name(b) in data["policies"] for b in data["matched"])
    assert set(target["not_matched"]) <= set(target["not_dominated"])
    assert target["above_every_baseline_matched"] == (not target["not_matched"])


def _as_blocks(s: TraceSession) -> TraceSession:
    """``s`` with every tool output as one text block with a fresh id, as MCP adapters send it."""
    messages = tuple(
        m.model_copy(update={"content": [{"type": "text", "text": m.content, "id": f"lc_{i}"}]})
        if isinstance(m, ToolMessage) and isinstance(m.content, str)
        else m
        for i, m in enumerate(s.messages)
    )
    return TraceSession(s.dataset, s.name, messages, s.dev_only)


@needs_traces
@pytest.mark.parametrize("policy", ["heuristic", "select+stubs:pacms@0.5"])
def test_tool_outputs_as_blocks_replay_as_strings_do(policy):
    # real runs with their outputs in MCP's shape: every cut judged the same, pruning the same
    sessions, _ = load_traces(TRACES, ["mini-swe", "tau-bench"])
    some = [
        s for d in ("mini-swe", "tau-bench") for s in [x for x in sessions if x.dataset == d][:3]
    ]
    for s in some:
        plain = evaluate_cuts([s], policy).row()
        assert evaluate_cuts([_as_blocks(s)], policy).row() | {"seconds": 0} == plain | {
            "seconds": 0
        }, s.name
