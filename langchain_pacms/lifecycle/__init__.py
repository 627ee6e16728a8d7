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
from langchain_pacms.lifecycle.heuristic import HeuristicPlanner, recent_turns
from langchain_pacms.lifecycle.llm_planner import LLMPlanner, PlanAction, PlanSchema
from langchain_pacms.lifecycle.objects import (
    ContextIndex,
    ContextObject,
    index_messages,
    payload_of,
)
from langchain_pacms.lifecycle.plan import Plan, Planner

__all__ = [
    "Action",
    "ActionResult",
    "ContextIndex",
    "ContextObject",
    "HeuristicPlanner",
    "LLMPlanner",
    "Plan",
    "PlanAction",
    "PlanSchema",
    "Planner",
    "SidecarRecord",
    "apply_actions",
    "find_locators",
    "index_messages",
    "mask_text",
    "payload_of",
    "provider_problems",
    "recent_turns",
]
