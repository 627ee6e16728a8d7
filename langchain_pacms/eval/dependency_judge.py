"""The no-impact judge of the lifecycle replay: are the continuation's exact dependencies visible?

A *future dependency* of a cut is an exact string that the rest of the session uses (in the
arguments of a later tool call, or in a later assistant message) and that first appeared in a
tool output before the cut: a path, a URL, an identifier mixing letters and digits, a number
of four or more digits, or a quoted value. Strings the task or the system prompt already gave
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

__all__ = ["Verdict", "extract", "future_dependencies", "verdict"]

_TOKEN = re.compile(
    r"https?://[^\s\"'<>)\]},]+"  # URLs
    r"|(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+"  # paths with at least one slash
    r"|\b[\w-]+\.(?:py|rst|md|txt|json|ya?ml|toml|cfg|ini|js|ts|html|sh|c|h|go|rs)\b"  # file names
    r"|\b(?=[\w-]*[A-Za-z])(?=[\w-]*\d)[A-Za-z0-9][\w-]{3,}"  # letters and digits mixed, >= 4
    r"|\b\d{4,}\b"  # long numbers
)
_QUOTED = re.compile(r"\"([^\"\n]{4,80})\"|'([^'\n]{4,80})'")


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
        recovery_calls: Distinct sidecars the recoverable ones need.
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
    holders = {d: [k for k, text in sidecars.items() if d in text] for d in missing}
    recoverable = tuple(d for d in missing if holders[d])
    calls: set[str] = set()
    for d in recoverable:
        calls.add(holders[d][0])
    return Verdict(len(dependencies), missing, recoverable, len(calls))
