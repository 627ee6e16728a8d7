"""How long an async agent's other tasks wait while the hook selects: the event loop's lag.

Many conversations share one event loop (a server running ``ainvoke`` for each user). Each of
``--agents`` tasks repeats: select with the PACMS hook (``await hook.ainvoke(state)``), then
wait ``--model-ms`` for a model that answers over the network (``asyncio.sleep``). A ticker
task sleeps 1 ms in a loop and records how late it wakes: the lag any other coroutine on the
loop (a model call's response, a websocket, a health check) sees.

The reference, measured in the same run on the same calls: the same selection run on the
event loop itself (``hook.invoke(state)`` inside the coroutine), which is what every async
entry point did before its steps ran in the loop's executor.

    python benchmarks/bench_async_loop.py [--agents 40] [--calls 5] [--rounds 75]

Prints, for each way, the ticker's lag (median, p99, max), the model waits' overshoot
(median, p99) and the calls per second; then the ratios of the lags (on-loop / offloaded).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench_hook import conversation
from langchain_core.messages import HumanMessage

from langchain_pacms.integrations import create_pacms_hook


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def one_way(
    select: Callable[[dict[str, Any]], Awaitable[Any]],
    states: list[dict[str, Any]],
    calls: int,
    model_s: float,
) -> dict[str, float]:
    """Run every agent's calls on this loop; the ticker's lags and the model waits' overshoot."""
    lags: list[float] = []
    overshoot: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - started - 0.001)

    async def agent(state: dict[str, Any]) -> None:
        for _ in range(calls):
            await select(state)
            started = time.perf_counter()
            await asyncio.sleep(model_s)
            overshoot.append(time.perf_counter() - started - model_s)

    tick = asyncio.create_task(ticker())
    started = time.perf_counter()
    await asyncio.gather(*(agent(state) for state in states))
    wall = time.perf_counter() - started
    stop.set()
    await tick
    ms = 1000.0
    return {
        "lag_p50": statistics.median(lags) * ms,
        "lag_p99": percentile(lags, 0.99) * ms,
        "lag_max": max(lags) * ms,
        "wait_p50": statistics.median(overshoot) * ms,
        "wait_p99": percentile(overshoot, 0.99) * ms,
        "calls_per_s": len(states) * calls / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=40)
    parser.add_argument("--calls", type=int, default=5, help="selections per agent")
    parser.add_argument("--rounds", type=int, default=75, help="4 messages a round")
    parser.add_argument("--budget", type=int, default=8000)
    parser.add_argument("--model-ms", type=float, default=20.0)
    args = parser.parse_args()

    hook = create_pacms_hook(budget=args.budget)
    base = conversation(args.rounds)
    # each agent's own conversation: a different last question, the same (cached) history
    states = [
        {"messages": [*base, HumanMessage(f"Agent {a}: what changed in round {a % args.rounds}?")]}
        for a in range(args.agents)
    ]
    hook.invoke(states[0])  # warm the embedding cache, as a running service has it

    async def on_loop(state: dict[str, Any]) -> Any:
        return hook.invoke(state)

    results = {}
    for name, select in (("on the loop (reference)", on_loop), ("offloaded", hook.ainvoke)):
        results[name] = asyncio.run(one_way(select, states, args.calls, args.model_ms / 1000))

    print(
        f"{args.agents} agents x {args.calls} calls, {len(states[0]['messages'])} messages, "
        f"budget {args.budget}, model {args.model_ms:g} ms"
    )
    print("way | lag p50 / p99 / max ms | model wait overshoot p50 / p99 ms | calls/s")
    for name, r in results.items():
        print(
            f"{name} | {r['lag_p50']:.1f} / {r['lag_p99']:.1f} / {r['lag_max']:.1f} | "
            f"{r['wait_p50']:.1f} / {r['wait_p99']:.1f} | {r['calls_per_s']:.1f}"
        )
    ref, new = results["on the loop (reference)"], results["offloaded"]
    lag = ref["lag_p99"] / max(new["lag_p99"], 1e-9)
    wait = ref["wait_p50"] / max(new["wait_p50"], 1e-9)
    print(
        f"ratios (on the loop / offloaded): lag p99 {lag:.1f}, model wait p50 {wait:.1f}; "
        f"throughput {new['calls_per_s'] / ref['calls_per_s']:.2f} (offloaded / on the loop)"
    )


if __name__ == "__main__":
    main()
