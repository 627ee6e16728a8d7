"""Context lifecycle (Self-GC): indexed objects, fold / mask / prune, sidecars, recovery.

``LifecycleMiddleware`` needs LangChain v1 (the ``middleware`` extra) and loads on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_pacms.lifecycle.actions import (
    Action,
    ActionResult,
    apply_actions,
    provider_problems,
    restore,
)
from langchain_pacms.lifecycle.analysis import recent_turns
from langchain_pacms.lifecycle.boundary import at_boundary, boundary_in_force
from langchain_pacms.lifecycle.commit import COMMIT_EVENT, Commit, HarnessStats
from langchain_pacms.lifecycle.fold import SidecarRecord, span_payload
from langchain_pacms.lifecycle.graph_store import GraphStore
from langchain_pacms.lifecycle.harness import LifecycleHarness
from langchain_pacms.lifecycle.heuristic import HeuristicPlanner
from langchain_pacms.lifecycle.llm_planner import LLMPlanner, PlanAction, PlanSchema
from langchain_pacms.lifecycle.mask import mask_text
from langchain_pacms.lifecycle.node import (
    IDS_KEY,
    HarnessOptions,
    create_lifecycle_node,
    known_ids_of,
)
from langchain_pacms.lifecycle.objects import (
    ContextIndex,
    ContextObject,
    carry_ids,
    carry_numbers,
    index_messages,
)
from langchain_pacms.lifecycle.plan import Plan, Planner
from langchain_pacms.lifecycle.recover import (
    RECOVER_TOOL_NAME,
    RecoverCheck,
    RecoverInput,
    RecoverTool,
    make_recover_tool,
    object_hashes,
    unreadable_store,
)
from langchain_pacms.lifecycle.restored import (
    by_recovery,
    restored_in_turn,
    restored_note,
    with_unsent_noted,
)
from langchain_pacms.lifecycle.sidecar import (
    AUDIT_NAMESPACE,
    SIDECAR_NAMESPACE,
    SidecarAmbiguousError,
    SidecarError,
    SidecarIntegrityError,
    SidecarNotFoundError,
    SidecarStore,
    acopy_thread_sidecars,
    adelete_thread_sidecars,
    copy_thread_sidecars,
    delete_thread_sidecars,
)
from langchain_pacms.lifecycle.tuning import CommitRule, Masking, PlannerTuning
from langchain_pacms.lifecycle.validate import Checked, Rejection, check_actions
from langchain_pacms.lifecycle.variants import FoldMemo, FoldVariant, fold_variants
from langchain_pacms.messages.locators import find_locators
from langchain_pacms.messages.payload import payload_of

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
    "CommitRule",
    "ContextIndex",
    "ContextObject",
    "FoldMemo",
    "FoldVariant",
    "GraphStore",
    "HarnessOptions",
    "HarnessStats",
    "HeuristicPlanner",
    "LLMPlanner",
    "LifecycleHarness",
    "LifecycleMiddleware",
    "LifecycleState",
    "Masking",
    "Plan",
    "PlanAction",
    "PlanSchema",
    "Planner",
    "PlannerTuning",
    "RecoverCheck",
    "RecoverInput",
    "RecoverTool",
    "Rejection",
    "SidecarAmbiguousError",
    "SidecarError",
    "SidecarIntegrityError",
    "SidecarNotFoundError",
    "SidecarRecord",
    "SidecarStore",
    "acopy_thread_sidecars",
    "adelete_thread_sidecars",
    "apply_actions",
    "at_boundary",
    "boundary_in_force",
    "by_recovery",
    "carry_ids",
    "carry_numbers",
    "check_actions",
    "copy_thread_sidecars",
    "create_lifecycle_node",
    "delete_thread_sidecars",
    "find_locators",
    "fold_variants",
    "index_messages",
    "known_ids_of",
    "make_recover_tool",
    "mask_text",
    "object_hashes",
    "payload_of",
    "provider_problems",
    "recent_turns",
    "restore",
    "restored_in_turn",
    "restored_note",
    "span_payload",
    "unreadable_store",
    "with_unsent_noted",
]

_LAZY = {"LifecycleMiddleware", "LifecycleState"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from langchain_pacms.lifecycle import middleware

        return getattr(middleware, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
