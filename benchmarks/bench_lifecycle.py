"""Per-step cost of the lifecycle on a 300-message history with large tool outputs.

The history has 75 rounds of: user question, AI tool call, a tool result (every third one a
~3,000-token file read, the rest 200-600-token logs and searches, some repeated), AI answer.
One step is what the harness does at a boundary: index the history, plan with the heuristic
planner, check (validate + rehearse) the plan. The token counter is shared and warm, as it is
in a running agent. Reported: median and minimum over ``--calls`` steps, for the same history
again (``repeat``) and for a history that grows by one round per step (``grow``), against the
cost of indexing alone measured in the same run.

    python benchmarks/bench_lifecycle.py [--calls 50] [--rounds 75]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langchain_pacms.lifecycle import HeuristicPlanner, check_actions, index_messages
from langchain_pacms.tokens import TokenCounter

TOPICS = ["billing", "payments", "search", "auth", "storage", "queue", "cache", "gateway"]


def round_of(t: int) -> list[BaseMessage]:
    topic = TOPICS[t % len(TOPICS)]
    cid = f"call_{t}"
    if t % 3 == 0:
        name, args = "read_file", {"path": f"src/{topic}/service_{t % 9}.py"}
        body = "\n".join(f"def {topic}_{k}(x):\n    return x * {k}  # line {k}" for k in range(400))
    elif t % 3 == 1:
        name, args = "run", {"cmd": f"pytest tests/test_{topic}.py"}
        body = "\n".join(f"tests/test_{topic}.py::test_{k} PASSED" for k in range(60 + t))
    else:
        name, args = "search", {"query": f"{topic} latency"}
        body = "\n".join(f"{topic}/doc_{k}.md: latency {(t * k) % 97} ms" for k in range(40))
    return [
        HumanMessage(f"Check the {topic} service, round {t}.", id=f"h{t}"),
        AIMessage("", tool_calls=[{"name": name, "args": args, "id": cid}], id=f"a{t}"),
        ToolMessage(body, tool_call_id=cid, name=name, id=f"t{t}"),
        AIMessage(f"The {topic} service looks fine in round {t}.", id=f"r{t}"),
    ]


def history(rounds: int) -> list[BaseMessage]:
    return [m for t in range(rounds) for m in round_of(t)]


def timed(fn: Callable[[int], object], calls: int) -> tuple[float, float]:
    samples = []
    for k in range(calls):
        start = time.perf_counter()
        fn(k)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000, min(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=75)
    args = parser.parse_args()
    counter = TokenCounter()
    planner = HeuristicPlanner()
    base = history(args.rounds)
    grown = history(args.rounds + args.calls)

    def step(messages: list[BaseMessage]) -> int:
        index = index_messages(messages, token_counter=counter)
        plan = planner.plan(index, messages)
        return len(check_actions(messages, index, plan.actions, token_counter=counter).accepted)

    accepted = step(base)  # warm: token memo and planner features
    for k in range(args.calls):
        step(grown[: (args.rounds + k) * 4])
    tokens = index_messages(base, token_counter=counter).active_tokens
    print(f"history: {len(base)} messages, {tokens} tokens; plan accepts {accepted} actions")
    index_only = timed(lambda k: index_messages(base, token_counter=counter), args.calls)
    repeat = timed(lambda k: step(base), args.calls)
    grow = timed(lambda k: step(grown[: (args.rounds + k) * 4]), args.calls)
    print(f"{'':>22} {'median':>9} {'min':>9}")
    print(f"{'index only':>22} {index_only[0]:8.2f}ms {index_only[1]:8.2f}ms")
    for name, (med, low) in (("step, repeat", repeat), ("step, grow", grow)):
        print(f"{name:>22} {med:8.2f}ms {low:8.2f}ms   {med / index_only[0]:.1f}x index")
    print("target: step <= 20 ms warm")


if __name__ == "__main__":
    main()
