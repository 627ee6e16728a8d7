"""Context lifecycle (Self-GC): indexed objects, fold / mask / prune, sidecars, recovery."""

from langchain_pacms.lifecycle.actions import (
    Action,
    ActionResult,
    SidecarRecord,
    apply_actions,
    find_locators,
    mask_text,
    provider_problems,
    restore,
)
from langchain_pacms.lifecycle.harness import (
    COMMIT_EVENT,
    Commit,
    HarnessStats,
    LifecycleHarness,
    at_boundary,
)
from langchain_pacms.lifecycle.heuristic import HeuristicPlanner, recent_turns
from langchain_pacms.lifecycle.llm_planner import LLMPlanner, PlanAction, PlanSchema
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

__all__ = [
    "AUDIT_NAMESPACE",
    "COMMIT_EVENT",
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
    "check_actions",
    "find_locators",
    "index_messages",
    "make_recover_tool",
    "mask_text",
    "payload_of",
    "provider_problems",
    "recent_turns",
    "restore",
]
