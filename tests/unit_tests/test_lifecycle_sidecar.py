import asyncio
import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.store.memory import InMemoryStore

from langchain_pacms.lifecycle import (
    SIDECAR_NAMESPACE,
    SidecarAmbiguousError,
    SidecarIntegrityError,
    SidecarNotFoundError,
    SidecarRecord,
    SidecarStore,
)
from langchain_pacms.lifecycle.sidecar import SidecarError, record_key

PAYLOADS = {
    "unicode": "naïve café — Ελληνικά, 日本語, עברית\r\n\ttabs",
    "emoji": "build ok ✅ 👩‍👩‍👧‍👦 🇫🇷 \U0001f600",
    "nul": "before\x00after\x00\x00",
    "lone_surrogate": "x\ud800y\udfffz",
    "json_tool_output": json.dumps(
        {"rows": [{"id": 1, "path": "/srv/a.py", "v": None}], "ok": True, "s": "\u2028"},
        indent=2,
    ),
    "empty": "",
}


def _record(payload, object_id="function:tool:1"):
    return SidecarRecord.of(object_id, payload, "tool", ("a1", "t1"), "read(path=a.py) -> 1 line")


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_round_trip_is_byte_exact(name):
    sidecars = SidecarStore(InMemoryStore(), "thread-1")
    record = _record(PAYLOADS[name])
    sidecars.put(record)
    back = sidecars.get("function:tool:1")
    assert back == record
    assert back.payload.encode("utf-8", "surrogatepass") == PAYLOADS[name].encode(
        "utf-8", "surrogatepass"
    )


def test_stored_value_is_json_safe_and_complete():
    store = InMemoryStore()
    record = _record(PAYLOADS["nul"] + PAYLOADS["lone_surrogate"])
    SidecarStore(store, "t").put(record)
    item = store.get((SIDECAR_NAMESPACE, "t"), record_key("function:tool:1", record.sha256))
    text = json.dumps(item.value, ensure_ascii=False)
    assert "\x00" not in text and "\ud800" not in text  # payload is base64, not raw
    assert set(item.value) >= {"payload", "sha256", "kind", "lineage", "description", "created_at"}
    assert item.value["lineage"] == ["a1", "t1"]
    assert item.value["created_at"].endswith("+00:00")


def test_one_megabyte_payload_is_fast():
    payload = ("0123456789abcdé\x00" * 65536)[: 1 << 20]
    sidecars = SidecarStore(InMemoryStore(), "t")
    start = time.perf_counter()
    sidecars.put(_record(payload))
    back = sidecars.get("function:tool:1")
    assert back.payload == payload
    assert time.perf_counter() - start < 1.0


@given(st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=200))
@settings(max_examples=60, deadline=None)
def test_any_text_round_trips(payload):
    sidecars = SidecarStore(InMemoryStore(), "t")
    sidecars.put(_record(payload))
    assert sidecars.get("function:tool:1").payload == payload


def _stored(payload: str, /, **change: Any) -> tuple[SidecarStore, SidecarRecord, dict[str, Any]]:
    """Thread ``t``'s sidecars holding ``payload``'s record, whose stored value is then updated
    with ``change``: the sidecars, the record and the value stored in the end."""
    sidecars = SidecarStore(InMemoryStore(), "t")
    record = _record(payload)
    sidecars.put(record)
    ns, key = (SIDECAR_NAMESPACE, "t"), record_key("function:tool:1", record.sha256)
    value = {**sidecars.store.get(ns, key).value, **change}
    sidecars.store.put(ns, key, value)
    return sidecars, record, value


def test_tampered_payload_raises_integrity_error():
    _, _, wrong = _stored("the wrong payload")
    sidecars, _, _ = _stored("the exact payload", payload=wrong["payload"])
    with pytest.raises(SidecarIntegrityError, match="does not match its sha256"):
        sidecars.get("function:tool:1")
    with pytest.raises(ValueError):
        asyncio.run(sidecars.aget("function:tool:1"))


@pytest.mark.parametrize(
    "change",
    [
        {"payload": "***not base64***"},
        {"payload": None},
        {"sha256": "0" * 64},
        {"encoding": "raw"},
        {"lineage": None},
    ],
)
def test_broken_values_raise_integrity_error(change):
    sidecars, record, _ = _stored("abc", **change)
    with pytest.raises(SidecarIntegrityError, match="'function:tool:1' in thread 't'"):
        sidecars.get("function:tool:1")
    with pytest.raises(SidecarIntegrityError, match="'function:tool:1' in thread 't'"):
        sidecars.get("function:tool:1", record.sha256)


def test_a_value_relabelled_as_another_object_is_never_returned():
    sidecars, record, _ = _stored("abc", object_id="function:tool:2")
    with pytest.raises(SidecarError):
        sidecars.get("function:tool:1")
    with pytest.raises(SidecarIntegrityError, match="is the sidecar of 'function:tool:2'"):
        sidecars.get("function:tool:1", record.sha256)


def test_missing_key_error_names_id_and_thread():
    sidecars = SidecarStore(InMemoryStore(), "thread-9")
    with pytest.raises(SidecarNotFoundError) as info:
        sidecars.get("function:tool:4")
    assert isinstance(info.value, KeyError)
    assert str(info.value) == "no sidecar for 'function:tool:4' in thread 'thread-9'"


def test_bad_record_is_refused_before_any_write():
    store = InMemoryStore()
    sidecars = SidecarStore(store, "t")
    good = _record("ok", "function:tool:1")
    bad = SidecarRecord("function:tool:2", "payload", "0" * 64, "tool")
    with pytest.raises(SidecarIntegrityError, match="refusing to store 'function:tool:2'"):
        sidecars.put_many([good, bad])
    assert sidecars.list_ids() == []


def test_threads_are_separate_namespaces_and_ids_sort_naturally():
    store = InMemoryStore()
    a, b = SidecarStore(store, "a"), SidecarStore(store, "b")
    a.put_many(_record(str(n), f"function:tool:{n}") for n in (10, 2, 1))
    b.put(_record("other", "conversation:user:1"))
    store.put((SIDECAR_NAMESPACE, "a", "deeper"), "function:tool:99", {"x": 1})
    assert a.list_ids() == ["function:tool:1", "function:tool:2", "function:tool:10"]
    assert b.list_ids() == ["conversation:user:1"]
    with pytest.raises(SidecarNotFoundError):
        b.get("function:tool:1")
    assert a.get("function:tool:10").payload == "10"


def test_list_ids_pages_through_many_items():
    sidecars = SidecarStore(InMemoryStore(), "t")
    sidecars.put_many(_record("p", f"function:tool:{n}") for n in range(1, 1203))
    ids = sidecars.list_ids()
    assert len(ids) == 1202 and ids[0] == "function:tool:1" and ids[-1] == "function:tool:1202"


async def test_async_twins():
    sidecars = SidecarStore(InMemoryStore(), "t")
    await sidecars.aput(_record(PAYLOADS["emoji"]))
    await sidecars.aput_many([_record("x", "function:tool:3")])
    await sidecars.aput_many([])
    assert (await sidecars.aget("function:tool:1")).payload == PAYLOADS["emoji"]
    assert await sidecars.alist_ids() == ["function:tool:1", "function:tool:3"]
    with pytest.raises(SidecarNotFoundError):
        await sidecars.aget("function:tool:2")


@pytest.mark.parametrize(
    ("store", "thread", "error", "match"),
    [
        ({}, "t", TypeError, "store must be a langgraph BaseStore"),
        (InMemoryStore(), 3, TypeError, "thread_id must be a string"),
        (InMemoryStore(), "", ValueError, "non-empty"),
    ],
)
def test_bad_arguments(store, thread, error, match):
    with pytest.raises(error, match=match):
        SidecarStore(store, thread)


def test_a_record_stored_under_its_bare_id_is_still_read_by_hash():
    # stores written before keys carried the payload's hash hold "function:tool:1" itself
    store = InMemoryStore()
    record = _record("written by an earlier version")
    scratch = SidecarStore(InMemoryStore(), "t")
    scratch.put(record)
    (item,) = scratch.store.search(scratch.namespace)
    store.put((SIDECAR_NAMESPACE, "t"), "function:tool:1", dict(item.value), index=False)
    sidecars = SidecarStore(store, "t")
    assert sidecars.get("function:tool:1").payload == record.payload
    assert sidecars.get("function:tool:1", record.sha256).payload == record.payload
    with pytest.raises(SidecarIntegrityError, match="matches the sha256"):
        sidecars.get("function:tool:1", "0" * 64)


def test_an_id_several_runs_of_a_thread_folded_reads_as_the_reading_run_s_own():
    # subagents called from a tool share their parent's thread id and number from 1 each
    store = InMemoryStore()
    for run in ("run:sub-a", "run:sub-b"):
        SidecarStore(store, "t1", run=run).put(_record(f"payload of {run}"))
    for run in ("run:sub-a", "run:sub-b"):
        assert SidecarStore(store, "t1", run=run).get("function:tool:1").payload == (
            f"payload of {run}"
        )
    for reader in (SidecarStore(store, "t1"), SidecarStore(store, "t1", run="run:other")):
        with pytest.raises(SidecarAmbiguousError, match="2 different payloads"):
            reader.get("function:tool:1")  # no run of its own to tell them apart


def test_an_id_the_branches_of_a_forked_thread_folded_reads_as_the_branch_s_own():
    from langchain_core.messages import AIMessage, HumanMessage

    shared = [HumanMessage("task", id="h1"), AIMessage("on it", id="a1")]
    main = [*shared, AIMessage("main goes on", id="a2")]  # the same turn, another tail
    branch = [*shared, HumanMessage("fork: redo", id="h2"), AIMessage("redoing", id="a3")]
    store = InMemoryStore()
    for history, payload in ((main, "main's"), (branch, "the branch's")):
        SidecarStore.of_history(store, "t1", history).put(_record(payload))
    for history, payload in ((main, "main's"), (branch, "the branch's")):
        assert SidecarStore.of_history(store, "t1", history).get("function:tool:1").payload == (
            payload
        )
    # the branch's last message gone (pruned), the latest turn it holds is the branch's
    later = [*branch[:3], AIMessage("much later", id="a9")]
    assert SidecarStore.of_history(store, "t1", later).get("function:tool:1").payload == (
        "the branch's"
    )
    with pytest.raises(SidecarAmbiguousError):  # a history holding neither
        SidecarStore.of_history(store, "t1", [HumanMessage("other", id="h7")]).get(
            "function:tool:1"
        )
