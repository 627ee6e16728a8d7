"""Watch an agent's selections live in the inspector page.

Starts the selection service on a free loopback port (or uses ``--url``), prints the address of
the inspector page that follows this run, and runs a LangGraph agent (a deterministic offline
model) whose pre-model hook selects through ``RemoteSelector(session=...)``. The service keeps
each selection under that session and streams it to the page, so the keep/drop grid changes
with every model call: the agent is told a fact, reads two long logs and a long order list
while the fact drops out of the kept set, then is asked about the fact again and it returns.
With ``--log PATH`` the hook also writes its JSONL selection log, which
``pacms serve --watch PATH`` follows the same way for an agent that selects in-process. Needs
the ``server`` extra (``pip install "langchain-pacms[server]"``).

    python examples/live_inspector.py                    # then open the printed address
    python examples/live_inspector.py --pause 3 --wait 10
    python examples/live_inspector.py --url http://127.0.0.1:8077 --session my-agent
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _agent_setup import OfflineAgentModel, PrintSelections, human, order_list, service_log
from _extras import needs_extra
from langchain_core.messages import SystemMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from langchain_pacms.integrations import SelectionConfig, create_pacms_hook
from langchain_pacms.integrations.graph import PACMSHook

with needs_extra("server"):
    import uvicorn

    from langchain_pacms.remote import RemoteSelector

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent

FACT = (
    "For the record, my notes on the staging database: it listens on port 6543 behind "
    "pgbouncer, which pools 40 connections per user in transaction mode; the primary runs "
    "PostgreSQL 16 on stg-db-1 with a streaming replica on stg-db-2, failover is manual, "
    "nightly dumps go to the backup bucket at 03:30 and are kept for two weeks, vacuum runs "
    "on Sundays, and schema migrations must be announced in the staging channel a day ahead."
)
TURNS = [
    FACT,
    "For the record: billing writes its invoices to /var/data/invoices, rotated nightly at "
    "02:00 by the archive job; the quota on /var/data is 500 GB.",
    "Please read the billing log and tell me what is wrong.",
    "For the record: ACME is our largest customer; their orders ship from the Leeds warehouse "
    "and are invoiced monthly.",
    "Now list the orders of ACME.",
    "Read the payments log too.",
    "Which port does the staging database listen on?",  # asks about the first turn again
]
BUDGET = 500
PROMPT = SystemMessage("You are an ops assistant.")


@tool
def read_service_log(service: str) -> str:
    """Return the last 20 lines of a service's log."""
    return service_log(service, lines=20, error_at=13)


@tool
def list_orders(customer: str) -> str:
    """List the recent orders of a customer."""
    return order_list(customer, 20)


TOOLS = [read_service_log, list_orders]


@contextlib.contextmanager
def serving() -> Iterator[str]:
    """Run ``pacms serve``'s app on a free loopback port until the block ends; its base URL."""
    from langchain_pacms.server import create_app  # the server extra, checked at the top

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(), host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise SystemExit("the service did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(5)


def build_agent(url: str, session: str, log_path: Path | None = None) -> tuple[Any, PACMSHook]:
    """The agent and its hook: each model call selects through the service under ``session``."""
    selector = RemoteSelector(url, session=session, timeout=10.0)
    hook = create_pacms_hook(
        config=SelectionConfig(budget=BUDGET, selector=selector, prompt=PROMPT, log=log_path)
    )
    with warnings.catch_warnings():  # create_react_agent is deprecated in favour of create_agent
        warnings.simplefilter("ignore")
        agent = create_react_agent(
            OfflineAgentModel(),
            TOOLS,
            pre_model_hook=hook,
            checkpointer=InMemorySaver(),
            prompt=PROMPT,
        )
    return agent, hook


def fact_kept(hook: PACMSHook) -> bool:
    """Whether the last model call was sent the turn that states :data:`FACT`."""
    selection = hook.last_selection
    assert selection is not None
    return any("6543" in c.text for c in selection.kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running pacms serve (default: start one here)")
    parser.add_argument("--session", default="live-demo", help="session id (default live-demo)")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between turns")
    parser.add_argument("--wait", type=float, default=0.0, help="seconds before the first turn")
    parser.add_argument("--log", type=Path, help="also write the hook's JSONL selection log")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        url = args.url.rstrip("/") if args.url else stack.enter_context(serving())
        print(f"inspector following this run: {url}/?follow={args.session}")
        time.sleep(args.wait)
        agent, hook = build_agent(url, args.session, args.log)
        config = {"configurable": {"thread_id": args.session}, "callbacks": [PrintSelections()]}
        for text in TURNS:
            print(f"\nuser: {text}")
            answer = agent.invoke(human(text), config)["messages"][-1].content
            print(f"assistant: {answer}")
            print(f"  the fact about port 6543 was {'kept' if fact_kept(hook) else 'dropped'}")
            time.sleep(args.pause)


if __name__ == "__main__":
    main()
