"""Time to store and recover one large folded payload in each sidecar store.

For every store it prints the median wall time, over ``--repeats`` warm runs (the first run is
dropped), of ``SidecarStore.put``, of ``SidecarStore.get`` (base64 decode and sha256 check
included) and of one ``recover_context`` tool call, each checked byte for byte. The payload is
text with accents, emoji and NUL bytes of about ``--kilobytes`` KB of UTF-8. Stores:
``InMemoryStore``, ``SqliteStore`` on a temp file and, when ``PACMS_TEST_POSTGRES_URI`` is set
(``.ci/postgres.sh`` sets it), ``PostgresStore``; a thread of its own, deleted at the end.

Usage::

    python benchmarks/bench_sidecar.py
    bash -c 'source .ci/postgres.sh && python benchmarks/bench_sidecar.py'
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from langchain_pacms.lifecycle import SidecarRecord, SidecarStore, make_recover_tool

UNIT = "0123456789 caf\u00e9 \U0001f4e6 \x00 "  # 20 chars, 24 UTF-8 bytes


def stores() -> Iterator[tuple[str, BaseStore]]:
    yield "InMemoryStore", InMemoryStore()
    from langgraph.store.sqlite import SqliteStore

    with (
        tempfile.TemporaryDirectory() as tmp,
        SqliteStore.from_conn_string(str(Path(tmp) / "sidecars.sqlite")) as store,
    ):
        store.setup()
        yield "SqliteStore (temp file)", store
    uri = os.environ.get("PACMS_TEST_POSTGRES_URI")
    if uri:
        from langgraph.store.postgres import PostgresStore

        with PostgresStore.from_conn_string(uri) as store:
            store.setup()
            yield "PostgresStore", store
    else:
        print("| PostgresStore | skipped: PACMS_TEST_POSTGRES_URI is not set | | |")


def median_ms(step: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) * 1000


def measure(name: str, store: BaseStore, record: SidecarRecord, repeats: int) -> str:
    sidecars = SidecarStore(store, f"bench-{uuid.uuid4().hex[:12]}")
    tool = make_recover_tool(store, thread_id=sidecars.thread_id)

    def get() -> None:
        assert sidecars.get(record.object_id) == record

    def call() -> None:
        assert tool.invoke({"object_id": record.object_id}) == record.payload

    put = median_ms(lambda: sidecars.put(record), repeats)
    row = (
        f"| {name} | {put:.1f} ms | {median_ms(get, repeats):.1f} ms | "
        f"{median_ms(call, repeats):.1f} ms |"
    )
    store.delete(sidecars.namespace, record.object_id)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kilobytes", type=int, default=1080, help="payload size (UTF-8 KB)")
    parser.add_argument("--repeats", type=int, default=6, help="timed runs after one warm-up")
    args = parser.parse_args()
    if args.kilobytes < 1 or args.repeats < 1:
        parser.error("--kilobytes and --repeats must be at least 1")
    payload = (UNIT * (args.kilobytes * 1000 // 24 + 1))[: args.kilobytes * 1000 * 20 // 24]
    record = SidecarRecord.of("function:tool:1", payload, "tool", ("a1", "t1"), "bench")
    size = len(payload.encode("utf-8", "surrogatepass"))
    print(f"payload: {size:,} UTF-8 bytes, median of {args.repeats} warm runs")
    print("| store | put | get (hash-checked) | `recover_context` call |")
    print("| --- | --- | --- | --- |")
    for name, store in stores():  # each store is closed when the next one opens
        print(measure(name, store, record, args.repeats))


if __name__ == "__main__":
    main()
