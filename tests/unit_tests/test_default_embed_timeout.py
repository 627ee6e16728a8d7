"""The hook and the middleware build their selector with an ``embed_timeout`` (10 s by default).

A stalled embedding backend then delays a model call by that much and falls back to recency,
instead of stalling the agent; ``embed_timeout=`` overrides it (``None``: no limit), and a
selector passed in keeps its own. The built-in embedder, which cannot stall, is timed without a
thread of its own.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.stores import InMemoryByteStore
from numpy.typing import NDArray

from langchain_pacms import Budget, ContextSelector
from langchain_pacms.embeddings import HashedTfidfEmbeddings
from langchain_pacms.integrations import create_pacms_hook
from langchain_pacms.integrations.config import DEFAULT_EMBED_TIMEOUT, SelectionConfig
from langchain_pacms.integrations.middleware import PACMSMiddleware

BUILDERS = {"hook": create_pacms_hook, "middleware": PACMSMiddleware}


@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
def test_a_built_selector_has_the_default_embed_timeout(build):
    assert DEFAULT_EMBED_TIMEOUT == 10.0
    assert build(budget=100).selector.embed_timeout == DEFAULT_EMBED_TIMEOUT


@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
@pytest.mark.parametrize("timeout", [None, 2.5, 1])
def test_embed_timeout_is_overridable(build, timeout: float | None):
    config = SelectionConfig(budget=Budget(tokens=100), embed_timeout=timeout)
    assert build(config=config).selector.embed_timeout == timeout


@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
def test_a_selector_passed_in_keeps_its_own(build):
    assert build(100, selector=ContextSelector()).selector.embed_timeout is None


@pytest.mark.parametrize("bad", [0, -1.5, "10", True])
def test_a_bad_embed_timeout_is_rejected(bad: object):
    with pytest.raises(ValueError, match="embed_timeout"):
        SelectionConfig(budget=100, embed_timeout=bad)


class Stalled(Embeddings):
    """Holds every call until ``gate`` opens."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.gate.wait(20)
        return [[1.0, float(len(t))] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.gate.wait(20)
        return [1.0, float(len(text))]


def test_a_stalled_embedder_delays_a_hook_call_by_the_timeout_only():
    model = Stalled()
    hook = create_pacms_hook(config=SelectionConfig(budget=12, selector=model, embed_timeout=0.2))
    messages = [HumanMessage(f"question {i} about the deploy") for i in range(6)]
    messages += [AIMessage("the deploy is done"), HumanMessage("is the deploy done?")]
    try:
        started = time.perf_counter()
        hook.invoke({"messages": messages})
        assert time.perf_counter() - started < 5
        selection = hook.last_selection
        assert selection is not None and selection.fell_back
        assert "embed_timeout=0.2" in (selection.error or "")
    finally:
        model.gate.set()


class ThreadNoting(HashedTfidfEmbeddings):
    """The built-in embedder, noting the thread of each call."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[threading.Thread] = []

    def embed_matrix(self, texts: list[str]) -> NDArray[np.float32]:
        self.threads.append(threading.current_thread())
        return super().embed_matrix(texts)


@pytest.mark.parametrize("store", [False, True], ids=["in-memory", "cache_store"])
def test_the_built_in_embedder_is_timed_without_a_thread_of_its_own(store: bool):
    # It cannot stall, so the default timeout costs it no thread hop; a store might stall.
    model = ThreadNoting()
    selector = ContextSelector(
        model,
        embed_timeout=DEFAULT_EMBED_TIMEOUT,
        cache_store=InMemoryByteStore() if store else None,
    )
    selection = selector.select(["red apples", "green pears"], "red", budget=2)
    assert selection.kept_ids == ("0",) and not selection.fell_back
    on_caller = [thread is threading.current_thread() for thread in model.threads]
    assert on_caller and set(on_caller) == {not store}
