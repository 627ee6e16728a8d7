"""A plan (a summary and actions on object ids) and the protocol every planner follows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from langchain_core.messages import BaseMessage

from langchain_pacms.lifecycle.actions import Action
from langchain_pacms.lifecycle.objects import ContextIndex
from langchain_pacms.lifecycle.validate import Rejection

__all__ = ["Plan", "Planner"]


@dataclass(frozen=True)
class Plan:
    """A proposed set of lifecycle actions.

    Attributes:
        summary: One or two sentences on what the plan does and why.
        planner: Name of the planner that made it.
        rejected: ``None`` for a usable plan, else why none could be made (no actions then).
        dropped: Actions the planner proposed and dropped itself, with reasons (the harness
            counts them as rejected actions).

    Example:
        >>> plan = Plan("fold the old read", (Action("fold", "function:tool:1", "stable body"),))
        >>> plan.ok, plan.groups(), Plan.rejection("unknown id").ok
        (True, {'fold': ['function:tool:1']}, False)
    """

    summary: str
    actions: tuple[Action, ...] = ()
    planner: str = ""
    rejected: str | None = None
    dropped: tuple[Rejection, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the planner produced a usable plan."""
        return self.rejected is None

    def groups(self) -> dict[str, list[str]]:
        """Target ids grouped by operation, in plan order."""
        out: dict[str, list[str]] = {}
        for action in self.actions:
            out.setdefault(action.op, []).append(action.target)
        return out

    @classmethod
    def rejection(cls, reason: str, *, planner: str = "") -> Plan:
        """A plan with no actions that says why none could be made."""
        return cls(summary="", actions=(), planner=planner, rejected=reason)


@runtime_checkable
class Planner(Protocol):
    """Proposes a :class:`Plan` for an indexed history; returns a rejection rather than raising."""

    name: str

    def plan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        """Propose actions for ``index`` (built from ``messages``)."""
        ...

    async def aplan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        """Async twin of :meth:`plan`."""
        ...
