"""A coding agent's single-task tool loop with the context lifecycle at its defaults.

``create_agent`` runs a shell tool over a small synthetic repository: the agent lists files,
reads modules, runs a reproduction script twice and greps, all in one user turn, as a coding
agent does. ``LifecycleMiddleware()`` is added with no arguments: once the run has gone a few
tool steps without a user turn it commits at tool boundaries, folding old outputs into a
sidecar store (a stub with a recovery pointer stays), masking noisy logs and pruning superseded
reads. At the end the model asks ``recover_context`` for an early listing and gets it back byte
for byte. Offline: a scripted model stands in for the LLM.

Needs the ``middleware`` extra (LangChain v1): ``pip install "langchain-pacms[middleware]"``.

    python examples/coding_agent_defaults.py
"""

from __future__ import annotations

import re
from typing import Any

from _extras import needs_extra

with needs_extra("middleware"):
    from langchain.agents import create_agent

from _agent_setup import ScriptedChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from langchain_pacms.lifecycle import LifecycleMiddleware
from langchain_pacms.messages import LIFECYCLE_KEY

REPO = {
    f"src/app/module_{n}.py": "\n".join(
        [f'"""Module {n} of the app."""', "", "import os", ""]
        + [
            f"def handler_{n}_{i}(request):\n    return {{'status': {200 + i}}}\n"
            for i in range(30)
        ]
    )
    for n in range(6)
}
LISTING = "\n".join(
    [*sorted(REPO), *(f"tests/app/test_module_{n}_{k}.py" for n in range(6) for k in range(8))]
)
TRACEBACK = """Traceback (most recent call last):
  File "/repo/reproduce.py", line 3, in <module>
    main()
  File "/repo/src/app/module_4.py", line 41, in handler_4_9
    return {'status': 209}
KeyError: 'status'
""" + "\n".join(f"DEBUG request {i} took {i % 17} ms" for i in range(120))


@tool
def bash(command: str) -> str:
    """Run a shell command in the repository and return its output."""
    if command.startswith("find"):
        return LISTING
    if command.startswith("cat "):
        return REPO.get(command.split(maxsplit=1)[1], "cat: no such file")
    if command.startswith("python reproduce.py"):
        return TRACEBACK
    if command.startswith("grep"):
        pattern = command.split()[-2].strip("'\"")
        return "\n".join(
            f"{path}:{n + 1}:{line}"
            for path, text in REPO.items()
            for n, line in enumerate(text.splitlines())
            if pattern in line
        )
    return f"ran: {command}"


PLAN = [
    "find src -name '*.py'",
    *(f"cat src/app/module_{n}.py" for n in range(6)),
    "python reproduce.py",
    "grep -n 'handler_4_9' src",
    "python reproduce.py",
]
_STUB = re.compile(r'recover_context\("([^"]+)"\)')


class CodingModel(ScriptedChatModel):
    """Runs the plan's commands one by one, then recovers the first listing, then answers."""

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        done = sum(1 for m in messages if isinstance(m, AIMessage) and m.tool_calls)
        if done < len(PLAN):
            call = {"name": "bash", "args": {"command": PLAN[done]}, "id": f"call_{done}"}
            return AIMessage("", tool_calls=[call])
        stub = next((m.group(1) for m in map(_STUB.search, map(_text, messages)) if m), None)
        asked = any(isinstance(m, ToolMessage) and m.name == "recover_context" for m in messages)
        if stub is not None and not asked:  # read the first folded output back
            call = {"name": "recover_context", "args": {"object_id": stub}, "id": "call_r"}
            return AIMessage("", tool_calls=[call])
        return AIMessage("The KeyError comes from handler_4_9 in src/app/module_4.py.")


def _text(message: BaseMessage) -> str:
    return str(message.content)


def states(messages: list[BaseMessage]) -> dict[str, list[str]]:
    """Object ids by lifecycle state, from the marks in the final history."""
    seen: dict[str, list[str]] = {"folded": [], "masked": []}
    for m in messages:
        mark = m.additional_kwargs.get(LIFECYCLE_KEY) or {}
        state, obj = mark.get("state"), mark.get("object")
        if state in seen and obj not in seen[state]:
            seen[state].append(obj)
    return seen


def main() -> dict[str, Any]:
    lifecycle = LifecycleMiddleware()  # the defaults: nothing to choose
    agent = create_agent(CodingModel(), [bash], middleware=[lifecycle])
    out = agent.invoke({"messages": [HumanMessage("Fix the KeyError that reproduce.py raises.")]})
    messages = out["messages"]
    stats = lifecycle.harness.stats
    marked = states(messages)
    pruned = stats.actions_accepted - len(marked["folded"]) - len(marked["masked"])
    print(
        f"tool steps: {len(PLAN)}; commits: {stats.commits}; tokens removed: {stats.tokens_removed}"
    )
    print(f"folded: {', '.join(marked['folded']) or 'none'}")
    print(f"masked: {', '.join(marked['masked']) or 'none'}")
    print(f"other accepted actions (prunes and superseded stubs): {max(pruned, 0)}")
    asked = next(
        (
            m
            for m in messages
            if isinstance(m, AIMessage)
            and m.tool_calls
            and m.tool_calls[0]["name"] == "recover_context"
        ),
        None,
    )
    recovered = next(
        (m for m in messages if isinstance(m, ToolMessage) and m.name == "recover_context"), None
    )
    exact = False
    if asked is not None and recovered is not None:
        object_id = asked.tool_calls[0]["args"]["object_id"]
        number = int(object_id.rsplit(":", 1)[1])
        original = bash.invoke({"command": PLAN[number - 1]})
        exact = recovered.content == original
        print(
            f"recover_context({object_id!r}) -> {PLAN[number - 1]!r}: "
            + ("byte-exact" if exact else "NOT exact")
        )
    else:
        print("recover_context: nothing was folded, nothing to recover")
    print(f"answer: {messages[-1].content}")
    return {"commits": stats.commits, "folded": marked["folded"], "exact": exact}


if __name__ == "__main__":
    main()
