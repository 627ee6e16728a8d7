"""The no-impact judge of the lifecycle replay: are the continuation's exact dependencies visible?

A *future dependency* of a cut is an exact string that the rest of the session uses (in the
arguments of a later tool call, or in a later assistant message) and that first appeared in a
tool output before the cut: a path, a URL, an identifier mixing letters and digits, a number
of four or more digits, or a quoted value (a quoted string followed by ``:``, a JSON key, is a
field name and not a value). Strings the task or the system prompt already gave
are not dependencies (the policy never removes those).

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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations

__all__ = ["Verdict", "extract", "future_dependencies", "minimal_cover", "verdict"]

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


def extract(text: str) -> set[str]:
    """The exact strings of ``text`` that count as dependencies when reused later.

    Example:
        >>> sorted(extract('open "setup.py" at https://x.io/a then id HAT039 and 20240521'))
        ['20240521', 'HAT039', 'https://x.io/a', 'setup.py']
    """
    found = {m.group(0).rstrip(".:") for m in _TOKEN.finditer(text)}
    found.update(a or b for a, b in _QUOTED.findall(text))
    return {t for t in found if len(t) >= 4}


def future_dependencies(
    tool_outputs: Iterable[str], continuation: Iterable[str], *, prompt: str = ""
) -> set[str]:
    """Strings the continuation uses that first came from a tool output before the cut.

    Args:
        tool_outputs: The tool outputs of the prefix.
        continuation: What the rest of the session does: its tool-call arguments and
            assistant texts.
        prompt: The system prompt and user messages of the prefix (never dependencies).

    Returns:
        The dependencies.
    """
    given = extract(prompt)
    seen: set[str] = set()
    for output in tool_outputs:
        seen |= extract(output)
    used: set[str] = set()
    for text in continuation:
        used |= extract(text)
    return {t for t in used & seen if t not in given and t not in prompt}


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
