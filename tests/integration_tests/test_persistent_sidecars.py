"""Sidecars survive the process: SqliteStore on a file and PostgresStore on a real server.

Each test writes in one process and recovers byte for byte in another (``sidecar_worker.py``).
The PostgreSQL test needs ``PACMS_TEST_POSTGRES_URI`` (``.ci/run`` starts a server and sets it).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import sidecar_worker
from script_runs import run_python

from langchain_pacms.lifecycle import SidecarIntegrityError, SidecarRecord, SidecarStore

pytest.importorskip("langgraph.store.sqlite", reason="needs the lifecycle extra")

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("sidecar_worker.py")
AGENT_WORKER = Path(__file__).with_name("agent_worker.py")
SURROGATES = sidecar_worker.SURROGATES


def big_payload() -> str:
    """Over 1 MB: JSON tool output with non-ASCII text and emoji, then raw NUL bytes."""
    rows = [
        {
            "id": n,
            "sku": f"SKU-{n:06d}",
            "name": "caf\u00e9 \u65e5\u672c \U0001f4e6",
            "note": "a\x00b",
        }
        for n in range(12000)
    ]
    body = json.dumps({"table": "orders", "rows": rows}, ensure_ascii=False)
    return f"{body}\nstderr: \x00\x00 raw bytes \x00\r\n"


def worker(*args: str) -> str:
    return run_python(WORKER, *args, timeout=60)


def round_trip(tmp_path: Path, backend: str, where: str, thread: str, *, put_here: bool) -> None:
    """Fold in this process and recover in a new one (``put_here``), or the other way round."""
    payload = big_payload()
    assert len(payload.encode()) > 1_000_000
    source, out = tmp_path / "payload.txt", tmp_path / "recovered.txt"
    source.write_bytes(payload.encode("utf-8"))
    if put_here:
        sidecar_worker.put(backend, where, thread, str(source))
        worker("get", backend, where, thread, str(out))
    else:
        assert 'recover_context("function:tool:1")' in worker(
            "put", backend, where, thread, str(source)
        )
        sidecar_worker.get(backend, where, thread, str(out))
    assert out.read_bytes() == source.read_bytes()
    assert Path(f"{out}.extra").read_bytes() == SURROGATES.encode("utf-8", "surrogatepass")


def test_sqlite_file_survives_a_restart(tmp_path):
    db = tmp_path / "sidecars.sqlite"
    round_trip(tmp_path, "sqlite", str(db), "thread-1", put_here=True)
    from langgraph.store.sqlite import SqliteStore

    with SqliteStore.from_conn_string(str(db)) as store:
        sidecars = SidecarStore(store, "thread-1")
        assert sidecars.list_ids() == ["extra:surrogates", "function:tool:1"]
        assert SidecarStore(store, "thread-2").list_ids() == []
        # a value changed in the file is caught on read
        store.conn.execute(
            "UPDATE store SET value = json_set(value, '$.sha256', ?) "
            "WHERE key LIKE 'function:tool:1@%'",
            ("0" * 64,),
        )
        with pytest.raises(SidecarIntegrityError):
            sidecars.get("function:tool:1")


async def test_async_sqlite_store(tmp_path):
    from langgraph.store.sqlite import SqliteStore
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    db = str(tmp_path / "async.sqlite")
    record = SidecarRecord.of("function:tool:3", big_payload()[:5000] + SURROGATES, "tool")
    async with AsyncSqliteStore.from_conn_string(db) as store:
        await store.setup()
        await SidecarStore(store, "t").aput_many([record])
        assert await SidecarStore(store, "t").alist_ids() == ["function:tool:3"]
    with SqliteStore.from_conn_string(db) as store:
        assert SidecarStore(store, "t").get("function:tool:3") == record


POSTGRES_URI = os.environ.get("PACMS_TEST_POSTGRES_URI")


@pytest.mark.skipif(
    not POSTGRES_URI,
    reason="PACMS_TEST_POSTGRES_URI is not set "
    "(.ci/run starts a PostgreSQL server and sets it; see .ci/postgres.sh)",
)
def test_postgres_payload_folded_by_one_process_is_recovered_by_another(tmp_path):
    pytest.importorskip("langgraph.store.postgres", reason="needs the lifecycle extra")
    from langgraph.store.postgres import PostgresStore

    assert POSTGRES_URI
    thread = f"pg-{uuid.uuid4().hex}"
    try:
        round_trip(tmp_path, "postgres", POSTGRES_URI, thread, put_here=False)
    finally:
        with PostgresStore.from_conn_string(POSTGRES_URI) as store:
            for key in ("function:tool:1", "extra:surrogates"):
                store.delete(("pacms_sidecar", thread), key)


@pytest.mark.skipif(
    not POSTGRES_URI,
    reason="PACMS_TEST_POSTGRES_URI is not set "
    "(.ci/run starts a PostgreSQL server and sets it; see .ci/postgres.sh)",
)
def test_agent_workers_on_one_postgres_database_recover_each_others_folds():
    # three processes serve one thread, each building the agent anew with LifecycleMiddleware()
    # (no store of its own) on the agent's PostgresStore: the second folds, the third recovers
    pytest.importorskip("langgraph.checkpoint.postgres", reason="needs the lifecycle extra")
    import hashlib

    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore
    from test_lifecycle_agent import PAYLOAD

    from langchain_pacms.lifecycle import delete_thread_sidecars

    assert POSTGRES_URI
    thread = f"agent-{uuid.uuid4().hex}"

    def turn(said: str) -> dict[str, Any]:
        out = run_python(AGENT_WORKER, POSTGRES_URI, thread, said, timeout=120)
        return json.loads(out.splitlines()[-1])

    try:
        assert turn("read data.json")["recovered_sha256"] is None
        turn("thanks")  # a turn boundary: the fold commits in this process
        with PostgresStore.from_conn_string(POSTGRES_URI) as store:
            assert SidecarStore(store, thread).list_ids() == ["function:tool:1"]
        answer = turn("what is k77?")
        assert answer["last"] == "k77 is v-77-é✓"
        assert answer["recovered_sha256"] == hashlib.sha256(PAYLOAD.encode()).hexdigest()
    finally:
        with PostgresStore.from_conn_string(POSTGRES_URI) as store:
            delete_thread_sidecars(store, thread)
        with PostgresSaver.from_conn_string(POSTGRES_URI) as saver:
            saver.delete_thread(thread)
