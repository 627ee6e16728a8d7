"""Warm per-call cost of one lifecycle step on a 100-object coding-agent history.

The history is a cut of a recorded mini-swe-agent session
(``../shared/data/agent-traces/mini-swe-agent-deepseek-dev/``, the session with the most tool
calls, cut at the last tool boundary with at most ``--objects`` objects) when that folder is
present, else a synthetic coding-agent run of the same shape (a system prompt, a task, then tool
spans: file views, listings, grep hits, tracebacks, some long ``cat > file`` scripts).

Printed, as the median of ``--calls`` warm calls (the token counter, the planner and every memo
warm, as in a running agent or a replay that measures many policies on one history):

* ``index``: :meth:`LifecycleHarness.index`;
* ``plan``: :meth:`HeuristicPlanner.plan`;
* ``check_actions``: validating and rehearsing that plan (:meth:`LifecycleHarness.check`);
* ``step``: a whole :meth:`LifecycleHarness.step` (a fresh harness each call, so it really
  indexes, plans, checks and commits to an ``InMemoryStore``);
* ``step, new message objects``: the same on a copy of the history made of new message objects
  (the same contents), so nothing remembered per message object applies;

each in wall and CPU time (CPU time holds better on a loaded machine), and as a multiple of
a lower bound measured in the same run: one copy of the message list and
one sha256 of every object's payload (what any step must at least do: walk the history and hash
what it may store). The last line compares the step with the target (at most 10 ms warm).

    python benchmarks/bench_lifecycle_step.py [--calls 30] [--objects 100] [--synthetic]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from langchain_pacms.lifecycle import HeuristicPlanner, LifecycleHarness, at_boundary, payload_of
from langchain_pacms.tokens import TokenCounter

T = TypeVar("T")
TARGET_MS = 10.0


def synthetic(spans: int, seed: int = 0) -> list[BaseMessage]:
    """A coding-agent run with ``spans`` tool calls (deterministic for a seed)."""
    rng = random.Random(seed)
    words = ["value", "parser", "token", "config", "handler", "cache", "error", "result"]

    def path() -> str:
        return f"src/pkg/{rng.choice(words)}_{rng.randrange(40)}.py"

    msgs: list[BaseMessage] = [
        SystemMessage("You are a careful coder. Run one bash command per step.", id="s"),
        HumanMessage(f"Fix the crash in {path()} reported in ABC-123.", id="h"),
    ]
    for k in range(spans):
        shape = k % 5
        if shape == 0:
            command = f"cat {path()}"
            body = "\n".join(f"{n}\tdef {rng.choice(words)}_{n}(x): return x" for n in range(150))
        elif shape == 1:
            command = "find src -name '*.py' | head -40"
            body = "\n".join(path() for _ in range(40))
        elif shape == 2:
            command = f"grep -rn {rng.choice(words)} src"
            body = "\n".join(f"{path()}:{rng.randrange(500)}: x = y" for _ in range(30))
        elif shape == 3:
            command = "python reproduce.py"
            frames = "\n".join(
                f'  File "/testbed/{path()}", line {rng.randrange(900)}, in f{n}' for n in range(8)
            )
            body = f"Traceback (most recent call last):\n{frames}\nValueError: bad token"
        else:
            command = "cat > fix.py <<'EOF'\n" + "x = compute(x)  # patched\n" * 20 + "EOF"
            body = "written"
        call = {"name": "bash", "args": {"command": command}, "id": f"c{k}"}
        msgs.append(AIMessage(f"THOUGHT: step {k}", tool_calls=[call], id=f"a{k}"))
        msgs.append(ToolMessage(body, tool_call_id=f"c{k}", id=f"t{k}"))
    return msgs


def recorded(objects: int) -> tuple[str, list[BaseMessage]] | None:
    """The longest boundary cut with at most ``objects`` objects of the longest dev session.

    The sessions are read with the evaluation's trace loader (``pacms_bench``, in ``bench/``).
    """
    from pacms_bench.traces import default_traces_dir, load_mini_swe

    dev = default_traces_dir() / "mini-swe-agent-deepseek-dev"
    if not dev.is_dir():
        return None
    sessions, _ = load_mini_swe(dev, dev_only=True)
    if not sessions:
        return None
    session = max(sessions, key=lambda s: (s.tool_calls, s.name))
    harness = LifecycleHarness(HeuristicPlanner())
    for end in range(len(session.messages), 1, -1):
        cut = list(session.messages[:end])
        if at_boundary(cut) and len(harness.index(cut).objects) <= objects:
            return f"{session.name}[:{end}]", cut
    return None


def median_ms(fn: Callable[[T], object], calls: int, setup: Callable[[], T]) -> tuple[float, float]:
    """Median wall and CPU time of ``fn(setup())`` in ms (``setup`` untimed), after a warm-up."""
    fn(setup())
    wall, cpu = [], []
    for _ in range(calls):
        given = setup()
        start, start_cpu = time.perf_counter(), time.process_time()
        fn(given)
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start)
    return statistics.median(wall) * 1000, statistics.median(cpu) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--objects", type=int, default=100)
    parser.add_argument("--synthetic", action="store_true", help="ignore the recorded sessions")
    args = parser.parse_args()

    found = None if args.synthetic else recorded(args.objects)
    name, messages = found or ("synthetic", synthetic(args.objects - 2))
    counter = TokenCounter()
    planner = HeuristicPlanner()
    harness = LifecycleHarness(planner, token_counter=counter)
    index = harness.index(messages)
    plan = planner.plan(index, messages)
    checked = harness.check(messages, index, plan.actions)
    print(
        f"history: {name}, {len(messages)} messages, {len(index.objects)} objects, "
        f"{index.active_tokens} tokens; plan: {len(plan.actions)} actions, "
        f"{len(checked.accepted)} accepted, {checked.tokens_saved} tokens saved"
    )

    def bound(history: list[BaseMessage]) -> None:
        list(history)
        for obj in index.objects:
            hashlib.sha256(payload_of(history, obj.indices).encode("utf-8", "surrogatepass"))

    def step(history: list[BaseMessage]) -> object:
        fresh = LifecycleHarness(planner, store=InMemoryStore(), token_counter=counter)
        return fresh.step(history, thread_id="bench")

    def same() -> list[BaseMessage]:
        return messages

    def copied() -> list[BaseMessage]:
        return [m.model_copy() for m in messages]

    n = args.calls
    floor = median_ms(bound, n, same)
    rows = [
        ("index", median_ms(harness.index, n, same)),
        ("plan", median_ms(lambda h: planner.plan(index, h), n, same)),
        ("check_actions", median_ms(lambda h: harness.check(h, index, plan.actions), n, same)),
        ("step", median_ms(step, n, same)),
        ("step, new message objects", median_ms(step, n, copied)),
    ]
    print(f"median of {n} warm calls   {'wall':>9} {'cpu':>9}  {'wall / bound':>12}")
    print(f"{'lower bound (copy + sha256)':>28} {floor[0]:6.3f} ms {floor[1]:6.3f} ms")
    for label, (wall, cpu) in rows:
        print(f"{label:>28} {wall:6.2f} ms {cpu:6.2f} ms  {wall / floor[0]:11.1f}x")
    step_ms = rows[3][1][0]
    verdict = "met" if step_ms <= TARGET_MS else "missed"
    print(f"target: step <= {TARGET_MS:.0f} ms warm: {verdict} ({step_ms:.2f} ms)")


if __name__ == "__main__":
    main()
