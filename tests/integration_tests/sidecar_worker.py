"""One process of the persistence tests: fold into, or recover from, a SQLite file or PostgreSQL.

    python sidecar_worker.py put  sqlite|postgres <path or uri> <thread> <payload file>
    python sidecar_worker.py get  sqlite|postgres <path or uri> <thread> <out file>

``put`` folds the tool output of a small history (the payload file, UTF-8) and stores the
sidecars, plus one record holding lone surrogates under ``extra:surrogates``; ``get`` recovers
``function:tool:1`` with the recover tool and writes its bytes to ``<out file>``, then the extra
record to ``<out file>.extra``. Files hold UTF-8 with ``surrogatepass``.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from pathlib import Path

from langchain_core.messages import HumanMessage
from pacms_fakes import fold, tool_round

from langchain_pacms.lifecycle import SidecarRecord, SidecarStore, make_recover_tool

SURROGATES = "lone \ud800 high, \udfff low, NUL \x00"


@contextmanager
def open_store(backend: str, where: str):
    if backend == "sqlite":
        from langgraph.store.sqlite import SqliteStore

        with SqliteStore.from_conn_string(where) as store:
            store.setup()
            yield store
    else:
        from langgraph.store.postgres import PostgresStore

        with PostgresStore.from_conn_string(where) as store:
            store.setup()
            yield store


def put(backend: str, where: str, thread: str, payload_file: str) -> None:
    payload = Path(payload_file).read_bytes().decode("utf-8", "surrogatepass")
    messages = [
        HumanMessage("export the orders table", id="h1"),
        *tool_round("export", {"table": "orders"}, payload),
        HumanMessage("how many rows?", id="h2"),
    ]
    result = fold(messages)
    extra = SidecarRecord.of("extra:surrogates", SURROGATES, "tool")
    with open_store(backend, where) as store:
        start = time.perf_counter()
        SidecarStore(store, thread).put_many([*result.sidecars, extra])
        print(f"put {time.perf_counter() - start:.4f}s")
    print(result.messages[2].content[:200])


def get(backend: str, where: str, thread: str, out_file: str) -> None:
    with open_store(backend, where) as store:
        tool = make_recover_tool(store, thread_id=thread)
        start = time.perf_counter()
        payload = tool.invoke({"object_id": "function:tool:1"})
        print(f"get {time.perf_counter() - start:.4f}s")
        extra = tool.invoke({"object_id": "extra:surrogates"})
    Path(out_file).write_bytes(payload.encode("utf-8", "surrogatepass"))
    Path(out_file + ".extra").write_bytes(extra.encode("utf-8", "surrogatepass"))


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"put": put, "get": get}[command](*args)
