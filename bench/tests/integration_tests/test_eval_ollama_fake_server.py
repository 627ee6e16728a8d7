"""``pacms-bench longmemeval qa`` and ``recall`` end to end with ``ollama:`` models, on loopback.

Reader, judge and embeddings are all ``ollama:`` specs served by one fake Ollama server
(:class:`fake_ollama.FakeOllama`), so the runs go through the code a real Ollama run uses:
the CLI's model options (``num_ctx``, ``temperature``, ``seed``), ``ChatOllama``'s streamed
replies and usage counts, the retry on a failed call, the removal of a ``<think>`` block
before judging, worker processes and the on-disk caches of a recall sweep, and what happens
when the server is missing a model or goes away. The fake reader answers only when the
evidence text is in its prompt, so the accuracy depends on what each strategy kept.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_ollama import MODEL, FakeOllama
from langchain_ollama import ChatOllama
from ollama import ResponseError

from pacms_bench.backends import selector_from_spec
from pacms_bench.cli import main
from pacms_bench.longmemeval import iter_questions
from pacms_bench.qa import run_qa
from pacms_bench.qa_cli import CHECK_PROMPT, DEFAULT_MAX_TOKENS, JUDGE_NUM_CTX
from pacms_bench.recall import load_questions, run_recall
from pacms_bench.recall_config import RecallConfig

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lme_mini"

# question -> (text that must be in the reader's history, the reader's reply when it is)
EVIDENCE = {
    "What colour is my bicycle?": (
        "repainted my bicycle teal",
        "<think>The user said they repainted it.</think>Teal.",
    ),
    "How many planets did you say the Kepler-90 system has?": (
        "Kepler-90 system has 8 known planets",
        "You said 8 planets.",
    ),
}
DONT_KNOW = "I don't know."


def _tag(text: str, name: str) -> str | None:
    found = re.search(rf"<{name}>\n(.*?)\n</{name}>", text, re.S)
    return found.group(1) if found else None


class Models:
    """The server's chat models: ``reader`` (its first question fails once) and ``judge``."""

    def __init__(self) -> None:
        self.failed = False
        self.lock = threading.Lock()  # the server answers calls in parallel threads

    def __call__(self, model: str, messages: list[dict[str, Any]]) -> str | int:
        prompt = messages[-1]["content"]
        if model == "reader":
            history, _, tail = prompt.partition("\n---\n")
            question = re.search(r"^Question: (.*)$", tail, re.M)
            if not question:
                return "OK"  # the CLI's test prompt
            with self.lock:
                fail, self.failed = not self.failed, True
            if fail:
                return 503  # a transient outage: the harness must retry
            snippet, reply = EVIDENCE.get(question.group(1), ("\x00", DONT_KNOW))
            return reply if snippet in history else DONT_KNOW
        if model == "judge":
            response = (_tag(prompt, "response") or "").lower()
            reference = _tag(prompt, "reference_answer")
            if reference is None:  # an abstention question: declining is right
                return "yes" if "don't know" in response else "no"
            return "yes" if reference.lower() in response else "no"
        return 404


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOllama]:
    for name in ("OLLAMA_HOST", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    fake = FakeOllama(chat=Models()).start()
    yield fake
    fake.stop()


def test_qa_run_with_ollama_models(server: FakeOllama, tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "qa"
    argv = ["longmemeval", "qa", "--data", str(FIXTURES), "--all", "--seed", "3"]
    argv += ["--reader", "ollama:reader", "--judge", "ollama:judge", "--num-ctx", "12288"]
    argv += ["--embeddings", f"ollama:{MODEL}", "--ollama-url", server.url]
    argv += ["--out", str(out), "--quiet"]
    assert main(argv) == 0
    report = json.loads((out / "qa_report.json").read_text())

    # Accuracy follows what was kept: recency loses both evidence rounds at this budget.
    accuracy = {name: row["accuracy"] for name, row in report["summary"].items()}
    assert accuracy["pacms"] == 100.0 and accuracy["lastk"] == pytest.approx(100 / 3)
    assert report["summary"]["pacms"]["evidence_recall"] == 1.0
    assert report["summary"]["lastk"]["evidence_recall"] == 0.0
    records = report["records"]
    assert len(records) == 3 * 4
    answers = {(r["strategy"], r["question_id"]): r["answer"] for r in records}
    assert answers["pacms", "fx_ssu"] == "Teal."  # streamed, think block removed
    assert answers["lastk", "fx_ssu"] == DONT_KNOW

    # The one failed call was retried, and nothing was lost.
    totals = report["totals"]
    assert totals["retries"] == 1 and totals["failures"] == 0 and totals["parse_failures"] == 0
    assert all(r["error"] is None for r in records)

    # Every call carried the CLI's options for ollama models.
    chats = server.chats
    checks = [body for body in chats if body["messages"][-1]["content"] == CHECK_PROMPT]
    assert sorted(body["model"] for body in checks) == ["judge", "reader"]
    assert chats[:2] == checks  # each model answered the test prompt before the run
    # a reader and a judge call per record, the retry, and the two test prompts
    assert len(chats) == 2 * len(records) + 1 + 2
    for body in chats:
        assert body["stream"] is True
        assert body["options"]["temperature"] == 0.0 and body["options"]["seed"] == 3
        # the reader's window as given; a judge of its own gets a small one
        window = 12288 if body["model"] == "reader" else JUDGE_NUM_CTX
        assert body["options"]["num_ctx"] == window
        assert body["options"]["num_predict"] == DEFAULT_MAX_TOKENS  # replies are capped
    assert {body["model"] for body in chats} == {"reader", "judge"}

    # The usage the server reported reached the report (the test prompts are not in it; each
    # was answered with one word).
    for role in ("reader", "judge"):
        reported = [totals[f"{role}_usage_in"], totals[f"{role}_usage_out"]]
        words_in, words_out = server.usage[role]
        assert reported == [words_in - len(CHECK_PROMPT.split()), words_out - 1]

    # One selector for all strategies: each text was embedded once, with the task prefix
    # nomic-embed-text was trained with (the question as a query, the rounds as documents).
    assert server.embedded and len(server.embedded) == len(set(server.embedded))
    queries = {t for t in server.embedded if t.startswith("search_query: ")}
    assert {q.removeprefix("search_query: ") for q in queries} >= {
        q.question for q in iter_questions(FIXTURES)
    }
    assert all(t.startswith("search_document: ") for t in set(server.embedded) - queries)
    printed = capsys.readouterr().out
    assert "reader `ollama:reader` · judge `ollama:judge`" in printed


def _qa_argv(server: FakeOllama, out: Path, *extra: str) -> list[str]:
    argv = ["longmemeval", "qa", "--data", str(FIXTURES), "--all", "--quiet"]
    argv += ["--reader", "ollama:reader", "--ollama-url", server.url, "--out", str(out)]
    return [*argv, *extra]


def test_max_tokens_caps_or_frees_the_replies(server: FakeOllama, tmp_path: Path) -> None:
    argv = _qa_argv(server, tmp_path / "capped", "--max-tokens", "64", "--no-check")
    assert main(argv) == 0
    assert {body["options"]["num_predict"] for body in server.chats} == {64}
    server.chats.clear()
    assert main(_qa_argv(server, tmp_path / "free", "--max-tokens", "0", "--no-check")) == 0
    assert server.chats and not any("num_predict" in body["options"] for body in server.chats)
    report = json.loads((tmp_path / "free" / "qa_report.json").read_text())
    assert report["config"]["max_tokens"] is None
    assert main(_qa_argv(server, tmp_path / "bad", "--max-tokens", "-1")) == 2


def test_a_missing_model_is_found_before_the_run(
    server: FakeOllama, tmp_path: Path, capsys: Any
) -> None:
    out = tmp_path / "qa"
    argv = _qa_argv(server, out, "--judge", "ollama:jugde", "--retries", "2")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the judge ollama:jugde did not answer a test prompt: ResponseError" in err
    assert "fake failure 404 for 'jugde'" in err
    assert not out.exists()
    # One call each: the server's 404 is not retried.
    assert [body["model"] for body in server.chats] == ["reader", "jugde"]

    # Without the test prompt, the judge's calls fail at once, and the error is named.
    server.chats.clear()
    assert main([*argv, "--no-check"]) == 1
    err = capsys.readouterr().err
    assert "every reader/judge call failed" in err
    assert "most common error (12 of 12 answers): judge: ResponseError: fake failure 404" in err
    totals = json.loads((out / "qa_report.json").read_text())["totals"]
    assert totals["failures"] == 12 and totals["retries"] == 1  # the reader's 503 only
    assert [body["model"] for body in server.chats].count("jugde") == 12


def test_run_qa_again_with_the_same_models(server: FakeOllama) -> None:
    # The async client pools connections on the loop that opened them; a second run must not
    # find them dead.
    llm = ChatOllama(model="judge", base_url=server.url, client_kwargs={"trust_env": False})
    questions = list(iter_questions(FIXTURES))
    for _ in range(3):
        report = run_qa(questions, reader=llm, judge=llm, progress=False, retries=0)
        assert report.totals()["failures"] == 0
        assert all(record.error is None for record in report.records)


async def test_run_qa_inside_a_running_loop_says_to_await(server: FakeOllama) -> None:
    llm = ChatOllama(model="judge", base_url=server.url)
    with pytest.raises(RuntimeError, match="await the async function"):
        run_qa(list(iter_questions(FIXTURES)), reader=llm, judge=llm, progress=False)


def test_a_dead_embedder_fails_the_answers_it_would_have_chosen(
    server: FakeOllama, tmp_path: Path, capsys: Any
) -> None:
    out = tmp_path / "qa"
    argv = _qa_argv(server, out, "--judge", "ollama:judge", "--retries", "1")
    argv += ["--embeddings", "ollama:missing-embedder"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the embeddings ollama:missing-embedder did not embed a test text" in err
    assert not out.exists()

    # Without the test, recency stands in for every selection: that is lastk's answer, not
    # pacms's, so those answers fail instead of being graded.
    server.chats.clear()
    assert main([*argv, "--no-check"]) == 0
    err = capsys.readouterr().err
    assert "warning: 9 answers failed" in err and "recency stood in" in err
    report = json.loads((out / "qa_report.json").read_text())
    for name, row in report["summary"].items():
        assert row["failures"] == (0 if name == "lastk" else 3)
    assert report["summary"]["lastk"]["accuracy"] == pytest.approx(100 / 3)
    # The reader was asked only for lastk's three answers (the first one twice: a 503).
    assert [b["model"] for b in server.chats].count("reader") == 3 + 1


# -- recall ------------------------------------------------------------------------------------


def _recall_argv(server: FakeOllama, tmp_path: Path, out: str, *extra: str) -> list[str]:
    argv = ["longmemeval", "recall", "--data", str(FIXTURES), "--quiet"]
    argv += ["--levels", "0", "2", "--budgets", "0.2", "0.5", "--out", str(tmp_path / out)]
    argv += ["--embeddings", f"ollama:{MODEL}", "--ollama-url", server.url]
    return [*argv, "--cache-dir", str(tmp_path / "cache"), *extra]


def _rows(tmp_path: Path, out: str) -> list[Any]:
    (path,) = (tmp_path / out).glob("*.json")
    return list(json.loads(path.read_text())["rows"])


def test_recall_sweep_with_ollama_embeddings(server: FakeOllama, tmp_path: Path) -> None:
    assert main(_recall_argv(server, tmp_path, "two", "--all", "--workers", "2")) == 0
    embedded = len(server.embedded)
    assert embedded > 0
    # One process, nothing reused but the vectors on disk: the same rows, no new embedding.
    argv = _recall_argv(server, tmp_path, "one", "--all", "--result-cache", "off")
    assert main(argv) == 0
    assert _rows(tmp_path, "one") == _rows(tmp_path, "two")
    assert len(server.embedded) == embedded + 1  # only the test text of the second run


def test_recall_with_the_embedder_gone(server: FakeOllama, tmp_path: Path, capsys: Any) -> None:
    first = sorted(q.question_id for q in iter_questions(FIXTURES) if q.evidence_indices)[0]
    assert main(_recall_argv(server, tmp_path, "first", "--ids", first)) == 0
    server.stop()
    capsys.readouterr()
    # Found before the data is loaded ...
    assert main(_recall_argv(server, tmp_path, "all", "--all")) == 2
    err = capsys.readouterr().err
    assert f"the embeddings ollama:{MODEL} did not embed a test text: ConnectionError" in err
    # ... or, without the test, when the sweep needs a vector it has not cached.
    assert main(_recall_argv(server, tmp_path, "all", "--all", "--no-check")) == 1
    err = capsys.readouterr().err
    assert "error: the sweep stopped: ConnectionError" in err
    assert "the same command goes on from there" in err
    # Back up: the question swept before is read from the cache, not embedded again.
    server.start()
    before = len(server.embedded)
    assert main(_recall_argv(server, tmp_path, "all", "--all")) == 0
    swept = {q.question_id: q for q in iter_questions(FIXTURES)}[first]
    again = {t.removeprefix("search_document: ") for t in server.embedded[before:]}
    assert {r.text for r in swept.rounds} <= {
        t.removeprefix("search_document: ") for t in server.embedded[:before]
    }
    assert not {r.text for r in swept.rounds} & again
    assert len(_rows(tmp_path, "all")) > len(_rows(tmp_path, "first"))


def test_a_failing_worker_stops_the_sweep_at_once(tmp_path: Path) -> None:
    # Twelve copies of one question, each with a word of its own. The embedder fails on the
    # first one's texts; every request is held a little, so the queue is still long when the
    # failure arrives. The error must not wait for the queued questions to be swept.
    record = json.loads((FIXTURES / "2_fx_ssu.json").read_text())
    data = tmp_path / "copies"
    data.mkdir()
    for k in range(12):
        copy = json.loads(json.dumps(record))
        copy["question_id"] = f"q{k:02d}"
        for session in copy["haystack_sessions"]:
            for turn in session:
                turn["content"] += f" tag{k:02d}"
        (data / f"{k}_q{k:02d}.json").write_text(json.dumps(copy))

    def fail_first(texts: list[str]) -> int | None:
        return 400 if any("tag00" in t for t in texts) else None

    fake = FakeOllama(stall=0.2, embed_status=fail_first).start()
    try:
        factory = functools.partial(
            selector_from_spec, f"ollama:{MODEL}", ollama_url=fake.url, cache="off"
        )
        config = RecallConfig.create(levels=(0,), budgets=(0.5,), strategies=["topk"])
        with pytest.raises(ResponseError, match="fake failure 400"):
            run_recall(
                load_questions(data, n=None),
                config,
                selector=factory(),
                selector_factory=factory,
                workers=2,
            )
        # What reached the server: the failing question, the one beside it, and the few the
        # pool had already handed to its workers; never all twelve.
        tags = {m.group() for t in fake.embedded for m in re.finditer(r"tag\d\d", t)}
        assert "tag00" in tags and len(tags) <= 6, sorted(tags)
    finally:
        fake.stop()


def test_ctrl_c_while_a_model_is_tested(tmp_path: Path) -> None:
    # The test prompt waits on a server that is still loading the model; Ctrl-C ends the
    # command at once, with no traceback.
    asked, release = threading.Event(), threading.Event()

    def loading(model: str, messages: list[dict[str, Any]]) -> str:
        asked.set()
        release.wait(60)
        return "OK"

    fake = FakeOllama(chat=loading).start()
    argv = [sys.executable, "-m", "pacms_bench.cli", "longmemeval", "qa"]
    argv += ["--data", str(FIXTURES), "--all", "--reader", "ollama:reader", "--quiet"]
    argv += ["--ollama-url", fake.url, "--out", str(tmp_path / "qa")]
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    pipe = subprocess.PIPE
    # a shell runs background jobs with SIGINT ignored, and the child would inherit that
    proc = subprocess.Popen(
        argv,
        stdout=pipe,
        stderr=pipe,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert asked.wait(60), "the test prompt never reached the server"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)  # before the server answers (60 s)
    finally:
        release.set()
        proc.kill()
        fake.stop()
    assert proc.returncode == 130
    assert "interrupted before any answer was asked for" in err
    assert "Traceback" not in err
    assert not (tmp_path / "qa").exists()
