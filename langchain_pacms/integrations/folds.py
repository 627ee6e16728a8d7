"""Fold stubs in per-call selection: each tool span's stub variant, reused spans, sidecar writes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage
from langchain_core.runnables import RunnableConfig

from langchain_pacms._steps import Call, Steps
from langchain_pacms.integrations.fit import Pool
from langchain_pacms.integrations.options import ToolLoopOptions
from langchain_pacms.lifecycle import (
    FoldMemo,
    FoldVariant,
    SidecarStore,
    fold_variants,
    index_messages,
    known_ids_of,
    object_hashes,
)
from langchain_pacms.messages.handles import reusable_values
from langchain_pacms.messages.memo import MessageMemo
from langchain_pacms.messages.payload import LIFECYCLE_KEY
from langchain_pacms.messages.reuse import latest_reads, reused_spans
from langchain_pacms.messages.runs import state_messages, thread_of
from langchain_pacms.messages.spans import Span
from langchain_pacms.selector import Selection

__all__ = ["FoldStubs", "state_view"]


def state_view(
    messages: Sequence[BaseMessage], state: Any
) -> tuple[Mapping[str, str] | None, Callable[[FoldVariant], bool] | None]:
    """How fold stubs over ``messages`` agree with what ``recover_context`` finds in ``state``.

    Returns the ``message id -> object id`` map to number the spans with, and a test of whether a
    stub's payload is what ``recover_context`` finds under its id in the graph state (``None``:
    every one is). When the messages selected from are not the state's (a middleware before
    this one trimmed the request, reordered or copied messages, or added example rounds), their
    own positions would give a span the id of another round of the state: spans are numbered by
    the state's index instead, and a stub is sent only when the state's round of that id holds
    the same payload (an example round has none; a redacted copy holds another).

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> from langchain_pacms.lifecycle import fold_variants
        >>> def read(n, text):
        ...     call = {"name": "read", "args": {"path": f"{n}.py"}, "id": f"c{n}"}
        ...     return [AIMessage("", tool_calls=[call], id=f"a{n}"),
        ...             ToolMessage(text, tool_call_id=f"c{n}", id=f"t{n}")]
        >>> held = [HumanMessage("go", id="h"), *read(1, "one"), *read(2, "two")]
        >>> sent = [held[0], *read(2, "two"), *read(3, "an example")]  # copies, and an example
        >>> known, recoverable = state_view(sent, {"messages": held})
        >>> variants = fold_variants(sent, known_ids=known)
        >>> [(v.record.object_id, recoverable(v)) for v in variants.values()]
        [('function:tool:2', True), ('function:tool:3', False)]
    """
    known = known_ids_of(state)
    held = state_messages(state)
    sent = [m for m in messages if not isinstance(m, SystemMessage)]
    kept = [m for m in held if not isinstance(m, SystemMessage)]
    if not held or (len(sent) == len(kept) and all(a is b for a, b in zip(sent, kept))):
        return known, None
    index = index_messages(held, known_ids=known)

    def recoverable(variant: FoldVariant) -> bool:
        obj = index.by_id.get(variant.record.object_id)
        if obj is None or obj.state != "active":
            return False
        digest = variant.record.sha256  # a stub of the results alone needs no span payload built
        return digest == obj.sha256 or digest in object_hashes(held, obj)[0]

    return index.id_map, recoverable


class FoldStubs:
    """The fold stubs of one integration's calls (``options``: the tool-loop options)."""

    def __init__(self, options: ToolLoopOptions) -> None:
        self.options = options
        self._memo: FoldMemo | None = None  # the variants of the spans seen, between calls

    def variants(
        self, messages: Sequence[BaseMessage], token_counter: Callable[[str], int], state: Any
    ) -> Mapping[int, FoldVariant]:
        """The fold-stub variants of the tool spans (none unless ``fold_stubs``).

        Each stub names its span as ``recover_context`` finds it in the graph ``state``
        (:func:`state_view`).
        """
        if not self.options.fold_stubs:
            return {}
        if self._memo is None:
            self._memo = FoldMemo()
        known, recoverable = state_view(messages, state)
        found = fold_variants(
            messages, token_counter=token_counter, memo=self._memo, known_ids=known
        )
        if recoverable is None:
            return found
        return {i: v for i, v in found.items() if recoverable(v)}

    def reused(self, messages: Sequence[BaseMessage], pool: Pool, memo: MessageMemo) -> Pool:
        """``pool`` with its reused tool spans (values used later, newest reads) and folded ones."""
        tools = [
            sp
            for sp in pool.spans
            if sp.kind == "tool" and not sp.stub and len(sp.indices) > 1 and not sp.mandatory
        ]
        if not tools or not (self.options.lift_reused or self.options.fold_stubs):
            return pool

        def mark(i: int) -> Mapping[str, Any]:
            return messages[i].additional_kwargs.get(LIFECYCLE_KEY) or {}

        folded = {sp.indices[0] for sp in tools if mark(sp.indices[-1]).get("state") == "folded"}
        # each result's values, found once per message (a folded span's are its stub's), and
        # those a folded span's stub left out as shown elsewhere (only folded spans have any)
        values = {
            sp.indices[0]: frozenset().union(
                *(memo.values(messages[j]) for j in sp.indices[1:]),
                reusable_values(
                    "\n".join(str(t) for j in sp.indices for t in mark(j).get("elsewhere") or ())
                )
                if sp.indices[0] in folded
                else frozenset(),
            )
            for sp in tools
        }
        reused = reused_spans(messages, values) | latest_reads(messages, values.keys())
        return dataclasses.replace(
            pool,
            reused=reused,
            folded=frozenset(folded) if self.options.fold_stubs else frozenset(),
        )

    def store(
        self,
        messages: Sequence[BaseMessage],
        selection: Selection,
        folds: Mapping[int, FoldVariant],
        config: RunnableConfig | None,
        state: Any,
    ) -> Steps[list[str]]:
        """Write each sent fold stub's payload to the sidecar store first; the ids written.

        The thread is the one ``recover_context`` reads: the run's ``thread_id``, else named
        after the first message of the graph ``state`` (``messages`` without one).
        """
        sent = [
            c.source.indices[0]
            for c in selection.kept
            if isinstance(c.source, Span) and c.source.sends
        ]
        if not sent:
            return []
        assert self.options.sidecar_store is not None  # checked by ToolLoopOptions
        history = state_messages(state) or messages
        thread = thread_of(config, history)
        sidecars = SidecarStore.of_history(self.options.sidecar_store, thread, history)
        records = [folds[i].record for i in sent]
        yield Call(sidecars.put_many, sidecars.aput_many, (records,))
        return [r.object_id for r in records]
