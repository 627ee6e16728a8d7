"""Exact future dependencies of a continuation, checked against a managed view.

The judge has its own rules and imports nothing from :mod:`langchain_pacms.lifecycle` or the
planners, so a policy cannot score itself with the judge's own notion of value.

Rules:

* A *value* is a URL, a path (``a/b.py``, ``setup.py``), an identifier that mixes letters and
  digits (``credit_card_4421486``, ``HAT123``), a date, or a number of four or more digits
  (decimals included); a short tool-call argument leaf without spaces is a value as a whole.
* A *future dependency* at cut ``c`` is a value used in a tool-call argument after ``c`` whose
  first appearance anywhere in the session is a tool output at or before ``c``, and that no
  user message or tool output after ``c`` shows again before the call that uses it.
* It is *visible* when it occurs verbatim in the view's text (contents and call arguments), and
  *recoverable* when it is not visible but occurs in a folded payload (a sidecar); the recovery
  calls are the fewest sidecars that cover all recoverable values (greedy cover).

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    >>> call = lambda n, c: AIMessage("", tool_calls=[
    ...     {"name": "bash", "args": {"command": c}, "id": n, "type": "tool_call"}])
    >>> msgs = [HumanMessage("fix the bug"), call("1", "grep -rl foo ."),
    ...         ToolMessage("src/pkg/core.py", tool_call_id="1"), call("2", "cat src/pkg/core.py")]
    >>> deps = future_dependencies(msgs, 2)
    >>> [d.value for d in deps]
    ['src/pkg/core.py']
    >>> judge_view(deps, msgs[:2], {"obj": "src/pkg/core.py"}).recovery_calls
    1
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

_PATTERNS = (
    r"https?://[^\s'\"<>()\[\]{}]+",
    r"(?:[\w.-]+/)+[\w.-]+",  # paths with a slash
    r"\b[\w-]+\.(?:py|pyi|js|ts|json|yaml|yml|toml|cfg|ini|txt|md|rst|c|h|cpp|go|rs|java|sh|html)\b",
    r"\b\d{4}-\d{2}-\d{2}\b",  # dates
    r"\b(?=[A-Za-z_]*\d)(?=\w*[A-Za-z])\w{4,}\b",  # letters and digits mixed
    r"(?<![\w.])\d{4,}(?:\.\d+)?(?![\w.])|(?<![\w.])\d+\.\d{2,}(?![\w.])",  # numbers
)
_VALUE = re.compile("|".join(f"(?:{p})" for p in _PATTERNS))
_LEAF = re.compile(r"\S{3,64}")
_TRAIL = ".,:;'\"`)]}>"


def extract_values(text: str) -> set[str]:
    """The values (per the module rules) that occur in ``text``.

    Example:
        >>> sorted(extract_values("see https://x.io/a, pkg/mod.py:12 and id HAT123 on 2024-05-15"))
        ['2024-05-15', 'HAT123', 'https://x.io/a', 'pkg/mod.py']
    """
    out = set()
    for match in _VALUE.finditer(text):
        value = match.group(0).rstrip(_TRAIL)
        if len(value) >= 4:
            out.add(value)
    return out


def _leaves(value: Any) -> Iterable[str]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def call_values(message: BaseMessage) -> set[str]:
    """Values in the tool-call arguments of ``message`` (empty for other messages).

    Example:
        >>> m = AIMessage("", tool_calls=[{"name": "f", "id": "1", "type": "tool_call",
        ...     "args": {"payment_id": "credit_card_44", "cabin": "economy", "n": 2}}])
        >>> sorted(call_values(m))
        ['credit_card_44', 'economy']
    """
    if not isinstance(message, AIMessage):
        return set()
    out: set[str] = set()
    for call in message.tool_calls:
        for leaf in _leaves(call.get("args", {})):
            out |= extract_values(leaf)
            if _LEAF.fullmatch(leaf) and (not leaf.isdigit() or len(leaf) >= 4):
                out.add(leaf)
    return out


def message_text(message: BaseMessage) -> str:
    """All text the model sees in ``message``: its content and its call arguments.

    Example:
        >>> message_text(HumanMessage("hi"))
        'hi'
    """
    content = message.content
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if isinstance(message, AIMessage) and message.tool_calls:
        args = [json.dumps(c.get("args", {}), ensure_ascii=False) for c in message.tool_calls]
        raw = [str(v) for c in message.tool_calls for v in _leaves(c.get("args", {}))]
        text = "\n".join([text, *args, *raw])
    return text


@dataclass(frozen=True)
class Dependency:
    """One value the continuation needs from the prefix.

    Attributes:
        value: The exact value.
        source: Index of the tool output where it first appeared.
        consumer: Index of the first later message whose call uses it.

    Example:
        >>> Dependency("a/b.py", 2, 5).value
        'a/b.py'
    """

    value: str
    source: int
    consumer: int


def future_dependencies(
    messages: Sequence[BaseMessage], cut: int, texts: Sequence[str] | None = None
) -> tuple[Dependency, ...]:
    """The future dependencies of the continuation after ``messages[cut]``.

    Args:
        messages: The whole session.
        cut: Index of the last message of the prefix.
        texts: ``message_text`` of each message, when the caller has them already.

    Returns:
        The dependencies, ordered by first use.

    Raises:
        ValueError: If ``cut`` is outside the session.

    Example:
        >>> future_dependencies([HumanMessage("x")], 0)
        ()
    """
    if not 0 <= cut < len(messages):
        raise ValueError(f"cut must index a message of the session, got {cut!r}")
    texts = list(texts) if texts is not None else [message_text(m) for m in messages]
    found: dict[str, Dependency] = {}
    refreshed: set[str] = set()
    later: list[str] = []  # user messages and tool outputs after the cut, in order seen
    for k in range(cut + 1, len(messages)):
        message = messages[k]
        for value in sorted(call_values(message)):
            if value in found or value in refreshed or any(value in t for t in later):
                continue
            source = _first_index(value, texts, cut)
            if source is not None and isinstance(messages[source], ToolMessage):
                found[value] = Dependency(value, source, k)
            else:
                refreshed.add(value)
        if isinstance(message, (ToolMessage, HumanMessage)):
            later.append(texts[k])
    return tuple(found.values())


def _first_index(value: str, texts: Sequence[str], cut: int) -> int | None:
    for k in range(cut + 1):
        if value in texts[k]:
            return k
    return None


@dataclass(frozen=True)
class Verdict:
    """How a view serves a continuation's dependencies.

    Attributes:
        dependencies: All of them.
        missing: Values not visible in the view.
        recoverable: Missing values found in a sidecar.
        recovery_calls: Fewest sidecars that cover ``recoverable``.

    Example:
        >>> Verdict((), (), (), 0).strict
        True
    """

    dependencies: tuple[Dependency, ...]
    missing: tuple[str, ...]
    recoverable: tuple[str, ...]
    recovery_calls: int

    @property
    def strict(self) -> bool:
        """Every dependency is visible in the view."""
        return not self.missing

    @property
    def with_recovery(self) -> bool:
        """Every missing dependency can be recovered from a sidecar."""
        return len(self.recoverable) == len(self.missing)


def judge_view(
    dependencies: Sequence[Dependency],
    view: Sequence[BaseMessage],
    sidecars: Mapping[str, str] | None = None,
) -> Verdict:
    """Check ``dependencies`` against an active ``view`` and folded ``sidecars`` (id -> payload).

    Example:
        >>> judge_view([Dependency("HAT123", 1, 3)], [HumanMessage("HAT123")]).strict
        True
    """
    visible = "\n".join(message_text(m) for m in view)
    missing = tuple(d.value for d in dependencies if d.value not in visible)
    payloads = dict(sidecars or {})
    covers = {sid: {v for v in missing if v in text} for sid, text in payloads.items()}
    recoverable = tuple(v for v in missing if any(v in c for c in covers.values()))
    todo, calls = set(recoverable), 0
    while todo:
        best = max(covers, key=lambda s: len(covers[s] & todo))
        todo -= covers[best]
        calls += 1
    return Verdict(tuple(dependencies), missing, recoverable, calls)
