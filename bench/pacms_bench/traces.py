"""Load recorded tool-calling agent runs as LangChain messages (for the lifecycle replay).

Three sets under ``../shared/data/agent-traces/`` (each folder's ``SOURCE.md`` gives schema and
licence):

* ``tau-bench-airline-gpt4o/gpt-4o-airline.json``: 200 customer-service sessions (OpenAI chat
  format). Call ids repeat inside sessions, so each ``tool`` message is paired with the call of
  the assistant message just before it and every call gets a fresh id;
* ``mini-swe-agent-deepseek-swebench/**.traj.json``: 31 SWE-bench shell sessions with OpenAI
  ``tool_calls`` (the final ``exit`` message, the submitted patch, is not part of the run);
* ``swe-agent-demos/**.traj``: 22 SWE-agent runs; each ``trajectory`` step (an action string
  and its observation) becomes a ``bash`` tool call with its result, after the task message (the
  first user message of ``history``, or the step's own messages).

A data set may also have a development-only folder (:data:`DEV_ONLY`): ``mini-swe`` has
``mini-swe-agent-deepseek-dev/**.traj.json`` (40 more sessions of the same agent, same schema).
Its sessions are marked ``dev_only`` and named by their path under the folder (the same task
appears in two runs), so they never take the name of another session; a replay puts them in its
development split whatever its seed, and never in its test split.

Every message gets an id (``<session>:<n>``), as the lifecycle requires. A file or session that
cannot be read is reported with the reason, never skipped silently.

Example:
    >>> sessions, problems = load_tau_bench(Path("no/such/file.json"))
    >>> sessions, problems[0][0]
    ([], 'no/such/file.json')
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from pacms_bench.paths import shared_data_dir

__all__ = [
    "DATASETS",
    "DEV_ONLY",
    "TraceSession",
    "default_traces_dir",
    "load_mini_swe",
    "load_swe_agent",
    "load_tau_bench",
    "load_traces",
]

Problem = tuple[str, str]
"""``(file or session, reason)`` for what could not be read."""


@dataclass(frozen=True)
class TraceSession:
    """One recorded run.

    Attributes:
        dataset: ``tau-bench``, ``mini-swe`` or ``swe-agent``.
        name: Session name (file stem, or task and trial).
        messages: The run as LangChain messages, every one with an id.
        dev_only: The session is for development only (choosing settings and rules), never
            for a reported test figure.
    """

    dataset: str
    name: str
    messages: tuple[BaseMessage, ...]
    dev_only: bool = False

    @property
    def tool_calls(self) -> int:
        """Number of tool results in the run."""
        return sum(isinstance(m, ToolMessage) for m in self.messages)


def default_traces_dir() -> Path:
    """``../shared/data/agent-traces`` next to the repository checkout (may not exist)."""
    return shared_data_dir() / "agent-traces"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content
        )
    return "" if content is None else str(content)


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        parsed = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {"input": str(raw)}
    return parsed if isinstance(parsed, dict) else {"input": parsed}


def _openai_messages(name: str, raw: Iterable[Mapping[str, Any]]) -> list[BaseMessage]:
    """OpenAI-format chat messages -> LangChain messages; tool results pair with the call before."""
    out: list[BaseMessage] = []
    pending: list[str] = []
    for n, m in enumerate(raw):
        mid = f"{name}:{n}"
        role = m.get("role")
        content = _text(m.get("content"))
        if role == "system":
            out.append(SystemMessage(content, id=mid))
        elif role == "user":
            out.append(HumanMessage(content, id=mid))
        elif role == "assistant":
            calls: list[dict[str, Any]] = [
                {
                    "name": str((c.get("function") or {}).get("name") or "tool"),
                    "args": _args((c.get("function") or {}).get("arguments")),
                    "id": f"{mid}:c{k}",
                    "type": "tool_call",
                }
                for k, c in enumerate(m.get("tool_calls") or [])
            ]
            pending = [str(c["id"]) for c in calls]
            out.append(AIMessage(content, tool_calls=calls, id=mid))
        elif role == "tool":
            if not pending:
                raise ValueError(f"message {n}: a tool result with no open call")
            out.append(ToolMessage(content, tool_call_id=pending.pop(0), id=mid))
        # other roles (mini-swe-agent's final "exit") are not part of the run
    return out


def _unanswered_dropped(messages: list[BaseMessage]) -> list[BaseMessage]:
    """Drop a trailing tool call that never got a result (the run ended on it)."""
    answered = {str(m.tool_call_id) for m in messages if isinstance(m, ToolMessage)}
    out = list(messages)
    while (
        out
        and isinstance(out[-1], AIMessage)
        and out[-1].tool_calls
        and not all(str(c["id"]) in answered for c in out[-1].tool_calls)
    ):
        out.pop()
    return out


def load_tau_bench(path: Path) -> tuple[list[TraceSession], list[Problem]]:
    """The tau-bench airline sessions of ``path`` (one JSON array)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return [], [(str(path), f"unreadable: {err}")]
    sessions: list[TraceSession] = []
    problems: list[Problem] = []
    for item in data:
        name = f"task{item.get('task_id')}-trial{item.get('trial')}"
        try:
            messages = _unanswered_dropped(_openai_messages(name, item["traj"]))
        except (KeyError, TypeError, ValueError) as err:
            problems.append((name, f"unreadable: {err}"))
            continue
        sessions.append(TraceSession("tau-bench", name, tuple(messages)))
    return sessions, problems


def load_mini_swe(
    folder: Path, *, dev_only: bool = False
) -> tuple[list[TraceSession], list[Problem]]:
    """The mini-swe-agent runs under ``folder`` (``*.traj.json``).

    A session is named by its file (``django__django-11019``); with ``dev_only`` by its path
    under ``folder`` (``deepseek_chat_dev__pvlib__pvlib-python-1072``), and marked
    development-only.
    """
    sessions: list[TraceSession] = []
    problems: list[Problem] = []
    for path in sorted(folder.rglob("*.traj.json")):
        relative = path.relative_to(folder) if dev_only else Path(path.name)
        name = str(relative).removesuffix(".traj.json").replace("/", "__")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            messages = _unanswered_dropped(_openai_messages(name, data["messages"]))
        except (OSError, KeyError, TypeError, ValueError) as err:
            problems.append((str(path), f"unreadable: {err}"))
            continue
        sessions.append(TraceSession("mini-swe", name, tuple(messages), dev_only))
    return sessions, problems


def _swe_task(data: Mapping[str, Any]) -> str:
    for m in data.get("history") or []:
        if m.get("role") == "user":
            return _text(m.get("content"))
    for step in data.get("trajectory") or []:
        for m in step.get("messages") or []:
            if m.get("role") == "user":
                return _text(m.get("content"))
    return ""


def load_swe_agent(folder: Path) -> tuple[list[TraceSession], list[Problem]]:
    """The SWE-agent ``*.traj`` runs under ``folder`` (one ``bash`` call per trajectory step)."""
    sessions: list[TraceSession] = []
    problems: list[Problem] = []
    for path in sorted(folder.rglob("*.traj")):
        name = str(path.relative_to(folder).with_suffix("")).replace("/", "__")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            steps = data.get("trajectory") or []
            task = _swe_task(data)
        except (OSError, TypeError, ValueError, AttributeError) as err:
            problems.append((str(path), f"unreadable: {err}"))
            continue
        if not steps or not task:
            problems.append((str(path), "no trajectory steps" if not steps else "no task message"))
            continue
        messages: list[BaseMessage] = [HumanMessage(task, id=f"{name}:0")]
        for n, step in enumerate(steps, start=1):
            cid = f"{name}:c{n}"
            call = {
                "name": "bash",
                "args": {"command": str(step.get("action", ""))},
                "id": cid,
                "type": "tool_call",
            }
            messages.append(
                AIMessage(str(step.get("thought") or ""), tool_calls=[call], id=f"{name}:a{n}")
            )
            messages.append(
                ToolMessage(str(step.get("observation") or ""), tool_call_id=cid, id=f"{name}:t{n}")
            )
        sessions.append(TraceSession("swe-agent", name, tuple(messages)))
    return sessions, problems


Loader = Callable[[Path], tuple[list[TraceSession], list[Problem]]]
"""Reads the sessions of a file or folder, and what it could not read."""

DATASETS: dict[str, tuple[str, Loader]] = {
    "tau-bench": ("tau-bench-airline-gpt4o/gpt-4o-airline.json", load_tau_bench),
    "mini-swe": ("mini-swe-agent-deepseek-swebench", load_mini_swe),
    "swe-agent": ("swe-agent-demos", load_swe_agent),
}
"""``dataset -> (path under the traces folder, loader)``."""

DEV_ONLY: dict[str, tuple[str, Loader]] = {
    "mini-swe": ("mini-swe-agent-deepseek-dev", partial(load_mini_swe, dev_only=True)),
}
"""``dataset -> (path under the traces folder, loader)`` of development-only sessions."""


def load_traces(
    root: Path | None = None, datasets: Iterable[str] = tuple(DATASETS)
) -> tuple[list[TraceSession], list[Problem]]:
    """Load the given data sets from ``root`` (default :func:`default_traces_dir`).

    A data set's development-only folder (:data:`DEV_ONLY`) is loaded with it when present
    (its absence is no problem: it only adds development sessions).

    Raises:
        ValueError: For an unknown data set name.
    """
    base = root if root is not None else default_traces_dir()
    sessions: list[TraceSession] = []
    problems: list[Problem] = []
    for dataset in datasets:
        if dataset not in DATASETS:
            raise ValueError(f"unknown data set {dataset!r}; known: {', '.join(DATASETS)}")
        relative, loader = DATASETS[dataset]
        found, failed = loader(base / relative)
        if not found and not failed:
            failed = [(str(base / relative), "no sessions found")]
        sessions.extend(found)
        problems.extend(failed)
        if dataset in DEV_ONLY:
            folder, load_dev = DEV_ONLY[dataset]
            if (base / folder).is_dir():
                extra, unread = load_dev(base / folder)
                sessions.extend(extra)
                problems.extend(unread)
    return sessions, problems
