"""One worker of an agent that several processes serve: one turn on a shared PostgreSQL database.

    python agent_worker.py <postgres uri> <thread> <message>

Each run builds the agent from scratch (a new fake model and a ``LifecycleMiddleware`` without
a store of its own) on a ``PostgresStore`` and a ``PostgresSaver``, runs one turn of the thread
and prints, as JSON, the turn's last message and the sha256 of what ``recover_context``
returned in the thread (``null`` before a recovery).
"""

from __future__ import annotations

import hashlib
import json
import sys

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.postgres import PostgresStore
from pacms_fakes import RecordingChatModel, classic
from test_lifecycle_agent import read_file, thanks

from langchain_pacms.lifecycle import RECOVER_TOOL_NAME, LifecycleMiddleware


def turn(uri: str, thread: str, said: str) -> dict[str, str | None]:
    with PostgresStore.from_conn_string(uri) as store, PostgresSaver.from_conn_string(uri) as saver:
        store.setup()
        saver.setup()
        lifecycle = LifecycleMiddleware(planner=classic(keep_recent=0))
        model = RecordingChatModel(script=thanks)
        agent = create_agent(
            model, [read_file], middleware=[lifecycle], store=store, checkpointer=saver
        )
        config = {"configurable": {"thread_id": thread}}
        state = agent.invoke({"messages": [HumanMessage(said)]}, config)
    recovered = [
        str(m.content)
        for m in state["messages"]
        if isinstance(m, ToolMessage) and m.name == RECOVER_TOOL_NAME
    ]
    digest = hashlib.sha256(recovered[0].encode()).hexdigest() if recovered else None
    return {"last": str(state["messages"][-1].content), "recovered_sha256": digest}


if __name__ == "__main__":
    print(json.dumps(turn(*sys.argv[1:])))
