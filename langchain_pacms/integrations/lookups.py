"""What a call looks up besides the conversation: a store's memories, a retriever's documents."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore

from langchain_pacms._steps import Call, Steps
from langchain_pacms.integrations.config import SelectionConfig
from langchain_pacms.integrations.options import MemoryOptions

__all__ = ["lookups", "namespaces"]

logger = logging.getLogger(__name__)

_PAGE = 100  # items per store.search page when a namespace is scanned


def _template_values(config: RunnableConfig | None, context: Any) -> dict[str, Any]:
    values: dict[str, Any] = dict((config or {}).get("configurable") or {})
    if isinstance(context, Mapping):
        values.update(context)
    elif dataclasses.is_dataclass(context) and not isinstance(context, type):
        values.update(dataclasses.asdict(context))
    elif context is not None and hasattr(context, "model_dump"):
        values.update(context.model_dump())
    return values


def namespaces(
    memory: MemoryOptions,
    state: Any,
    config: RunnableConfig | None,
    context: Any,
    *,
    strict: bool = False,
) -> list[tuple]:
    """Memory namespaces with ``{placeholders}`` filled.

    One without its value is skipped with a warning, or raises ``ValueError`` under ``strict``.
    """
    values = _template_values(config, context)
    out = []
    for ns in memory.namespaces:
        try:
            if callable(ns):
                out.append(tuple(ns(state, values)))
            else:
                out.append(tuple(p.format(**values) if "{" in p else p for p in ns))
        except (KeyError, IndexError) as err:
            if strict:
                raise ValueError(f"memory namespace {ns!r} needs {err}") from err
            logger.warning("memory namespace %r needs %s; skipped", ns, err)
    return out


def lookups(
    options: SelectionConfig,
    source: str,
    store: BaseStore | None,
    query: str,
    state: Any,
    config: Any,
    context: Any,
) -> Steps[tuple[list[Any], list[Any], str | None]]:
    """Steps to one call's ``(memories, documents, error)`` (the configured store before ``store``).

    A failed lookup is logged and reported in ``error``, or raised under ``strict``.
    """
    memories: list[Any] = []
    documents: list[Any] = []
    errors = []
    memory = options.memory
    if memory is not None and memory.store is not None:
        store = memory.store
    if memory is not None and store is None:
        missing = (
            "memory is configured but there is no store: compile the graph with store=..., "
            "or pass MemoryOptions(store=...)"
        )
        if options.strict:
            raise ValueError(missing)
        errors.append(missing)
    if memory is not None and store is not None:
        for ns in namespaces(memory, state, config, context, strict=options.strict):
            try:
                memories += yield from _namespace_items(memory, source, store, ns, query)
            except Exception as err:
                if options.strict:
                    raise
                errors.append(f"{type(err).__name__}: {err}")
    retriever = options.retriever
    if retriever is not None and query.strip():
        try:
            documents = list((yield Call(retriever.invoke, retriever.ainvoke, (query, config))))
        except Exception as err:
            if options.strict:
                raise
            errors.append(f"{type(err).__name__}: {err}")
    if errors:
        logger.warning("pacms %s: memory/document lookup failed: %s", source, errors)
    return memories, documents, "; ".join(errors) or None


def _namespace_items(
    memory: MemoryOptions, source: str, store: BaseStore, ns: tuple, query: str
) -> Steps[list[Any]]:
    """One namespace's memories: the nearest ones, or, without a vector index, a scan."""
    if query.strip() and getattr(store, "index_config", None):
        items = yield Call(
            store.search, store.asearch, (ns,), {"query": query, "limit": memory.limit}
        )
        return list(items)
    cap = memory.scan_limit
    found: list[Any] = []
    while len(found) <= cap:  # one item past the cap tells whether the cap cut it short
        want = min(_PAGE, cap + 1 - len(found))
        page = yield Call(store.search, store.asearch, (ns,), {"limit": want, "offset": len(found)})
        found += page
        if len(page) < want:
            break
    if len(found) > cap:
        logger.warning(
            "pacms %s: namespace %r holds more than MemoryOptions.scan_limit=%d items and the "
            "store has no vector index; only the first %d were considered",
            source,
            ns,
            cap,
            cap,
        )
    return found[:cap]
