"""Per-model-call overhead of the PACMS pre-model hook on a 300-message agent conversation.

The conversation has 75 rounds of: user question, AI tool call, a ~600-token tool result, AI
answer (300 messages, ~50k tokens). The embedding cache is warmed once, as it is in a running
agent. Two timings, each the median over many calls of ``hook.invoke(state)``:

* ``repeat``: the same state again (everything cached);
* ``reload``: the same state as new message objects with the same contents (what a graph meets
  when a checkpointer loads the state again for a new run): per-object memos miss;
* ``grow``: each call sees the conversation plus one new round (a few new texts to embed), which
  is what an agent loop does, in a sliding 300-message window (the oldest round leaves);
* ``append``: one new round per call with nothing leaving (the history only grows, as in a
  graph's state), for at most 50 calls: from 301 to 501 messages.

    python benchmarks/bench_hook.py [--calls 200] [--strategy pacms] [--budget 8000]
    python benchmarks/bench_hook.py --fold-stubs   # dropped tool rounds sent as fold stubs

Wall-clock times suffer on a busy machine (numpy's BLAS threads compete for cores); the minimum
and the process CPU time are the steadier figures there.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from langchain_pacms.integrations import (
    StrategyOptions,
    ToolLoopOptions,
    apply_selection,
    create_pacms_hook,
    messages_to_candidates,
    query_from_messages,
)

TOPICS = ["billing", "payments", "search", "auth", "storage", "queue", "cache", "gateway"]


def round_of(t: int) -> list[BaseMessage]:
    topic = TOPICS[t % len(TOPICS)]
    cid = f"call_{t}"
    rows = " ".join(f"{topic} row {k}: status ok latency {(t * k) % 97} ms;" for k in range(60))
    return [
        HumanMessage(f"Check the {topic} service, round {t}. Anything unusual?"),
        AIMessage("", tool_calls=[{"name": "read_log", "args": {"service": topic}, "id": cid}]),
        ToolMessage(rows, tool_call_id=cid, name="read_log"),
        AIMessage(f"The {topic} service looks healthy in round {t}."),
    ]


def conversation(rounds: int) -> list[BaseMessage]:
    return [m for t in range(rounds) for m in round_of(t)]


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--strategy", default="pacms")
    parser.add_argument("--budget", type=int, default=8000)
    parser.add_argument(
        "--min-gain",
        type=float,
        default=None,
        help="pacms min_gain override (default: the embedder's)",
    )
    parser.add_argument(
        "--fold-stubs", action="store_true", help="fold stubs with an in-memory sidecar store"
    )
    args = parser.parse_args()

    messages = conversation(75)
    options = {} if args.min_gain is None else {"min_gain": args.min_gain}
    stubs = ToolLoopOptions(sidecar_store=InMemoryStore()) if args.fold_stubs else None
    strategy = StrategyOptions(args.strategy, **options)
    hook = create_pacms_hook(args.budget, strategy=strategy, tool_loop=stubs)
    state = {"messages": [*messages, HumanMessage("Which service had the highest latency?")]}
    hook.invoke(state)  # warm the caches
    selection = hook.last_selection
    total = selection.tokens_total

    repeat, repeat_cpu = [], []
    for _ in range(args.calls):
        t0, c0 = time.perf_counter(), time.process_time()
        hook.invoke(state)
        repeat.append(time.perf_counter() - t0)
        repeat_cpu.append(time.process_time() - c0)

    reload_cpu = []
    for _ in range(min(args.calls, 50)):
        loaded = {"messages": [m.model_copy() for m in state["messages"]]}
        c0 = time.process_time()
        hook.invoke(loaded)
        reload_cpu.append(time.process_time() - c0)

    grow, grow_cpu = [], []
    stream = [*messages, *(m for t in range(75, 75 + args.calls) for m in round_of(t))]
    for i in range(args.calls):
        current = stream[4 * (i + 1) : 4 * (i + 1) + 300]  # a sliding 300-message window
        question = HumanMessage(f"What changed in round {75 + i}?")
        t0, c0 = time.perf_counter(), time.process_time()
        hook.invoke({"messages": [*current, question]})
        grow.append(time.perf_counter() - t0)
        grow_cpu.append(time.process_time() - c0)

    sel = hook.last_selection
    append, append_cpu = [], []
    history = list(state["messages"])
    for i in range(min(args.calls, 50)):
        history += round_of(75 + args.calls + i)
        t0, c0 = time.perf_counter(), time.process_time()
        hook.invoke({"messages": history})
        append.append(time.perf_counter() - t0)
        append_cpu.append(time.process_time() - c0)

    mapping = []  # the integration's own share: messages -> candidates -> messages
    msgs = state["messages"]
    for _ in range(args.calls):
        t0 = time.perf_counter()
        _, spans = messages_to_candidates(msgs)
        query_from_messages(msgs)
        apply_selection(msgs, selection, spans)
        mapping.append(time.perf_counter() - t0)

    print(
        f"conversation: {len(messages) + 1} messages, {total} tokens, "
        f"{len(sel.candidates)} candidates; budget {args.budget}; strategy {args.strategy} "
        f"{options or ''}{' with fold stubs' if stubs else ''}"
    )
    print(
        f"hook overhead per model call, warm cache, repeat: median {median_ms(repeat):.2f} ms "
        f"(min {min(repeat) * 1000:.2f} ms, p90 "
        f"{median_ms(sorted(repeat)[int(0.9 * len(repeat)) :]):.2f} ms; "
        f"process CPU median {median_ms(repeat_cpu):.2f} ms)"
    )
    print(
        "hook overhead per model call, the same state loaded again (new message objects): "
        f"process CPU median {median_ms(reload_cpu):.2f} ms"
    )
    print(
        f"hook overhead per model call, growing conversation: median {median_ms(grow):.2f} ms "
        f"(min {min(grow) * 1000:.2f} ms, p90 "
        f"{median_ms(sorted(grow)[int(0.9 * len(grow)) :]):.2f} ms; "
        f"process CPU median {median_ms(grow_cpu):.2f} ms)"
    )
    print(
        f"hook overhead per model call, history only growing ({len(history)} messages at "
        f"the end): median {median_ms(append):.2f} ms (p90 "
        f"{median_ms(sorted(append)[int(0.9 * len(append)) :]):.2f} ms; "
        f"process CPU median {median_ms(append_cpu):.2f} ms)"
    )
    print(
        f"  of which message mapping (to candidates and back): median {median_ms(mapping):.2f} ms"
    )
    timings = {k: round(v * 1000, 2) for k, v in sel.timings.items()}
    print(f"last selection phases (ms): {timings}")
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
