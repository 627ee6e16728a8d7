r"""The heuristic planner: the offline default that proposes fold / mask / prune by rule.

Every active object outside the protected tail gets a *future value* in ``[0, 1]`` from its
relevance to the recent turns (the selector's embeddings and cache, or word overlap without a
selector), its recency, and a prior by kind. The actions then follow the Self-GC safeguards:

* never the system prompt, the latest turn, or the ``keep_recent`` objects just before it;
* user messages are never pruned or masked; the first one (the task) is never touched; a later
  one is folded only when very large (``user_fold_min_tokens``) and of low value;
* a tool result whose values (paths, ids, numbers mixing letters and digits, long numbers) reappear
  in a later call's arguments is a *live handle*: it is not masked, and it is pruned only when the
  object that supersedes it holds the same values (a fold keeps locators and the exact payload,
  so a fold is allowed);
* a file read whose path a later call writes or edits is an *editable body*: kept or folded, never
  masked;
* with ``keep_file_views`` the latest whole read of a file (``cat path``, an editor's view without
  a range) stays in view: later edits and rewrites quote its lines exactly, often long after;
* prune only what a later object supersedes: the same call (same signature) repeated later when
  nothing it shows can have changed (the later run gave the same output, or the call reads or
  searches and no call between the two writes, runs or does anything else), or a later
  whole-file read of the same path; a script run again shows a new output, not the old one;
* fold large stable bodies (file reads, search results, API responses, long generated answers);
  mask mid-size noisy output (test runs, build and command logs), keeping its head and tail;
* with ``fold_calls`` a tool span's fold also takes its call message's text and long arguments
  (a heredoc script, an edit) into the sidecar (``scope="span"``), leaving the call's name and
  short arguments in view;
* an action whose stub or mask would not be smaller than what it replaces is not proposed
  (:func:`~langchain_pacms.lifecycle.actions.action_gain`);
* with ``max_stubs`` at most that many fold stubs and masks stay in view, the newest ones: an
  older folded or masked tool span or generated body is pruned (user messages never are). A
  long tool loop otherwise piles up one stub per step; a payload folded before its prune stays
  in the sidecar.

The planner is deterministic and cheap: the per-object features (values found in a result, its
words, whether it reads like a log) are cached by content hash, so re-planning a growing history
only scans what is new.

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    >>> from langchain_pacms.lifecycle.objects import index_messages
    >>> def call(i):
    ...     return AIMessage("", tool_calls=[{"name": "read_file", "args": {"path": "app.py"},
    ...                                       "id": f"c{i}"}], id=f"a{i}")
    >>> msgs = [HumanMessage("fix app.py", id="h1"), call(1),
    ...         ToolMessage("x = 1", tool_call_id="c1", id="t1"), call(2),
    ...         ToolMessage("x = 2", tool_call_id="c2", id="t2"), HumanMessage("done?", id="h2")]
    >>> plan = HeuristicPlanner(keep_recent=0).plan(index_messages(msgs), msgs)
    >>> [(a.op, a.target) for a in plan.actions]
    [('prune', 'function:tool:1')]
    >>> plan.actions[0].reason
    'superseded by function:tool:2: the same call runs again later'
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from langchain_core.messages import AIMessage, BaseMessage

from langchain_pacms._lru import LruMemo
from langchain_pacms.lifecycle.actions import (
    Action,
    action_gain,
    call_texts,
    fold_source,
    visible_locators,
)
from langchain_pacms.lifecycle.locators import ranked_locators
from langchain_pacms.lifecycle.objects import ContextIndex, ContextObject, by_message, payload_of
from langchain_pacms.lifecycle.plan import Plan

if TYPE_CHECKING:
    from langchain_pacms.selector import ContextSelector

__all__ = ["HeuristicPlanner", "call_values", "read_paths", "recent_turns", "reusable_values"]

CallKind = Literal["read", "search", "write", "run", "other"]


def _vocab(words: str) -> frozenset[str]:
    return frozenset(words.split())


_EXT = r"(?:py|js|ts|tsx|json|md|txt|csv|ya?ml|toml|ini|cfg|html|css|sql|sh|rs|go|java|c|h|cpp|rb)"
_PATH = re.compile(rf"[\w.-]*/[\w.@%+-]+(?:/[\w.@%+-]+)*|\b[\w-]+\.{_EXT}\b")
_HANDLE = re.compile(
    r"https?://[^\s\"'<>)\]]+"  # URLs
    rf"|[\w.-]*/[\w.@%+-]+(?:/[\w.@%+-]+)*|\b[\w-]+\.{_EXT}\b"  # paths and file names
    r"|\b[A-Za-z_]+\d[\w-]*"  # letters then digits: credit_card_4421486, HAT039, call_00_x
    r"|\b\d+[A-Za-z_][\w-]*"  # digits then letters: 2FBBAH, 7f3a9c
    r"|\b\d{4,}(?:[-:.]\d+)*"  # long numbers and dates: 23553, 2024-05-21
)
_WORD = re.compile(r"[^\W\d_]{3,}")
_NOISE = re.compile(
    r"\b(?:PASSED|FAILED|ERROR|WARNING|WARN|INFO|DEBUG|passed|failed|error|warning|Traceback"
    r"|Exception|collected|seconds)\b|^\s*(?:at |File \")|\d\d:\d\d:\d\d",
    re.MULTILINE,
)
_SCAN = 200_000  # characters scanned for values in one payload
_NOISE_SCAN = 20_000
_SHORT = 8_000  # texts up to this many characters have their values remembered
_EMBED_CHARS = 4_000  # characters of an object embedded for relevance
_REL_FLOOR = 0.25  # relevance is scaled by max(best score, this)
_STOP = _vocab(
    "the and for are but not you your with this that from have has was were will would can could "
    "should about into over than then them they there their what when where which who why how all "
    "any our out its also just more most some such only own same very now new use let one yes"
)

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
_KIND_PRIOR: dict[str, float] = {
    "read": 0.5,
    "search": 0.4,
    "write": 0.6,
    "run": 0.2,
    "other": 0.4,
    "assistant": 0.6,
    "user": 1.0,
}


@dataclass(frozen=True)
class _Call:
    """One tool call, classified."""

    signature: str
    kind: CallKind
    paths: frozenset[str]
    whole: bool  # a read of whole files (no line range, no filter)
    uses: frozenset[str]  # the values in its arguments


_Gains = tuple[tuple[BaseMessage, ...], tuple[str, ...], dict[tuple[str, ...], int]]
"""An object's messages, its stub's source locators, and its gain per set of those shown."""


@dataclass(frozen=True)
class _Features:
    """What the planner needs from one object's content (cached by content hash)."""

    calls: tuple[_Call, ...]
    handles: frozenset[str]
    words: frozenset[str]
    noise: int


def _distinct(text: str) -> str:
    """The distinct whitespace-separated chunks of ``text``, one per line (order is irrelevant).

    Neither words nor values span whitespace, so scanning this is the same as scanning
    ``text``, and much shorter on repetitive output.
    """
    return "\n".join(set(text.split()))


def _words_of(text: str) -> frozenset[str]:
    """Lower-cased words of three letters or more, without common function words."""
    return frozenset(w.lower() for w in _WORD.findall(_distinct(text))) - _STOP


def _handles_of(text: str) -> frozenset[str]:
    """The values in ``text`` a later call could reuse (see ``_HANDLE``), four chars or more."""
    found = _HANDLE.findall(_distinct(text))
    return frozenset(t for m in found if len(t := m.rstrip(".,:-")) >= 4)


@functools.lru_cache(maxsize=4_096)
def _short_values(text: str) -> frozenset[str]:
    return _handles_of(text)


def reusable_values(text: str) -> frozenset[str]:
    """The values in ``text`` a later tool call could take up: paths, URLs, ids, long numbers.

    The planner's *live handle* rule reads a tool result this way (its first 200,000
    characters). Texts up to 8,000 characters (call arguments, most messages) are remembered,
    so a growing history is not scanned again.

    Example:
        >>> sorted(reusable_values("Booked HAT039 for user mia_li_3668, see docs/policy.md"))
        ['HAT039', 'docs/policy.md', 'mia_li_3668']
    """
    return _short_values(text) if len(text) <= _SHORT else _handles_of(text[:_SCAN])


@by_message
def _call_values(message: BaseMessage) -> frozenset[str]:
    calls = message.tool_calls if isinstance(message, AIMessage) else []
    return _handles_of("\n".join(leaf for c in calls for leaf in _leaves(c.get("args") or {})))


def call_values(message: BaseMessage) -> frozenset[str]:
    """The values (as :func:`reusable_values` finds them) in a message's tool-call arguments.

    Remembered per message object, as the lifecycle index remembers each message's signature.

    Example:
        >>> call = {"name": "get_reservation", "args": {"id": "HAT039"}, "id": "c1"}
        >>> call_values(AIMessage("", tool_calls=[call]))
        frozenset({'HAT039'})
    """
    return _call_values(message)


@by_message
def _read_paths(message: BaseMessage) -> frozenset[str]:
    calls = message.tool_calls if isinstance(message, AIMessage) else []
    return frozenset(p for c in calls if (k := _classify(c)).kind == "read" for p in k.paths)


def read_paths(message: BaseMessage) -> frozenset[str]:
    """The files a message's tool calls read, whole or in part (as the planner classifies calls).

    A shell read names them as operands (``cat a.py``, ``sed -n '1,9p' a.py``, ``nl a.py``); a
    tool whose name says it reads names them in path-like arguments. Remembered per message
    object, like :func:`call_values`.

    Example:
        >>> call = {"name": "bash", "args": {"command": "sed -n '10,40p' src/app.py"}, "id": "c1"}
        >>> read_paths(AIMessage("", tool_calls=[call]))
        frozenset({'src/app.py'})
    """
    return _read_paths(message)


def _name_words(name: str) -> list[str]:
    return [w.lower() for w in re.split(r"[_\-\s.]+|(?<=[a-z])(?=[A-Z])", name) if w]


def _read_operands(words: Sequence[str]) -> set[str]:
    """The files a read command (``cat a b``, ``sed -n '1,9p' a``) names, whatever their names."""
    operands = [w.strip("'\"") for w in words[1:] if not w.startswith("-")]
    if words[0].rsplit("/", 1)[-1] == "sed":
        operands = operands[1:]  # the first operand is the script
    return {o.removeprefix("./") for o in operands if o and not o.isdigit()}


def _shell_kind(command: str) -> tuple[CallKind, bool, set[str]]:
    """Classify a shell command: its kind, whether it reads whole files, and the files it reads."""
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
    found: set[str] = set()
    for key, value in args.items():
        if not _PATH_KEYS.search(str(key).lower()):
            continue
        values = value if isinstance(value, list) else [value]
        found.update(v.removeprefix("./") for v in values if isinstance(v, str) and v)
    return found


def _leaves(value: Any) -> list[str]:
    """The scalar values inside a call's (nested) arguments, as text."""
    if isinstance(value, Mapping):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [str(value)]


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
    """The shell command a call runs, or ``None``.

    That is the ``command``, ``cmd`` or ``script`` argument (unless the tool's name does not
    say it runs things and it names files in other arguments); else, any argument that reads
    files the shell way (``cat a.py``) for a tool whose name does not say it writes, or that is
    a recognised command for a tool whose name says it is a shell.
    """
    texts = [(k, t) for k, v in args.items() if (t := _argv(v)) is not None]
    standard = next((t for key in _SHELL_ARGS for k, t in texts if k == key), None)
    if standard is not None:
        return standard if words & _NAME_WORDS["run"] or not paths else None
    if words & _NAME_WORDS["write"]:
        return None
    for _, text in texts:
        kind, _, read = _shell_kind(text)
        if kind == "read" and any(_PATH.fullmatch(r) for r in read):
            return text
        if kind != "other" and words & _SHELL_NAMES:
            return text
    return None


def _classify(call: Mapping[str, Any]) -> _Call:
    """Classify one tool call: its kind, the files it names, whether it reads them whole.

    Recognised shapes: an editor verb (``command``, ``action``, ``operation``, ... set to
    ``view``, ``read``, ``str_replace``, ...) with a path argument; a shell command (see
    :func:`_shell_of`); else the tool's name (``read_file``, ``search``, ``book_flight``) with
    its path-like arguments (``path``, ``file_path``, ``filename``, ...).
    """
    name = str(call.get("name") or "")
    args = call.get("args") or {}
    args = args if isinstance(args, Mapping) else {}
    signature = f"{name}({json.dumps(args, sort_keys=True, default=str)})"
    uses = _handles_of("\n".join(_leaves(args)))
    paths = _arg_paths(args)
    verbs = [v.lower() for k in _VERB_ARGS if isinstance(v := args.get(k), str)]
    verb = next((v for v in verbs if v in _EDITOR_VERBS), None)
    if verb is not None and paths:
        kind = _EDITOR_VERBS[verb]
        return _Call(signature, kind, frozenset(paths), kind == "read" and not _ranged(args), uses)
    words = set(_name_words(name))
    shell = _shell_of(args, words, paths)
    if shell is not None:
        kind, whole, read = _shell_kind(shell)
        paths |= read | {p.removeprefix("./") for p in _PATH.findall(shell)}
        return _Call(
            signature, kind, frozenset(paths), whole and bool(paths), _handles_of(signature)
        )
    kind = next((k for k, vocab in _NAME_WORDS.items() if words & vocab), "other")
    whole = kind == "read" and bool(paths) and not _ranged(args)
    return _Call(signature, kind, frozenset(paths), whole, uses)


def recent_turns(
    index: ContextIndex, *, tail: int = 4, max_chars: int = 1_000
) -> list[tuple[ContextObject, str]]:
    """The objects that stand for "the recent turns", each with a text snippet.

    That is the latest user message and the last ``tail`` objects after it (without a user
    message: the last ``tail`` objects). Planners read them to judge what the work needs now.

    Args:
        index: The indexed history.
        tail: How many of the latest objects after the user message to include.
        max_chars: Characters kept of each object's text (head and tail halves).

    Returns:
        ``(object, snippet)`` pairs, oldest first.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> from langchain_pacms.lifecycle.objects import index_messages
        >>> index = index_messages([HumanMessage("old"), AIMessage("a"), HumanMessage("now")])
        >>> [(o.id, text) for o, text in recent_turns(index)]
        [('conversation:user:2', 'now')]
    """
    latest = [o for o in index.objects if o.latest]
    chosen = [latest[0], *latest[1:][-tail:]] if latest else list(index.objects[-tail:])
    half = max(max_chars // 2, 1)

    def snippet(text: str) -> str:
        return text if len(text) <= max_chars else f"{text[:half]}\n[...]\n{text[-half:]}"

    return [(o, snippet(o.text)) for o in chosen if o.kind != "system"]


@dataclass
class _Analysis:
    """The pure part of one planning round."""

    index: ContextIndex
    candidates: list[ContextObject]
    scored: list[ContextObject]  # candidates big enough for a value-dependent action
    calls: dict[str, tuple[_Call, ...]]
    features: dict[str, _Features]
    live: dict[str, frozenset[str]]
    superseded: dict[str, tuple[str, str, frozenset[str]]]  # id -> (by, why, its handles)
    edited: dict[str, list[str]]
    views: frozenset[str]  # ids holding the latest whole read of some file
    recency: dict[str, float]
    query: str
    first_user: str
    messages: Sequence[BaseMessage]
    shown: frozenset[str]
    cutoff: int  # objects at or after this position are protected


def _unchanged(
    obj: ContextObject, later: ContextObject, call: _Call, changes: Sequence[int]
) -> bool:
    """Whether ``later``, a run of ``call`` again, shows what ``obj`` shows.

    It does when its output is the same, or when ``call`` reads or searches and no object
    between the two holds a call that may change state (``changes``: their positions, ascending).
    """
    if later.sha256 == obj.sha256:
        return True
    between = bisect.bisect_left(changes, later.position) - bisect.bisect_right(
        changes, obj.position
    )
    return call.kind in ("read", "search") and between == 0


def _check_int(name: str, value: Any, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return value


class HeuristicPlanner:
    """Rule-based planner following the Self-GC safeguards (the offline default).

    The defaults are the setting the lifecycle replay chose on its development sessions (the
    same on a coding agent's shell loop, a customer-service chat and an editor-tool agent): fold
    any low-value stable body from 60 tokens, mask noisy output from 60 tokens, protect only the
    current work, and keep the latest whole read of each file in view. The results page reports
    what these defaults keep and prune (``docs/results/lifecycle.md``).

    Args:
        selector: A :class:`~langchain_pacms.ContextSelector` whose embeddings (and their cache)
            score relevance to the recent turns; ``None`` scores by word overlap. If embedding
            fails the planner falls back to word overlap and says so in the plan summary.
        fold_min_tokens: A stable body (file read, search result, API response, long answer) of
            at least this many tokens is folded when its value is low.
        mask_min_tokens: Noisy output (test runs, logs) of at least this many tokens is masked.
        user_fold_min_tokens: A user message (other than the first) is folded only from this
            size on.
        keep_recent: Objects just before the latest turn that are never touched.
        keep_above: An object whose future value is at least this is kept, however large
            (superseded objects are pruned whatever their value).
        fold_calls: Fold a tool span with its call message's text and long arguments
            (``scope="span"``) rather than its results alone.
        keep_file_views: Keep the latest whole read of each file in view (no fold or mask;
            a later whole read of the same file still supersedes it). Worth it for agents that
            edit the files they read: edits quote the lines they replace.
        max_stubs: Fold stubs and masks kept in view, the newest first; older folded or
            masked tool spans and generated bodies are pruned (``None``: no limit). Trades
            what later steps can still see for pruning on long tool loops.
        recency_half_life: Number of objects after which recency halves.
        cache_size: Objects whose features (values, words, log markers) stay cached, by content
            hash, and objects whose action gains stay cached, by message (``0``: no cache).

    Raises:
        TypeError: If a size option is not an int or ``selector`` has no ``embeddings``.
        ValueError: If an option is out of range.

    Example:
        >>> planner = HeuristicPlanner(fold_min_tokens=500)
        >>> planner.name, planner.fold_min_tokens
        ('heuristic', 500)
    """

    name = "heuristic"

    def __init__(
        self,
        selector: ContextSelector | None = None,
        *,
        fold_min_tokens: int = 60,
        mask_min_tokens: int = 60,
        user_fold_min_tokens: int = 4_000,
        keep_recent: int = 0,
        keep_above: float = 1.0,
        fold_calls: bool = True,
        keep_file_views: bool = True,
        max_stubs: int | None = None,
        recency_half_life: float = 12.0,
        cache_size: int = 4_096,
    ) -> None:
        if selector is not None and not hasattr(selector, "embeddings"):
            raise TypeError("selector must be a ContextSelector (it has no embeddings)")
        self.selector = selector
        self.fold_min_tokens = _check_int("fold_min_tokens", fold_min_tokens, 1)
        self.mask_min_tokens = _check_int("mask_min_tokens", mask_min_tokens, 1)
        self.user_fold_min_tokens = _check_int("user_fold_min_tokens", user_fold_min_tokens, 1)
        self.keep_recent = _check_int("keep_recent", keep_recent, 0)
        self.cache_size = _check_int("cache_size", cache_size, 0)
        self.max_stubs = None if max_stubs is None else _check_int("max_stubs", max_stubs, 0)
        if not isinstance(keep_above, (int, float)) or not 0.0 < keep_above <= 1.0:
            raise ValueError(f"keep_above must be in (0, 1], got {keep_above!r}")
        if not isinstance(recency_half_life, (int, float)) or recency_half_life <= 0:
            raise ValueError(f"recency_half_life must be > 0, got {recency_half_life!r}")
        for flag, given in (("fold_calls", fold_calls), ("keep_file_views", keep_file_views)):
            if not isinstance(given, bool):
                raise TypeError(f"{flag} must be a bool, got {type(given).__name__}")
        self.keep_above = float(keep_above)
        self.fold_calls = fold_calls
        self.keep_file_views = keep_file_views
        self.recency_half_life = float(recency_half_life)
        self._cache: LruMemo[tuple[str, str], _Features] = LruMemo(self.cache_size)
        self._gains: LruMemo[tuple[Any, ...], _Gains] = LruMemo(self.cache_size)

    # -- features -------------------------------------------------------------------------------
    def _features(self, obj: ContextObject, messages: Sequence[BaseMessage]) -> _Features:
        key = (obj.sha256, obj.signature)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        head = messages[obj.indices[0]]
        calls: tuple[_Call, ...] = ()
        if obj.kind == "tool" and isinstance(head, AIMessage):
            calls = tuple(_classify(c) for c in head.tool_calls)
        payload = payload_of(messages, obj.indices) if obj.kind == "tool" else obj.text
        sample = payload[:_SCAN]
        noise = len(_NOISE.findall(sample[:_NOISE_SCAN]))
        found = _Features(calls, _handles_of(sample), _words_of(obj.text[:_SCAN]), noise)
        self._cache.put(key, found)
        return found

    # -- analysis (pure) ------------------------------------------------------------------------
    def _analyse(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> _Analysis:
        objects = index.objects
        # the trailing run of protected objects: the latest turn, or with latest="step" the
        # newest object (the task message, protected too, may sit far earlier)
        boundary = len(objects)
        while boundary > 0 and objects[boundary - 1].latest:
            boundary -= 1
        protect = self.keep_recent if boundary < len(objects) else max(self.keep_recent, 1)
        cutoff = boundary - protect
        features = {o.id: self._features(o, messages) for o in objects if o.kind != "system"}
        calls = {i: f.calls for i, f in features.items() if f.calls}
        known = frozenset().union(
            *(self._features(o, messages).handles for o in objects if o.kind in ("system", "user"))
        )
        # where each value is used in a call's arguments (last use) and what is written when
        last_use: dict[str, int] = {}
        last_write: dict[str, int] = {}
        last_whole_read: dict[str, tuple[int, str]] = {}
        last_signature: dict[str, tuple[int, str]] = {}
        changes: list[int] = []  # positions of objects with a call that may change state
        for o in objects:
            if any(c.kind not in ("read", "search") for c in calls.get(o.id, ())):
                changes.append(o.position)
            for call in calls.get(o.id, ()):
                last_use.update(dict.fromkeys(call.uses, o.position))
                last_signature[call.signature] = (o.position, o.id)
                if call.kind == "write":
                    last_write.update(dict.fromkeys(call.paths, o.position))
                if call.kind == "read" and call.whole:
                    last_whole_read.update(dict.fromkeys(call.paths, (o.position, o.id)))
        used = frozenset(last_use)
        candidates = [
            o
            for o in objects
            if o.kind != "system" and not o.latest and o.state == "active" and o.position < cutoff
        ]
        live: dict[str, frozenset[str]] = {}
        superseded: dict[str, tuple[str, str, frozenset[str]]] = {}
        edited: dict[str, list[str]] = {}
        for o in candidates:
            if o.kind != "tool":
                continue
            handles = features[o.id].handles
            live[o.id] = frozenset(t for t in (handles & used) - known if last_use[t] > o.position)
            edited[o.id] = sorted(
                p
                for c in calls.get(o.id, ())
                if c.kind == "read"
                for p in c.paths
                if last_write.get(p, -1) > o.position
            )
            cover = self._cover(
                o, calls.get(o.id, ()), last_signature, last_whole_read, index, changes
            )
            if cover is not None:
                by, why = cover
                superseded[o.id] = (by, why, features[by].handles)
        latest_views = {by for _, by in last_whole_read.values()} if self.keep_file_views else set()
        views = frozenset(o.id for o in candidates if o.id in latest_views)
        span = max(cutoff, 1)
        recency = {o.id: 0.5 ** ((span - o.position) / self.recency_half_life) for o in candidates}
        query = "\n".join(text for _, text in recent_turns(index))
        first_user = next((o.id for o in objects if o.kind == "user"), "")
        smallest = min(self.fold_min_tokens, self.mask_min_tokens)
        scored = [o for o in candidates if o.tokens >= smallest]
        return _Analysis(
            index,
            candidates,
            scored,
            calls,
            features,
            live,
            superseded,
            edited,
            views,
            recency,
            query,
            first_user,
            messages,
            visible_locators(messages),
            cutoff,
        )

    @staticmethod
    def _cover(
        obj: ContextObject,
        calls: Sequence[_Call],
        last_signature: Mapping[str, tuple[int, str]],
        last_whole_read: Mapping[str, tuple[int, str]],
        index: ContextIndex,
        changes: Sequence[int],
    ) -> tuple[str, str] | None:
        """The later object that supersedes every call of ``obj``, with why (or ``None``).

        A later run of the same call supersedes it only when what it shows is unchanged: the
        same output, or a read or search with no call between them that may change state
        (``changes``: the positions of such objects, ascending).
        """
        if not calls:
            return None
        by: tuple[int, str] | None = None
        why = ""
        for call in calls:
            repeat = last_signature.get(call.signature)
            if (
                repeat is not None
                and repeat[0] > obj.position
                and _unchanged(obj, index.by_id[repeat[1]], call, changes)
            ):
                found, reason = repeat, "the same call runs again later"
            elif call.kind == "read" and call.paths:
                reads = [last_whole_read.get(p) for p in sorted(call.paths)]
                if not all(r is not None and r[0] > obj.position for r in reads):
                    return None
                found = max(r for r in reads if r is not None)
                reason = f"{', '.join(sorted(call.paths))} is read again later"
            else:
                return None
            if by is None or found[0] > by[0]:
                by, why = found, reason
        return (by[1], why) if by is not None else None

    # -- relevance ------------------------------------------------------------------------------
    def _lexical(self, a: _Analysis) -> dict[str, float]:
        query = _words_of(a.query)
        if not query:
            return {o.id: 0.0 for o in a.scored}
        return {o.id: len(query & a.features[o.id].words) / len(query) for o in a.scored}

    def _texts(self, a: _Analysis) -> list[str]:
        return [o.text[:_EMBED_CHARS] for o in a.scored]

    def _cosines(self, a: _Analysis, docs: Any, query: Any) -> dict[str, float]:
        assert self.selector is not None
        docs, query = self.selector.reweight_pool(np.asarray(docs), np.asarray(query))
        norms = np.linalg.norm(docs, axis=1) * max(float(np.linalg.norm(query)), 1e-12)
        scores = (docs @ query) / np.maximum(norms, 1e-12)
        return {o.id: float(s) for o, s in zip(a.scored, scores)}

    def _relevance(self, a: _Analysis) -> tuple[dict[str, float], str]:
        if self.selector is None or not a.scored or not a.query.strip():
            return self._lexical(a), ""
        try:
            docs = self.selector.embeddings.embed_matrix(self._texts(a))
            query = self.selector.embeddings.embed_matrix([a.query], kind="query")[0]
            return self._cosines(a, docs, query), ""
        except Exception as err:  # fail soft: word overlap instead
            return self._lexical(a), f"{type(err).__name__}: {err}"

    async def _arelevance(self, a: _Analysis) -> tuple[dict[str, float], str]:
        if self.selector is None or not a.scored or not a.query.strip():
            return self._lexical(a), ""
        try:
            docs = await self.selector.embeddings.aembed_matrix(self._texts(a))
            query = (await self.selector.embeddings.aembed_matrix([a.query], kind="query"))[0]
            return self._cosines(a, docs, query), ""
        except Exception as err:  # fail soft: word overlap instead
            return self._lexical(a), f"{type(err).__name__}: {err}"

    # -- decisions (pure) -----------------------------------------------------------------------
    def _gain(self, a: _Analysis, obj: ContextObject, action: Action) -> int:
        """:func:`~langchain_pacms.lifecycle.actions.action_gain`, remembered.

        The gain depends on the object's messages, id and kind, the action, and (for a fold)
        which locators of its stub's source are shown elsewhere: the memo is keyed by those,
        the messages by identity (an entry holds them, so an identity is not reused while
        cached).
        """
        held = tuple(a.messages[i] for i in obj.indices)
        key = (tuple(map(id, held)), obj.id, obj.kind, action.op, action.scope)
        hit = self._gains.get(key)
        if hit is None or any(x is not y for x, y in zip(hit[0], held, strict=True)):
            source = fold_source(a.messages, obj, action.scope) if action.op == "fold" else ""
            hit = (held, tuple(ranked_locators(source)), {})
            self._gains.put(key, hit)
        hidden = tuple(t for t in hit[1] if t in a.shown)
        gains = hit[2]
        if hidden not in gains:
            gains[hidden] = action_gain(a.messages, obj, action, shown=a.shown)
        return gains[hidden]

    def _value(self, a: _Analysis, obj: ContextObject, relevance: float) -> float:
        kinds = {c.kind for c in a.calls.get(obj.id, ())}
        prior = max((_KIND_PRIOR[k] for k in kinds), default=_KIND_PRIOR.get(obj.kind, 0.4))
        return 0.45 * relevance + 0.35 * a.recency[obj.id] + 0.2 * prior

    def _noisy(self, a: _Analysis, obj: ContextObject) -> bool:
        kinds = {c.kind for c in a.calls.get(obj.id, ())}
        if "run" in kinds:
            return True
        return kinds <= {"other"} and a.features[obj.id].noise >= 3

    def _action(self, a: _Analysis, obj: ContextObject, value: float) -> Action | None:
        tokens = obj.tokens
        if obj.kind == "user":
            if (
                obj.id != a.first_user
                and tokens >= self.user_fold_min_tokens
                and (value < self.keep_above)
            ):
                return Action("fold", obj.id, f"very large old user message ({tokens} tokens)")
            return None
        if obj.kind == "assistant":
            if tokens >= self.fold_min_tokens and value < self.keep_above:
                return Action(
                    "fold",
                    obj.id,
                    f"large generated body ({tokens} tokens); folded so a later "
                    "step can quote it exactly",
                )
            return None
        live = sorted(a.live.get(obj.id, ()))
        cover = a.superseded.get(obj.id)
        if cover is not None:
            by, why, later = cover
            missing = [t for t in live if t not in later]
            if not missing:
                return Action("prune", obj.id, f"superseded by {by}: {why}")
            live = missing
        if value >= self.keep_above or obj.id in a.views:
            return None
        uses = f"; later calls use {', '.join(live[:3])}" if live else ""
        edited = a.edited.get(obj.id)
        if self._noisy(a, obj) and not edited:
            if live and tokens >= self.mask_min_tokens:
                return Action(
                    "fold",
                    obj.id,
                    f"noisy output ({tokens} tokens){uses}: fold keeps them recoverable",
                )
            if tokens >= self.mask_min_tokens:
                return Action(
                    "mask",
                    obj.id,
                    f"noisy output ({tokens} tokens, value {value:.2f}): head and tail kept",
                )
            return None
        if tokens >= self.fold_min_tokens:
            body = f"; {', '.join(edited)} is edited later" if edited else ""
            return Action(
                "fold",
                obj.id,
                f"large stable body ({tokens} tokens, value {value:.2f}){body}{uses}",
            )
        return None

    def _scoped(self, a: _Analysis, obj: ContextObject, action: Action | None) -> Action | None:
        """A tool span's fold with ``scope="span"`` when its call has text or long arguments."""
        if action is None or action.op != "fold" or obj.kind != "tool" or not self.fold_calls:
            return action
        if not any(call_texts(a.messages[obj.indices[0]])):
            return action
        return Action(
            "fold", obj.id, f"{action.reason}; with its call's text and arguments", scope="span"
        )

    def _horizon(self, a: _Analysis, actions: list[Action]) -> list[Action]:
        """``actions`` with every stub or mask beyond the newest ``max_stubs`` pruned instead."""
        if self.max_stubs is None:
            return actions
        shrinks = {x.target for x in actions if x.op in ("fold", "mask")}
        shrunk = [
            o
            for o in a.index.objects
            if o.kind in ("tool", "assistant")
            and o.position < a.cutoff
            and (o.state != "active" or o.id in shrinks)
        ]
        old = shrunk[: max(len(shrunk) - self.max_stubs, 0)]
        if not old:
            return actions
        why = f"an older stub than the newest {self.max_stubs} (max_stubs)"
        drop = {o.id: Action("prune", o.id, why) for o in old}
        kept = [drop.pop(x.target, x) for x in actions]
        return kept + list(drop.values())

    def _decide(self, a: _Analysis, relevance: Mapping[str, float], failure: str) -> Plan:
        best = max(relevance.values(), default=0.0)
        scale = max(best, _REL_FLOOR)
        actions: list[Action] = []
        idle = 0
        for obj in a.candidates:
            value = self._value(a, obj, max(relevance.get(obj.id, 0.0), 0.0) / scale)
            action = self._scoped(a, obj, self._action(a, obj, value))
            if action is not None and action.op != "prune" and self._gain(a, obj, action) <= 0:
                action, idle = None, idle + 1  # its stub or mask would not be smaller
            if action is not None:
                actions.append(action)
        actions = self._horizon(a, actions)
        counts = {op: sum(1 for x in actions if x.op == op) for op in ("prune", "fold", "mask")}
        targeted = sum(a.index.by_id[x.target].tokens for x in actions)
        summary = (
            f"{counts['prune']} prune, {counts['fold']} fold, {counts['mask']} mask on "
            f"{len(a.candidates)} eligible of {len(a.index.objects)} objects; "
            f"{targeted} of {a.index.active_tokens} tokens targeted; {idle} left out as "
            "saving nothing"
        )
        if failure:
            summary += f" (relevance by word overlap: embedding failed, {failure})"
        return Plan(summary, tuple(actions), planner=self.name)

    # -- public ---------------------------------------------------------------------------------
    def plan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        """Propose actions for ``index`` (built from ``messages``); see the module docs.

        Args:
            index: The indexed history.
            messages: The messages it was built from (not modified).

        Returns:
            The :class:`~langchain_pacms.lifecycle.plan.Plan` (possibly with no actions).

        Example:
            >>> from langchain_core.messages import HumanMessage
            >>> from langchain_pacms.lifecycle.objects import index_messages
            >>> msgs = [HumanMessage("hello")]
            >>> HeuristicPlanner().plan(index_messages(msgs), msgs).actions
            ()
        """
        analysis = self._analyse(index, messages)
        return self._decide(analysis, *self._relevance(analysis))

    async def aplan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        """Async twin of :meth:`plan` (embeds with the model's async API)."""
        analysis = self._analyse(index, messages)
        return self._decide(analysis, *(await self._arelevance(analysis)))
