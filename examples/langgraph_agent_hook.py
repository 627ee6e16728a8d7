"""A LangGraph ReAct agent whose every model call goes through the PACMS pre-model hook.

Shows: tools with large outputs (hundreds of log lines) that would crowd the context, memories
in an InMemoryStore pooled with the conversation, and an early fact that is still found at the
end under a 3,000-token budget. The checkpoint keeps the whole transcript; only what the model
sees is selected. Runs offline with a deterministic fake model, or with Ollama when OLLAMA_HOST is
set and reachable. Needs no extra (a base install runs it); the Ollama model needs the ``ollama``
extra (``pip install "langchain-pacms[ollama]"``).

    python examples/langgraph_agent_hook.py
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

from _agent_setup import SCRIPT, TOOLS, PrintSelections, chat_model, human, memory_store
from langchain_core.messages import SystemMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_pacms.integrations import MemoryOptions, create_pacms_hook

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent


def main() -> None:
    model, label = chat_model()
    print(f"model: {label}")
    log_path = Path(tempfile.mkdtemp()) / "selections.jsonl"
    hook = create_pacms_hook(
        3000,  # what the model may see per call
        memory=MemoryOptions([("memories", "{user_id}")], limit=5),  # from config["configurable"]
        log=log_path,
    )
    with warnings.catch_warnings():  # create_react_agent is deprecated in favour of create_agent
        warnings.simplefilter("ignore")
        agent = create_react_agent(
            model,
            TOOLS,
            pre_model_hook=hook,
            store=memory_store(),
            checkpointer=InMemorySaver(),
            prompt=SystemMessage("You are Ada's ops assistant."),
        )
    config = {
        "configurable": {"thread_id": "demo", "user_id": "ada"},
        "callbacks": [PrintSelections()],
    }
    for text in SCRIPT:
        print(f"\nuser: {text}")
        result = agent.invoke(human(text), config)
        print(f"assistant: {result['messages'][-1].content}")

    state = agent.get_state(config).values
    total = sum(hook.selector.token_counter(str(m.content)) for m in state["messages"])
    print(f"\ncheckpoint holds {len(state['messages'])} messages ({total} tokens): nothing removed")
    selection = hook.last_selection
    assert selection is not None
    memories = [c.text for c in selection.kept if c.kind == "memory"]
    print(
        f"last call kept {len(selection.kept_ids)}/{len(selection.candidates)} candidates, "
        f"{selection.tokens_kept}/{selection.tokens_total} tokens"
    )
    print("memories sent as one 'Relevant memories' message:")
    for text in memories:
        print(f"  - {text}")
    dropped = [c for c in selection.candidates if c.id in set(selection.dropped_ids)]
    print(
        "left out of the last call: "
        + ", ".join(f"{c.kind} {c.id} ({selection.tokens[c.id]} tokens)" for c in dropped)
    )
    print(f"selection log: {len(log_path.read_text().splitlines())} records in {log_path}")


if __name__ == "__main__":
    main()
