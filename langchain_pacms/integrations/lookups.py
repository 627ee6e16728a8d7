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
    """The values ``{placeholders}`` take: ``configurable``, then the runtime context's fields.

    A ``None`` is no value (it neither fills a placeholder nor hides a configurable one). A
    dataclass context is read field by field, not copied (it may hold a connection or a lock).
    """
    fields: dict[str, Any] = {}
    if isinstance(context, Mapping):
        fields = dict(context)
    elif dataclasses.is_dataclass(context) and not isinstance(context, type):
        fields = {f.name: getattr(context, f.name) for f in dataclasses.fields(context)}
    elif context is not None and hasattr(context, "model_dump"):
        fields = context.model_dump()
    configurable = (config or {}).get("configurable") or {}
    return {k: v for k, v in [*configurable.items(), *fields.items()] if v is not None}


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
        seen: set[tuple[tuple[str, ...], str]] = set()  # namespaces that overlap find items again
        for ns in namespaces(memory, state, config, context, strict=options.strict):
            try:
                items = yield from _namespace_items(memory, source, store, ns, query)
            except Exception as err:
                if options.strict:
                    raise
                errors.append(f"{type(err).__name__}: {err}")
                continue
            for item in items:
                key = (tuple(getattr(item, "namespace", ())), str(getattr(item, "key", id(item))))
                if key not in seen:
                    seen.add(key)
                    memories.append(item)
    retriever = options.retriever
    if retriever is not None and query.strip():
        try:
            found = yield Call(retriever.invoke, retriever.ainvoke, (query, config))
            documents = _distinct(list(found))
        except Exception as err:
            if options.strict:
                raise
            errors.append(f"{type(err).__name__}: {err}")
    if errors:
        logger.warning("pacms %s: memory/document lookup failed: %s", source, errors)
    return memories, documents, "; ".join(errors) or None


def _distinct(documents: list[Any]) -> list[Any]:
    """``documents`` without repeats, each one candidate however often it came back.

    A repeat: the same text under the same id, or, without an id, the same text and metadata.
    """
    seen: set[tuple[str, str]] = set()
    out = []
    for doc in documents:
        text = repr(getattr(doc, "page_content", doc))
        ident = getattr(doc, "id", None)
        key = (f"id:{ident}", text) if ident else (repr(getattr(doc, "metadata", None)), text)
        if key not in seen:
            seen.add(key)
            out.append(doc)
    return out


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
