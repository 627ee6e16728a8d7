"""The context lifecycle and per-call selection in one ``create_agent`` agent.

``LifecycleMiddleware`` edits the agent *state*: at a turn boundary the heuristic planner
proposes folds, masks and prunes, the harness checks them and commits once they remove at least
30% of the history (so the provider's prompt cache breaks rarely). A folded tool output stays in
the history as a stub with a recovery pointer; its exact bytes are in the store, and the
middleware's ``recover_context`` tool reads them back. ``PACMSMiddleware`` then picks each model
call's context from that state under a token budget. Order: lifecycle first, selection second.
Runs offline with a deterministic fake model. Needs the ``middleware`` extra:
``pip install "langchain-pacms[middleware]"``.

    python examples/lifecycle_with_selection.py
"""

from __future__ import annotations

from typing import Any

from _extras import needs_extra

with needs_extra("middleware"):
    from langchain.agents import create_agent
from _agent_setup import TOOLS, PrintSelections, chat_model, human
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from langchain_pacms.integrations import PACMSMiddleware
from langchain_pacms.lifecycle import (
    COMMIT_EVENT,
    RECOVER_TOOL_NAME,
    HeuristicPlanner,
    LifecycleMiddleware,
    PlannerTuning,
)
from langchain_pacms.tokens import TokenCounter

SCRIPT = [
    "Please read the billing log and tell me what is wrong.",
    "Now list the orders of ACME.",
    "Read the payments log too.",
    "What was the exact ERROR line of the billing log?",
]


class PrintCommits(PrintSelections):
    """Also print one line per lifecycle commit."""

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        if name == COMMIT_EVENT:
            print(
                f"  [lifecycle] commit ({data['reason']}): {data['actions']}; "
                f"history {data['tokens_before']} -> {data['tokens_after']} tokens"
            )
        super().on_custom_event(name, data, **kwargs)


def main() -> None:
    model, label = chat_model()
    print(f"model: {label}")
    counter = TokenCounter()  # one counter for both layers, so they count alike
    lifecycle = LifecycleMiddleware(
        planner=HeuristicPlanner(tuning=PlannerTuning(keep_recent=1)),
        store=InMemoryStore(),
        token_counter=counter,
    )
    agent = create_agent(
        model,
        TOOLS,
        system_prompt="You are Ada's ops assistant.",
        middleware=[lifecycle, PACMSMiddleware(3000)],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "ops-1"}, "callbacks": [PrintCommits()]}
    for text in SCRIPT:
        print(f"\nuser: {text}")
        result = agent.invoke(human(text), config)
        print(f"assistant: {result['messages'][-1].content}")

    messages = agent.get_state(config).values["messages"]
    stats = lifecycle.harness.stats
    print(
        f"\nlifecycle: {stats.commits} commit(s), {stats.tokens_removed} tokens removed from "
        f"the state, {stats.actions_rejected} action(s) rejected"
    )
    for m in messages:
        if isinstance(m, ToolMessage):
            print(f"  {m.name:<18} {str(m.content)[:100].replace(chr(10), ' | ')}")
    (recovered,) = [m for m in messages if m.name == RECOVER_TOOL_NAME]
    original = TOOLS[0].invoke({"service": "billing"})
    same = recovered.content == original
    print(f"recover_context returned the original log byte for byte: {same}")


if __name__ == "__main__":
    main()
