from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import re
import sys
import threading
import types
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel, FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from langchain_pacms import ContextSelector
from pacms_bench._calls import run_sync
from pacms_bench.judge import (
    JUDGE_CRITERIA,
    REASK_PROMPT,
    build_judge_messages,
    criterion_key,
    parse_verdict,
)
from pacms_bench.longmemeval import QUESTION_TYPES, Question, Round, iter_questions
from pacms_bench.qa import (
    DEFAULT_STRATEGIES,
    QAReport,
    arun_qa,
    build_pool,
    build_reader_messages,
    pool_budget,
    run_qa,
)
from pacms_bench.qa_cli import (
    CHECK_PROMPT,
    DEFAULT_MAX_TOKENS,
    add_qa_arguments,
    auto_num_ctx,
    qa_from_args,
    read_ids,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lme_mini"

# question text -> (text that must be in the prompt's history, answer given when it is)
FACTS = {
    "What colour is my bicycle?": ("repainted my bicycle teal", "Your bicycle is teal."),
    "How many planets did you say the Kepler-90 system has?": (
        "Kepler-90 system has 8 known planets",
        "I said it has 8 planets.",
    ),
}
DONT_KNOW = "I don't know; the excerpts do not say."


def _last_human(messages: list[BaseMessage]) -> str:
    return next(m.text for m in reversed(messages) if isinstance(m, HumanMessage))


class ContextReader(BaseChatModel):
    """Answers from a fact table, but only if the evidence text is in its prompt's history."""

    facts: dict[str, tuple[str, str]] = Field(default_factory=lambda: dict(FACTS))
    fail_first: int = 0
    always_fail: bool = False
    delay: float = 0.0
    interrupt_after: int = 0  # > 0: Ctrl-C (KeyboardInterrupt) on the call after that many
    state: dict[str, Any] = Field(
        default_factory=lambda: {"calls": 0, "in_flight": 0, "max_in_flight": 0, "seen": Counter()}
    )

    @property
    def _llm_type(self) -> str:
        return "context-reader"

    def _answer(self, messages: list[BaseMessage]) -> AIMessage:
        prompt = _last_human(messages)
        if prompt == CHECK_PROMPT and not self.always_fail:
            return AIMessage(content="OK")  # the CLI's test prompt; not counted as a call
        self.state["calls"] += 1
        if self.interrupt_after and self.state["calls"] > self.interrupt_after:
            raise KeyboardInterrupt
        self.state["seen"][prompt] += 1
        if self.always_fail or self.state["seen"][prompt] <= self.fail_first:
            raise RuntimeError("transient reader failure")
        history, _, tail = prompt.partition("\n---\n")
        question = re.search(r"^Question: (.*)$", tail, re.M).group(1)
        snippet, answer = self.facts.get(question, ("\x00", ""))
        text = answer if snippet in history else DONT_KNOW
        usage = {"input_tokens": 1000, "output_tokens": 7, "total_tokens": 1007}
        return AIMessage(content=text, usage_metadata=usage)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._answer(messages))])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.state["in_flight"] += 1
        self.state["max_in_flight"] = max(self.state["max_in_flight"], self.state["in_flight"])
        try:
            await asyncio.sleep(self.delay)
            return self._generate(messages)
        finally:
            self.state["in_flight"] -= 1


class RuleJudge(BaseChatModel):
    """Grades by substring: reference in response; abstention: response says it doesn't know."""

    style: str = "plain"  # plain | chatty | garbage_first | garbage | raise
    state: dict[str, Any] = Field(default_factory=lambda: {"calls": 0, "prompts": []})

    @property
    def _llm_type(self) -> str:
        return "rule-judge"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.state["calls"] += 1
        self.state["prompts"].append(messages)
        if self.style == "raise":
            raise ConnectionError("judge unreachable")
        reask = _last_human(messages) == REASK_PROMPT
        if self.style == "garbage" or (self.style == "garbage_first" and not reask):
            text = "Hmm, that is hard to say."
        else:
            body = next(m.text for m in messages if isinstance(m, HumanMessage))
            ref = re.search(r"<(reference_answer|rubric|explanation)>\n(.*?)\n</\1>", body, re.S)
            response = re.search(r"<response>\n(.*?)\n</response>", body, re.S).group(1)
            if ref.group(1) == "explanation":
                ok = "don't know" in response.lower()
            else:
                ok = ref.group(2).lower() in response.lower()
            word = "CORRECT" if ok else "WRONG"
            text = f"**Verdict:** {word.lower()}." if self.style == "chatty" else word
        usage = {"input_tokens": 300, "output_tokens": 1, "total_tokens": 301}
        return ChatResult(
            generations=[ChatGeneration(message=AIMessage(content=text, usage_metadata=usage))]
        )


@pytest.fixture(scope="module")
def questions() -> list[Question]:
    return list(iter_questions(FIXTURES))


@pytest.fixture(scope="module")
def selector() -> ContextSelector:
    return ContextSelector()


def _run(questions: list[Question], selector: ContextSelector, **kw: Any) -> QAReport:
    kw.setdefault("reader", ContextReader())
    kw.setdefault("judge", RuleJudge())
    return run_qa(questions, selector=selector, progress=False, backoff=0, **kw)


def _by(report: QAReport, strategy: str, qid: str) -> Any:
    return next(r for r in report.records if r.strategy == strategy and r.question_id == qid)


# -- parse_verdict ------------------------------------------------------------------------


CORRECT_REPLIES = [
    "CORRECT",
    "correct",
    " Correct. ",
    "**CORRECT**",
    "`CORRECT`",
    "Verdict: CORRECT",
    "Final verdict - correct",
    "Final answer: Correct",
    '{"label": "CORRECT"}',
    "yes",
    "Yes.",
    "<think>The response says teal, so it is wrong? no, right.</think>\nCORRECT",
    "CORRECT\n\nThe response names the same colour.",
    "The response is correct.",
    "The response is not wrong.",
    "Yes, the response is correct.",
    "No issues: the response matches the reference, so it is correct.",
    "The response names teal; nothing in it is wrong.",
    '{"correct": true}',
    '```json\n{"verdict": "CORRECT", "reason": "same colour"}\n```',
    # a negation before a conjunction does not reach the verdict after it
    "The response says it doesn't know so it is CORRECT",
    "The response does not mention the outdated value but it is correct",
    "The assistant states it cannot find this information which is CORRECT",
    "The response is correct. There is nothing wrong with it.",
    '{"answer": "teal", "correct": true}',
]
"""Replies the judge gives for a correct answer."""

WRONG_REPLIES = [
    "WRONG",
    "wrong",
    "Wrong!",
    "INCORRECT",
    "incorrect.",
    "**WRONG**",
    "Verdict: wrong",
    '{"label": "WRONG"}',
    "no",
    "No.",
    "Not correct",
    "The response is incorrect.",
    "The response is not correct",
    "The response isn't correct",
    "The response gives Tuesday, so WRONG",
    "<think>\nLet me check... it matches? It does not.\n</think>\n\nWRONG",
    '{"correct": false}',
    '{"verdict": "WRONG", "reason": "off by a week"}',
    "The response isn\u2019t correct.",
    "The response doesn\u2019t seem correct.",
    "I don't think the response is correct.",
    "The response is not entirely correct.",
    "Correct answer: 19 days. The response says 25 days, so WRONG.",
    "WRONG. The correct answer is 19 days.",
    # a verdict before a dash decides, whatever the explanation after it says
    "WRONG - the response says 25 days, but 19 days is correct.",
    "WRONG \u2014 The response says the bike is blue. The user said teal, which is correct.",
    # a text field before the verdict field
    '{"answer": "19 days", "correct": false}',
    # a question in the reply is not a verdict; the answer to it is
    "Is the response correct? No, it says 25 days instead of 19.",
]
"""Replies the judge gives for a wrong answer."""

UNREADABLE_REPLIES = [
    "",
    "   ",
    "maybe",
    "Hmm, that is hard to say.",
    "I cannot judge this.",
    "<think>correct</think>",
    "<think>unfinished reasoning that says CORRECT",
    "Is it right? I would say no",
    "Verdict:",
    "partially",
    "The response is only partially correct.",
    "The response is mostly correct.",
    "The correct answer is 19 days.",
    '{"reason": "no verdict here"}',
    '{"reason": "the response is correct"}',  # words of a JSON reply are not a verdict
    # two verdicts that disagree: the judge is asked again
    "The response is WRONG since the reference says 19 days, which is correct.",
    "The response is correct; the earlier value was wrong.",
]
"""Replies the judge cannot read a verdict from: it is asked again."""


@pytest.mark.parametrize(
    ("text", "verdict"),
    [(text, True) for text in CORRECT_REPLIES]
    + [(text, False) for text in WRONG_REPLIES]
    + [(text, None) for text in UNREADABLE_REPLIES],
)
def test_parse_verdict(text: str, verdict: bool | None) -> None:
    assert parse_verdict(text) is verdict


def test_parse_verdict_non_string() -> None:
    assert parse_verdict(None) is None  # type: ignore[arg-type]


# -- judge prompt ---------------------------------------------------------------------------


def _question(qtype: str, qid: str = "q1", answer: str = "Teal") -> Question:
    rnd = Round(0, "s0", 0, "2023/05/20 (Sat) 14:10", "hi", "hello", True)
    return Question(
        qid, qtype, "What colour is my bicycle?", answer, "2023/05/30 (Tue) 23:40", (rnd,)
    )


CRITERION_MARKERS = {
    "default": ("equivalent", "only part of the reference"),
    "temporal-reasoning": ("off by one", "days, weeks or months"),
    "knowledge-update": ("outdated", "most recent"),
    "single-session-preference": ("rubric", "does not have to cover every point", "personal"),
    "abstention": ("declines", "does not know"),
}


@pytest.mark.parametrize(
    ("qtype", "qid", "key"),
    [
        ("single-session-user", "q1", "default"),
        ("single-session-assistant", "q1", "default"),
        ("multi-session", "q1", "default"),
        ("temporal-reasoning", "q1", "temporal-reasoning"),
        ("knowledge-update", "q1", "knowledge-update"),
        ("single-session-preference", "q1", "single-session-preference"),
        ("multi-session", "q1_abs", "abstention"),
        ("temporal-reasoning", "q1_abs", "abstention"),
        ("knowledge-update", "q1_abs", "abstention"),
    ],
)
def test_judge_prompt_has_type_criterion(qtype: str, qid: str, key: str) -> None:
    q = _question(qtype, qid)
    assert criterion_key(q) == key
    msgs = build_judge_messages(q, "Teal", "Your bicycle is teal.")
    assert [type(m) for m in msgs] == [SystemMessage, HumanMessage]
    body = msgs[1].text
    assert JUDGE_CRITERIA[key] in body
    for marker in CRITERION_MARKERS[key]:
        assert marker in body
    # no other type's extra rule leaks in
    if key != "temporal-reasoning":
        assert "off by one" not in body
    if key != "knowledge-update":
        assert "outdated" not in body
    assert "What colour is my bicycle?" in body
    assert "<response>\nYour bicycle is teal.\n</response>" in body
    tag = {"single-session-preference": "rubric", "abstention": "explanation"}.get(
        key, "reference_answer"
    )
    assert f"<{tag}>\nTeal\n</{tag}>" in body
    assert "CORRECT or WRONG" in body and "CORRECT or WRONG" in msgs[0].text


def test_every_upstream_type_has_a_criterion() -> None:
    for qtype in QUESTION_TYPES:
        assert criterion_key(_question(qtype)) in JUDGE_CRITERIA


# -- reader prompt and pool ------------------------------------------------------------------


def test_reader_prompt_is_chronological_dated_and_leak_free(questions: list[Question]) -> None:
    q = next(q for q in questions if q.question_id == "fx_ssu")
    pool = build_pool(q, 2, seed=0)
    msgs = build_reader_messages(q, list(reversed(pool)))  # order of input must not matter
    body = msgs[1].text
    assert "answer_" not in body and "distractor_" not in body  # session ids never shown
    assert body.index("2023/05/20 (Sat) 09:05") < body.index("2023/05/20 (Sat) 14:10")
    assert body.index("pasta") < body.index("repainted my bicycle teal")
    assert "Current date: 2023/05/30 (Tue) 23:40" in body
    assert body.rstrip().endswith("say that you don't know.")
    assert "Question: What colour is my bicycle?" in body
    assert "Recaps of earlier exchanges" in body
    assert body.index("Recaps of earlier exchanges") > body.index("repainted my bicycle teal")
    assert "don't know" in msgs[0].text
    empty = build_reader_messages(q, [])[1].text
    assert "No excerpts" in empty


def test_reader_prompt_marks_gaps_within_a_session(questions: list[Question]) -> None:
    q = next(q for q in questions if q.question_id == "fx_ssa")
    pool = build_pool(q, 0)
    body = build_reader_messages(q, [pool[0], pool[2]])[1].text
    assert body.count("### Session of") == 1
    assert "[...]" in body


def test_pool_budget_bases(questions: list[Question], selector: ContextSelector) -> None:
    q = next(q for q in questions if q.question_id == "fx_ssa")
    pool = build_pool(q, 2)
    count = selector.token_counter
    total = sum(count(p.text) for p in pool)
    orig = sum(count(p.text) for p in pool if not p.is_restatement)
    assert pool_budget(pool, count, 0.45) == math.floor(0.45 * total)
    assert pool_budget(pool, count, 0.45, "original") == math.floor(0.45 * orig)
    with pytest.raises(ValueError):
        pool_budget(pool, count, 0.0)
    with pytest.raises(ValueError):
        pool_budget(pool, count, 0.5, "everything")


# -- end to end -------------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [0.3, 0.45])
def test_accuracy_differs_when_lastk_drops_evidence(
    questions: list[Question], selector: ContextSelector, budget: float
) -> None:
    report = _run(questions, selector, budget_ratio=budget)
    assert report.strategies == DEFAULT_STRATEGIES
    assert len(report.records) == len(questions) * 4
    # query-aware strategies keep the evidence round; recency keeps only recent recaps
    for s in ("pacms", "topk", "mmr"):
        assert report.accuracy(s) == pytest.approx(100.0)
        assert _by(report, s, "fx_ssu").evidence_kept == 1
    assert report.accuracy("lastk") == pytest.approx(100 / 3)
    for qid in ("fx_ssu", "fx_ssa"):
        rec = _by(report, "lastk", qid)
        assert rec.evidence_kept == 0 and not rec.correct
        assert rec.answer == DONT_KNOW
        assert rec.verdict_raw == "WRONG"
    assert _by(report, "pacms", "fx_ssu").answer == "Your bicycle is teal."
    # abstention: everyone declines, which is correct
    for s in DEFAULT_STRATEGIES:
        assert _by(report, s, "fx_ku_abs").correct
    assert report.summary()["lastk"]["evidence_recall"] == 0.0
    assert report.summary()["pacms"]["evidence_recall"] == 1.0
    assert all(r.error is None and r.retries == 0 for r in report.records)


def test_run_qa_after_an_interrupted_run(
    questions: list[Question], selector: ContextSelector
) -> None:
    # run_qa keeps its thread's event loop open; the tasks of a run stopped by Ctrl-C must not
    # wake up in the next run.
    with pytest.raises(KeyboardInterrupt):
        _run(questions, selector, reader=ContextReader(interrupt_after=2), concurrency=1)
    report = _run(questions, selector)
    assert report.totals()["failures"] == 0
    assert report.accuracy("pacms") == pytest.approx(100.0)


def test_sync_runs_share_their_thread_loop_until_the_thread_is_gone() -> None:
    async def running_loop() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    seen: list[asyncio.AbstractEventLoop] = []

    def work() -> None:
        seen.extend(run_sync(running_loop()) for _ in range(2))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen[0] is seen[1] and not seen[0].is_closed()  # one loop for the thread's runs
    del thread
    gc.collect()
    assert seen[0].is_closed()


def test_reasoning_without_an_answer_is_not_graded(
    questions: list[Question], selector: ContextSelector
) -> None:
    # A reasoning model cut off while thinking: its reasoning names the reference ("teal").
    cut = FakeListChatModel(responses=["<think>They said they repainted the bicycle teal, so"])
    judge = RuleJudge()
    report = _run(questions, selector, reader=cut, judge=judge, strategies=["pacms"])
    assert judge.state["calls"] == 0
    for record in report.records:
        assert not record.correct and record.answer == ""
        assert record.error == "reader: the reply holds reasoning but no answer"
    assert report.totals()["failures"] == len(questions)


def test_per_type_breakdown(questions: list[Question], selector: ContextSelector) -> None:
    report = _run(questions, selector)
    assert report.question_types() == [
        "single-session-user",
        "single-session-assistant",
        "knowledge-update",
    ]
    summary = report.summary()
    lastk = summary["lastk"]["per_type"]
    assert lastk["single-session-user"] == {"n": 1, "correct": 0, "accuracy": 0.0}
    assert lastk["single-session-assistant"]["accuracy"] == 0.0
    assert lastk["knowledge-update"]["accuracy"] == 100.0
    assert summary["lastk"]["abstention"] == {"n": 1, "correct": 1, "accuracy": 100.0}
    assert report.accuracy("pacms", "single-session-user") == 100.0
    assert report.accuracy("lastk", abstention=False) == 0.0
    assert report.accuracy("lastk", "multi-session") is None
    for s in DEFAULT_STRATEGIES:
        assert sum(v["n"] for v in summary[s]["per_type"].values()) == summary[s]["n"] == 3


def test_strategy_subset_and_budget_base(
    questions: list[Question], selector: ContextSelector
) -> None:
    pool_run = _run(questions, selector, strategies=("topk",), budget_base="pool")
    orig_run = _run(questions, selector, strategies=("topk",), budget_base="original")
    assert pool_run.strategies == ("topk",)
    for q in questions:
        a, b = _by(pool_run, "topk", q.question_id), _by(orig_run, "topk", q.question_id)
        assert b.budget < a.budget
        assert a.kept_tokens <= a.budget and b.kept_tokens <= b.budget
    assert orig_run.config["budget_base"] == "original"


def test_retry_after_one_failure(questions: list[Question], selector: ContextSelector) -> None:
    # one strategy: every prompt is distinct, so every record fails once, then succeeds
    reader = ContextReader(fail_first=1)
    report = _run(questions, selector, reader=reader, retries=2, strategies=("pacms",))
    assert all(r.retries == 1 and r.error is None for r in report.records)
    assert report.accuracy("pacms") == 100.0
    assert report.totals()["failures"] == 0
    assert report.totals()["retries"] == len(report.records) == 3
    assert reader.state["calls"] == 6


def test_retry_accounting_all_strategies(
    questions: list[Question], selector: ContextSelector
) -> None:
    # strategies that keep the same items send the same prompt; the reader fails only the
    # first time it sees a prompt, so retries == distinct prompts
    reader = ContextReader(fail_first=1)
    report = _run(questions, selector, reader=reader, retries=2)
    baseline = _run(questions, selector)
    assert report.totals()["failures"] == 0
    assert all(r.retries <= 1 for r in report.records)
    assert report.totals()["retries"] == len(reader.state["seen"])
    assert reader.state["calls"] == len(report.records) + len(reader.state["seen"])
    for s in DEFAULT_STRATEGIES:
        assert report.accuracy(s) == baseline.accuracy(s)


def test_failure_counted_after_retries(
    questions: list[Question], selector: ContextSelector
) -> None:
    reader = ContextReader(always_fail=True)
    judge = RuleJudge()
    report = _run(questions, selector, reader=reader, judge=judge, retries=2)
    assert reader.state["calls"] == 3 * len(report.records)
    assert judge.state["calls"] == 0
    for r in report.records:
        assert r.failed and not r.correct
        assert r.retries == 2
        assert r.error.startswith("reader: RuntimeError: transient reader failure")
        assert r.tokens_in > 0  # the prompt was still built and counted
    summary = report.summary()
    assert all(summary[s]["failures"] == 3 and summary[s]["accuracy"] == 0.0 for s in summary)
    assert report.totals()["failures"] == len(report.records)


def test_judge_failure_counted(questions: list[Question], selector: ContextSelector) -> None:
    judge = RuleJudge(style="raise")
    report = _run(questions, selector, judge=judge, retries=1, strategies=("pacms",))
    assert judge.state["calls"] == 2 * len(questions)
    for r in report.records:
        assert r.error.startswith("judge: ConnectionError")
        assert r.retries == 1 and not r.correct and r.answer  # the reader did answer


def test_retries_zero_means_one_attempt(
    questions: list[Question], selector: ContextSelector
) -> None:
    reader = ContextReader(fail_first=1)
    report = _run(questions, selector, reader=reader, retries=0, strategies=("pacms",))
    assert all(r.failed and r.retries == 0 for r in report.records)


@pytest.mark.parametrize("concurrency", [1, 2, 3])
async def test_concurrency_limit(
    questions: list[Question], selector: ContextSelector, concurrency: int
) -> None:
    reader = ContextReader(delay=0.02)
    report = await arun_qa(
        questions,
        reader=reader,
        judge=RuleJudge(),
        selector=selector,
        concurrency=concurrency,
        progress=False,
        backoff=0,
    )
    assert len(report.records) == 12
    assert reader.state["max_in_flight"] == concurrency  # bounded, and actually parallel


def test_unreadable_verdict_reasked_then_wrong(
    questions: list[Question], selector: ContextSelector
) -> None:
    report = _run(questions, selector, judge=RuleJudge(style="garbage"), strategies=("pacms",))
    for r in report.records:
        assert r.parse_failed and not r.correct and r.error is None
        assert r.judge_attempts == 2
        assert r.verdict_raw == "Hmm, that is hard to say."
    assert report.summary()["pacms"]["parse_failures"] == 3

    judge = RuleJudge(style="garbage_first")
    report = _run(questions, selector, judge=judge, strategies=("pacms",))
    assert all(not r.parse_failed and r.judge_attempts == 2 for r in report.records)
    assert report.accuracy("pacms") == 100.0
    reask = judge.state["prompts"][-1]
    assert isinstance(reask[-2], AIMessage) and reask[-1].text == REASK_PROMPT


class ScriptedJudge(BaseChatModel):
    """Async judge that plays a script: a string is a reply (with usage), an exception is raised."""

    script: list[Any]
    delay: float = 0.0
    state: dict[str, Any] = Field(default_factory=lambda: {"calls": 0})

    @property
    def _llm_type(self) -> str:
        return "scripted-judge"

    def _generate(self, *args: Any, **kw: Any) -> ChatResult:
        raise NotImplementedError("async only")

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        step = self.script[min(self.state["calls"], len(self.script) - 1)]
        self.state["calls"] += 1
        await asyncio.sleep(self.delay)
        if isinstance(step, Exception):
            raise step
        usage = {"input_tokens": 100, "output_tokens": len(step.split()), "total_tokens": 0}
        message = AIMessage(content=step, usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=message)])


def test_timeout_applies_to_each_judge_call(
    questions: list[Question], selector: ContextSelector
) -> None:
    # Each call takes 0.3 s under a 0.5 s timeout: the re-ask must not share the first call's.
    judge = ScriptedJudge(script=["Let me compare the two answers.", "CORRECT"], delay=0.3)
    report = _run(questions[:1], selector, judge=judge, strategies=("topk",), timeout=0.5)
    (record,) = report.records
    assert record.error is None and record.correct and record.retries == 0
    assert record.judge_attempts == 2 and judge.state["calls"] == 2


@pytest.mark.parametrize("retries", [0, 1])
def test_judge_usage_survives_a_failed_call(
    questions: list[Question], selector: ContextSelector, retries: int
) -> None:
    unreadable = "one two three four five"  # 5 output tokens, not a verdict
    judge = ScriptedJudge(script=[unreadable, ConnectionError("reset"), "CORRECT " * 50])
    report = _run(questions[:1], selector, judge=judge, strategies=("topk",), retries=retries)
    (record,) = report.records
    if retries:
        assert record.correct and record.error is None and record.retries == 1
        assert (record.judge_usage_in, record.judge_usage_out) == (200, 55)
        assert record.judge_attempts == 2 and judge.state["calls"] == 3
    else:  # the re-ask failed for good; the first reply's usage still counts
        assert not record.correct and record.error.startswith("judge: ConnectionError")
        assert (record.judge_usage_in, record.judge_usage_out) == (100, 5)
        assert record.judge_attempts == 1


def test_chatty_judge_is_parsed(questions: list[Question], selector: ContextSelector) -> None:
    report = _run(questions, selector, judge=RuleJudge(style="chatty"))
    assert report.accuracy("pacms") == 100.0
    assert report.accuracy("lastk") == pytest.approx(100 / 3)
    assert _by(report, "pacms", "fx_ssu").verdict_raw == "**Verdict:** correct."


def test_token_accounting(questions: list[Question], selector: ContextSelector) -> None:
    report = _run(questions, selector)
    for r in report.records:
        assert r.tokens_in > 0 and r.tokens_out > 0
        assert r.judge_tokens_in > 0 and r.judge_tokens_out > 0
        assert (r.usage_in, r.usage_out) == (1000, 7)
        assert (r.judge_usage_in, r.judge_usage_out) == (300, 1)
        assert r.pool_tokens > 0 and 0 <= r.kept_tokens <= r.budget
    pacms = report.summary()["pacms"]["tokens"]
    assert pacms["reader_usage_in"] == 3000 and pacms["judge_usage_out"] == 3
    assert pacms["reader_in"] == sum(r.tokens_in for r in report.records if r.strategy == "pacms")
    totals = report.totals()
    assert totals["reader_usage_in"] == 12000
    assert totals["tokens_reader_in"] > 0 and totals["tokens_judge_in"] > 0
    assert report.config["token_counter"] == selector.token_counter.name
    # The options each strategy ran with, as resolved by the selector.
    assert report.config["strategy_options"]["pacms"] == {
        "similarity_threshold": selector.similarity_threshold,
        "min_gain": selector.min_gain,
        "relevance_feedback": selector.relevance_feedback,
    }
    assert report.config["strategy_options"]["lastk"] == {}


def test_reader_without_usage_metadata(
    questions: list[Question], selector: ContextSelector
) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    reader = GenericFakeChatModel(messages=iter([AIMessage(content=DONT_KNOW)] * 3))
    report = _run(questions, selector, reader=reader, strategies=("pacms",))
    assert all(r.usage_in is None for r in report.records)
    assert report.summary()["pacms"]["tokens"]["reader_usage_in"] is None
    assert report.accuracy("pacms") == pytest.approx(100 / 3)  # only the abstention passes
    assert "–" in report.to_markdown()


def test_markdown_and_json_shape(
    questions: list[Question], selector: ContextSelector, tmp_path: Path
) -> None:
    report = _run(questions, selector, meta={"reader": "fake:reader", "judge": "fake:judge"})
    md = report.to_markdown()
    lines = md.splitlines()
    header = next(ln for ln in lines if ln.startswith("| Strategy | Overall"))
    assert header == "| Strategy | Overall | SSU | SSA | KU | Abs. | Recall | Failed |"
    assert "reader `fake:reader`" in md and "judge `fake:judge`" in md
    assert "R=2 (recap)" in md and "budget 45% of pool tokens" in md
    assert "| pacms | 100.0 | 100.0 | 100.0 | 100.0 | 100.0 | 1.000 | 0 |" in lines
    assert "| lastk | 33.3 | 0.0 | 0.0 | 100.0 | 100.0 | 0.000 | 0 |" in lines
    assert "| Δ (pacms − lastk) | +66.7 | +100.0 | +100.0 | +0.0 | +0.0 |  |  |" in lines
    assert sum(ln.startswith("| Δ") for ln in lines) == 3
    assert "Questions per column: SSU 1, SSA 1, KU 1, Abs. 1." in md

    data = json.loads(report.to_json())
    assert set(data) == {
        "config",
        "strategies",
        "question_types",
        "elapsed_seconds",
        "totals",
        "summary",
        "records",
    }
    assert data["strategies"] == list(DEFAULT_STRATEGIES)
    assert len(data["records"]) == 12
    assert {
        "question_id",
        "strategy",
        "correct",
        "verdict_raw",
        "answer",
        "tokens_in",
        "tokens_out",
        "retries",
        "error",
    } <= set(data["records"][0])
    assert data["summary"]["pacms"]["accuracy"] == 100.0
    assert data["config"]["level"] == 2 and data["config"]["reader"] == "fake:reader"

    paths = report.save(tmp_path / "out")
    assert json.loads(paths["json"].read_text())["totals"]["records"] == 12
    assert paths["markdown"].read_text() == md
    assert len(paths["records"].read_text().splitlines()) == 12


def test_invalid_arguments(questions: list[Question], selector: ContextSelector) -> None:
    for kw in (
        {"strategies": ("nope",)},
        {"strategies": ()},
        {"strategies": ("topk", "topk")},
        {"style": "poem"},
        {"budget_base": "all"},
        {"budget_ratio": 1.5},
        {"concurrency": 0},
    ):
        with pytest.raises(ValueError):
            _run(questions, selector, **kw)
    with pytest.raises(ValueError):
        _run([*questions, questions[0]], selector)


# -- CLI helpers ------------------------------------------------------------------------------


def _fake_backends(monkeypatch: pytest.MonkeyPatch, calls: list[Any]) -> None:
    """Install a stand-in ``pacms_bench.backends`` that records what it builds."""
    mod = types.ModuleType("pacms_bench.backends")

    def chat_model_from_spec(spec: str, **kwargs: Any) -> BaseChatModel:
        calls.append((spec, kwargs))
        if spec.startswith("fake:judge"):
            return RuleJudge()
        if spec.startswith(("fake:reader", "ollama:", "prov:")):
            return ContextReader()
        if spec.startswith("down:"):
            return ContextReader(always_fail=True)
        raise ValueError(f"unknown spec {spec!r}")

    def selector_from_spec(spec: str, **kwargs: Any) -> ContextSelector:
        calls.append((spec, kwargs))
        if spec.startswith("bad:"):
            raise ValueError(f"unknown embeddings spec {spec!r}")
        return ContextSelector()

    mod.chat_model_from_spec = chat_model_from_spec  # type: ignore[attr-defined]
    mod.selector_from_spec = selector_from_spec  # type: ignore[attr-defined]
    mod.embeddings_from_spec = lambda spec: None  # type: ignore[attr-defined]
    mod.check_embeddings = lambda spec, embeddings: None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pacms_bench.backends", mod)
    # Once the real module was imported, ``from pacms_bench import backends`` reads
    # the package attribute rather than sys.modules: replace that too.
    import pacms_bench as eval_package

    monkeypatch.setattr(eval_package, "backends", mod, raising=False)


FAKE_RUN = ["--data", str(FIXTURES), "--all", "--reader", "fake:reader", "--judge", "fake:judge"]
"""A run on every fixture question, answered and judged by the fake models."""


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    assert add_qa_arguments(parser) is parser
    return parser.parse_args(argv)


def test_qa_from_args(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any) -> None:
    calls: list[Any] = []
    _fake_backends(monkeypatch, calls)
    argv = [*FAKE_RUN, "--embeddings", "fake:emb", "--strategies", "pacms,lastk", "--quiet"]
    args = _parse([*argv, "--out", str(tmp_path), "--concurrency", "2"])
    assert args.budget == 0.45 and args.level == 2 and args.budget_base == "pool"
    assert qa_from_args(args) == 0
    # models are built once, before the (slow) data load
    assert [c[0] for c in calls] == ["fake:reader", "fake:judge", "fake:emb"]
    assert all(kw == {} for spec, kw in calls if spec in ("fake:reader", "fake:judge"))
    assert ("fake:emb", {"cache_dir": None, "ollama_url": None}) in calls
    out = capsys.readouterr().out
    assert "| pacms | 100.0 |" in out and "| lastk | 33.3 |" in out
    data = json.loads((tmp_path / "qa_report.json").read_text())
    assert data["strategies"] == ["pacms", "lastk"]
    assert data["config"]["reader"] == "fake:reader" and data["config"]["judge"] == "fake:judge"
    assert data["config"]["n_questions"] == 3


def test_qa_cli_keeps_answers_on_ctrl_c_and_resumes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    _fake_backends(monkeypatch, [])
    import pacms_bench as eval_package

    build = eval_package.backends.chat_model_from_spec
    readers: list[ContextReader] = []

    def chat_model_from_spec(spec: str, **kwargs: Any) -> BaseChatModel:
        if spec != "fake:reader":
            return build(spec, **kwargs)
        readers.append(ContextReader(interrupt_after=0 if readers else 4))
        return readers[-1]

    monkeypatch.setattr(eval_package.backends, "chat_model_from_spec", chat_model_from_spec)
    out = tmp_path / "run"
    argv = [*FAKE_RUN, "--strategies", "pacms,lastk,topk", "--out", str(out), "--quiet"]
    argv += ["--concurrency", "1"]
    assert qa_from_args(_parse(argv)) == 130
    assert "--resume" in capsys.readouterr().err
    kept = (out / "qa_records.jsonl").read_text().splitlines()
    # The 5th reader call was stopped: the pairs finished before it are on disk, no report.
    assert 0 < len(kept) < 5 and not (out / "qa_report.json").exists()
    assert qa_from_args(_parse([*argv, "--resume", "--seed", "1"])) == 2  # other settings
    assert "other settings" in capsys.readouterr().err
    fewer = [*argv[:2], "--n", "2", *argv[3:]]  # the same settings, another question sample
    assert qa_from_args(_parse([*fewer, "--resume"])) == 2
    assert "questions: 3 there, 2 now" in capsys.readouterr().err
    # The same spec building another embedder (as ollama:nomic-embed-text did once task
    # prefixes were added) must not mix its vectors into the kept answers.
    run_file = out / "qa_run.json"
    saved = run_file.read_text()
    settings = json.loads(saved)
    assert settings["embeddings_identity"].startswith("pacms-hashed-tfidf")
    run_file.write_text(json.dumps({**settings, "embeddings_identity": "older-embedder"}))
    assert qa_from_args(_parse([*argv, "--resume"])) == 2
    assert "embeddings_identity: 'older-embedder' there" in capsys.readouterr().err
    run_file.write_text(saved)
    assert qa_from_args(_parse([*argv, "--resume"])) == 0
    assert readers[-1].state["calls"] == 9 - len(kept)  # only the missing pairs were asked
    records = [json.loads(line) for line in (out / "qa_records.jsonl").read_text().splitlines()]
    assert len({(r["question_id"], r["strategy"]) for r in records}) == len(records) == 9
    data = json.loads((out / "qa_report.json").read_text())
    assert data["config"]["resumed_records"] == len(kept)
    # The same accuracies as a run that was never stopped.
    assert qa_from_args(_parse([*argv[:-5], "--out", str(tmp_path / "clean"), "--quiet"])) == 0
    clean = json.loads((tmp_path / "clean" / "qa_report.json").read_text())
    assert data["summary"] == clean["summary"]


def test_default_output_folder_names_every_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_backends(monkeypatch, [])
    monkeypatch.chdir(tmp_path)
    base = [*FAKE_RUN, "--strategies", "topk", "--quiet"]
    assert qa_from_args(_parse(base)) == 0
    assert qa_from_args(_parse([*base, "--judge", "fake:judge2", "--seed", "7"])) == 0
    folders = {p.name for p in (tmp_path / "results" / "qa").iterdir()}
    assert folders == {
        "fake-reader_judge-fake-judge_s_recap_pool_R2_b45_seed0",
        "fake-reader_judge-fake-judge2_s_recap_pool_R2_b45_seed7",
    }


def test_qa_from_args_errors(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_backends(monkeypatch, [])
    missing = _parse(["--data", str(tmp_path / "nope"), "--reader", "fake:reader", "--quiet"])
    assert qa_from_args(missing) == 2
    bad_model = _parse(["--data", str(FIXTURES), "--reader", "other:x", "--quiet"])
    assert qa_from_args(bad_model) == 2
    bad_strategy = _parse(
        [
            "--data",
            str(FIXTURES),
            "--reader",
            "fake:reader",
            "--strategies",
            "zzz",
            "--quiet",
            "--out",
            str(tmp_path),
        ]
    )
    assert qa_from_args(bad_strategy) == 2
    bad_emb = _parse(
        ["--data", str(FIXTURES), "--reader", "fake:reader", "--embeddings", "bad:x", "--quiet"]
    )
    assert qa_from_args(bad_emb) == 2
    with pytest.raises(SystemExit):
        _parse(["--data", str(FIXTURES)])  # --reader is required


def test_qa_from_args_all_calls_fail(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_backends(monkeypatch, [])
    argv = ["--data", str(FIXTURES), "--all", "--reader", "down:model", "--retries", "0"]
    argv += ["--strategies", "topk", "--out", str(tmp_path / "run"), "--quiet"]
    # The test prompt finds the dead model before the run: nothing is written.
    assert qa_from_args(_parse(argv)) == 2
    err = capsys.readouterr().err
    assert "the reader and judge down:model did not answer a test prompt" in err
    assert "RuntimeError: transient reader failure" in err
    assert not (tmp_path / "run").exists()
    # Without it, every answer fails; the report is saved and names the error.
    assert qa_from_args(_parse([*argv, "--no-check"])) == 1
    err = capsys.readouterr().err
    assert "every reader/judge call failed" in err
    assert "most common error (3 of 3 answers): reader: RuntimeError: transient" in err
    assert (tmp_path / "run" / "qa_report.md").exists()
    config = json.loads((tmp_path / "run" / "qa_report.json").read_text())["config"]
    assert config["judge"] == "down:model"  # the judge defaults to the reader spec


def test_embeddings_shared_across_strategies(questions: list[Question]) -> None:
    fresh = ContextSelector()
    report = _run(questions, fresh)
    assert len(report.records) == 12
    n_texts = sum(len({p.text for p in build_pool(q, 2)}) + 1 for q in questions)
    cache = fresh.embeddings
    # Every text is embedded once, by the first strategy; the other three reuse its rows
    # (from the selector's last pool or from the cache) and embed nothing.
    assert cache.misses == n_texts


def test_qa_from_args_ids_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_backends(monkeypatch, [])
    ids = tmp_path / "ids.txt"
    ids.write_text("# pinned\nfx_ssu\nfx_ssa  # two\nfx_ssu\n")
    args = _parse(
        [
            "--data",
            str(FIXTURES),
            "--ids",
            str(ids),
            "--reader",
            "fake:reader",
            "--judge",
            "fake:judge",
            "--out",
            str(tmp_path / "o"),
            "--quiet",
            "--strategies",
            "topk",
        ]
    )
    assert qa_from_args(args) == 0
    data = json.loads((tmp_path / "o" / "qa_report.json").read_text())
    assert sorted({r["question_id"] for r in data["records"]}) == ["fx_ssa", "fx_ssu"]
    assert data["config"]["ids_file"] == str(ids)
    (tmp_path / "ids.json").write_text('["fx_ku_abs"]')
    assert read_ids(tmp_path / "ids.json") == ["fx_ku_abs"]
    (tmp_path / "empty.txt").write_text("# nothing\n")
    args.ids = str(tmp_path / "empty.txt")
    assert qa_from_args(args) == 2


def test_qa_from_args_ollama_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[Any] = []
    _fake_backends(monkeypatch, calls)
    base = ["--data", str(FIXTURES), "--all", "--reader", "ollama:llama3.1", "--quiet"]
    base += ["--judge", "fake:judge", "--strategies", "topk", "--ollama-url", "http://h:1"]
    assert qa_from_args(_parse([*base, "--out", str(tmp_path / "a"), "--seed", "3"])) == 0
    built = [kw for spec, kw in calls if spec == "ollama:llama3.1" and kw]
    assert built == [
        {
            "ollama_url": "http://h:1",
            "temperature": 0.0,
            "seed": 3,
            "num_ctx": 8192,
            "num_predict": DEFAULT_MAX_TOKENS,
        }
    ]  # auto window: the fixture prompts are tiny, so the 8192 floor
    # Checked before the data load, built once the window is known.
    assert [kw for spec, kw in calls if spec == "ollama:llama3.1"] == [{}, *built]
    calls.clear()
    argv = [*base, "--out", str(tmp_path / "b"), "--num-ctx", "65536", "--temperature", "0.2"]
    assert qa_from_args(_parse(argv)) == 0
    built = [kw for spec, kw in calls if spec == "ollama:llama3.1" and kw]
    assert built[0]["num_ctx"] == 65536 and built[0]["temperature"] == 0.2
    # A given window is known up front: the model is built once, before the data load.
    assert [kw for spec, kw in calls if spec == "ollama:llama3.1"] == built
    config = json.loads((tmp_path / "b" / "qa_report.json").read_text())["config"]
    assert config["num_ctx"] == 65536


def test_qa_from_args_provider_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[Any] = []
    _fake_backends(monkeypatch, calls)
    argv = ["--data", str(FIXTURES), "--all", "--reader", "prov:some-model", "--quiet"]
    argv += ["--judge", "fake:judge", "--strategies", "topk", "--temperature", "0.3"]
    assert qa_from_args(_parse([*argv, "--out", str(tmp_path)])) == 0
    built = [kw for spec, kw in calls if spec == "prov:some-model" and kw]
    # No Ollama-only options for other providers: the reply cap is their max_tokens.
    assert built == [{"temperature": 0.3, "max_tokens": DEFAULT_MAX_TOKENS}]
    assert all(kw == {} for spec, kw in calls if spec == "fake:judge")
    # 'none' leaves the temperature to the model (some reasoning models reject it), and a cap
    # of 0 sends no cap.
    calls.clear()
    argv[-1] = "none"
    argv += ["--max-tokens", "0"]
    assert qa_from_args(_parse([*argv, "--out", str(tmp_path / "none")])) == 0
    assert [kw for spec, kw in calls if spec == "prov:some-model"] == [{}]
    config = json.loads((tmp_path / "none" / "qa_report.json").read_text())["config"]
    assert config["temperature"] is None


@pytest.mark.parametrize("bad", ["-1", "warm", "nan"])
def test_qa_temperature_rejects_bad_values(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parse(["--reader", "fake:r", "--temperature", bad])
    assert "temperature" in capsys.readouterr().err


def test_auto_num_ctx(questions: list[Question], selector: ContextSelector) -> None:
    assert auto_num_ctx([], selector.token_counter, level=2, budget_ratio=0.45) == 8192
    big = Question(
        "big",
        "single-session-user",
        "q?",
        "a",
        "2023/05/30 (Tue) 23:40",
        tuple(
            Round(i, "s", 0, "2023/05/20 (Sat) 14:10", "word " * 500, "reply " * 500, False)
            for i in range(40)
        ),
    )
    n = auto_num_ctx([big], selector.token_counter, level=0, budget_ratio=0.5)
    budget = pool_budget(build_pool(big, 0), selector.token_counter, 0.5)
    assert n % 4096 == 0 and n >= 1.3 * budget + 1024 and n - 4096 < 1.3 * budget + 1024


def test_qa_from_args_with_real_backends(tmp_path: Path, capsys: Any) -> None:
    backends = pytest.importorskip("pacms_bench.backends")
    assert hasattr(backends, "chat_model_from_spec")
    args = _parse(
        [
            "--data",
            str(FIXTURES),
            "--all",
            "--reader",
            "fake:I don't know.",
            "--judge",
            "fake:CORRECT",
            "--out",
            str(tmp_path),
            "--quiet",
        ]
    )
    assert qa_from_args(args) == 0
    data = json.loads((tmp_path / "qa_report.json").read_text())
    assert data["summary"]["pacms"]["accuracy"] == 100.0  # the fake judge always says CORRECT
    assert data["totals"]["failures"] == 0


def test_qa_from_args_python_reader_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pacms_qa_reader.py").write_text(
        "from langchain_core.language_models import FakeListChatModel\n\n\n"
        "def reader():\n"
        '    return FakeListChatModel(responses=["I don\'t know."])\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    argv = ["--data", str(FIXTURES), "--all", "--reader", "python:pacms_qa_reader:reader"]
    argv += ["--judge", "fake:WRONG", "--strategies", "topk,lastk", "--out", str(out), "--quiet"]
    assert qa_from_args(_parse(argv)) == 0
    data = json.loads((out / "qa_report.json").read_text())
    assert data["config"]["reader"] == "python:pacms_qa_reader:reader"
    assert {name: row["accuracy"] for name, row in data["summary"].items()} == {
        "topk": 0.0,
        "lastk": 0.0,
    }  # the judge always says WRONG
    assert data["totals"]["failures"] == 0
