"""The same agent built with LangChain v1 ``create_agent`` and ``PACMSMiddleware``.

The middleware selects in ``wrap_model_call``: each model request carries only the selected
messages (the system prompt always, memories as one context message after it), while the agent
state keeps the whole transcript. Runs offline with a deterministic fake model, or with Ollama
when OLLAMA_HOST is set and reachable. Needs the ``middleware`` extra (``langchain>=1``):
``pip install "langchain-pacms[middleware]"``.

    python examples/middleware_agent.py
"""

from __future__ import annotations

import asyncio

from _agent_setup import (
    SCRIPT,
    TOOLS,
    PrintSelections,
    chat_model,
    human,
    memory_store,
    show_request,
)
from _extras import needs_extra

with needs_extra("middleware"):
    from langchain.agents import create_agent
    from langchain.agents.middleware import AgentMiddleware
from langgraph.checkpoint.memory import InMemorySaver

from langchain_pacms.integrations import MemoryOptions
from langchain_pacms.integrations.middleware import PACMSMiddleware


class ShowLastRequest(AgentMiddleware):
    """Remember the messages of the last model request (to print them at the end)."""

    def __init__(self) -> None:
        super().__init__()
        self.last: list = []

    async def awrap_model_call(self, request, handler):
        self.last = [request.system_message, *request.messages]
        return await handler(request)


async def main() -> None:
    model, label = chat_model()
    print(f"model: {label}")
    pacms = PACMSMiddleware(3000, memory=MemoryOptions([("memories", "{user_id}")], limit=5))
    spy = ShowLastRequest()
    agent = create_agent(
        model,
        TOOLS,
        system_prompt="You are Ada's ops assistant.",
        middleware=[pacms, spy],  # pacms is outermost: spy sees the selected request
        store=memory_store(),
        checkpointer=InMemorySaver(),
    )
    config = {
        "configurable": {"thread_id": "demo", "user_id": "ada"},
        "callbacks": [PrintSelections()],
    }
    for text in SCRIPT:
        print(f"\nuser: {text}")
        result = await agent.ainvoke(human(text), config)  # the async path of the middleware
        print(f"assistant: {result['messages'][-1].content}")

    state = (await agent.aget_state(config)).values
    print(f"\nagent state holds {len(state['messages'])} messages: nothing removed")
    print(f"the last model request had {len(spy.last)} messages:")
    show_request(spy.last)


if __name__ == "__main__":
    asyncio.run(main())
