"""The LLM planner: any LangChain chat model proposes fold / mask / prune on a compact view."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.utils.json import parse_json_markdown
from pydantic import BaseModel, Field

from langchain_pacms._steps import Call, Steps, adrive_calls, drive_calls
from langchain_pacms.lifecycle.actions import Action
from langchain_pacms.lifecycle.analysis import recent_turns
from langchain_pacms.lifecycle.objects import ContextIndex, ContextObject
from langchain_pacms.lifecycle.plan import Plan
from langchain_pacms.lifecycle.validate import Rejection, merge_actions

__all__ = ["LLMPlanner", "PlanAction", "PlanSchema"]

_OPS = ("fold", "mask", "prune")
_PREVIEW = 120
_STARTS = 64  # "{" of a reply's prose tried as the start of the plan object
_RUN_CONFIG: RunnableConfig = {
    "run_name": "pacms_lifecycle_planner",
    "tags": ["nostream", "pacms:lifecycle-planner"],
}

SYSTEM_PROMPT = """\
You manage the working context of a long-running agent. You see an index of context objects \
(user turns, assistant replies, tool calls with their results) and the most recent turns. \
Propose lifecycle actions that cut tokens the agent no longer needs, without losing anything a \
later step depends on.

Actions:
- fold: move the exact body to recoverable storage; the history keeps a stub with a pointer, \
a one-line description and the locators (paths, URLs, ids, numbers) found in it. Use it for \
large, stable bodies: file contents, search results, API responses, long generated reports. \
For a tool call, "scope": "span" also folds the call's own text and long arguments (a script \
it wrote, an edit it made) when the agent no longer needs to see them.
- mask: keep the head and tail, drop the middle for good. Use it only for noisy output such as \
test runs, build logs and command output whose middle nobody will need.
- prune: remove the object for good. Use it only when a later object supersedes it: the same \
call repeated, or the same file read again later.

Hard rules:
1. Never target the system prompt or any object of the latest turn (they are listed as \
protected).
2. Never prune or mask a user message: user instructions and constraints stay. A very large \
old user message may be folded.
3. Live handles: if a tool result holds ids, paths or values that later calls reuse, do not \
mask or prune it; fold it if it is large.
4. A body that a later step may edit or quote exactly (a file that is edited later, a report the \
user may ask to revise) is folded or left alone, never masked.
5. When unsure, leave the object alone. Use only ids from the index.

Answer with one JSON object and nothing else:
{"summary": "<one sentence>", "actions": [{"op": "fold|mask|prune", "target": "<object id>", \
"reason": "<why, short>", "scope": "output|span (fold of a tool call only; default output)"}]}
An empty "actions" list is a valid answer."""


class PlanAction(BaseModel):
    """One proposed action (the model's output schema).

    Example:
        >>> PlanAction(op="fold", target="function:tool:1", reason="stable body").op
        'fold'
    """

    op: Literal["fold", "mask", "prune"] = Field(description="fold, mask or prune")
    target: str = Field(description="An object id from the index")
    reason: str = Field(default="", description="Why, in a few words")
    scope: Literal["output", "span"] = Field(
        default="output",
        description="For a fold of a tool call: 'span' also folds the call's text and long "
        "arguments; 'output' (default) folds its results only",
    )


class PlanSchema(BaseModel):
    """A lifecycle plan: a one-sentence summary and actions on object ids.

    Example:
        >>> PlanSchema(summary="nothing to do").actions
        []
    """

    summary: str = Field(description="One sentence on what the plan does")
    actions: list[PlanAction] = Field(default_factory=list, description="The actions")


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _preview(obj: ContextObject) -> str:
    if obj.kind == "tool" and obj.signature:
        head, _, body = obj.text.partition(obj.signature)
        return f"{_one_line(obj.signature, _PREVIEW)} -> {_one_line(body or head, _PREVIEW)}"
    return _one_line(obj.text, _PREVIEW)


def _json_in(text: str) -> Any:
    """The JSON value in a reply: the whole text or a fenced block, else an object in its prose.

    In prose, the plan is the first well-formed object with an ``"actions"`` key (else the first
    well-formed object); at most ``_STARTS`` of its ``{`` are tried. A value nested too deeply
    to parse is no value.
    """
    try:
        return parse_json_markdown(text, parser=json.loads)
    except (ValueError, RecursionError):
        pass
    decoder, first = json.JSONDecoder(), None
    start = text.find("{")
    for _ in range(_STARTS):
        if start < 0:
            break
        try:
            value, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            start = text.find("{", start + 1)
            continue
        if "actions" in value:  # an object: it starts with "{"
            return value
        first = value if first is None else first
        start = text.find("{", end)  # the objects inside it are not the plan either
    if first is None:
        raise ValueError("no JSON object in the reply")
    return first


class LLMPlanner:
    """A planner backed by any LangChain chat model.

    The model sees a system prompt and a one-line-per-object view (never the agent's messages);
    its call is tagged ``nostream``. Bad output never raises: the plan is rejected when nothing
    usable comes back (a reply nested too deeply included), otherwise invalid actions are
    dropped, with reasons in ``Plan.dropped`` and the summary.

    Args:
        model: The chat model; structured output (:class:`PlanSchema`) is used when it
            supports ``with_structured_output``, else JSON is read from the reply text.
        max_objects: At most this many objects (the largest) are listed in the view.
        name: The planner's name (``Plan.planner``).

    Raises:
        TypeError: If ``model`` is not a ``BaseChatModel`` or ``max_objects`` not an int.
        ValueError: If ``max_objects`` < 1 or ``name`` is empty.

    Example:
        >>> from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
        >>> LLMPlanner(FakeMessagesListChatModel(responses=[])).structured
        False
    """

    def __init__(self, model: BaseChatModel, *, max_objects: int = 200, name: str = "llm") -> None:
        if not isinstance(model, BaseChatModel):
            raise TypeError(f"model must be a LangChain BaseChatModel, got {type(model).__name__}")
        if not isinstance(max_objects, int) or isinstance(max_objects, bool):
            raise TypeError(f"max_objects must be an int, got {type(max_objects).__name__}")
        if max_objects < 1:
            raise ValueError(f"max_objects must be >= 1, got {max_objects}")
        if not isinstance(name, str) or not name:
            raise ValueError("name must be a non-empty string")
        self.model, self.max_objects, self.name = model, max_objects, name
        self._runnable: Runnable[Any, Any]
        try:
            self._runnable = model.with_structured_output(PlanSchema, include_raw=True)
            self.structured = True
        except NotImplementedError:
            self._runnable = model
            self.structured = False

    def view(self, index: ContextIndex) -> str:
        """The compact view of ``index`` that the model reads."""
        listed = [o for o in index.objects if o.kind != "system" and not o.latest]
        protected = [o.id for o in index.objects if o.kind == "system" or o.latest]
        left_out = 0
        if len(listed) > self.max_objects:
            largest = sorted(listed, key=lambda o: (-o.tokens, o.position))[: self.max_objects]
            left_out = len(listed) - len(largest)
            listed = sorted(largest, key=lambda o: o.position)
        lines = ["Objects (id | kind | tokens | state | preview):"]
        lines += [f"{o.id} | {o.kind} | {o.tokens} | {o.state} | {_preview(o)}" for o in listed]
        if not listed:
            lines.append("(none outside the latest turn)")
        if left_out:
            lines.append(f"({left_out} smaller objects not shown)")
        lines.append(f"Protected, never targets: {', '.join(protected) or '(none)'}")
        lines.append(f"Active tokens: {index.active_tokens}")
        lines += ["", "Recent turns:"]
        lines += [f"[{o.id}] {text}" for o, text in recent_turns(index, max_chars=600)]
        return "\n".join(lines)

    def prompt(self, index: ContextIndex) -> list[BaseMessage]:
        """The two messages sent to the model (the agent's own messages are never sent)."""
        return [SystemMessage(SYSTEM_PROMPT), HumanMessage(self.view(index))]

    def _data(self, output: Any) -> Any:
        """The plan as plain data from the model's output, or raise ValueError."""
        if isinstance(output, Mapping) and "raw" in output:  # structured, include_raw=True
            parsed = output.get("parsed")
            if isinstance(parsed, BaseModel):
                return parsed.model_dump()
            raw = output.get("raw")
            calls = getattr(raw, "tool_calls", None) or []
            if calls:
                return calls[0].get("args")
            output = raw
        if isinstance(output, BaseMessage):
            return _json_in(output.text)  # the reply's text blocks, not its reasoning
        raise ValueError(f"unexpected model output of type {type(output).__name__}")

    def _interpret(self, output: Any, index: ContextIndex) -> Plan:
        try:
            data = self._data(output)
        except ValueError as err:
            return Plan.rejection(f"the reply holds no readable plan: {err}", planner=self.name)
        if not isinstance(data, Mapping) or not isinstance(data.get("actions", []), list):
            why = "the reply is not an object with an 'actions' list"
            return Plan.rejection(why, planner=self.name)
        items = data.get("actions", [])
        checked = [self._check(item, index) for item in items]
        dropped = [Rejection(a, problem) for a, problem in checked if problem is not None]
        # two actions on one object: the most conservative stays (fold, then mask, then prune)
        actions, overlaps = merge_actions([a for a, problem in checked if problem is None])
        dropped += overlaps
        said = [f"{r.action.target}: {r.reason}" if r.action.target else r.reason for r in dropped]
        if items and not actions:
            unknown = sum(r.reason == "unknown id" for r in dropped)
            if unknown == len(items):
                why = f"all {unknown} target ids are unknown (not in the index)"
            else:
                why = "no usable action: " + "; ".join(said[:5])
            return Plan.rejection(why, planner=self.name)
        summary = _one_line(str(data.get("summary") or ""), 300)
        if dropped:
            summary += f" [dropped {len(dropped)}: {'; '.join(said[:5])}]"
        return Plan(summary.strip(), tuple(actions), planner=self.name, dropped=tuple(dropped))

    @staticmethod
    def _check(item: Any, index: ContextIndex) -> tuple[Action, str | None]:
        """The action ``item`` proposes, and why it is dropped (``None``: it is kept)."""
        fields: Mapping[str, Any] = item if isinstance(item, Mapping) else {}
        # as the model gave them: the action is dropped when they are not valid
        op: Any = fields.get("op")
        scope: Any = fields.get("scope") or "output"
        target = str(fields.get("target", ""))
        action = Action(op, target, _one_line(str(fields.get("reason") or ""), 200), scope)
        if not isinstance(item, Mapping):
            return action, "an action is not an object"
        obj = index.by_id.get(target)
        if obj is None:
            return action, "unknown id"
        if op not in _OPS:
            return action, f"unknown op {op!r}"
        if obj.kind == "system":
            return action, "the system prompt is never a target"
        if obj.latest:
            return action, "part of the latest turn"
        if obj.kind == "user" and op != "fold":
            return action, "a user message is only ever folded"
        if op != "prune" and obj.state != "active":
            return action, f"already {obj.state}"
        if scope not in ("output", "span"):
            return action, f"unknown scope {scope!r}"
        if scope == "span" and (op != "fold" or obj.kind != "tool"):
            return action, "scope 'span' is for a fold of a tool call only"
        return action, None

    def _planning(self, index: ContextIndex) -> Steps[Plan]:
        run = self._runnable
        try:
            config = {"config": _RUN_CONFIG}
            output = yield Call(run.invoke, run.ainvoke, (self.prompt(index),), config)
        except Exception as err:
            return Plan.rejection(f"model raised {type(err).__name__}: {err}", planner=self.name)
        return self._interpret(output, index)

    def plan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        """Ask the model for a plan (from ``index`` only); a rejection when it cannot give one."""
        return drive_calls(self._planning(index))

    async def aplan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        """Async twin of :meth:`plan` (the model is called with ``ainvoke``)."""
        return await adrive_calls(self._planning(index), offload=True)
