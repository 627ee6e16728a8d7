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
from langchain_pacms.lifecycle.objects import (
    ContextIndex,
    ContextObject,
    index_messages,
    payload_of,
)
from langchain_pacms.lifecycle.plan import Plan, Planner
from langchain_pacms.lifecycle.sidecar import (
    SIDECAR_NAMESPACE,
    SidecarError,
    SidecarIntegrityError,
    SidecarNotFoundError,
    SidecarStore,
)
from langchain_pacms.lifecycle.validate import Checked, Rejection, check_actions

__all__ = [
    "COMMIT_EVENT",
    "SIDECAR_NAMESPACE",
    "Action",
    "ActionResult",
    "Checked",
    "Commit",
    "ContextIndex",
    "ContextObject",
    "HarnessStats",
    "LifecycleHarness",
    "Plan",
    "Planner",
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
    "mask_text",
    "payload_of",
    "provider_problems",
    "restore",
]
