"""Every Python example in README.md and docs/*.md runs as it is written.

The examples of one page run in order in one namespace (a later example may use what an earlier
one made), from a temporary working folder, with top-level ``await`` allowed. The names an
example takes for granted (``model``, ``tools``, ``store``, ``checkpointer``, ...) are fakes
defined here: LangChain's kind of fake chat model, LangGraph's in-memory store and saver, a
small conversation with one tool call. ``ollama`` models reach a fake Ollama server on loopback
through ``OLLAMA_HOST``, so an example that embeds or chats sends real HTTP requests. Two
examples need what a checkout may lack and run in tests of their own: the PostgreSQL store
(``PACMS_TEST_POSTGRES_URI``, which ``.ci/run`` sets) and the QA run (the evaluation package and
LongMemEval's oracle file under ``../shared/data``), which the evaluation's tests run
(``bench/tests/integration_tests/test_docs_qa_example.py``).
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import re
import sys
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_ollama import FakeOllama
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.vectorstores import InMemoryVectorStore
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.store.memory import InMemoryStore
from pacms_fakes import BIG, RecordingChatModel, call, search

from langchain_pacms import Selection
from langchain_pacms.embeddings import HashedTfidfEmbeddings

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
POSTGRES_URI = os.environ.get("PACMS_TEST_POSTGRES_URI")
NEEDS_POSTGRES = "PostgresStore.from_conn_string"
NEEDS_DATA = "../shared/data/longmemeval/"
_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def examples(page: Path) -> list[tuple[int, str]]:
    """The page's Python blocks with the line each starts on."""
    text = page.read_text(encoding="utf-8")
    return [(text[: m.start()].count("\n") + 2, m.group(1)) for m in _BLOCK.finditer(text)]


def _chat(model: str, messages: list[dict[str, Any]]) -> str:
    return "I don't know." if "judge" not in str(messages[0].get("content", "")).lower() else "no"


@pytest.fixture
def ollama(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOllama]:
    server = FakeOllama(chat=_chat).start()
    monkeypatch.setenv("OLLAMA_HOST", server.url)
    try:
        yield server
    finally:
        server.stop()


def fakes() -> dict[str, Any]:
    """The names the examples take for granted, made anew for each example."""
    model = RecordingChatModel(script=[AIMessage("done")])
    builder = StateGraph(MessagesState)
    builder.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_edge(START, "model")
    vector_store = InMemoryVectorStore(HashedTfidfEmbeddings())
    vector_store.add_texts(["staging Postgres listens on 6543", "production uses 5432"])
    return {
        "model": model,
        "tools": [search],
        "store": InMemoryStore(),
        "checkpointer": InMemorySaver(),
        "builder": builder,
        "vector_store": vector_store,
        "texts": [
            "Rotate the staging database password with `vault rotate staging/db`.",
            "Staging Postgres is behind pgbouncer on port 6543.",
            "The billing job retries three times before it pages.",
        ],
        "messages": [
            HumanMessage("Find the failing billing job."),
            AIMessage("", tool_calls=[call("search", {"query": "billing"}, "c1")]),
            ToolMessage(BIG, tool_call_id="c1"),
            AIMessage("It is job_7."),
        ],
        "thread_id": "t1",
        "inputs": {"messages": [("user", "Which port does staging use?")]},
        "my_callable": lambda text: len(text.split()),
    }


@pytest.fixture
def names(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A module's namespace for the examples (LangGraph reads a state class's hints from it)."""
    module = types.ModuleType("docs_examples")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module.__dict__


def run(page: Path, line: int, code: str, names: dict[str, Any]) -> None:
    """Run one example in ``names``, awaiting it when it awaits at the top level.

    The fakes are made anew first, so an example that rebinds one (``with ... as store``)
    leaves the next its own; what the examples define themselves carries over.
    """
    names.update(fakes())
    compiled = compile(code, f"{page.name}:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # create_react_agent's notice
        result = eval(compiled, names)  # the project's own docs
        if inspect.iscoroutine(result):
            asyncio.run(result)


def runnable(page: Path) -> list[tuple[int, str]]:
    """The examples that need neither PostgreSQL nor the data set."""
    return [(n, c) for n, c in examples(page) if NEEDS_POSTGRES not in c and NEEDS_DATA not in c]


@pytest.mark.parametrize(
    "page", [p for p in PAGES if runnable(p)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_the_examples_of_a_page_run(
    page: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ollama: FakeOllama,
    names: dict[str, Any],
) -> None:
    found = runnable(page)
    monkeypatch.chdir(tmp_path)
    for line, code in found:
        run(page, line, code, names)
    if page.name == "README.md":
        selection = names["selection"]
        assert isinstance(selection, Selection) and selection.tokens_kept <= 40
        assert "1" in selection.kept_ids  # the pgbouncer port answers the query
    if page.name == "compressor.md":  # its retriever embeds with OllamaEmbeddings
        assert ollama.embedded and names["docs"]
    if page.name == "selection.md":  # the Ollama selector embeds with nomic's task prefixes
        texts = ["staging port 6543", "billing job"]
        names["selector"].select(texts, query="port", budget=9)
        assert "search_query: port" in ollama.embedded
        assert "search_document: staging port 6543" in ollama.embedded
    if page.name == "integrations.md":  # the hook logged a selection per model call
        assert (tmp_path / "selections.jsonl").read_text(encoding="utf-8").count("\n") >= 2
    if page.name == "lifecycle.md":  # the folded payload comes back byte for byte
        assert names["record"].payload == BIG and "function:tool:1" in names["sidecars"].list_ids()


def test_every_example_is_run_somewhere() -> None:
    counted = sum(len(examples(p)) for p in PAGES)
    special = [c for p in PAGES for _, c in examples(p) if NEEDS_POSTGRES in c or NEEDS_DATA in c]
    assert counted >= 20 and len(special) == 2


@pytest.mark.skipif(
    POSTGRES_URI is None,
    reason="PACMS_TEST_POSTGRES_URI is not set (.ci/run starts a PostgreSQL server and sets it)",
)
def test_the_postgres_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, names: dict[str, Any]
) -> None:
    (line, code), *_ = [(n, c) for p in PAGES for n, c in examples(p) if NEEDS_POSTGRES in c]
    written = re.search(r'"(postgresql://[^"]+)"', code)
    assert written is not None
    monkeypatch.chdir(tmp_path)
    run(
        ROOT / "docs" / "lifecycle.md",
        line,
        code.replace(written.group(1), str(POSTGRES_URI)),
        names,
    )
    graph = names["graph"]
    assert graph.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "pg"}})
