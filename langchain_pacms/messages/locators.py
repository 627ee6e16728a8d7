"""Locators: the exact values in a text, the one vocabulary of fold stubs, masks and handles.

By rank: (1) URLs, paths, file names, ``key=value``, uuids, ticket ids; (2) identifiers mixing
letters and digits; (3) short quoted literals; (4) dates, serials (``2024-05-21``,
``1.2.840.10008``), numbers of three or more digits, decimals. Stubs and masks show them
(:func:`ranked_locators`); the planner's handles (``messages.handles``) read the same tokens
with quoted literals left open (:func:`value_tokens`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass

from langchain_pacms._lru import LruMemo

__all__ = [
    "LONG_NUMBER",
    "PATH",
    "ShownBefore",
    "StubLocators",
    "durable_locators",
    "find_locators",
    "locator_budget",
    "locator_lines",
    "locator_rank",
    "ranked_locators",
    "ranked_stub_locators",
    "stub_budget",
    "stub_locators",
    "value_tokens",
]

_EXT = (
    r"(?:py|js|ts|tsx|json|md|txt|csv|ya?ml|toml|ini|cfg|html|css|sql|sh|rs|go|java|c|h|cpp|rb|rst)"
)
_PATH = r"(?<!<)(?:[\w.-]+)?(?:/[\w.@%+-]+)+(?:\.\w+)?"  # a path with a slash (not </tag>)
_STRONG = (
    r"https?://[^\s\"'<>)\]]+"  # URLs
    rf"|{_PATH}"
    rf"|\b[\w-]+\.{_EXT}\b"  # file names
    r"|\b[A-Za-z_][\w.-]*=[^\s,;\"'()]+"  # key=value
    r"|\b[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b"  # uuids
    r"|\b[A-Z][A-Z0-9]*-\d+\b"  # ticket-like ids (ABC-123)
)
_MIXED = r"\b(?=\w*[A-Za-z])(?=\w*\d)\w{3,}"  # letters and digits in one word
_QUOTED = r"\"([^\"\s:][^\"\n]{1,63})\"(?!\s*:)|'([^'\s:][^'\n]{1,63})'(?!\s*:)|`([^`\n]{2,64})`"
_SERIAL = r"\b\d{4,}(?:[-:.]\d+)+|\b\d+(?:\.\d+){2,}\b"  # dates, long numbers with separators
_SCI = r"\b\d+(?:\.\d+)?[eE][-+]?\d+\b"  # scientific notation
_NUMBER = rf"{_SCI}|\b\d{{3,}}(?:\.\d+)?|\b\d+\.\d+"
_LOCATOR = re.compile(rf"{_STRONG}|{_MIXED}|{_QUOTED}|{_SERIAL}|{_NUMBER}")
_VALUE = re.compile(rf"{_STRONG}|{_MIXED}|{_SERIAL}|{_NUMBER}")  # quoted literals left open
_WORDS = re.compile(r"\w(?:[\w.@:/+-]*\w)?")
_RANKS = (
    (1, re.compile(_STRONG)),
    (2, re.compile(_MIXED)),
    (4, re.compile(rf"{_SERIAL}|{_NUMBER}")),
)
_IS_PATH = re.compile(_PATH)
PATH = re.compile(rf"{_PATH}|\b[\w-]+\.{_EXT}\b")
"""A path with a slash, or a file name with a known extension."""
LONG_NUMBER = re.compile(rf"\d{{4,}}|{_SERIAL}|{_SCI}")
"""The rank-4 locators a tool call takes up: four digits or more, dates, serials, ``1e-8``."""
# a traceback frame: Python's ``File "p", line 5`` and the ``path:line`` of most other tools
_FRAME = re.compile(rf'File "([^"\n]+)", line (\d+)|((?:{_PATH})|\b[\w-]+\.\w+):(\d+)')
_SCAN = 200_000  # characters of a payload scanned
_ONE_PATH = re.compile(rf"{_PATH}|[\w.-]+\.{_EXT}")  # a line of a listing
_LISTING_SHARE = 0.7  # of a payload's lines that are paths, for a listing
_SHARE = 0.4  # of a payload's characters a fold stub may spend on locators
_FLOOR = 500  # characters a stub may always spend
_CEILING = 4_000  # characters of whole locators a stub holds at most (grouped paths: half more)
_MEMO_CHARS = 16_000_000  # characters the locator memo holds at most, its keys' texts included


def _memo_chars(key: tuple[str, str, int], found: list[str]) -> int:
    return len(key[1]) + sum(map(len, found))


_MEMO: LruMemo[tuple[str, str, int], list[str]] = LruMemo(
    8192, max_bytes=_MEMO_CHARS, weigh=_memo_chars
)
_UNIONS: LruMemo[tuple[str, ...], frozenset[str]] = LruMemo(16)
_STUBS: LruMemo[tuple[str, int, tuple[str, ...]], StubLocators] = LruMemo(4096)


def locator_rank(token: str) -> int:
    """A token's rank: 1 strong, 2 mixed, 3 other (a quoted literal), 4 number.

    Example:
        >>> [locator_rank(t) for t in ("src/a.py", "HAT039", "Boston", "2024-05-21")]
        [1, 2, 3, 4]
    """
    return next((rank for rank, pattern in _RANKS if pattern.fullmatch(token)), 3)


def _tokens(text: str, pattern: re.Pattern[str] = _LOCATOR) -> Iterator[str]:
    """The locators of ``text`` in order, repeats included (quoted literals verbatim)."""
    for match in pattern.finditer(text):
        group = match.lastindex  # only a quoted literal has a group
        token = match.group(group) if group else match.group(0).strip().rstrip(".,:")
        if len(token) >= 2:
            yield token


def value_tokens(text: str) -> Iterator[str]:
    """The locators of ``text`` with quoted literals left open: their values count one by one.

    Example:
        >>> list(value_tokens("sed -n '2225,2280p' pydicom/dataset.py"))
        ['2225', '2280p', 'pydicom/dataset.py']
    """
    return _tokens(text, _VALUE)


def ranked_locators(text: str) -> list[str]:
    """Every locator of ``text`` once, best rank first, first seen first within a rank."""
    found = {token: locator_rank(token) for token in dict.fromkeys(_tokens(text[:_SCAN]))}
    return sorted(found, key=found.__getitem__)  # stable: first seen first within a rank


def find_locators(
    text: str, limit: int = 12, *, budget: int | None = None, shown: Container[str] = frozenset()
) -> list[str]:
    """The locators of ``text``, best rank first, unique; at most ``limit`` (and ``budget`` chars).

    Args:
        text: The payload (its first 200,000 characters are scanned).
        limit: At most this many locators.
        budget: At most this many characters in all (each counts its length plus two).
        shown: Locators to leave out because they are visible elsewhere.

    Returns:
        The locators (none that is part of one already taken).

    Example:
        >>> find_locators('GET https://x.io/a -> {"id": "HAT039", "city": "Boston"} in 1920 ms')
        ['https://x.io/a', 'HAT039', 'Boston', '1920']
    """
    return _fill(ranked_locators(text), limit, budget, shown)


def _fill(ranked: list[str], limit: int, budget: int | None, shown: Container[str]) -> list[str]:
    out: list[str] = []
    taken = ""
    for token in ranked:
        if token in shown or token in taken:
            continue
        if len(out) >= limit or (budget is not None and len(taken) + len(token) + 2 > budget):
            break
        out.append(token)
        taken += f"{token}, "
    return out


def locator_budget(payload_chars: int) -> int:
    """Characters a fold stub spends on locators: two fifths of the payload, within 500-4,000.

    The bounds: docs/results/lifecycle.md.
    """
    return max(_FLOOR, min(_CEILING, int(_SHARE * payload_chars)))


@dataclass(frozen=True)
class StubLocators:
    """The locators a fold stub shows: ``whole``, ``grouped`` by directory, a ``left_out`` count."""

    whole: tuple[str, ...] = ()
    grouped: tuple[tuple[str, tuple[str, ...]], ...] = ()
    left_out: int = 0

    @property
    def locators(self) -> tuple[str, ...]:
        """Every locator the stub shows, each written out in full."""
        return (*self.whole, *(d + n for d, names in self.grouped for n in names))

    def __bool__(self) -> bool:
        return bool(self.whole or self.grouped or self.left_out)

    def __str__(self) -> str:
        items = [*self.whole, *(_group_text(d, names) for d, names in self.grouped)]
        more = f"(+{self.left_out} more)" if self.left_out else ""
        return " ".join(filter(None, (", ".join(items), more)))


def _group_text(directory: str, names: tuple[str, ...]) -> str:
    """A group as a stub writes it: ``dir/{a,b}``, or the path of its one name."""
    return directory + names[0] if len(names) == 1 else f"{directory}{{{','.join(names)}}}"


def _group_cost(directory: str, names: list[str]) -> int:
    """Characters of a group in a stub, with its separator (``0`` for no names)."""
    return len(_group_text(directory, tuple(names))) + 2 if names else 0


def _split(token: str) -> tuple[str, str] | None:
    """``(directory, name)`` of a path (the directory ends with ``/``), ``None`` for no path."""
    if "://" in token or not _IS_PATH.fullmatch(token):
        return None
    directory, _, name = token.rpartition("/")
    return directory + "/", name


def stub_locators(sha256: str, payload: str, shown: Container[str] = frozenset()) -> StubLocators:
    """The locators a fold stub of ``payload`` shows, without those in ``shown`` (memoised)."""
    ranked = ranked_stub_locators(sha256, payload)
    hidden = tuple(t for t in ranked if t in shown)
    key = (sha256, len(payload), hidden)
    found = _STUBS.get(key)
    if found is None:
        found = _layout(ranked, frozenset(hidden), stub_budget(payload))
        _STUBS.put(key, found)
    return found


def ranked_stub_locators(sha256: str, payload: str) -> list[str]:
    """:func:`ranked_locators` of ``payload`` (a stub's source), memoised by ``sha256``.

    ``sha256`` names the folded payload the source comes from (see :func:`stub_locators`).

    Example:
        >>> ranked_stub_locators("d1", "grep HAT039 in src/a.py")
        ['src/a.py', 'HAT039']
    """
    return _memo(("stub", sha256, len(payload)), lambda: ranked_locators(payload))


def stub_budget(payload: str) -> int:
    """A stub's budget for whole locators: :func:`locator_budget`, or 4,000 for a listing."""
    lines = [line.strip() for line in payload[:_SCAN].splitlines() if line.strip()]
    paths = sum(1 for line in lines if _ONE_PATH.fullmatch(line))
    listing = bool(lines) and paths >= _LISTING_SHARE * len(lines)
    return _CEILING if listing else locator_budget(len(payload))


def _layout(ranked: list[str], hidden: frozenset[str], budget: int) -> StubLocators:
    """The :class:`StubLocators` of ``ranked`` without ``hidden``."""
    whole = _fill(ranked, 10**6, budget, hidden)
    text = ", ".join(whole)  # every locator shown, each written out
    groups: dict[str, list[str]] = {}
    loose: list[str] = []
    room = budget // 2  # for those that do not fit whole, paths grouped by directory
    for token in ranked:
        if token in hidden or token in text:
            continue
        parts = _split(token)
        if parts is None:
            step = len(token) + 2
        else:
            names = groups.get(parts[0], [])
            step = _group_cost(parts[0], [*names, parts[1]]) - _group_cost(parts[0], names)
        if step > room:
            break
        room -= step
        if parts is None:
            loose.append(token)
        else:
            groups.setdefault(parts[0], []).append(parts[1])
        text += f", {token}"
    left = sum(1 for t in ranked if t not in hidden and t not in text)
    return StubLocators((*whole, *loose), tuple((d, tuple(n)) for d, n in groups.items()), left)


def _memo(key: tuple[str, str, int], compute: Callable[[], list[str]]) -> list[str]:
    found = _MEMO.get(key)
    if found is None:
        found = compute()
        _MEMO.put(key, found)
    return found


def _words(text: str) -> list[str]:
    """The locators and words of ``text`` (memoised)."""
    return _memo(("text", text, 0), lambda: [*ranked_locators(text), *_WORDS.findall(text[:_SCAN])])


def durable_locators(texts: Iterable[str]) -> frozenset[str]:
    """The locators and words of ``texts``: what fold stubs in the same history need not repeat."""
    key = tuple(texts)  # the texts are the history's own strings: their hashes are cached
    hit = _UNIONS.get(key)
    if hit is not None:
        return hit
    union = frozenset(token for text in key for token in _words(text))
    _UNIONS.put(key, union)
    return union


class ShownBefore:
    """:func:`durable_locators` of the first ``end`` groups of texts, any ``end``, built once."""

    def __init__(self, groups: Iterable[Iterable[str]]) -> None:
        first: dict[str, int] = {}
        count = 0
        for count, texts in enumerate(groups, 1):
            for text in texts:
                for token in _words(text):
                    first.setdefault(token, count - 1)
        self._first: Mapping[str, int] = first
        self._end = count

    def upto(self, end: int) -> ShownBefore:
        """What the first ``end`` groups show (the lookup table is shared, not copied)."""
        out = copy.copy(self)
        out._end = end
        return out

    def __contains__(self, token: object) -> bool:
        return isinstance(token, str) and self._first.get(token, self._end) < self._end


def locator_lines(text: str, budget: int) -> list[str]:
    """Lines of ``text`` with a new rank-1/2 locator or frame, in order, within ``budget``."""
    kept: list[str] = []
    seen: set[str] = set()
    spent = 0
    for line in text.splitlines():
        if spent + len(line) + 1 > budget:
            continue
        tokens = {t for t in _tokens(line) if locator_rank(t) <= 2}
        if not tokens:  # a frame names its file: no locator, no frame
            continue
        tokens.update(
            f"{m.group(1) or m.group(3)}:{m.group(2) or m.group(4)}" for m in _FRAME.finditer(line)
        )
        if tokens <= seen:
            continue
        kept.append(line)
        seen |= tokens
        spent += len(line) + 1
    return kept
