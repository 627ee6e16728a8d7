"""Shared pieces of the agent examples: the model (Ollama if reachable, else an offline fake),
tools with large outputs, a memory store and a printer for the ``pacms_selection`` events.
"""

from __future__ import annotations

import os
import re
import urllib.request
from typing import Any

from _extras import needs_extra
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.store.memory import InMemoryStore

_WORD = re.compile(r"[a-z0-9-]+")
_STUB = re.compile(r'recover_context\("([^"]+)"\)')


def _text(message: BaseMessage) -> str:
    return str(message.content)


# -- tools whose outputs are large ---------------------------------------------------------------
def service_log(service: str, lines: int = 120, error_at: int = 77) -> str:
    """The last ``lines`` lines of a service's log: requests that went well, one error."""
    log = [
        f"2025-03-0{i % 9 + 1} 12:{i % 60:02d} INFO {service}: request ok in {i % 37} ms"
        for i in range(lines)
    ]
    log[error_at] = (
        f"2025-03-04 12:{error_at % 60:02d} ERROR {service}: disk quota exceeded on /var/data"
    )
    return "\n".join(log)


def order_list(customer: str, count: int = 100) -> str:
    """A customer's ``count`` orders, one a line."""
    return "\n".join(f"order {customer}-{n:04d}: 3 items, shipped" for n in range(count))


@tool
def read_service_log(service: str) -> str:
    """Return the last 120 lines of a service's log."""
    return service_log(service)


@tool
def list_orders(customer: str) -> str:
    """List every order of a customer (long)."""
    return order_list(customer)


TOOLS = [read_service_log, list_orders]


# -- memories -----------------------------------------------------------------------------------
def memory_store() -> InMemoryStore:
    store = InMemoryStore()
    for key, text in {
        "pref": "Ada prefers short answers with bullet points.",
        "team": "Ada is on the payments team.",
        "pet": "Ada's cat is called Turing.",
        "oncall": "Ada is on call for the billing service this week.",
        "editor": "Ada uses Emacs.",
    }.items():
        store.put(("memories", "ada"), key, {"content": text})
    return store


# -- the model ----------------------------------------------------------------------------------
def ollama_model() -> BaseChatModel | None:
    """A ChatOllama when ``OLLAMA_HOST`` is set and answers within a second."""
    host = os.environ.get("OLLAMA_HOST")
    if not host:
        return None
    base = host if host.startswith("http") else f"http://{host}"
    try:
        with urllib.request.urlopen(f"{base.rstrip('/')}/api/tags", timeout=1):
            pass
    except OSError:
        return None
    with needs_extra("ollama"):
        from langchain_ollama import ChatOllama

    return ChatOllama(model=os.environ.get("PACMS_OLLAMA_MODEL", "llama3.2"), base_url=base)


class ScriptedChatModel(BaseChatModel):
    """A deterministic chat model for the examples: ``_reply`` decides each message.

    Tools bound to it are ignored (the script knows them); subclasses write ``_reply``.
    """

    @property
    def _llm_type(self) -> str:
        return type(self).__name__

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        raise NotImplementedError

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])


class OfflineAgentModel(ScriptedChatModel):
    """A deterministic stand-in for a tool-calling chat model.

    New question naming a log or orders: call the matching tool. A question asking for something
    exact while a fold stub is in context: call ``recover_context`` on it. After a tool result:
    summarise it in one line. Otherwise: answer with the sentence of the context it received
    that shares the most words with the question (so the answer shows what the selection kept).
    """

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            lines = str(last.content).splitlines()
            errors = [ln for ln in lines if "ERROR" in ln]
            return AIMessage(
                f"{last.name} returned {len(lines)} lines"
                + (f"; notable: {errors[0]}" if errors else ".")
            )
        question = str(last.content).lower()
        stub = next((m.group(1) for m in map(_STUB.search, map(_text, messages)) if m), None)
        if "exact" in question and stub is not None:  # the body was folded: read it back
            return AIMessage(
                "",
                tool_calls=[
                    {"name": "recover_context", "args": {"object_id": stub}, "id": "call_recover"}
                ],
            )
        if "for the record" in question:
            return AIMessage("Noted.")
        if "log" in question:
            service = "billing" if "billing" in question else "payments"
            return AIMessage(
                "",
                tool_calls=[
                    {"name": "read_service_log", "args": {"service": service}, "id": "call_log"}
                ],
            )
        if "orders" in question:
            return AIMessage(
                "",
                tool_calls=[
                    {"name": "list_orders", "args": {"customer": "ACME"}, "id": "call_orders"}
                ],
            )
        words = set(_WORD.findall(question)) - {"what", "is", "my", "the", "a", "was", "did"}
        best, score = "I don't know.", 0
        for message in messages[:-1]:
            if isinstance(message, ToolMessage):
                continue
            for sentence in re.split(r"(?<=[.!?])\s+|\n", str(message.content)):
                overlap = len(words & set(_WORD.findall(sentence.lower())))
                if overlap > score:
                    best, score = sentence.strip("- "), overlap
        return AIMessage(f"From my context: {best}")


def chat_model() -> tuple[BaseChatModel, str]:
    model = ollama_model()
    if model is not None:
        return model, f"ChatOllama ({model.model})"
    return OfflineAgentModel(), "offline fake model (set OLLAMA_HOST to use Ollama)"


# -- visibility ---------------------------------------------------------------------------------
class PrintSelections(BaseCallbackHandler):
    """Print one line per model call from the ``pacms_selection`` custom event."""

    def __init__(self) -> None:
        self.calls = 0

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        if name != "pacms_selection":
            return
        self.calls += 1
        kinds = ", ".join(f"{k}={v}" for k, v in sorted(data["kept_by_kind"].items()))
        print(
            f"  [pacms] model call {self.calls}: kept {data['kept']}/"
            f"{data['kept'] + data['dropped']} candidates ({kinds}); "
            f"{data['tokens_kept']}/{data['tokens_total']} tokens, budget {data['budget']}, "
            f"strategy {data['strategy']}{', FELL BACK' if data['fell_back'] else ''}"
            f"{' (the current turn alone exceeds it)' if data['over_budget'] else ''}"
        )


SCRIPT = [
    "Hi! For the record: the billing database password rotation id is ROT-5521.",
    "Please read the billing log and tell me what is wrong.",
    "Now list the orders of ACME.",
    "Read the payments log too.",
    "What is the billing database password rotation id?",
]


def show_request(messages: list[BaseMessage]) -> None:
    """Print a compact view of what the model received."""
    for m in messages:
        text = str(m.content).replace("\n", " | ")
        if isinstance(m, AIMessage) and m.tool_calls:
            text = " ".join(f"-> {c['name']}({c['args']})" for c in m.tool_calls)
        print(f"    {type(m).__name__:<14} {text[:90]}{'...' if len(text) > 90 else ''}")


def human(text: str) -> dict[str, list[HumanMessage]]:
    return {"messages": [HumanMessage(text)]}
