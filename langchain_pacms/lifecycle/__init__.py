"""Context lifecycle (Self-GC): indexed objects, fold / mask / prune, sidecars, recovery."""

from langchain_pacms.lifecycle.actions import (
    Action,
    ActionResult,
    SidecarRecord,
    apply_actions,
    find_locators,
    mask_text,
    provider_problems,
)
from langchain_pacms.lifecycle.objects import (
    ContextIndex,
    ContextObject,
    index_messages,
    payload_of,
)
from langchain_pacms.lifecycle.plan import Plan, Planner
from langchain_pacms.lifecycle.recover import RECOVER_TOOL_NAME, RecoverInput, make_recover_tool
from langchain_pacms.lifecycle.sidecar import (
    SIDECAR_NAMESPACE,
    SidecarError,
    SidecarIntegrityError,
    SidecarNotFoundError,
    SidecarStore,
)

__all__ = [
    "RECOVER_TOOL_NAME",
    "SIDECAR_NAMESPACE",
    "Action",
    "ActionResult",
    "ContextIndex",
    "ContextObject",
    "Plan",
    "Planner",
    "RecoverInput",
    "SidecarError",
    "SidecarIntegrityError",
    "SidecarNotFoundError",
    "SidecarRecord",
    "SidecarStore",
    "apply_actions",
    "find_locators",
    "index_messages",
    "make_recover_tool",
    "mask_text",
    "payload_of",
    "provider_problems",
]
