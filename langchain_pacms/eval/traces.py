"""Load real agent traces (tau-bench, mini-swe-agent, SWE-agent) as LangChain messages.

Every loaded message carries an id (``"<session>:<n>"``), every tool call an id that its
``ToolMessage`` answers. Tool calls that a trace stores as text (SWE-agent ``action`` strings)
become calls to a ``bash`` tool with ``{"command": <action>}``. A session that cannot be read
is returned in the ``problems`` list with its reason; nothing is skipped silently.

Example:
    >>> s = session_from_openai("demo", [
    ...     {"role": "user", "content": "hi"},
    ...     {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
    ...      "function": {"name": "ls", "arguments": "{}"}}]},
    ...     {"role": "tool", "tool_call_id": "c", "content": "a.txt"}])
    >>> [type(m).__name__ for m in s.messages], s.tool_spans
    (['HumanMessage', 'AIMessage', 'ToolMessage'], 1)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

DATASETS = ("tau-bench", "mini-swe-agent", "swe-agent")
BASH_TOOL = "bash"


@dataclass(frozen=True)
class TraceSession:
    """One agent session as LangChain messages.

    Example:
        >>> TraceSession("s", "tau-bench", []).tool_spans
        0
    """

    session_id: str
    dataset: str
    messages: list[BaseMessage] = field(default_factory=list)

    @property
    def tool_spans(self) -> int:
        """Number of tool outputs in the session.

        Example:
            >>> TraceSession("s", "x", [ToolMessage("o", tool_call_id="c")]).tool_spans
            1
        """
        return sum(isinstance(m, ToolMessage) for m in self.messages)


@dataclass
class LoadResult:
    """Sessions read from one data set, and the ones that could not be read with why.

    Example:
        >>> LoadResult("swe-agent").problems
        []
    """

    dataset: str
    sessions: list[TraceSession] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for item in content:
            if isinstance(item, Mapping):
                parts.append(str(item.get("text", "")))
            else:
                parts.append(str(item))
        return "\n".join(parts)
    return str(content)


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError) as exc:
        raise ValueError(f"tool call arguments are not JSON: {raw!r:.60}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"tool call arguments are not a JSON object: {raw!r:.60}")
    return value


class _Builder:
    """Assign ids and pair each tool output with the calls of the assistant message before it."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.messages: list[BaseMessage] = []
        self.pending: list[str] = []

    def _id(self) -> str:
        return f"{self.session_id}:{len(self.messages)}"

    def system(self, text: str) -> None:
        self.messages.append(SystemMessage(text, id=self._id()))

    def user(self, text: str) -> None:
        self.messages.append(HumanMessage(text, id=self._id()))

    def assistant(self, text: str, calls: Sequence[tuple[str, dict[str, Any]]]) -> None:
        n = len(self.messages)
        tool_calls = [
            {
                "name": name,
                "args": args,
                "id": f"{self.session_id}:{n}:call{k}",
                "type": "tool_call",
            }
            for k, (name, args) in enumerate(calls)
        ]
        self.messages.append(AIMessage(text, tool_calls=tool_calls, id=self._id()))
        self.pending = [str(c["id"]) for c in tool_calls]

    def tool(self, text: str, name: str = "") -> None:
        if not self.pending:
            raise ValueError(f"tool output at message {len(self.messages)} answers no call")
        call_id = self.pending.pop(0)
        self.messages.append(ToolMessage(text, tool_call_id=call_id, name=name, id=self._id()))

    def done(self, dataset: str) -> TraceSession:
        return TraceSession(self.session_id, dataset, self.messages)


def session_from_openai(
    session_id: str, raw: Iterable[Mapping[str, Any]], dataset: str = "openai"
) -> TraceSession:
    """Convert OpenAI-format chat messages; unknown roles (e.g. ``exit``) are left out.

    Tool outputs are paired with the assistant message just before them, in call order, not by
    the trace's call ids (tau-bench repeats them); fresh ids are given.

    Example:
        >>> session_from_openai("x", [{"role": "system", "content": "p"}]).messages[0].id
        'x:0'
    """
    b = _Builder(session_id)
    for m in raw:
        role = m.get("role")
        if role == "system":
            b.system(_text(m.get("content")))
        elif role == "user":
            b.user(_text(m.get("content")))
        elif role == "assistant":
            calls = [
                (str(c["function"]["name"]), _args(c["function"].get("arguments")))
                for c in m.get("tool_calls") or []
            ]
            b.assistant(_text(m.get("content")), calls)
        elif role == "tool":
            b.tool(_text(m.get("content")), str(m.get("name") or ""))
    return b.done(dataset)


def load_tau_bench(path: Path) -> LoadResult:
    """Read the tau-bench historical trajectory file (one JSON array of sessions).

    Example:
        >>> load_tau_bench(Path("/nonexistent.json")).problems[0][0]
        '/nonexistent.json'
    """
    result = LoadResult("tau-bench")
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        result.problems.append((str(path), f"unreadable: {exc}"))
        return result
    for k, item in enumerate(data):
        sid = f"task{item.get('task_id', '?')}-trial{item.get('trial', '?')}-{k}"
        try:
            result.sessions.append(session_from_openai(sid, item["traj"], "tau-bench"))
        except (KeyError, TypeError, ValueError) as exc:
            result.problems.append((sid, f"{type(exc).__name__}: {exc}"))
    return result


def load_mini_swe_agent(folder: Path) -> LoadResult:
    """Read every ``*.traj.json`` under a mini-swe-agent run folder.

    Example:
        >>> load_mini_swe_agent(Path("/nonexistent")).sessions
        []
    """
    result = LoadResult("mini-swe-agent")
    for file in sorted(Path(folder).rglob("*.traj.json")):
        sid = file.name.removesuffix(".traj.json")
        try:
            data = json.loads(file.read_text())
            result.sessions.append(session_from_openai(sid, data["messages"], "mini-swe-agent"))
        except (OSError, KeyError, TypeError, ValueError) as exc:
            result.problems.append((sid, f"{type(exc).__name__}: {exc}"))
    return result


def _swe_agent_session(sid: str, data: Mapping[str, Any]) -> TraceSession:
    history = data.get("history") or []
    steps = data.get("trajectory") or []
    if not steps:
        if not any(m.get("tool_calls") for m in history):
            raise ValueError("no trajectory steps and no tool calls in history")
        return session_from_openai(sid, history, "swe-agent")
    b = _Builder(sid)
    for m in history:
        role = m.get("role")
        if role == "assistant":
            break
        if m.get("is_demo"):
            continue
        if role == "system":
            b.system(_text(m.get("content")))
        elif role == "user":
            b.user(_text(m.get("content")))
    for step in steps:
        b.assistant(_text(step.get("thought")), [(BASH_TOOL, {"command": str(step["action"])})])
        b.tool(_text(step.get("observation")), BASH_TOOL)
    return b.done("swe-agent")


def load_swe_agent(folder: Path) -> LoadResult:
    """Read every ``*.traj`` under a SWE-agent folder; actions become ``bash`` tool calls.

    The uniform ``trajectory[i].action`` / ``.observation`` pairs are used; the system prompt and
    the task come from ``history`` (demonstration messages are left out). A file with no steps
    falls back to its ``history`` function calls.

    Example:
        >>> load_swe_agent(Path("/nonexistent")).problems
        []
    """
    result = LoadResult("swe-agent")
    root = Path(folder)
    for file in sorted(root.rglob("*.traj")):
        sid = str(file.relative_to(root).with_suffix(""))
        try:
            result.sessions.append(_swe_agent_session(sid, json.loads(file.read_text())))
        except (OSError, KeyError, TypeError, ValueError) as exc:
            result.problems.append((sid, f"{type(exc).__name__}: {exc}"))
    return result


def load_all(root: Path) -> dict[str, LoadResult]:
    """Load the three sets under ``agent-traces/``; a missing set is one problem entry.

    Example:
        >>> sorted(load_all(Path("/nonexistent")))
        ['mini-swe-agent', 'swe-agent', 'tau-bench']
    """
    root = Path(root)
    return {
        "tau-bench": load_tau_bench(root / "tau-bench-airline-gpt4o" / "gpt-4o-airline.json"),
        "mini-swe-agent": _require(
            load_mini_swe_agent, root / "mini-swe-agent-deepseek-swebench", "mini-swe-agent"
        ),
        "swe-agent": _require(load_swe_agent, root / "swe-agent-demos", "swe-agent"),
    }


def _require(loader: Any, folder: Path, name: str) -> LoadResult:
    if not folder.is_dir():
        return LoadResult(name, problems=[(str(folder), "folder missing")])
    result: LoadResult = loader(folder)
    return result
