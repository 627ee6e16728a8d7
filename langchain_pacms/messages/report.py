"""Report each selection: traced run, custom event, log line, JSONL log (failures only logged)."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from langchain_core.callbacks import adispatch_custom_event, dispatch_custom_event
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import (
    ensure_config,
    get_async_callback_manager_for_config,
    get_callback_manager_for_config,
    patch_config,
)

from langchain_pacms._steps import Call, Steps, parameters_of
from langchain_pacms.selector import Selection

__all__ = [
    "EVENT_NAME",
    "SelectionLog",
    "areport_selection",
    "report_arguments",
    "report_selection",
    "selection_event",
    "traced_selection",
]

T = TypeVar("T")

logger = logging.getLogger(__name__)

EVENT_NAME = "pacms_selection"


def selection_event(selection: Selection, *, source: str, **extra: Any) -> dict[str, Any]:
    """The compact summary sent as the ``pacms_selection`` custom event, plus ``extra``."""
    kept = set(selection.kept_ids)
    kept_kinds = Counter(c.kind for c in selection.candidates if c.id in kept)
    dropped_kinds = Counter(c.kind for c in selection.candidates if c.id not in kept)
    return {
        "source": source,
        "strategy": selection.strategy,
        "kept": len(selection.kept_ids),
        "dropped": len(selection.candidates) - len(selection.kept_ids),
        "tokens_total": selection.tokens_total,
        "tokens_kept": selection.tokens_kept,
        "tokens_dropped": selection.tokens_dropped,
        "tokens_sent": selection.info.get("tokens_sent", selection.tokens_kept),
        "budget": selection.budget,
        "over_budget": selection.over_budget,
        "fell_back": selection.fell_back,
        "error": selection.error,
        "kept_by_kind": dict(kept_kinds),
        "dropped_by_kind": dict(dropped_kinds),
        "kept_ids": list(selection.kept_ids),
        "seconds": selection.timings.get("total"),
        "timings": dict(selection.timings),
        **extra,
    }


def _start_run(config: RunnableConfig | None, inputs: dict[str, Any]) -> Any:
    manager = get_callback_manager_for_config(ensure_config(config))
    return manager.on_chain_start(None, inputs, name=EVENT_NAME)


async def _astart_run(config: RunnableConfig | None, inputs: dict[str, Any]) -> Any:
    manager = get_async_callback_manager_for_config(ensure_config(config))
    return await manager.on_chain_start(None, inputs, name=EVENT_NAME)


def traced_selection(
    body: Callable[[RunnableConfig], Steps[tuple[T, Mapping[str, Any] | None]]],
    config: RunnableConfig | None,
    inputs: dict[str, Any],
) -> Steps[T]:
    """Steps running ``body`` (``child_config -> steps of (result, summary)``) as a child run."""
    run = yield Call(_start_run, _astart_run, (config, inputs))
    try:
        result, summary = yield from body(patch_config(config, callbacks=run.get_child()))
    except Exception as err:
        yield Call(run.on_chain_error, run.on_chain_error, (err,))
        raise
    yield Call(run.on_chain_end, run.on_chain_end, (dict(summary or {}),))
    return result


class SelectionLog:
    """Append-only JSONL log of selections, one record per model call (thread-safe).

    Args:
        path: File to append to; parent folders are created.

    Example:
        >>> import tempfile, pathlib
        >>> from langchain_pacms import ContextSelector
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "sel.jsonl"
        >>> SelectionLog(path).write(ContextSelector().select(["a"], "a", 5), query="a", source="x")
        >>> len(path.read_text().splitlines())
        1
    """

    _locks: ClassVar[dict[str, threading.Lock]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        key = str(self.path.resolve())
        with SelectionLog._guard:
            self._lock = SelectionLog._locks.setdefault(key, threading.Lock())

    def record(
        self, selection: Selection, *, query: str, source: str, **extra: Any
    ) -> dict[str, Any]:
        """The record written for one selection."""
        return {
            "timestamp": datetime.now(timezone.utc).isoformat(),
            "source": source,
            "query": query,
            **selection.to_dict(),
            **extra,
        }

    def write(self, selection: Selection, *, query: str, source: str, **extra: Any) -> None:
        """Append one record."""
        self.append(self.record(selection, query=query, source=source, **extra))

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one JSON record as a line (thread-safe per file).

        A lone surrogate (a file name that is not UTF-8, as ``os.listdir`` gives it) is written
        as its JSON escape, so every line stays valid JSON and UTF-8.
        """
        line = json.dumps(record, ensure_ascii=False, default=str)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8", errors="backslashreplace") as handle:
                handle.write(line + "\n")


def _log_line(event: dict[str, Any]) -> None:
    if event["fell_back"]:
        logger.warning(
            "pacms %s: selection fell back to recency (%s); kept %d/%d candidates",
            event["source"],
            event["error"],
            event["kept"],
            event["kept"] + event["dropped"],
        )
    elif logger.isEnabledFor(logging.DEBUG):
        logger.debug(
            "pacms %s: %s kept %d/%d candidates, %d/%d tokens, %d sent (budget %d)%s",
            event["source"],
            event["strategy"],
            event["kept"],
            event["kept"] + event["dropped"],
            event["tokens_kept"],
            event["tokens_total"],
            event["tokens_sent"],
            event["budget"],
            " over budget (mandatory only)" if event["over_budget"] else "",
        )


def _dispatch_failed(err: Exception) -> None:
    if isinstance(err, RuntimeError):
        return  # not inside a run: nobody to tell
    logger.warning("pacms_selection event handler failed: %s", err)  # never break the agent


def report_arguments(
    selection: Selection,
    *,
    query: str,
    source: str,
    config: RunnableConfig | None = None,
    log: SelectionLog | None = None,
    **extra: Any,
) -> tuple[dict[str, Any], RunnableConfig | None]:
    """The parameters of :func:`report_selection` and its twin: the event (logged) and config."""
    event = selection_event(selection, source=source, **extra)
    _log_line(event)
    if log is not None:
        try:
            log.write(selection, query=query, source=source, **extra)
        except OSError as err:
            logger.warning("could not write the selection log %s: %s", log.path, err)
    return event, config


@parameters_of(report_arguments)
def report_selection(*args: Any, **kwargs: Any) -> dict[str, Any]:  # noqa: D417 (the parameters)
    """Report one selection: a custom event, a log line and, with ``log``, a JSONL record.

    Args:
        selection: The verdict.
        query: The query it was made for.
        source: Which integration selected (``"hook"``, ``"middleware"``, ...).
        config: The current run's config (default: the one in context, if any).
        log: Optional JSONL log.
        **extra: Extra fields for the event and the record (e.g. ``memory_error``).

    Returns:
        The event payload.
    """
    event, config = report_arguments(*args, **kwargs)
    try:
        dispatch_custom_event(EVENT_NAME, event, config=config)
    except Exception as err:
        _dispatch_failed(err)
    return event


@parameters_of(report_arguments)
async def areport_selection(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Async twin of :func:`report_selection`."""
    event, config = report_arguments(*args, **kwargs)
    try:
        await adispatch_custom_event(EVENT_NAME, event, config=config)
    except Exception as err:
        _dispatch_failed(err)
    return event
