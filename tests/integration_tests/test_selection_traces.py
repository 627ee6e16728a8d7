"""Each selection is a ``pacms_selection`` run in LangChain's traces, carrying its summary.

The tracer here records runs the way LangChain's tracers do (a ``BaseTracer`` whose root runs
are persisted with their child runs), with no network.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tracers.base import BaseTracer
from langchain_core.tracers.schemas import Run
from langchain_core.vectorstores import InMemoryVectorStore
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from pacms_fakes import (
    EventCollector,
    RecordingChatModel,
    long_conversation,
    search,
    tool_calling_script,
)

from langchain_pacms import ContextSelector
from langchain_pacms.embeddings import HashedTfidfEmbeddings
from langchain_pacms.integrations import PACMSCompressor, create_pacms_hook
from langchain_pacms.integrations.middleware import PACMSMiddleware
from langchain_pacms.remote import RemoteSelector

SUMMARY_KEYS = {
    "strategy",
    "budget",
    "tokens_kept",
    "tokens_sent",
    "kept",
    "dropped",
    "fell_back",
    "timings",
}


class RecordingTracer(BaseTracer):
    """Keeps every finished root run, its child runs attached, as LangChain's tracers persist."""

    def __init__(self) -> None:
        super().__init__()
        self.roots: list[Run] = []

    def _persist_run(self, run: Run) -> None:
        self.roots.append(run)

    def named(self, name: str) -> list[Run]:
        found: list[Run] = []
        stack = list(self.roots)
        while stack:
            run = stack.pop()
            found += [run] if run.name == name else []
            stack += run.child_runs
        return sorted(found, key=lambda r: r.start_time)


def parent_of(tracer: RecordingTracer, child: Run) -> Run:
    stack = list(tracer.roots)
    while stack:
        run = stack.pop()
        if any(c.id == child.id for c in run.child_runs):
            return run
        stack += run.child_runs
    raise AssertionError("a root run")


def assert_summary(run: Run, source: str) -> dict[str, Any]:
    outputs = run.outputs or {}
    assert outputs.keys() >= SUMMARY_KEYS, outputs
    assert outputs["source"] == source == run.inputs["source"]
    assert outputs["kept"] >= 1 and outputs["timings"]["total"] > 0
    assert run.end_time is not None and run.error is None
    return outputs


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    llm_input_messages: list[AnyMessage]


def hook_graph(hook: Any, model: RecordingChatModel) -> Any:
    graph = StateGraph(State)
    graph.add_node("select", hook)
    graph.add_node("model", lambda s: {"messages": [model.invoke(s["llm_input_messages"])]})
    graph.add_edge(START, "select")
    graph.add_edge("select", "model")
    return graph.compile()


HISTORY = [*long_conversation(12, fact="My locker code is 31-07-42."), HumanMessage("Locker?")]


@pytest.mark.parametrize("use_async", [False, True])
def test_a_hook_call_in_a_graph_is_a_run_with_the_summary(use_async):
    hook = create_pacms_hook(budget=300, strategy="topk")
    app = hook_graph(hook, RecordingChatModel(script=[AIMessage("31-07-42")]))
    tracer, collector = RecordingTracer(), EventCollector()
    config = {"callbacks": [tracer, collector]}
    if use_async:
        asyncio.run(app.ainvoke({"messages": HISTORY}, config))
    else:
        app.invoke({"messages": HISTORY}, config)
    (run,) = tracer.named("pacms_selection")
    outputs = assert_summary(run, "hook")
    assert parent_of(tracer, run).name in ("select", "pacms_pre_model_hook")
    assert run.inputs["messages"] == len(HISTORY) and run.inputs["budget"] == {"tokens": 300}
    selection = hook.last_selection
    assert outputs["strategy"] == selection.strategy == "topk"
    assert outputs["budget"] == 300 and outputs["fell_back"] is False
    assert outputs["kept"] == len(selection.kept_ids) and outputs["dropped"] > 0
    assert outputs["tokens_sent"] == selection.info["tokens_sent"] <= 300
    # the custom event stays, dispatched inside the selection's run
    assert collector.selections == [outputs]


def test_a_middleware_call_in_create_agent_is_a_run_with_the_summary():
    model = RecordingChatModel(script=tool_calling_script("search", "locker"))
    mw = PACMSMiddleware(budget=3000)
    agent = create_agent(model, [search], system_prompt="Be brief.", middleware=[mw])
    tracer = RecordingTracer()
    agent.invoke({"messages": HISTORY}, {"callbacks": [tracer]})
    runs = tracer.named("pacms_selection")
    assert len(runs) == len(model.received) == 2  # the tool call, then the answer
    outputs = assert_summary(runs[-1], "middleware")
    assert outputs["tokens_sent"] == mw.last_selection.info["tokens_sent"] <= 3000
    assert runs[-1].inputs["tool_tokens"] > 0  # the bound tool's schema is charged
    assert parent_of(tracer, runs[-1]).name == "model"


@pytest.mark.parametrize("use_async", [False, True])
def test_a_compressor_honours_its_callbacks(use_async):
    docs = [Document(f"note {i}: the staging port is {6540 + i}") for i in range(6)]
    compressor = PACMSCompressor(budget=20)
    tracer = RecordingTracer()
    if use_async:
        asyncio.run(compressor.acompress_documents(docs, "staging port", callbacks=[tracer]))
    else:
        compressor.compress_documents(docs, "staging port", callbacks=[tracer])
    (run,) = tracer.named("pacms_selection")
    outputs = assert_summary(run, "compressor")
    assert run.inputs["documents"] == 6 and run.inputs["query"] == "staging port"
    assert outputs["budget"] == 20 and outputs["kept"] + outputs["dropped"] == 6


def test_a_compressor_behind_a_retriever_is_a_child_of_the_retriever_run():
    store = InMemoryVectorStore(HashedTfidfEmbeddings())
    store.add_texts([f"the staging port is {6540 + i}" for i in range(8)])
    retriever = ContextualCompressionRetriever(
        base_compressor=PACMSCompressor(budget=15),
        base_retriever=store.as_retriever(search_kwargs={"k": 8}),
    )
    tracer = RecordingTracer()
    kept = retriever.invoke("staging port", {"callbacks": [tracer]})
    (run,) = tracer.named("pacms_selection")
    assert assert_summary(run, "compressor")["kept"] == len(kept) > 0
    assert parent_of(tracer, run).run_type == "retriever"


def test_a_remote_selection_that_fell_back_says_so_in_the_trace():
    remote = RemoteSelector("http://127.0.0.1:9", timeout=0.2)  # nothing listens there
    hook = create_pacms_hook(300, selector=remote)
    app = hook_graph(hook, RecordingChatModel(script=[AIMessage("?")]))
    tracer = RecordingTracer()
    app.invoke({"messages": HISTORY}, {"callbacks": [tracer]})
    (run,) = tracer.named("pacms_selection")
    outputs = assert_summary(run, "hook")
    assert run.inputs["selector"] == "RemoteSelector"
    assert outputs["fell_back"] is True and outputs["error"]


def test_without_a_run_the_selection_still_works():
    hook = create_pacms_hook(50, selector=ContextSelector())
    out = hook.invoke({"messages": [HumanMessage("hello")]})["llm_input_messages"]
    assert [m.content for m in out] == ["hello"]
