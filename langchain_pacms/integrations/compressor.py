"""``PACMSCompressor``: budgeted, query-aware document selection as a LangChain compressor."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import Embeddings
from langchain_core.runnables import RunnableConfig
from pydantic import ConfigDict, InstanceOf

from langchain_pacms._steps import Call, Steps, adrive_calls, drive_calls
from langchain_pacms.budget import Budget, BudgetInput
from langchain_pacms.core import Strategy
from langchain_pacms.integrations.options import StrategyOptions
from langchain_pacms.messages.report import areport_selection, report_selection, traced_selection
from langchain_pacms.selector import Candidate, ContextSelector, Selection, Selector

if TYPE_CHECKING:
    from langchain_core.callbacks import Callbacks

__all__ = ["METADATA_PREFIX", "PACMSCompressor"]

METADATA_PREFIX = "pacms_"
"""Prefix of the metadata keys the compressor writes (see :class:`PACMSCompressor`)."""


def _copy_key(text: str) -> str:
    """What copies of ``text`` share: the text casefolded, its runs of whitespace one space."""
    return " ".join(text.casefold().split())


def _prefer_higher_ranked(documents: Sequence[Document], selection: Selection) -> Selection:
    """``selection`` with kept documents swapped for dropped, higher-ranked copies within budget.

    Copies are the same text up to case and whitespace: punctuation and symbols count
    (``C#`` is no copy of ``C++``).
    """
    kept = set(selection.kept_ids)
    room = selection.budget - selection.tokens_kept
    copies: dict[str, list[int]] = {}
    for index, doc in enumerate(documents):
        copies.setdefault(_copy_key(doc.page_content), []).append(index)
    swaps: dict[str, str] = {}  # replaced id -> the higher-ranked copy kept in its place
    for group in copies.values():
        if len(group) < 2:
            continue
        for j in group:
            if str(j) in kept:
                continue
            for i in reversed(group):  # the lowest-ranked kept copy first
                extra = selection.tokens[str(j)] - selection.tokens[str(i)]
                if i > j and str(i) in kept and extra <= room:
                    room -= extra
                    kept.discard(str(i))
                    kept.add(str(j))
                    swaps[str(i)] = str(j)
                    break
    if not swaps:
        return selection
    tokens_kept = sum(selection.tokens[cid] for cid in kept)
    return dataclasses.replace(
        selection,
        kept_ids=tuple(str(c.id) for c in selection.candidates if str(c.id) in kept),
        pick_order=tuple(swaps.get(cid, cid) for cid in selection.pick_order),
        gains=MappingProxyType({swaps.get(cid, cid): g for cid, g in selection.gains.items()}),
        tokens_kept=tokens_kept,
        tokens_dropped=selection.tokens_total - tokens_kept,
    )


def _selector(selector: Selector | Embeddings | None) -> Selector:
    """``selector`` itself, or a ``ContextSelector`` built with it as its embeddings."""
    if isinstance(selector, Selector):
        return selector
    if selector is None or isinstance(selector, Embeddings):
        return ContextSelector(selector)
    raise ValueError(
        f"selector must be a Selector or LangChain Embeddings, got {type(selector).__name__}"
    )


class PACMSCompressor(BaseDocumentCompressor):
    """Keep the documents that best cover a query within a token budget.

    Use it as ``base_compressor`` of ``ContextualCompressionRetriever`` or in a
    ``DocumentCompressorPipeline``. It returns new documents in input order, with metadata
    ``pacms_relevance``, ``pacms_gain`` (at pick time, or ``None``), ``pacms_pick_rank`` (from
    ``0``) and ``pacms_strategy`` (the one that ran: ``"lastk"`` when it fell back).

    Args:
        budget: Tokens per call, ``("tokens", n)``, ``("ratio", x)`` (of the documents' tokens)
            or a ``Budget`` (not a ``fraction`` one: a compressor has no chat model).
        strategy: A strategy name or callable, or its options (``StrategyOptions(...)``,
            ``Pacms(...)``); ``None``: the selector's default.
        selector: A :class:`~langchain_pacms.selector.Selector` (share one to share its warm
            cache), or the ``Embeddings`` of a ``ContextSelector`` built here.
        input_order: ``"ranked"`` (default: best first, so recency keeps the head of the
            ranking, and of two copies the higher-ranked one; exact relevance ties between
            other documents go to the lower-ranked one) or ``"chronological"``.

    Raises:
        TypeError: For an unknown keyword (the valid ones are listed).
        ValueError: For a missing, bad or ``fraction`` budget, a bad selector, strategy or
            options.

    Example:
        >>> from langchain_pacms import ContextSelector
        >>> selector = ContextSelector(strategy="topk")
        >>> PACMSCompressor(("ratio", 0.5), selector=selector).selector is selector
        True
    """

    budget: InstanceOf[Budget]
    strategy: InstanceOf[StrategyOptions] | None = None
    selector: InstanceOf[Selector]
    input_order: Literal["ranked", "chronological"] = "ranked"

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    def __init__(
        self,
        budget: BudgetInput | None = None,
        *,
        strategy: str | Strategy | StrategyOptions | None = None,
        selector: Selector | Embeddings | None = None,
        input_order: Literal["ranked", "chronological"] = "ranked",
        **unknown: Any,
    ) -> None:
        if unknown:
            raise TypeError(
                f"PACMSCompressor() got an unknown keyword: {', '.join(sorted(unknown))}. Its "
                "keywords are budget, strategy, selector, input_order (strategy options go in "
                "strategy=StrategyOptions(name, ...) or Pacms(...))"
            )
        if budget is None:
            raise ValueError('PACMSCompressor needs a budget: 800, ("ratio", 0.5) or a Budget')
        checked = Budget.coerce(budget)
        if checked.fraction is not None:
            raise ValueError(
                f'PACMSCompressor needs a budget in tokens or a ratio, got ("fraction", '
                f"{checked.fraction}): a share of a chat model's window, and a compressor has "
                'no model (pass 800, ("ratio", 0.5) or Budget(context_window=...))'
            )
        fields: dict[str, Any] = {
            "budget": checked,
            "strategy": None if strategy is None else StrategyOptions.coerce(strategy),
            "selector": _selector(selector),
            "input_order": input_order,
        }
        super().__init__(**fields)

    def _candidates(self, documents: Sequence[Document]) -> list[Candidate]:
        if isinstance(documents, (str, Document)) or not isinstance(documents, Sequence):
            raise ValueError("documents must be a sequence of Document")
        for index, doc in enumerate(documents):
            if not isinstance(doc, Document):
                raise ValueError(f"document {index} is {type(doc).__name__}, expected Document")
        n = len(documents)
        return [
            Candidate(
                text=doc.page_content,
                id=str(index),  # by index: Document.id may be None or repeated
                kind="document",
                position=n - 1 - index if self.input_order == "ranked" else index,
                source=doc,
            )
            for index, doc in enumerate(documents)
        ]

    def _result(
        self, documents: Sequence[Document], selection: Selection
    ) -> tuple[list[Document], Selection]:
        """The kept documents with their metadata, and the selection."""
        if self.input_order == "ranked":
            selection = _prefer_higher_ranked(documents, selection)
        rank = {cid: r for r, cid in enumerate(selection.pick_order)}
        out = []
        for cid in selection.kept_ids:  # original order
            doc = documents[int(cid)]
            extra = {
                f"{METADATA_PREFIX}relevance": float(selection.relevance.get(cid, 0.0)),
                f"{METADATA_PREFIX}gain": selection.gains.get(cid),
                f"{METADATA_PREFIX}pick_rank": rank[cid],
                f"{METADATA_PREFIX}strategy": selection.strategy,
            }
            out.append(doc.model_copy(update={"metadata": {**doc.metadata, **extra}}))
        return out, selection

    def _steps(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None
    ) -> Steps[tuple[list[Document], Selection]]:
        """One compression as a ``pacms_selection`` run on ``callbacks`` (sync and async)."""
        selector, budget, strategy = self.selector, self.budget, self.strategy
        candidates = self._candidates(documents)
        options = {} if strategy is None else {"strategy": strategy.strategy, **strategy.options}
        kwargs = {"budget": budget, **options}
        inputs = {
            "source": "compressor",
            "documents": len(candidates),
            "query": query,
            "strategy": selector.strategy if strategy is None else strategy.name,
            "budget": {budget.kind: getattr(budget, budget.kind)},
            "selector": type(selector).__name__,
        }

        def body(child: RunnableConfig) -> Steps[tuple[Any, dict[str, Any]]]:
            selection = yield Call(selector.select, selector.aselect, (candidates, query), kwargs)
            result = self._result(documents, selection)
            event = yield Call(
                report_selection,
                areport_selection,
                (result[1],),
                {"query": query, "source": "compressor", "config": child},
            )
            return result, event

        config: RunnableConfig | None = None if callbacks is None else {"callbacks": callbacks}
        return (yield from traced_selection(body, config, inputs))

    def compress_with_selection(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> tuple[list[Document], Selection]:
        """Compress and also return the :class:`~langchain_pacms.selector.Selection`.

        Args:
            documents: The retrieved documents.
            query: The query the kept documents should serve.
            callbacks: Where the ``pacms_selection`` run and event go (default: the run in context).

        Returns:
            The kept documents and the selection (candidate ids are the documents' indices).
        """
        return drive_calls(self._steps(documents, query, callbacks))

    async def acompress_with_selection(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> tuple[list[Document], Selection]:
        """Async twin of :meth:`compress_with_selection` (embeds with the async API)."""
        return await adrive_calls(self._steps(documents, query, callbacks), offload=True)

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Keep the documents that best serve ``query`` within the budget.

        Args:
            documents: The retrieved documents.
            query: The query the kept documents should serve.
            callbacks: The calling run's callbacks (they get a ``pacms_selection`` child run).

        Returns:
            New documents, in the original order, with ``pacms_*`` metadata.

        Raises:
            ValueError: For an empty query or non-document input (embedding failures fall back to
                recency unless the selector is ``strict``).

        Example:
            >>> docs = [Document("The staging DB listens on port 6543."), Document("We had lunch.")]
            >>> kept = PACMSCompressor(12).compress_documents(docs, "Which port has staging DB?")
            >>> [(d.page_content, d.metadata["pacms_pick_rank"]) for d in kept]
            [('The staging DB listens on port 6543.', 0)]
        """
        if not documents:
            return []
        return self.compress_with_selection(documents, query, callbacks)[0]

    async def acompress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Async twin of :meth:`compress_documents`, using the selector's ``aselect``."""
        if not documents:
            return []
        return (await self.acompress_with_selection(documents, query, callbacks))[0]
