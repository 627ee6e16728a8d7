"""Resident memory of one long-lived process that runs many short agent threads.

Each thread is a `create_agent` run with `LifecycleMiddleware()` and `PACMSMiddleware(3000)`: a
scripted model reads 12 files of 300 lines (new paths and values every time) and answers, so the
lifecycle folds and the selection embeds new texts in every thread. Each thread gets its own
`InMemoryStore` (what a persistent store holds lives in a database, not in this process), so the
growth measured is the package's own: its caches, memos and per-thread bookkeeping, whose
documented bounds are the selector's memory ceiling and the fold memo's entry limit.

    python benchmarks/bench_agent_memory.py [--threads 1500] [--every 100] [--reads 12]

It prints RSS (MiB, from /proc/self/status) after the first thread and then every ``--every``
threads, and the growth from the ``--every``-th thread to the last: a package that leaks per
thread grows linearly; bounded caches level off. Needs the ``middleware`` extra.
"""

from __future__ import annotations

import argparse
import gc
import random
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.store.memory import InMemoryStore

from langchain_pacms.integrations import PACMSMiddleware
from langchain_pacms.lifecycle import LifecycleMiddleware


def rss_mib() -> float:
    """This process's resident set size in MiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS line in /proc/self/status")


@tool
def read(path: str) -> str:
    """Read a file."""
    rng = random.Random(path)
    return "\n".join(f"{path}:{i}: value_{rng.randrange(10**9)} = f({i})" for i in range(300))


class ScriptedReader(BaseChatModel):
    """Reads ``reads`` new files, one call each, then answers."""

    reads: int = 12
    thread: int = 0
    calls: int = 0  # the selection may leave earlier reads out of a request: counted here

    @property
    def _llm_type(self) -> str:
        return "scripted-reader"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        done, self.calls = self.calls, self.calls + 1
        if done < self.reads:
            path = f"/src/t{self.thread}/m{done}.py"
            call = {"name": "read", "args": {"path": path}, "id": f"c{done}"}
            message = AIMessage("", tool_calls=[call])
        else:
            message = AIMessage("done")
        return ChatResult(generations=[ChatGeneration(message=message)])


def main() -> None:
    """Run the threads and print the RSS table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1500)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--reads", type=int, default=12)
    args = parser.parse_args()
    print("| threads run | RSS MiB |")
    print("|---:|---:|")
    marks: dict[int, float] = {}
    for thread in range(1, args.threads + 1):
        model = ScriptedReader(reads=args.reads, thread=thread)
        middleware = [LifecycleMiddleware(), PACMSMiddleware(3000)]
        agent = create_agent(model, [read], middleware=middleware, store=InMemoryStore())
        agent.invoke({"messages": [HumanMessage(f"task {thread}: read the files")]})
        if thread == 1 or thread % args.every == 0 or thread == args.threads:
            gc.collect()
            marks[thread] = rss_mib()
            print(f"| {thread} | {marks[thread]:.0f} |", flush=True)
    start = min(args.every, args.threads)
    grown = marks[args.threads] - marks[start]
    print(f"\ngrowth from thread {start} to {args.threads}: {grown:+.0f} MiB")


if __name__ == "__main__":
    main()
