"""Synthetic coding-agent histories and a summary of what checking and stepping them gives.

Shared by ``test_lifecycle_check_frozen.py`` (the summaries must equal the ones frozen in
``tests/fixtures/lifecycle_check_frozen.json``) and the property tests of the rehearsal.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.store.memory import InMemoryStore

from langchain_pacms.lifecycle import CommitRule, HeuristicPlanner, LifecycleHarness
from langchain_pacms.lifecycle.actions import Action
from langchain_pacms.lifecycle.validate import Checked

_DIRS = ["src/pkg", "src/pkg/io", "tests", "docs", "/testbed/lib"]
_WORDS = ["value", "parser", "token", "config", "handler", "cache", "error", "result"]


def _path(rng: random.Random) -> str:
    return f"{rng.choice(_DIRS)}/{rng.choice(_WORDS)}_{rng.randrange(30)}.py"


def _output(rng: random.Random, kind: str) -> str:
    """A tool output of one of the shapes a coding agent sees."""
    if kind == "listing":
        return "\n".join(_path(rng) for _ in range(rng.randrange(3, 60)))
    if kind == "traceback":
        frames = [
            f'  File "/testbed/{_path(rng)}", line {rng.randrange(1, 900)}, in f{k}\n'
            f"    {rng.choice(_WORDS)} = call(ID{rng.randrange(10**4):04}X)"
            for k in range(rng.randrange(1, 12))
        ]
        noise = "\n".join(f"log line {k} ok" for k in range(rng.randrange(0, 80)))
        return f"{noise}\nTraceback (most recent call last):\n" + "\n".join(frames) + "\nError"
    if kind == "file":
        return "\n".join(
            f"{k}\tdef {rng.choice(_WORDS)}_{k}(x):  # see {_path(rng)} port={rng.randrange(9999)}"
            for k in range(rng.randrange(5, 120))
        )
    if kind == "grep":
        return "\n".join(
            f"{_path(rng)}:{rng.randrange(1, 500)}: {rng.choice(_WORDS)} = '{rng.choice(_WORDS)}'"
            for _ in range(rng.randrange(1, 40))
        )
    return rng.choice(["ok", "", "done", "1 passed in 0.01s"])


def history(seed: int, spans: int, turns: float = 0.06) -> list[BaseMessage]:
    """A seeded coding-agent run: a system prompt, a task, then tool spans and some turns.

    ``turns`` is the chance of a user message (and, apart, of an assistant answer) before a span.
    """
    rng = random.Random(seed)
    msgs: list[BaseMessage] = [
        SystemMessage("You are a careful coder. Use bash. Work in /testbed.", id="s"),
        HumanMessage(f"Fix the crash in {_path(rng)} (ticket ABC-{seed})", id="h0"),
    ]
    commands = [f"cat {_path(rng)}", "python reproduce.py", f"grep -rn value {_path(rng)}", "ls"]
    for k in range(spans):
        if rng.random() < turns:
            msgs.append(HumanMessage(f"also check {_path(rng)}", id=f"u{k}"))
        if rng.random() < turns:
            msgs.append(AIMessage(f"Looking at {rng.choice(_WORDS)} next.", id=f"r{k}"))
        width = 2 if rng.random() < 0.12 else 1
        calls = []
        for j in range(width):
            command = rng.choice(commands) if rng.random() < 0.4 else f"cat {_path(rng)}"
            if rng.random() < 0.2:  # a long script argument: a span fold replaces it
                command = "cat > fix.py <<'EOF'\n" + "x = 1  # patch line\n" * rng.randrange(12, 30)
            calls.append({"name": "bash", "args": {"command": command}, "id": f"c{k}_{j}"})
        text = rng.choice(["", "", f"THOUGHT: inspect {_path(rng)} for the {rng.choice(_WORDS)}"])
        msgs.append(AIMessage(text, tool_calls=calls, id=f"a{k}"))
        for j in range(width):
            kind = rng.choice(["listing", "traceback", "file", "file", "grep", "short"])
            body: Any = _output(rng, kind)
            if rng.random() < 0.05:
                body = [{"type": "text", "text": body}]
            mid = None if rng.random() < 0.02 else f"t{k}_{j}"
            msgs.append(ToolMessage(body, tool_call_id=f"c{k}_{j}", id=mid))
    return msgs


def random_actions(seed: int, ids: Sequence[str]) -> list[Action]:
    """Seeded actions on ``ids`` and some unknown ones: every op, both scopes, repeats."""
    rng = random.Random(seed)
    pool = [*ids, "function:tool:999", "conversation:user:1", "conversation:user:2", "system:1"]
    return [
        Action(
            rng.choice(["fold", "fold", "mask", "prune"]),
            rng.choice(pool),
            "r",
            "span" if rng.random() < 0.4 else "output",
        )
        for _ in range(rng.randrange(1, len(ids) + 3))
    ]


def _digest(value: Any) -> str:
    return hashlib.sha256(
        json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode(
            "utf-8", "surrogatepass"
        )
    ).hexdigest()[:16]


def message_view(message: BaseMessage) -> dict[str, Any]:
    """Everything of a message a commit or a rehearsal can change, as plain data."""
    return {
        "type": message.type,
        "id": message.id,
        "content": message.content,
        "kwargs": message.additional_kwargs,
        "calls": getattr(message, "tool_calls", None),
        "call_id": getattr(message, "tool_call_id", None),
    }


def checked_summary(checked: Checked) -> dict[str, Any]:
    """A :class:`Checked` as plain data (messages and payloads by digest)."""
    result = checked.result
    return {
        "accepted": [[a.op, a.target, a.scope] for a in checked.accepted],
        "rejected": [[r.action.op, r.action.target, r.reason] for r in checked.rejected],
        "messages": _digest([message_view(m) for m in result.messages]),
        "replaced": sorted(result.replaced),
        "removed": list(result.removed),
        "sidecars": [
            [s.object_id, s.sha256[:16], _digest([s.kind, s.description])[:8]]
            for s in result.sidecars
        ],
        "tokens": [result.tokens_before, result.tokens_after, checked.tokens_saved],
        "saved": dict(result.saved),
    }


def stepped_summary(
    messages: Sequence[BaseMessage], *, threshold: float, cached_price: float | None
) -> list[Any]:
    """Step a harness over every prefix of ``messages`` as an agent would; what each step gives."""
    store = InMemoryStore()
    harness = LifecycleHarness(
        HeuristicPlanner(),
        store=store,
        commit=CommitRule(threshold=threshold, cached_price=cached_price),
    )
    history: list[BaseMessage] = []
    known: dict[str, str] | None = None
    out: list[Any] = []
    for message in messages:
        history.append(message)
        commit = harness.step(history, thread_id="t", known_ids=known)
        if commit is None:
            out.append([len(history), [[a.op, a.target, a.scope] for a in harness.staged("t")]])
            continue
        history = list(commit.messages)
        known = dict(commit.known_ids)
        out.append(
            {
                "at": len(history),
                "actions": [[a.op, a.target, a.scope] for a in commit.actions],
                "rejected": [[r.action.op, r.action.target, r.reason] for r in commit.rejected],
                "updates": _digest([message_view(m) for m in commit.updates]),
                "messages": _digest([message_view(m) for m in commit.messages]),
                "sidecars": [s.sha256[:16] for s in commit.sidecars],
                "tokens": [commit.tokens_before, commit.tokens_after, commit.reason],
            }
        )
    out.append(harness.stats.to_dict())
    return out


def _checks(name: str, messages: list[BaseMessage], seed: int) -> dict[str, Any]:
    """Check the planner's plan and seeded random actions, on both protections of the history."""
    out: dict[str, Any] = {}
    for boundary in ("turn", "tool"):
        harness = LifecycleHarness(HeuristicPlanner(), commit=CommitRule(boundary=boundary))
        index = harness.index(messages)
        plan = harness.planner.plan(index, messages)
        ids = [o.id for o in index.objects]
        for label, actions in (
            ("plan", list(plan.actions)),
            ("random", random_actions(seed, ids)),
            ("plan+random", [*plan.actions, *random_actions(seed + 1, ids)]),
            ("plan+turns", [*plan.actions, *(Action("prune", i) for i in ids if "conv" in i)]),
        ):
            out[f"{name}/{boundary}/{label}"] = checked_summary(
                harness.check(messages, index, actions)
            )
    return out


def frozen_cases() -> dict[str, Any]:
    """Every summary the frozen fixture holds, computed by the code as it is now."""
    out: dict[str, Any] = {}
    for seed in range(12):
        spans = (4, 12, 30, 60)[seed % 4]
        msgs = history(seed, spans, 0.3 if seed % 3 == 0 else 0.06)
        out.update(_checks(f"seed{seed}", msgs, seed))
        # a history that a commit already edited: folded, masked and pruned objects in it
        harness = LifecycleHarness(HeuristicPlanner(), commit=CommitRule(boundary="tool"))
        commit = harness.step(msgs, thread_id="x")
        if commit is not None:
            out.update(_checks(f"seed{seed}-committed", list(commit.messages), seed + 100))
    for seed, threshold, price in (
        (1, 0.0, None),
        (2, 0.3, None),
        (3, 0.0, 0.1),
        (5, 0.1, None),
        (6, 0.0, None),
    ):
        out[f"steps{seed}/{threshold}/{price}"] = stepped_summary(
            history(seed, 25), threshold=threshold, cached_price=price
        )
    return out
