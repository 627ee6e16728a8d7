"""The no-impact judge of the lifecycle replay: are the continuation's exact dependencies visible?

A *future dependency* of a cut is an exact string that the rest of the session uses (in the
arguments of a later tool call, or in a later assistant message) and that first appeared in a
tool output before the cut: a path, a URL, an identifier mixing letters and digits, a number
of four or more digits, or a quoted value (a quoted string followed by ``:``, a JSON key, is a
field name and not a value). A path also matches by a suffix aligned on ``/``:
``tests/test_x.py`` in a later command takes ``/testbed/tests/test_x.py`` from a listing.
Strings the task or the system prompt already gave are not dependencies (the policy never
removes those), nor are those a later user message states before their first use.

That is the *strict* definition (:func:`cut_dependencies`), the headline. A value that a later
tool output shows again before its first use still counts: the agent would need that call to
see it again, and nothing guarantees it makes it. The earlier definition, kept as
``"rederivable_excluded"``, drops such values and matches paths only whole.

A cut is *strictly unaffected* when every dependency is still in the policy's active view, and
*unaffected with recovery* when the missing ones are in payloads the policy folded into
sidecars (each folded object that holds one is a recovery call).

This module has its own rules on purpose and imports nothing from the lifecycle or its
planners: a policy that reused the judge's extraction would grade itself.

Example:
    >>> deps = future_dependencies(["ls -> src/app.py config_v2.yaml"],
    ...                            ["cat src/app.py"], prompt="fix the bug")
    >>> sorted(deps), verdict(deps, "folded: src/app.py", {})
    (['src/app.py'], Verdict(dependencies=1, missing=(), recoverable=(), recovery_calls=0))
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Literal

__all__ = [
    "DEFINITIONS",
    "Definition",
    "Verdict",
    "cut_dependencies",
    "extract",
    "future_dependencies",
    "minimal_cover",
    "restated",
    "verdict",
]

Definition = Literal["strict", "rederivable_excluded"]
DEFINITIONS: tuple[Definition, ...] = ("strict", "rederivable_excluded")
"""The dependency definitions: the headline one first (see the module docs)."""

_TOKEN = re.compile(
    r"https?://[^\s\"'<>)\]},]+"  # URLs
    r"|(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+"  # paths with at least one slash
    r"|\b[\w-]+\.(?:py|rst|md|txt|json|ya?ml|toml|cfg|ini|js|ts|html|sh|c|h|go|rs)\b"  # file names
    r"|\b(?=[\w-]*[A-Za-z])(?=[\w-]*\d)[A-Za-z0-9][\w-]{3,}"  # letters and digits mixed, >= 4
    r"|\b\d{4,}\b"  # long numbers
)
# a quoted value, not a JSON key: a key names a field of the schema, it is no value to carry over;
# a value starts with neither blank nor JSON punctuation (else ``": [{"``, the text between two
# quoted strings, would count as one)
_QUOTED = re.compile(
    r"\"((?![\s:,\[\]{}])[^\"\n]{4,80})\"(?!\s*:)|'((?![\s:,\[\]{}])[^'\n]{4,80})'(?!\s*:)"
)
_FILE_NAME = re.compile(r"[\w-]+\.\w+")


def extract(text: str) -> set[str]:
    """The exact strings of ``text`` that count as dependencies when reused later.

    Example:
        >>> sorted(extract('open "setup.py" at https://x.io/a then id HAT039 and 20240521'))
        ['20240521', 'HAT039', 'https://x.io/a', 'setup.py']
    """
    found = {m.group(0).rstrip(".:") for m in _TOKEN.finditer(text)}
    found.update(a or b for a, b in _QUOTED.findall(text))
    return {t for t in found if len(t) >= 4}


def _suffixes(token: str) -> set[str]:
    """The ``/``-aligned suffixes of a path that are a path or a file name, four chars or more.

    Example:
        >>> sorted(_suffixes("/testbed/tests/test_x.py"))
        ['test_x.py', 'testbed/tests/test_x.py', 'tests/test_x.py']
    """
    if "://" in token:
        return set()
    parts = token.split("/")
    tails = ("/".join(parts[k:]) for k in range(1, len(parts)))
    return {t for t in tails if len(t) >= 4 and ("/" in t or _FILE_NAME.fullmatch(t))}


def future_dependencies(
    tool_outputs: Iterable[str],
    continuation: Iterable[str],
    *,
    prompt: str = "",
    suffixes: bool = True,
) -> set[str]:
    """Strings the continuation uses that first came from a tool output before the cut.

    Args:
        tool_outputs: The tool outputs of the prefix.
        continuation: What the rest of the session does: its tool-call arguments and
            assistant texts.
        prompt: The system prompt and user messages of the prefix (never dependencies).
        suffixes: A used path also matches a longer path of an output that ends with it on a
            ``/`` boundary (``tests/test_x.py`` and ``/testbed/tests/test_x.py``); ``False``:
            whole matches only.

    Returns:
        The dependencies (as the continuation writes them).

    Example:
        >>> sorted(future_dependencies(["/testbed/tests/test_x.py"], ["pytest tests/test_x.py"]))
        ['tests/test_x.py']
        >>> future_dependencies(["/testbed/tests/test_x.py"], ["pytest tests/test_x.py"],
        ...                     suffixes=False)
        set()
    """
    given = extract(prompt)
    seen: set[str] = set()
    for output in tool_outputs:
        seen |= extract(output)
    if suffixes:
        seen |= {tail for token in seen if "/" in token for tail in _suffixes(token)}
    used: set[str] = set()
    for text in continuation:
        used |= extract(text)
    return {t for t in used & seen if t not in given and t not in prompt}


def restated(
    dependencies: Iterable[str],
    rest: Sequence[tuple[str, str]],
    by: Iterable[str] = ("user", "tool"),
) -> set[str]:
    """The dependencies that a later message of a role in ``by`` shows before their first use.

    Args:
        dependencies: The values to check.
        rest: The continuation as ``(role, text)`` pairs, oldest first; a value is used by an
            ``"assistant"`` text (its message text and tool-call arguments).
        by: The roles whose messages count (``"user"``, ``"tool"``).

    Returns:
        The values shown again before they are used.

    Example:
        >>> rest = [("tool", "src/a.py"), ("assistant", "cat src/a.py src/b.py")]
        >>> restated({"src/a.py", "src/b.py"}, rest), restated({"src/a.py"}, rest, by=("user",))
        ({'src/a.py'}, set())
    """
    roles = frozenset(by)
    out: set[str] = set()
    for value in dependencies:
        for role, text in rest:
            if value not in text:
                continue
            if role in roles:
                out.add(value)
            if role in roles or role == "assistant":
                break
    return out


def cut_dependencies(
    prefix: Sequence[tuple[str, str]],
    rest: Sequence[tuple[str, str]],
    *,
    definition: Definition = "strict",
) -> set[str]:
    r"""The dependencies of a cut between ``prefix`` and ``rest``, by one of :data:`DEFINITIONS`.

    ``"strict"`` (the headline): what the continuation uses from a prefix tool output, paths
    matched by ``/``-aligned suffix too, less what a later user message states before its
    first use. ``"rederivable_excluded"``: whole matches only, and less what a later user
    message or tool output shows before its first use.

    Args:
        prefix: The history up to the cut as ``(role, text)`` pairs: roles ``"system"``,
            ``"user"``, ``"assistant"`` and ``"tool"``.
        rest: The continuation, the same way (an assistant text holds its tool-call arguments).
        definition: Which definition.

    Returns:
        The dependencies.

    Raises:
        ValueError: For another definition.

    Example:
        >>> prefix = [("user", "fix it"), ("tool", "/testbed/src/a.py\n/testbed/src/b.py")]
        >>> rest = [("assistant", "grep -rn x /testbed/src"), ("tool", "/testbed/src/a.py:3: x"),
        ...         ("assistant", "nl src/a.py; cat /testbed/src/a.py /testbed/src/b.py")]
        >>> sorted(cut_dependencies(prefix, rest))
        ['/testbed/src/a.py', '/testbed/src/b.py', 'src/a.py']
        >>> sorted(cut_dependencies(prefix, rest, definition="rederivable_excluded"))
        ['/testbed/src/b.py']
    """
    if definition not in DEFINITIONS:
        raise ValueError(f"definition must be one of {DEFINITIONS}, got {definition!r}")
    strict = definition == "strict"
    deps = future_dependencies(
        [text for role, text in prefix if role == "tool"],
        [text for role, text in rest if role == "assistant"],
        prompt="\n".join(text for role, text in prefix if role in ("system", "user")),
        suffixes=strict,
    )
    return deps - restated(deps, rest, ("user",) if strict else ("user", "tool"))


@dataclass(frozen=True)
class Verdict:
    """The judgement of one cut.

    Attributes:
        dependencies: How many dependencies the continuation has.
        missing: Those not visible in the active view.
        recoverable: Those among ``missing`` found in a folded sidecar.
        recovery_calls: The fewest sidecars that together hold every recoverable one (a
            minimal cover: exact for up to 16 candidate sidecars, greedy beyond).
    """

    dependencies: int
    missing: tuple[str, ...]
    recoverable: tuple[str, ...]
    recovery_calls: int

    @property
    def strict(self) -> bool:
        """Every dependency visible."""
        return not self.missing

    @property
    def with_recovery(self) -> bool:
        """Every dependency visible or in a folded sidecar."""
        return len(self.recoverable) == len(self.missing)


def verdict(dependencies: set[str], view: str, sidecars: Mapping[str, str]) -> Verdict:
    """Judge a cut: which dependencies the view lacks, and which sidecars hold them.

    Args:
        dependencies: From :func:`future_dependencies`.
        view: The text of the policy's active view (everything the model would see).
        sidecars: ``object id -> payload`` of the folded objects.
    """
    missing = tuple(sorted(d for d in dependencies if d not in view))
    holds = {k: frozenset(d for d in missing if d in text) for k, text in sidecars.items()}
    recoverable = tuple(d for d in missing if any(d in held for held in holds.values()))
    return Verdict(len(dependencies), missing, recoverable, minimal_cover(holds))


def minimal_cover(holds: Mapping[str, frozenset[str]], exact_up_to: int = 16) -> int:
    """The fewest sets of ``holds`` whose union is the union of them all.

    Sets contained in another are dropped first; then, with at most ``exact_up_to`` left,
    every combination is tried from the smallest size up (exact), otherwise the set covering
    most of what is still missing is taken, repeatedly (greedy, within a log factor).

    Example:
        >>> minimal_cover({"a": frozenset("xy"), "b": frozenset("y"), "c": frozenset("z")})
        2
    """
    sets = sorted({s for s in holds.values() if s}, key=lambda s: (-len(s), sorted(s)))
    kept = [s for i, s in enumerate(sets) if not any(s < other for other in sets[:i])]
    goal = frozenset().union(*kept)
    if len(kept) <= exact_up_to:
        for size in range(len(kept) + 1):
            if any(frozenset().union(*c) == goal for c in combinations(kept, size)):
                return size
    left, calls = set(goal), 0
    while left:
        left -= max(kept, key=lambda s: len(left & s))
        calls += 1
    return calls
