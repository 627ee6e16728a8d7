"""One conformance suite for SidecarStore on every store: InMemoryStore, SqliteStore (a file)
and PostgresStore (when PACMS_TEST_POSTGRES_URI is set; .ci/run sets it)."""

from __future__ import annotations

import json
import os
import uuid

import pytest
from langgraph.store.memory import InMemoryStore

from langchain_pacms.lifecycle import (
    AUDIT_NAMESPACE,
    SIDECAR_NAMESPACE,
    SidecarIntegrityError,
    SidecarNotFoundError,
    SidecarRecord,
    SidecarStore,
    acopy_thread_sidecars,
    adelete_thread_sidecars,
    copy_thread_sidecars,
    delete_thread_sidecars,
    make_recover_tool,
)
from langchain_pacms.lifecycle.sidecar import record_key

PAYLOADS = [
    "naïve café — Ελληνικά, 日本語, עברית\r\n\ttabs",
    "emoji ✅ 👩‍👩‍👧‍👦 🇫🇷",
    "NUL \x00 in \x00\x00 the middle",
    "lone \ud800 and \udfff surrogates",
    json.dumps({"rows": [{"id": 1, "path": "/a/b.py", "v": None}], "s": "\u2028"}),
    "",
    "x" * 1_000_001,
]
POSTGRES_URI = os.environ.get("PACMS_TEST_POSTGRES_URI")


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request, tmp_path):
    if request.param == "memory":
        yield InMemoryStore()
        return
    if request.param == "sqlite":
        sqlite = pytest.importorskip("langgraph.store.sqlite", reason="needs the lifecycle extra")
        with sqlite.SqliteStore.from_conn_string(str(tmp_path / "s.sqlite")) as db:
            db.setup()
            yield db
        return
    if not POSTGRES_URI:
        pytest.skip("PACMS_TEST_POSTGRES_URI is not set (.ci/postgres.sh starts a server)")
    postgres = pytest.importorskip("langgraph.store.postgres", reason="needs the lifecycle extra")
    with postgres.PostgresStore.from_conn_string(POSTGRES_URI) as db:
        db.setup()
        yield db


@pytest.fixture
def thread():
    return f"t-{uuid.uuid4().hex}"  # a fresh thread: a shared server keeps earlier runs


def test_payloads_round_trip_byte_exact(store, thread):
    sidecars = SidecarStore(store, thread)
    records = [
        SidecarRecord.of(f"function:tool:{n}", p, "tool", (f"m{n}",), "d")
        for n, p in enumerate(PAYLOADS, 1)
    ]
    sidecars.put_many(records)
    for record in records:
        back = sidecars.get(record.object_id)
        assert back == record
        assert back.payload.encode("utf-8", "surrogatepass") == record.payload.encode(
            "utf-8", "surrogatepass"
        )


def test_text_fields_a_database_refuses_are_stored_as_replacement_characters(store, thread):
    # a description from a payload's first line or an audit note may hold a NUL or a lone
    # surrogate: PostgreSQL and SQLite refused the record, so the commit never happened
    sidecars = SidecarStore(store, thread)
    payload = "cat bin\x00ary \ud800 out"
    sidecars.put(SidecarRecord.of("function:tool:1", payload, "tool", ("m\x00",), payload))
    back = sidecars.get("function:tool:1")
    assert back.payload == payload
    assert back.description == "cat bin\ufffdary \ufffd out" and back.lineage == ("m\ufffd",)


def test_tampered_value_and_missing_id(store, thread):
    sidecars = SidecarStore(store, thread)
    exact = SidecarRecord.of("function:tool:1", "exact", "tool")
    sidecars.put(exact)
    ns, key = (SIDECAR_NAMESPACE, thread), record_key("function:tool:1", exact.sha256)
    value = dict(store.get(ns, key).value)
    value["sha256"] = SidecarRecord.of("x", "other", "tool").sha256
    store.put(ns, key, value, index=False)
    with pytest.raises(SidecarIntegrityError):
        sidecars.get("function:tool:1")
    with pytest.raises(SidecarNotFoundError, match=f"in thread '{thread}'"):
        sidecars.get("function:tool:2")


def test_list_ids_pages_and_threads_stay_apart(store, thread):
    sidecars, other = SidecarStore(store, thread), SidecarStore(store, f"{thread}-b")
    sidecars.put_many(SidecarRecord.of(f"function:tool:{n}", "p", "tool") for n in range(1, 522))
    other.put(SidecarRecord.of("conversation:user:1", "q", "user"))
    ids = sidecars.list_ids()
    assert len(ids) == 521 and ids[:2] == ["function:tool:1", "function:tool:2"]
    assert ids[-1] == "function:tool:521"
    assert other.list_ids() == ["conversation:user:1"]


async def test_async_twins_and_tool(store, thread):
    # SqliteStore has no async path: the sidecar store runs its sync calls in a thread
    sidecars = SidecarStore(store, thread)
    await sidecars.aput_many([SidecarRecord.of("function:tool:1", PAYLOADS[3], "tool")])
    await sidecars.aput(SidecarRecord.of("function:tool:2", PAYLOADS[2], "tool"))
    assert (await sidecars.aget("function:tool:1")).payload == PAYLOADS[3]
    assert await sidecars.alist_ids() == ["function:tool:1", "function:tool:2"]
    tool = make_recover_tool(store)
    config = {"configurable": {"thread_id": thread}}
    assert await tool.ainvoke({"object_id": "function:tool:2"}, config) == PAYLOADS[2]
    missing = await tool.ainvoke({"object_id": "function:tool:3"}, config)
    assert missing.startswith("recover_context failed: no sidecar for 'function:tool:3'")


def _thread_with_records(store, thread, n):
    sidecars = SidecarStore(store, thread)
    sidecars.put_many(SidecarRecord.of(f"function:tool:{k}", f"p{k}", "tool") for k in range(n))
    audit = SidecarStore(store, thread, namespace=AUDIT_NAMESPACE)
    audit.put(SidecarRecord.of("function:tool:0", "pruned", "tool"))
    return sidecars, audit


def test_deleting_a_thread_takes_its_payloads_and_audit_only(store, thread):
    sidecars, audit = _thread_with_records(store, thread, 503)  # more than one search page
    kept, kept_audit = _thread_with_records(store, f"{thread}-b", 2)
    assert delete_thread_sidecars(store, thread) == 504
    assert sidecars.list_ids() == [] and audit.list_ids() == []
    with pytest.raises(SidecarNotFoundError):
        sidecars.get("function:tool:1")
    assert kept.list_ids() == ["function:tool:0", "function:tool:1"]
    assert kept_audit.get("function:tool:0").payload == "pruned"
    assert delete_thread_sidecars(store, thread) == 0  # nothing left: nothing to do


async def test_deleting_a_thread_async(store, thread):
    sidecars, _ = _thread_with_records(store, thread, 3)
    _thread_with_records(store, f"{thread}-b", 1)
    tool = make_recover_tool(store)
    config = {"configurable": {"thread_id": thread}}
    assert await tool.ainvoke({"object_id": "function:tool:2"}, config) == "p2"
    assert await adelete_thread_sidecars(store, thread) == 4
    gone = await tool.ainvoke({"object_id": "function:tool:2"}, config)
    assert gone.startswith("recover_context failed: no sidecar for 'function:tool:2'")
    assert await sidecars.alist_ids() == []
    assert await SidecarStore(store, f"{thread}-b").alist_ids() == ["function:tool:0"]


async def test_copying_a_thread_copies_its_payloads_and_audit(store, thread):
    """What a copied thread needs: every record of the source, paged, nothing of other threads."""
    sidecars, audit = _thread_with_records(store, thread, 503)  # more than one search page
    _thread_with_records(store, f"{thread}-other", 2)
    copy = f"{thread}-copy"
    assert copy_thread_sidecars(store, thread, copy) == 504
    copied = SidecarStore(store, copy)
    assert copied.list_ids() == sidecars.list_ids()
    assert copied.get("function:tool:502") == sidecars.get("function:tool:502")
    assert SidecarStore(store, copy, namespace=AUDIT_NAMESPACE).get("function:tool:0") == (
        audit.get("function:tool:0")
    )
    delete_thread_sidecars(store, thread)  # the copy is its own
    assert copied.get("function:tool:7").payload == "p7"
    assert await acopy_thread_sidecars(store, copy, f"{thread}-async") == 504
    tool = make_recover_tool(store)
    config = {"configurable": {"thread_id": f"{thread}-async"}}
    assert await tool.ainvoke({"object_id": "function:tool:3"}, config) == "p3"
