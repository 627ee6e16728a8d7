r"""Locators: the exact handles in a payload that a fold stub or a mask keeps in view.

A fold takes a payload out of the history; its stub keeps the *locators* found in it, so the
model still sees the paths, URLs, identifiers and values it may need and can recover the rest.
A mask keeps the head and tail of a log plus the elided lines that hold a locator. These rules
belong to the lifecycle alone: the replay's no-impact judge
(:mod:`langchain_pacms.eval.dependency_judge`) has its own, and neither imports the other, so a
policy never grades itself with its own extraction.

Locators, by rank (a capped list fills from the first rank down, first seen first within one):

1. URLs, paths with a slash, file names with a known extension, ``key=value`` pairs, uuids and
   ticket ids (``ABC-123``);
2. identifiers that mix letters and digits (``HAT039``, ``b64encode``, ``E016``, ``0o027``);
3. short quoted literals (2 to 64 characters on one line; a JSON key, a quoted string followed
   by ``:``, is a field name and is skipped here, though a key that mixes letters and digits,
   such as ``address1``, is still taken under rank 2);
4. bare numbers of three or more digits, and decimals (shorter ones are mostly counts).

A closing markup tag (``</output>``) is no path.

The list is deduplicated. A fold stub gets a character budget that grows with the payload
(:func:`locator_budget`), so a large body keeps more of its handles than a small one while the
stub stays a small share of what it replaces.

Example:
    >>> find_locators('GET https://x.io/a -> {"id": "HAT039", "city": "Boston"} in 1920 ms')
    ['https://x.io/a', 'HAT039', 'Boston', '1920']
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Container, Iterable, Mapping
from functools import partial

from langchain_pacms._lru import LruMemo

__all__ = [
    "ShownBefore",
    "durable_locators",
    "find_locators",
    "locator_budget",
    "locator_lines",
    "stub_locators",
]

_EXT = r"(?:py|js|ts|json|md|txt|csv|yaml|yml|toml|ini|cfg|html|sql|sh|rs|go|java|c|h|rst)"
_STRONG = (
    r"https?://[^\s\"'<>)\]]+"  # URLs
    r"|(?<!<)(?:[\w.-]+)?(?:/[\w.@%+-]+)+(?:\.\w+)?"  # paths with a slash (not </tag>)
    rf"|\b[\w-]+\.{_EXT}\b"  # file names
    r"|\b[A-Za-z_][\w.-]*=[^\s,;\"'()]+"  # key=value
    r"|\b[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b"  # uuids
    r"|\b[A-Z][A-Z0-9]*-\d+\b"  # ticket-like ids (ABC-123)
)
_MIXED = r"\b(?=\w*[A-Za-z])(?=\w*\d)\w{3,}"  # letters and digits in one word
_QUOTED = r"\"([^\"\s:][^\"\n]{1,63})\"(?!\s*:)|'([^'\s:][^'\n]{1,63})'(?!\s*:)|`([^`\n]{2,64})`"
_NUMBER = r"\b\d{3,}(?:\.\d+)?|\b\d+\.\d+"
_LOCATOR = re.compile(rf"{_STRONG}|{_MIXED}|{_QUOTED}|{_NUMBER}")
_WORDS = re.compile(r"\w(?:[\w.@:/+-]*\w)?")
_RANKS = ((1, re.compile(_STRONG)), (2, re.compile(_MIXED)), (4, re.compile(_NUMBER)))
_SCAN = 200_000  # characters of a payload scanned
_SHARE = 0.4  # of a payload's characters a fold stub may spend on locators
_FLOOR = 500  # characters a stub may always spend
_CEILING = 4_000  # characters a stub never exceeds
_MEMO: LruMemo[tuple[str, str, int], list[str]] = LruMemo(8192)
_UNIONS: LruMemo[tuple[str, ...], frozenset[str]] = LruMemo(16)


def _rank(token: str) -> int:
    """1 strong, 2 mixed, 3 other quoted literal, 4 number."""
    return next((rank for rank, pattern in _RANKS if pattern.fullmatch(token)), 3)


def _ranked(text: str) -> list[str]:
    """Unique locators of ``text``, by rank, first seen first within a rank."""
    found: dict[str, int] = {}
    for match in _LOCATOR.finditer(text[:_SCAN]):
        quoted = next((g for g in match.groups() if g), None)
        token = (quoted or match.group(0)).strip().rstrip(".,:")
        if len(token) >= 2 and token not in found:
            found[token] = _rank(token)
    return sorted(found, key=found.__getitem__)  # stable: first seen first within a rank


def find_locators(
    text: str, limit: int = 12, *, budget: int | None = None, shown: Container[str] = frozenset()
) -> list[str]:
    """The locators of ``text``, best rank first, unique; at most ``limit`` (and ``budget`` chars).

    A locator that is part of one already taken (``3.5`` of ``v3.5.1``) is not repeated, and
    neither is one in ``shown`` (handles the reader already sees elsewhere, see
    :func:`durable_locators`).

    Args:
        text: The payload (its first 200,000 characters are scanned).
        limit: At most this many locators.
        budget: At most this many characters in all (each locator counts its length plus two
            for the separator); ``None``: no character cap.
        shown: Locators to leave out because they are visible elsewhere.

    Returns:
        The locators.

    Example:
        >>> find_locators("1 2 30 GET https://x.io/a?b=1 -> /tmp/out.json, id=AB-12 in 3.5s")
        ['https://x.io/a?b=1', '/tmp/out.json', 'id=AB-12', '3.5']
        >>> find_locators("GET https://x.io/a -> /tmp/out.json", shown=frozenset({"/tmp/out.json"}))
        ['https://x.io/a']
    """
    return _fill(_ranked(text), limit, budget, shown)


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
    """Characters a fold stub spends on locators for a payload of ``payload_chars``.

    Two fifths of the payload, at least 500 and at most 4,000 characters (chosen on the
    replay's development split, see ``docs/results/lifecycle-notes.md``).

    Example:
        >>> locator_budget(100), locator_budget(5_000), locator_budget(10**6)
        (500, 2000, 4000)
    """
    return max(_FLOOR, min(_CEILING, int(_SHARE * payload_chars)))


def stub_locators(sha256: str, payload: str, shown: Container[str] = frozenset()) -> list[str]:
    """:func:`find_locators` of a payload within :func:`locator_budget`, ranked once per hash.

    ``shown`` holds locators already visible elsewhere in the history (see
    :func:`durable_locators`): they are left out, and the budget goes to the others.

    Example:
        >>> stub_locators("sha-of-payload", 'saved "report.md" to /srv/out as RPT-7 (412 kB)')
        ['report.md', '/srv/out', 'RPT-7', '412']
        >>> stub_locators("sha-of-payload", 'saved "report.md" to /srv/out as RPT-7 (412 kB)',
        ...               frozenset({"report.md", "RPT-7"}))
        ['/srv/out', '412']
    """
    ranked = _memo(("stub", sha256, len(payload)), lambda: _ranked(payload))
    return _fill(ranked, 10**6, locator_budget(len(payload)), shown)


def _memo(key: tuple[str, str, int], compute: Callable[[], list[str]]) -> list[str]:
    found = _MEMO.get(key)
    if found is None:
        found = compute()
        _MEMO.put(key, found)
    return found


def _words(text: str) -> list[str]:
    return [*_ranked(text), *_WORDS.findall(text[:_SCAN])]


def durable_locators(texts: Iterable[str]) -> frozenset[str]:
    """The locators and words of ``texts``: what fold stubs in the same history need not repeat.

    The caller passes what a fold leaves in view: the system prompt, the user messages and the
    short arguments of tool calls (a span fold replaces only long argument values, see
    :mod:`~langchain_pacms.lifecycle.actions`). Besides their locators, their words (runs of
    letters, digits and ``_.@:/+-`` inside a word) count, so a quoted value such as ``economy``
    that the policy prompt names unquoted is not repeated either. Each text is scanned once
    (memoised).

    Example:
        >>> shown = durable_locators(['user mia_li_3668 on HAT136, cabin "economy"'])
        >>> sorted(t for t in shown if not t.islower())
        ['HAT136']
        >>> {"mia_li_3668", "economy"} <= shown
        True
    """
    key = tuple(texts)  # the texts are the history's own strings: their hashes are cached
    hit = _UNIONS.get(key)
    if hit is not None:
        return hit
    found: set[str] = set()
    for text in key:
        found.update(_memo(("text", text, 0), partial(_words, text)))
    union = frozenset(found)
    _UNIONS.put(key, union)
    return union


class ShownBefore:
    """:func:`durable_locators` of the first ``end`` groups of texts, for any ``end``, built once.

    A history's prefixes each have their own set of shown locators; this holds, per locator or
    word, the first group (message) that shows it, so each prefix's set is a lookup away. It
    supports ``in``, which is all a fold stub asks of what is shown.

    Args:
        groups: The texts of each message, in order (all of them count until :meth:`upto`).

    Example:
        >>> shown = ShownBefore([["user mia_li_3668"], ["booked HAT136"]])
        >>> "HAT136" in shown, "HAT136" in shown.upto(1), "mia_li_3668" in shown.upto(1)
        (True, False, True)
    """

    def __init__(self, groups: Iterable[Iterable[str]]) -> None:
        first: dict[str, int] = {}
        count = 0
        for count, texts in enumerate(groups, 1):
            for text in texts:
                for token in _memo(("text", text, 0), partial(_words, text)):
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
    r"""Lines of ``text`` that hold a locator of rank 1 or 2 not seen on an earlier kept line.

    A mask keeps them from the part it elides, in order, until ``budget`` characters are spent
    (a line longer than the budget is skipped).

    Example:
        >>> locator_lines("ok\nFAILED tests/test_a.py::t1\nok\nFAILED tests/test_a.py::t1", 100)
        ['FAILED tests/test_a.py::t1']
    """
    kept: list[str] = []
    seen: set[str] = set()
    spent = 0
    for line in text.splitlines():
        tokens = {t for m in _LOCATOR.finditer(line) if _rank(t := m.group(0)) <= 2}
        if not tokens or tokens <= seen or spent + len(line) + 1 > budget:
            continue
        kept.append(line)
        seen |= tokens
        spent += len(line) + 1
    return kept
