"""What a model request adds to a call's selection: its budget, its tools' tokens, recovery."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from langchain_core.utils.function_calling import convert_to_openai_tool

__all__ = ["RequestCost", "tool_name", "tool_schema_text", "tool_state"]


class RequestCost(NamedTuple):
    """What a model call's request adds to the selection.

    Its budget (by the model's profile), its tools' tokens, and whether the model can call
    ``recover_context`` (fold stubs are sent only then).
    """

    budget: int | None
    tools: int
    recovers: bool = True


def tool_name(tool: Any) -> str | None:
    """A bound tool's name (a ``BaseTool``, an OpenAI-style dict, or a function)."""
    if isinstance(tool, Mapping):
        inner = tool.get("function")
        return str(tool.get("name") or (inner.get("name") if isinstance(inner, Mapping) else ""))
    return getattr(tool, "name", None) or getattr(tool, "__name__", None)


def tool_schema_text(tool: Any) -> str:
    """A bound tool's schema as the budget counts it: ``convert_to_openai_tool``, as JSON."""
    return json.dumps(convert_to_openai_tool(tool), sort_keys=True, ensure_ascii=False, default=str)


def tool_state(tool: Any) -> Any:
    """What a tool's schema is made of, cheaply: a count made for it holds while this is equal.

    A dict's JSON; a ``BaseTool``'s name, description and argument schema (by identity); a
    function's name and docstring. A tool edited in place (a description that grows) gives
    another state, so its schema is counted again.

    Example:
        >>> tool = {"name": "ls", "description": "List."}
        >>> before = tool_state(tool)
        >>> tool["description"] = "List the files of a folder."
        >>> tool_state(tool) == before
        False
    """
    if isinstance(tool, Mapping):
        return json.dumps(tool, sort_keys=True, ensure_ascii=False, default=str)
    schema = getattr(tool, "args_schema", None)
    return (
        getattr(tool, "name", None) or getattr(tool, "__name__", None),
        getattr(tool, "description", None) or getattr(tool, "__doc__", None),
        id(schema) if schema is not None else None,
    )
