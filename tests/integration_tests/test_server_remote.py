"""RemoteSelector against a real uvicorn server: up, slow and down, inside the hook, the
middleware and the compressor, sync and async."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterator

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.messages import BaseMessage, HumanMessage
from pacms_fakes import (
    FACT,
    SECRET,
    RecordingChatModel,
    answer_from_context,
    assert_provider_valid,
    create_react_agent,
    long_conversation,
    values_loop,
)
from pacms_server import DOCS_BODY, free_port, running

from langchain_pacms import ContextSelector
from langchain_pacms.integrations import PACMSCompressor, create_pacms_hook
from langchain_pacms.remote import RemoteSelector
from langchain_pacms.server import create_app

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class SlowSelector(ContextSelector):
    def select(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(1.5)
        return super().select(*args, **kwargs)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with running(create_app()) as base:
        yield base


@pytest.fixture(scope="module")
def slow_url() -> Iterator[str]:
    with running(create_app(SlowSelector())) as base:
        yield base


def run_agent(selector: RemoteSelector) -> tuple[str, list[BaseMessage]]:
    model = RecordingChatModel(script=answer_from_context)
    hook = create_pacms_hook(budget=600, selector=selector)
    agent = create_react_agent(model, [], pre_model_hook=hook)
    history = long_conversation(60, fact=FACT, early_at=2)
    result = agent.invoke({"messages": [*history, HumanMessage("What is my locker combination?")]})
    (received,) = model.received
    assert_provider_valid(received)
    assert hook.selector is selector
    return result["messages"][-1].content, received


def test_hook_with_service_up_keeps_the_early_fact(url: str) -> None:
    remote = RemoteSelector(url, timeout=5)
    reply, _ = run_agent(remote)
    assert SECRET in reply
    sel = remote.select(["old fact: port 6543", "lunch", "ci flaky"], "which port?", budget=6)
    local = ContextSelector().select(
        ["old fact: port 6543", "lunch", "ci flaky"], "which port?", budget=6
    )
    assert sel.fell_back is False and sel.kept_ids == local.kept_ids
    assert sel.relevance == pytest.approx(dict(local.relevance))
    assert "server_total" in sel.timings


@pytest.mark.parametrize("where", ["down", "slow"])
def test_hook_falls_back_to_recency_when_down_or_slow(where: str, slow_url: str) -> None:
    base = slow_url if where == "slow" else f"http://127.0.0.1:{free_port()}"
    remote = RemoteSelector(base, timeout=0.3)
    started = time.monotonic()
    reply, _ = run_agent(remote)
    assert time.monotonic() - started < 3  # no stall
    assert reply == "I do not know."  # recency lost the early fact
    sel = remote.select(["a b c", "d e f", "g h i"], "x", budget=7)
    assert sel.fell_back and sel.strategy == "lastk" and sel.kept_ids == ("1", "2")
    assert sel.tokens_kept <= 7 and sel.error


def test_error_answer_falls_back_and_strict_raises() -> None:
    # a limit of the service is its failure (a strategy it refuses raises: test_remote_parity)
    with running(create_app(max_candidates=1)) as small:
        sel = RemoteSelector(small, timeout=5).select(["a", "b"], "a", budget=1)
        assert sel.fell_back and "422" in str(sel.error) and "max_candidates" in str(sel.error)
        with pytest.raises(RuntimeError, match="422"):
            RemoteSelector(small, strict=True).select(["a", "b"], "a", budget=1)


async def test_async_select_up_and_down(url: str) -> None:
    remote = RemoteSelector(url, timeout=5)
    local = ContextSelector().select(
        ["red apple", "green pear", "red car"], "red", budget=4, strategy="topk"
    )
    sel = await remote.aselect(
        ["red apple", "green pear", "red car"], "red", budget=4, strategy="topk"
    )
    assert sel.fell_back is False and sel.kept_ids == local.kept_ids
    down = RemoteSelector(f"http://127.0.0.1:{free_port()}", timeout=0.3)
    sel = await down.aselect(["a", "b"], "a", budget=1)
    assert sel.fell_back and sel.kept_ids == ("1",)


async def test_relevant_ids_reach_the_service(url: str) -> None:
    remote = RemoteSelector(url, timeout=5)
    pool = ["blue plums", "red apples"]
    local = ContextSelector().select(pool, "red", budget=3, relevant_ids=["0"])
    sel = remote.select(pool, "red", budget=3, relevant_ids=["0"])
    assert sel.fell_back is False and sel.kept_ids == local.kept_ids == ("0",)
    sel = await remote.aselect(pool, "red", budget=3, relevant_ids=["0"])
    assert sel.fell_back is False and sel.kept_ids == ("0",)
    assert remote.select(pool, "red", budget=3).kept_ids == ("1",)
    with pytest.raises(ValueError, match="names no candidate"):  # before any request
        RemoteSelector(f"http://127.0.0.1:{free_port()}").select(
            pool, "red", budget=3, relevant_ids=["7"]
        )


async def test_compressor_and_middleware_take_it(url: str) -> None:
    remote = RemoteSelector(url, timeout=5)
    docs = [Document(page_content=t) for t in ["port 6543 staging", "lunch menu", "ci flaky"]]
    compressor = PACMSCompressor(selector=remote, budget=5)
    kept = await compressor.acompress_documents(docs, "staging port")
    assert [d.page_content for d in kept] == ["port 6543 staging"]
    assert kept[0].metadata["pacms_strategy"] == "pacms"
    middleware_mod = pytest.importorskip("langchain_pacms.integrations.middleware")
    middleware = middleware_mod.PACMSMiddleware(budget=600, selector=remote)
    assert middleware.selector is remote


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="url"):
        RemoteSelector("localhost:8077")
    with pytest.raises(ValueError, match="timeout"):
        RemoteSelector(timeout=0)
    with pytest.raises(ValueError, match="query"):
        RemoteSelector().select(["a"], "", budget=1)


def test_one_warning_per_outage_and_recovery_rearms(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    remote = RemoteSelector(down, timeout=0.3)

    def warned() -> int:
        return len([r for r in caplog.records if "falling back" in r.getMessage()])

    with caplog.at_level("WARNING", logger="langchain_pacms"):
        for _ in range(2):
            sel = remote.select(["a b", "c"], "c", budget=1)
            assert sel.fell_back and sel.kept_ids == ("1",) and "ConnectError" in str(sel.error)
            assert set(sel.timings) == {"tokens", "remote", "solve", "total"}
            assert sel.timings["total"] >= sel.timings["remote"]
        assert warned() == 1
        remote.url = url  # the service is back
        assert not remote.select(["a b", "c"], "c", budget=1).fell_back
        remote.url = down
        assert remote.select(["a b", "c"], "c", budget=1).fell_back
        assert warned() == 2
    # nothing to send: no request, no fallback
    empty = remote.select([], "c", budget=("ratio", 0.5))
    assert empty.kept_ids == () and not empty.fell_back and empty.strategy == "lastk"


def test_a_slow_selection_stalls_neither_the_loop_nor_other_selections() -> None:
    # Its own server: selections that earlier tests' clients gave up on would still be running.
    body = {"candidates": [{"text": "a b"}, {"text": "c"}], "query": "c", "budget_tokens": 1}
    with running(create_app(SlowSelector())) as slow_url:
        _two_slow_selections_overlap(slow_url, body)


def _two_slow_selections_overlap(slow_url: str, body: dict) -> None:
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        slow = [
            pool.submit(httpx.post, f"{slow_url}/select", json=body, timeout=10) for _ in range(2)
        ]
        time.sleep(0.3)  # both selections are sleeping in the service now
        health = httpx.get(f"{slow_url}/healthz", timeout=10)
        assert health.status_code == 200 and time.monotonic() - started < 1.2
        assert [f.result().json()["kept_ids"] for f in slow] == [["1"], ["1"]]
    assert time.monotonic() - started < 2.8  # the two 1.5 s selections overlapped


def test_selection_threads_bound_the_selections_at_work() -> None:
    # One selection thread: two slow selections run one after the other, in arrival order,
    # while the event loop keeps answering; the default (at least 2) overlaps them (above).
    body = {"candidates": [{"text": "a b"}, {"text": "c"}], "query": "c", "budget_tokens": 1}
    with running(create_app(SlowSelector(), selection_threads=1)) as base:
        assert httpx.get(f"{base}/healthz", timeout=5).json()["selection_threads"] == 1
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            first = pool.submit(httpx.post, f"{base}/select", json=body, timeout=10)
            time.sleep(0.3)
            second = pool.submit(httpx.post, f"{base}/select", json=body, timeout=10)
            time.sleep(0.3)
            assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
            assert time.monotonic() - started < 1.2
            first.result()
            done_first = time.monotonic() - started
            assert second.result().json()["kept_ids"] == ["1"]
        done_second = time.monotonic() - started
    assert 1.4 < done_first < 2.6 and done_second > 2.9  # 1.5 s each, one at a time
    with pytest.raises(ValueError, match="selection_threads"):
        create_app(selection_threads=0)


class CountingSlowSelector(SlowSelector):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def select(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.calls += 1
        return super().select(*args, **kwargs)


def test_a_request_whose_client_left_while_queued_is_never_worked() -> None:
    body = {"candidates": [{"text": "a b"}, {"text": "c"}], "query": "c", "budget_tokens": 1}
    selector = CountingSlowSelector()
    with running(create_app(selector, selection_threads=1)) as base:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            first = pool.submit(httpx.post, f"{base}/select", json=body, timeout=10)
            time.sleep(0.3)  # the first holds the only selection thread
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(f"{base}/select", json=body, timeout=0.3)  # gives up in the queue
            assert first.result().status_code == 200
        time.sleep(0.3)
        assert selector.calls == 1  # the abandoned request never reached the selector
        assert httpx.post(f"{base}/select", json=body, timeout=10).status_code == 200
        assert selector.calls == 2


@pytest.mark.parametrize("use_async", [False, True])
async def test_a_tool_loop_through_the_service_covers_values_as_locally(
    url: str, use_async: bool
) -> None:
    from langchain_pacms import Budget

    loop = values_loop(10)
    local = create_pacms_hook(budget=Budget(ratio=0.4))
    remote = create_pacms_hook(
        budget=Budget(ratio=0.4), selector=RemoteSelector(url, timeout=5, strict=True)
    )
    if use_async:
        sent = (await remote.ainvoke({"messages": loop}))["llm_input_messages"]
    else:
        sent = remote.invoke({"messages": loop})["llm_input_messages"]
    expected = local.invoke({"messages": loop})["llm_input_messages"]
    assert [m.content for m in sent] == [m.content for m in expected]
    assert remote.last_selection is not None and local.last_selection is not None
    assert remote.last_selection.info["coverage"] == "values"
    assert remote.last_selection.kept_ids == local.last_selection.kept_ids
    assert len(remote.last_selection.kept_ids) < len(remote.last_selection.candidates)


def test_the_service_takes_values_for_every_candidate_and_pacms_alone_reads_them(url: str) -> None:
    cands = [
        {"id": "a", "text": "grep found src/a.py", "values": ["src/a.py"]},
        {"id": "b", "text": "ls shows src/b.py and src/a.py", "values": ["src/a.py", "src/b.py"]},
        {"id": "c", "text": "the tests pass", "values": []},
    ]
    body = {"candidates": cands, "query": "where is b?", "budget_tokens": 9}
    ok = httpx.post(f"{url}/select_debug", json=body)
    assert ok.status_code == 200, ok.text
    assert ok.json()["info"]["coverage"] == "values" and ok.json()["kept_ids"] == ["b"]
    partial = {**body, "candidates": [*cands[:2], {"id": "c", "text": "the tests pass"}]}
    refused = httpx.post(f"{url}/select", json=partial)
    assert refused.status_code == 422 and "candidates[2].values" in refused.text
    plain = [{k: v for k, v in c.items() if k != "values"} for c in cands]
    for strategy in ("topk", "mmr", "lastk"):  # a session compares strategies as it is
        other = httpx.post(f"{url}/select", json={**body, "strategy": strategy})
        alone = httpx.post(
            f"{url}/select", json={**body, "candidates": plain, "strategy": strategy}
        )
        assert other.status_code == 200 and other.json()["kept_ids"] == alone.json()["kept_ids"]


def unknown_relevant_id(body: dict) -> dict:
    return {**body, "relevant_ids": ["zz"]}


def values_for_one_candidate(body: dict) -> dict:
    first = {**body["candidates"][0], "values": ["6543"]}
    return {**body, "candidates": [first, *body["candidates"][1:]]}


@pytest.mark.parametrize("options", [{}, {"relevance_weight": 0.2}])
@pytest.mark.parametrize(
    ("change", "field"),
    [(unknown_relevant_id, "relevant_ids"), (values_for_one_candidate, "candidates[1].values")],
)
def test_a_refusal_names_the_field_whatever_options_come_with_it(
    url: str, options: dict, change: Callable[[dict], dict], field: str
) -> None:
    body = change({**DOCS_BODY, "strategy_options": options})
    r = httpx.post(f"{url}/select", json=body)
    assert r.status_code == 422
    assert r.json()["detail"].startswith(f"{field}: ")
    assert [e["field"] for e in r.json()["errors"]] == [field]
    # an option the strategy rejects is still refused as the strategy_options it is
    bad = httpx.post(f"{url}/select", json={**body, "strategy_options": {"k": 2}})
    assert [e["field"] for e in bad.json()["errors"]] == ["strategy_options"]


@pytest.mark.parametrize("strategy", ["topk", "lastk", "mmr", "rag"])
async def test_values_for_a_strategy_that_takes_none_raise_as_locally(
    url: str, strategy: str
) -> None:
    pool = ["port 6543", "role app_rw", "lunch"]
    values = [{"6543"}, {"app_rw"}, set()]
    with pytest.raises(TypeError, match="values"):
        ContextSelector().select(pool, "port?", 5, strategy=strategy, values=values)
    for remote in (RemoteSelector(url, timeout=10), RemoteSelector(url, strategy=strategy)):
        with pytest.raises(TypeError, match=f"strategy {strategy!r}: unknown option 'values'"):
            remote.select(pool, "port?", 5, strategy=strategy, values=values)
        with pytest.raises(TypeError, match=f"strategy {strategy!r}: unknown option 'values'"):
            await remote.aselect(pool, "port?", 5, strategy=strategy, values=values)
    # pacms takes them, by name or as the default
    for named in ("pacms", None):
        sel = RemoteSelector(url, timeout=10).select(
            pool, "port?", 5, strategy=named, values=values
        )
        assert not sel.fell_back and sel.info["coverage"] == "values"


def test_values_that_do_not_match_the_candidates_raise_as_locally() -> None:
    remote = RemoteSelector("http://127.0.0.1:9", timeout=0.2)  # never asked: the input is bad
    for selector in (ContextSelector(), remote):
        with pytest.raises(ValueError, match=r"one collection per candidate \(2\), got 1"):
            selector.select(["a b", "c d"], "q", budget=5, values=[{"x"}])


_WORDS = ["port", "staging", "parser", "crash", "token", "file", "config", "retry", "cache"]
_VALUES = ["src/a.py", "src/b.py", "BUG-101", "6543", "tests/test_p.py", "0x0010"]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(_WORDS), min_size=1, max_size=6),
            st.frozensets(st.sampled_from(_VALUES), max_size=3),
        ),
        min_size=1,
        max_size=10,
    ),
    st.integers(1, 40),
)
def test_the_service_covers_values_as_the_local_selector_does(
    url: str, pool: list[tuple[list[str], frozenset[str]]], budget: int
) -> None:
    texts = [" ".join(words + sorted(held)) for words, held in pool]
    values = [held for _, held in pool]
    local = ContextSelector().select(texts, "fix the staging port", budget, values=values)
    remote = RemoteSelector(url, timeout=5, strict=True).select(
        texts, "fix the staging port", budget, values=values
    )
    assert remote.kept_ids == local.kept_ids and remote.pick_order == local.pick_order
    assert remote.info["coverage"] == local.info["coverage"] == "values"
