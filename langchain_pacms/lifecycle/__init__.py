"""Context lifecycle (Self-GC): indexed objects, fold / mask / prune, sidecars, recovery.

Everything here loads with the package's core dependencies except ``LifecycleMiddleware``,
which needs LangChain v1 (``pip install "langchain-pacms[middleware]"``) and is imported on
first access.

Example:
    >>> from langchain_pacms.lifecycle import LifecycleHarness, HeuristicPlanner
    >>> harness = LifecycleHarness(HeuristicPlanner())
    >>> harness.threshold, harness.boundary
    (0.0, 'auto')
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_pacms.lifecycle.actions import (
    Action,
    ActionResult,
    SidecarRecord,
    apply_actions,
    find_locators,
    mask_text,
    provider_problems,
    restore,
    span_payload,
)
from langchain_pacms.lifecycle.harness import (
    COMMIT_EVENT,
    Commit,
    HarnessStats,
    LifecycleHarness,
    at_boundary,
    boundary_in_force,
)
from langchain_pacms.lifecycle.heuristic import HeuristicPlanner, recent_turns
from langchain_pacms.lifecycle.llm_planner import LLMPlanner, PlanAction, PlanSchema
from langchain_pacms.lifecycle.node import IDS_KEY, create_lifecycle_node
from langchain_pacms.lifecycle.objects import (
    ContextIndex,
    ContextObject,
    index_messages,
    payload_of,
)
from langchain_pacms.lifecycle.plan import Plan, Planner
from langchain_pacms.lifecycle.recover import RECOVER_TOOL_NAME, RecoverInput, make_recover_tool
from langchain_pacms.lifecycle.sidecar import (
    AUDIT_NAMESPACE,
    SIDECAR_NAMESPACE,
    SidecarError,
    SidecarIntegrityError,
    SidecarNotFoundError,
    SidecarStore,
)
from langchain_pacms.lifecycle.validate import Checked, Rejection, check_actions

if TYPE_CHECKING:
    from langchain_pacms.lifecycle.middleware import LifecycleMiddleware, LifecycleState

__all__ = [
    "AUDIT_NAMESPACE",
    "COMMIT_EVENT",
    "IDS_KEY",
    "RECOVER_TOOL_NAME",
    "SIDECAR_NAMESPACE",
    "Action",
    "ActionResult",
    "Checked",
    "Commit",
    "ContextIndex",
    "ContextObject",
    "HarnessStats",
    "HeuristicPlanner",
    "LLMPlanner",
    "LifecycleHarness",
    "LifecycleMiddleware",
    "LifecycleState",
    "Plan",
    "PlanAction",
    "PlanSchema",
    "Planner",
    "RecoverInput",
    "Rejection",
    "SidecarError",
    "SidecarIntegrityError",
    "SidecarNotFoundError",
    "SidecarRecord",
    "SidecarStore",
    "apply_actions",
    "at_boundary",
    "boundary_in_force",
    "check_actions",
    "create_lifecycle_node",
    "find_locators",
    "index_messages",
    "make_recover_tool",
    "mask_text",
    "payload_of",
    "provider_problems",
    "recent_turns",
    "restore",
    "span_payload",
]

_LAZY = {"LifecycleMiddleware", "LifecycleState"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from langchain_pacms.lifecycle import middleware

        return getattr(middleware, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
