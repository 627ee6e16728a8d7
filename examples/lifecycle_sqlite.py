"""Fold a large tool output into a SQLite sidecar file, then recover it byte for byte.

The history keeps a short stub (pointer, one-line description, locators); the exact payload goes
to LangGraph's ``SqliteStore`` under the namespace ``("pacms_sidecar", thread_id)``. The store is
closed and reopened, as after a restart, and the ``recover_context`` tool returns the payload;
``restore`` then puts it back into the history. Offline. Needs the ``lifecycle`` extra:
``pip install "langchain-pacms[lifecycle]"``.

    python examples/lifecycle_sqlite.py [--db sidecars.sqlite]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _extras import needs_extra

with needs_extra("lifecycle"):
    from langgraph.store.sqlite import SqliteStore
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_pacms.lifecycle import (
    RECOVER_TOOL_NAME,
    Action,
    SidecarStore,
    apply_actions,
    index_messages,
    make_recover_tool,
    payload_of,
    provider_problems,
)
from langchain_pacms.lifecycle.actions import restore

THREAD = "demo-thread"


def build_history() -> list:
    """A short session whose one tool call returned about 200 KB of JSON."""
    events = [
        {
            "ts": f"2026-03-0{1 + n % 9}T10:{n % 60:02d}:00Z",
            "service": "billing",
            "level": "ERROR" if n % 97 == 0 else "INFO",
            "path": f"/srv/billing/job_{n}.py",
            "msg": f"processed batch {n} \u2014 {n * 7} rows",
        }
        for n in range(1500)
    ]
    output = json.dumps(
        {"file": "/var/log/billing/2026-03.jsonl", "events": events}, indent=1, ensure_ascii=False
    )
    call = {"name": "read_log", "args": {"path": "/var/log/billing/2026-03.jsonl"}, "id": "c1"}
    return [
        SystemMessage("You are an on-call assistant.", id="s1"),
        HumanMessage("Read the March billing log and tell me what failed.", id="h1"),
        AIMessage("", tool_calls=[call], id="a1"),
        ToolMessage(output, tool_call_id="c1", id="t1"),
        AIMessage("16 ERROR events, the first in /srv/billing/job_0.py.", id="a2"),
        HumanMessage("Which batch failed last? Give the exact line.", id="h2"),
    ]


def main(db: Path) -> None:
    messages = build_history()
    index = index_messages(messages)
    folded = apply_actions(messages, index, [Action("fold", "function:tool:1", "large, stable")])
    assert not provider_problems(folded.messages)
    with SqliteStore.from_conn_string(str(db)) as store:
        store.setup()
        SidecarStore(store, THREAD).put_many(folded.sidecars)  # persist before using the edit
    print(f"folded function:tool:1: {folded.tokens_before} -> {folded.tokens_after} tokens")
    print(f"stub: {folded.messages[3].content}")

    # later, as after a restart: reopen the file and let the model call the tool
    original = payload_of(messages, index.by_id["function:tool:1"].indices)
    with SqliteStore.from_conn_string(str(db)) as store:
        tool = make_recover_tool(store)
        call = {
            "name": RECOVER_TOOL_NAME,
            "args": {"object_id": "function:tool:1"},
            "id": "r1",
            "type": "tool_call",
        }
        result = tool.invoke(call, {"configurable": {"thread_id": THREAD}})
        exact = result.content == original
        print(f"recovered {len(result.content)} chars from {db.name}: byte-exact {exact}")
        assert exact
        record = SidecarStore(store, THREAD).get("function:tool:1")
    back = restore(folded.messages, index_messages(folded.messages), record)
    assert back.messages[3].content == messages[3].content
    print(
        f"restored into the history: {back.tokens_after} tokens, message id "
        f"{back.messages[3].id}, provider problems: {provider_problems(back.messages) or 'none'}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="SQLite file to keep (default: a temp file)")
    args = parser.parse_args()
    if args.db:
        main(args.db)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp) / "sidecars.sqlite")
