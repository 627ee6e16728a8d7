"""What a tool call does, read from its name and arguments: read, search, write, run or other."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage

from langchain_pacms.messages.handles import PATH, handles_of, leaves
from langchain_pacms.messages.identity import by_message

__all__ = ["CallKind", "ToolCall", "classify_call", "read_paths"]

CallKind = Literal["read", "search", "write", "run", "other"]


def _vocab(words: str) -> frozenset[str]:
    return frozenset(words.split())


_NAME_WORDS: dict[CallKind, frozenset[str]] = {
    "write": _vocab(
        "write edit replace create insert patch apply save update delete remove append move "
        "rename book cancel send post put set modify commit"
    ),
    "read": _vocab("read open view cat get fetch load show download retrieve describe head tail"),
    "search": _vocab("search grep find glob list ls query lookup browse locate scan"),
    "run": _vocab("run exec execute test tests pytest shell bash terminal python sh cmd"),
}
_SHELL_ARGS = ("command", "cmd", "script")
_VERB_ARGS = ("command", "action", "operation", "op", "mode", "verb")
_SHELL_NAMES = _vocab("bash sh zsh shell terminal console exec execute cmd command")
_PATH_KEYS = re.compile(r"(?:^|_)(?:path|paths|file|files|filename|filepath|dir|directory)$")
_RANGE_KEYS = _vocab(
    "offset limit start end line lines start_line end_line line_number view_range range page"
)
_EDITOR_VERBS: dict[str, CallKind] = {
    **dict.fromkeys(("view", "read", "open", "cat", "show"), "read"),
    **dict.fromkeys(
        ("create", "str_replace", "insert", "undo_edit", "write", "edit", "replace", "append"),
        "write",
    ),
}
_SHELL_EDITORS = _vocab("str_replace_editor str_replace_based_edit_tool editor edit_tool")
_SHELL_READ = _vocab("cat nl less more head tail bat")
_SHELL_SEARCH = _vocab("grep rg ag find ls tree fd locate git")
_SHELL_RUN = _vocab(
    "python python3 pytest make npm npx node pip tox cargo go bash sh uv poetry yarn mvn "
    "gradle java ruby docker coverage"
)
_SHELL_WRITE = re.compile(
    r"\bsed\s+-i|(?<![\d&>])>>?\s*[\w./-]|\btee\b|\bpatch\b|\bgit\s+apply\b|\b(?:mv|cp|rm|touch|"
    r"mkdir)\s"
)


@dataclass(frozen=True)
class ToolCall:
    """One tool call, classified (see :func:`classify_call`)."""

    signature: str  # name(json args): equal signatures mean the same call repeated
    kind: CallKind
    paths: frozenset[str]  # the files it names
    whole: bool  # a read of whole files (no line range, no filter)
    uses: frozenset[str]  # the values in its arguments


@by_message
def _read_paths(message: BaseMessage) -> frozenset[str]:
    calls = message.tool_calls if isinstance(message, AIMessage) else []
    return frozenset(p for c in calls if (k := classify_call(c)).kind == "read" for p in k.paths)


def read_paths(message: BaseMessage) -> frozenset[str]:
    """The files a message's tool calls read, whole or in part (memoised per message)."""
    return _read_paths(message)


def _name_words(name: str) -> list[str]:
    return [w.lower() for w in re.split(r"[_\-\s.]+|(?<=[a-z])(?=[A-Z])", name) if w]


def _read_operands(words: Sequence[str]) -> set[str]:
    """The files a read command (``cat a b``, ``sed -n '1,9p' a``) names."""
    operands = [w.strip("'\"") for w in words[1:] if not w.startswith("-")]
    if words[0].rsplit("/", 1)[-1] == "sed":
        operands = operands[1:]  # the first operand is the script
    return {o.removeprefix("./") for o in operands if o and not o.isdigit()}


def _shell_kind(command: str) -> tuple[CallKind, bool, set[str]]:
    """A shell command's kind, whether it reads whole files, and the files it reads."""
    if _SHELL_WRITE.search(command):
        return "write", False, set()
    segments = [s.split() for s in re.split(r"&&|\|\||;|\|", command) if s.strip()]
    segments = [s for s in segments if s and s[0] != "cd"]
    if not segments:
        return "other", False, set()
    first = [s[0].rsplit("/", 1)[-1] for s in segments]
    if any(f in _SHELL_RUN or f.startswith("./") for f in first):
        return "run", False, set()
    head = first[0]
    if head in _SHELL_EDITORS and len(segments[0]) > 1 and segments[0][1] in _EDITOR_VERBS:
        # an editor tool run from the shell: ``str_replace_editor view /testbed/a.py``
        kind = _EDITOR_VERBS[segments[0][1]]
        whole = kind == "read" and "--view_range" not in segments[0]
        return kind, whole, _read_operands(segments[0][1:]) if kind == "read" else set()
    if head == "open":  # an agent shell's file viewer (``open "a.py" 120``): a window of lines
        return "read", False, _read_operands(segments[0])
    if head in _SHELL_READ or (head == "sed" and "-n" in segments[0]):
        whole = len(segments) == 1 and head in ("cat", "nl", "bat")
        return "read", whole, _read_operands(segments[0])
    if head in _SHELL_SEARCH:
        return "search", False, set()
    return "other", False, set()


def _arg_paths(args: Mapping[str, Any]) -> set[str]:
    keyed = [v for k, v in args.items() if _PATH_KEYS.search(str(k).lower())]
    named = [v if isinstance(v, list) else [v] for v in keyed]
    return {v.removeprefix("./") for values in named for v in values if isinstance(v, str) and v}


def _argv(value: Any) -> str | None:
    """A string argument, or an argument vector (a list of strings) as one command line."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return " ".join(value)
    return None


def _ranged(args: Mapping[str, Any]) -> bool:
    """Whether a call's arguments ask for part of a file (a line range, an offset, a page)."""
    return any(args[k] not in (None, "", []) for k in _RANGE_KEYS & set(args))


def _shell_of(args: Mapping[str, Any], words: set[str], paths: set[str]) -> str | None:
    """The shell command a call runs, or ``None``."""
    texts = [(k, t) for k, v in args.items() if (t := _argv(v)) is not None]
    standard = next((t for key in _SHELL_ARGS for k, t in texts if k == key), None)
    if standard is not None:
        return standard if words & _NAME_WORDS["run"] or not paths else None
    if words & _NAME_WORDS["write"]:
        return None
    for _, text in texts:
        kind, _, read = _shell_kind(text)
        if kind == "read" and any(PATH.fullmatch(r) for r in read):
            return text
        if kind != "other" and words & _SHELL_NAMES:
            return text
    return None


def classify_call(call: Mapping[str, Any]) -> ToolCall:
    """Classify a tool call (``name``, ``args``) by editor verb, else shell command, else name."""
    name = str(call.get("name") or "")
    args = call.get("args") or {}
    args = args if isinstance(args, Mapping) else {}
    signature = f"{name}({json.dumps(args, sort_keys=True, default=str)})"
    uses = handles_of("\n".join(leaves(args)))
    paths = _arg_paths(args)
    verbs = [v.lower() for k in _VERB_ARGS if isinstance(v := args.get(k), str)]
    verb = next((v for v in verbs if v in _EDITOR_VERBS), None)
    if verb is not None and paths:
        kind = _EDITOR_VERBS[verb]
        return ToolCall(
            signature, kind, frozenset(paths), kind == "read" and not _ranged(args), uses
        )
    words = set(_name_words(name))
    shell = _shell_of(args, words, paths)
    if shell is not None:
        kind, whole, read = _shell_kind(shell)
        paths |= read | {p.removeprefix("./") for p in PATH.findall(shell)}
        return ToolCall(
            signature, kind, frozenset(paths), whole and bool(paths), handles_of(signature)
        )
    kind = next((k for k, vocab in _NAME_WORDS.items() if words & vocab), "other")
    whole = kind == "read" and bool(paths) and not _ranged(args)
    return ToolCall(signature, kind, frozenset(paths), whole, uses)
