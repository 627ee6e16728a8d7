"""One task, sixty tool calls: every model call fits the budget, and no read vanishes.

A coding-style agent gets one task and then reads ``src/module_0.py`` ... ``module_59.py``, one
tool call per step, all after the single human message. The pre-model hook keeps each call
under 6,000 tokens (the whole run reaches 43,000) by selecting inside the run: the task, the
newest step and the system prompt stay. With fold stubs (a sidecar store) an earlier read that is
not sent whole goes as its fold stub, a one-line pointer with the names it holds (about 60 tokens
here; the path stays in view in the call), and its exact text is written to a SQLite sidecar
store first. At the end the model asks for the first module it read back with
``recover_context`` and gets the original byte for byte.
Runs offline with a scripted fake model. Needs the ``lifecycle`` extra (the SQLite store):
``pip install "langchain-pacms[lifecycle]"``.

    python examples/tool_loop_fold_stubs.py
"""

from __future__ import annotations

import json
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

from _extras import needs_extra

with needs_extra("lifecycle"):
    from langgraph.store.sqlite import SqliteStore
from _agent_setup import ScriptedChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from pydantic import Field, PrivateAttr

from langchain_pacms.integrations import SelectionConfig, ToolLoopOptions, create_pacms_hook
from langchain_pacms.lifecycle import make_recover_tool
from langchain_pacms.messages import sent_tokens

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent

READS = 60
BUDGET = 6_000
THREAD = "fix-quota"
STUB = re.compile(r'recover_context\("([^"]+)"\)')


def module_text(n: int) -> str:
    """What ``read_file`` returns for ``src/module_<n>.py`` (about 700 tokens)."""
    body = "\n".join(
        f"    # step {k}: check the request, then log how long it took" for k in range(40)
    )
    return f"# src/module_{n}.py\ndef handle_{n}(request):\n{body}\n    return QUOTA_{n}"


@tool
def read_file(path: str) -> str:
    """Read a source file."""
    return module_text(int(path.split("_")[1].split(".")[0]))


class ScriptedReader(ScriptedChatModel):
    """Reads the modules in order, then recovers the first one from its stub and answers."""

    counter: Any = None  # the hook's token counter, to measure each request
    seen: list[int] = Field(default_factory=list)  # tokens of every request it received
    _step: int = PrivateAttr(default=0)

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        self.seen.append(sent_tokens(messages, self.counter))
        step, self._step = self._step, self._step + 1
        if step < READS:
            call = {
                "name": "read_file",
                "args": {"path": f"src/module_{step}.py"},
                "id": f"read_{step}",
            }
            return AIMessage(f"Step {step}: reading module {step}.", tool_calls=[call])
        if step == READS:  # module 0's read is long gone from view: take it back from its stub
            results = {
                m.tool_call_id: str(m.content) for m in messages if isinstance(m, ToolMessage)
            }
            stub = results.get("read_0", "")
            found = STUB.search(stub)
            assert found, f"module 0 should reach the model as a stub, got {stub[:80]!r}"
            call = {
                "name": "recover_context",
                "args": {"object_id": found.group(1)},
                "id": "recover_0",
            }
            return AIMessage("", tool_calls=[call])
        return AIMessage("handle_0 in src/module_0.py returns QUOTA_0.")


def main() -> None:
    folder = Path(tempfile.mkdtemp())
    with SqliteStore.from_conn_string(str(folder / "sidecars.db")) as store:
        store.setup()
        prompt = SystemMessage("You are a careful coder.")  # added after the hook: charged
        hook = create_pacms_hook(
            config=SelectionConfig(
                budget=BUDGET, tool_loop=ToolLoopOptions(sidecar_store=store), prompt=prompt
            )
        )
        counter = hook.selector.token_counter
        model = ScriptedReader(counter=counter)
        with warnings.catch_warnings():  # create_react_agent is deprecated for create_agent
            warnings.simplefilter("ignore")
            agent = create_react_agent(
                model,
                [read_file, make_recover_tool(store)],
                pre_model_hook=hook,
                prompt=prompt,
            )
        config = {"configurable": {"thread_id": THREAD}, "recursion_limit": 4 * READS}
        task = HumanMessage(
            "Read the sixty modules in order, then say which quota the first one returns."
        )
        result = agent.invoke({"messages": [task]}, config)

        history = result["messages"]
        total = sent_tokens(history, counter)
        print(f"history: {len(history)} messages, {total} tokens, one human message")
        print(
            f"model calls: {len(model.seen)}, largest request {max(model.seen)} tokens "
            f"(budget {BUDGET})"
        )
        selection = hook.last_selection
        assert selection is not None
        print(
            f"last call: stub floor {selection.info['stub_floor']}, "
            f"{selection.info['tokens_sent']} tokens sent"
        )
        recovered = next(
            m for m in history if isinstance(m, ToolMessage) and m.tool_call_id == "recover_0"
        )
        payload = json.loads(str(recovered.content))  # the call's text was folded with it
        exact = payload["results"] == module_text(0)
        print(f"module 0 recovered byte for byte: {exact}")
        print(f"answer: {history[-1].content}")


if __name__ == "__main__":
    main()
