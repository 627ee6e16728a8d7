"""Fold stubs in per-call selection: each tool span's stub variant, reused spans, sidecar writes.

With ``ToolLoopOptions.fold_stubs`` an optional tool span that is not kept whole can be sent as
its lifecycle fold stub (:func:`~langchain_pacms.lifecycle.fold_variants`); every stub that is
sent has its payload written to the sidecar store first, under the run's thread, so the
``recover_context`` tool finds it. The lifecycle is reached through its public package-level
names only.

Example:
    >>> stubs = FoldStubs(ToolLoopOptions())
    >>> stubs.variants([], len)  # fold_stubs is off without a sidecar store
    {}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig

from langchain_pacms._steps import Call, Steps
from langchain_pacms.integrations.fit import Pool
from langchain_pacms.integrations.options import ToolLoopOptions
from langchain_pacms.lifecycle import FoldMemo, FoldVariant, SidecarStore, fold_variants
from langchain_pacms.messages.handles import reusable_values
from langchain_pacms.messages.memo import MessageMemo
from langchain_pacms.messages.payload import LIFECYCLE_KEY
from langchain_pacms.messages.reuse import latest_reads, reused_spans
from langchain_pacms.messages.runs import thread_of
from langchain_pacms.messages.spans import Span
from langchain_pacms.selector import Selection

__all__ = ["FoldStubs"]


class FoldStubs:
    """The fold stubs of one integration's calls, remembered between calls.

    Args:
        options: The tool-loop options (``fold_stubs``, ``lift_reused``, ``sidecar_store``).
    """

    def __init__(self, options: ToolLoopOptions) -> None:
        self.options = options
        self._memo: FoldMemo | None = None  # the variants of the spans seen, between calls

    def variants(
        self, messages: Sequence[BaseMessage], token_counter: Callable[[str], int]
    ) -> Mapping[int, FoldVariant]:
        """The fold-stub variants of the tool spans (none unless ``fold_stubs``)."""
        if not self.options.fold_stubs:
            return {}
        if self._memo is None:
            self._memo = FoldMemo()
        return fold_variants(messages, token_counter=token_counter, memo=self._memo)

    def reused(self, messages: Sequence[BaseMessage], pool: Pool, memo: MessageMemo) -> Pool:
        """``pool`` with its reused tool spans, and those the lifecycle folded already.

        A span is reused when its results hold a value a later call took up
        (:func:`~langchain_pacms.messages.reuse.reused_spans`) or it holds the newest read
        of a file (:func:`~langchain_pacms.messages.reuse.latest_reads`): ``lift_reused``
        raises its relevance, and its stub goes first in the stub floor. A span whose results the
        lifecycle already replaced by a fold stub has no stub variant of its own: its floor is
        the span itself, and its values are its stub's and those the stub left out as shown
        elsewhere. ``memo`` finds each result's values once per message.
        """
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
    ) -> Steps[list[str]]:
        """Write the payload of every fold stub that is sent to the sidecar store.

        It runs before the messages go to the model, so ``recover_context`` finds each one.
        Returns the object ids written.
        """
        sent = [
            c.source.indices[0]
            for c in selection.kept
            if isinstance(c.source, Span) and c.source.sends
        ]
        if not sent:
            return []
        assert self.options.sidecar_store is not None  # checked by ToolLoopOptions
        sidecars = SidecarStore(self.options.sidecar_store, thread_of(config, messages))
        records = [folds[i].record for i in sent]
        yield Call(sidecars.put_many, sidecars.aput_many, (records,))
        return [r.object_id for r in records]
