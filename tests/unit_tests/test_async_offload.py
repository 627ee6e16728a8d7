"""The async entry points compute off the event loop: other tasks keep running meanwhile."""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

import langchain_pacms.integrations.runner as runner_module
import langchain_pacms.lifecycle.harness as harness_module
import langchain_pacms.selector.context as context_module
from langchain_pacms import ContextSelector
from langchain_pacms._steps import adrive, adrive_calls
from langchain_pacms.embeddings import CachedEmbeddings
from langchain_pacms.integrations import create_pacms_hook
from langchain_pacms.lifecycle import HarnessStats, LifecycleHarness
from langchain_pacms.selector.pool import PoolEmbedder

REQUEST = contextvars.ContextVar("request", default="none")


def _spy(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[bool]:
    """Wrap ``module.name`` to record, per call, whether it ran on the main (loop) thread."""
    seen: list[bool] = []
    original = getattr(module, name)

    def spied(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread() is threading.main_thread())
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, spied)
    return seen


async def _echo(request: str) -> tuple[str, bool]:
    return request, threading.current_thread() is threading.main_thread()


def _body(log: list[Any]) -> Generator[str, tuple[str, bool], str]:
    log.append(("start", threading.current_thread() is threading.main_thread(), REQUEST.get()))
    REQUEST.set("set in a step")
    answer = yield "first"
    log.append(("answer", answer, REQUEST.get()))
    try:
        yield "boom"
    except ValueError as err:
        log.append(("thrown in", str(err)))
    return "done"


async def _answer_or_fail(request: str) -> tuple[str, bool]:
    if request == "boom":
        raise ValueError("no answer")
    return await _echo(request)


def test_offloaded_steps_run_in_a_worker_and_their_answers_on_the_loop() -> None:
    log: list[Any] = []

    async def main() -> str:
        REQUEST.set("caller's")
        return await adrive(_body(log), _answer_or_fail, offload=True)

    assert asyncio.run(main()) == "done"
    # the steps see the caller's context and keep what they set in it from step to step
    assert log[0] == ("start", False, "caller's")
    assert log[1] == ("answer", ("first", True), "set in a step")
    assert log[2] == ("thrown in", "no answer")


def test_without_offload_the_steps_run_on_the_loop() -> None:
    log: list[Any] = []
    assert asyncio.run(adrive(_body(log), _answer_or_fail)) == "done"
    assert log[0][1] is True


def test_an_error_of_an_offloaded_step_reaches_the_caller() -> None:
    def failing() -> Generator[Any, Any, None]:
        yield None
        raise KeyError("lost")

    async def none(_: Any) -> None:
        return None

    with pytest.raises(KeyError, match="lost"):
        asyncio.run(adrive(failing(), none, offload=True))


def _blocking(seconds: float) -> Callable[[], Generator[Any, Any, str]]:
    def steps() -> Generator[Any, Any, str]:
        time.sleep(seconds)  # a step that computes (holds its thread) for a while
        if False:  # pragma: no cover - makes this a generator
            yield
        return "computed"

    return steps


@pytest.mark.parametrize("offload", [True, False])
def test_other_tasks_run_while_a_step_computes_only_when_offloaded(offload: bool) -> None:
    async def main() -> int:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                await asyncio.sleep(0.005)
                ticks += 1

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)  # the ticker starts
        before = ticks
        await adrive_calls(_blocking(0.3)(), offload=offload)
        during = ticks - before
        done.set()
        await task
        return during

    during = asyncio.run(main())
    if offload:
        assert during >= 5
    else:
        assert during == 0


def _conversation(rounds: int) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for t in range(rounds):
        rows = " ".join(f"service row {k}: latency {(t * k) % 97} ms" for k in range(40))
        messages += [
            HumanMessage(f"Check round {t} of the logs."),
            AIMessage("", tool_calls=[{"name": "read_log", "args": {"n": t}, "id": f"c{t}"}]),
            ToolMessage(rows, tool_call_id=f"c{t}", name="read_log"),
            AIMessage(f"Round {t} looks fine."),
        ]
    return [*messages, HumanMessage("Which round had latency 42 ms?")]


def test_the_hook_selects_off_the_loop_with_the_picks_of_its_sync_twin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = {"messages": _conversation(12)}
    hook = create_pacms_hook(budget=900)
    expected = hook.invoke(state)
    pooled = _spy(monkeypatch, runner_module, "messages_to_candidates")
    solved = _spy(monkeypatch, context_module, "solve")
    got = asyncio.run(hook.ainvoke(state))
    assert [m.content for m in got["llm_input_messages"]] == [
        m.content for m in expected["llm_input_messages"]
    ]
    assert pooled and not any(pooled)  # the pool was built in a worker thread
    assert solved and not any(solved)  # and the selection solved there


def test_a_lifecycle_step_plans_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    harness = LifecycleHarness()
    messages = _conversation(30)
    indexed = _spy(monkeypatch, harness_module, "index_messages")
    asyncio.run(harness.astep(messages, thread_id="t-offload"))
    assert indexed and not any(indexed)


def test_offloaded_steps_do_not_wait_for_a_full_default_executor() -> None:
    gate = threading.Event()

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
        stuck = loop.run_in_executor(None, gate.wait, 20)  # a stalled sync call holds it
        try:
            hook = create_pacms_hook(budget=900)
            out = await asyncio.wait_for(hook.ainvoke({"messages": _conversation(4)}), 10)
            return [str(m.content) for m in out["llm_input_messages"]]
        finally:
            gate.set()
            await stuck

    assert asyncio.run(main())[-1] == "Which round had latency 42 ms?"


def test_harness_counters_stay_exact_when_steps_count_at_once() -> None:

    stats = HarnessStats()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        threads = [
            threading.Thread(
                target=lambda: [stats.add(plans=1, rejections=["x"]) for _ in range(20_000)]
            )
            for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert stats.plans == 80_000 and stats.rejections["x"] == 80_000


def test_the_pool_and_the_cache_compute_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:

    seen = {
        name: _spy(monkeypatch, owner, name)
        for owner, name in (
            (PoolEmbedder, "_pooled"),
            (PoolEmbedder, "_rows_from"),
            (CachedEmbeddings, "_finish"),
            (CachedEmbeddings, "_keys"),
        )
    }
    pool = [f"service s{i} latency {i * 7 % 101} ms" for i in range(50)]

    asyncio.run(ContextSelector().aselect(pool, "latency 42 ms", budget=60))
    # the pool's 50 texts are computed off the loop; the query alone (1 text) stays on it
    assert seen["_pooled"] and not any(seen["_pooled"]) and not any(seen["_rows_from"])
    assert all(False in seen[name] for name in ("_keys", "_finish")), seen
