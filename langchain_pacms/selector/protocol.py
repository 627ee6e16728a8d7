"""``Selector``: the protocol the integrations, the lifecycle planners and the service call."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from langchain_pacms._steps import method_parameters_of
from langchain_pacms.budget import BudgetInput
from langchain_pacms.core import Strategy
from langchain_pacms.embeddings.profile import EmbedderProfile
from langchain_pacms.selector.selection import CandidateInput, Selection
from langchain_pacms.tokens import TokenCounter

__all__ = ["SelectArguments", "Selector", "select_arguments"]

_StrategyArg = str | Strategy | None
SelectArguments = tuple[
    Sequence[CandidateInput], str, BudgetInput, _StrategyArg, Collection[str], dict[str, Any]
]
"""What :func:`select_arguments` returns: the arguments of one ``select`` call, in order."""


def select_arguments(
    candidates: Sequence[CandidateInput],
    query: str,
    budget: BudgetInput,
    *,
    strategy: str | Strategy | None = None,
    relevant_ids: Collection[str] = (),
    **options: Any,
) -> SelectArguments:
    """Every selector's ``select``/``aselect`` parameters (meanings: ``ContextSelector.select``)."""
    return candidates, query, budget, strategy, relevant_ids, options


@runtime_checkable
class Selector(Protocol):
    """Selects candidates for a query under a token budget, sync or async.

    ``ContextSelector`` (in process) and ``RemoteSelector`` (``pacms serve``) implement it.

    Example:
        >>> from langchain_pacms import ContextSelector
        >>> isinstance(ContextSelector(), Selector)
        True
    """

    @property
    def token_counter(self) -> TokenCounter:
        """The counter that gives every candidate without its own ``tokens`` its cost."""
        ...

    @property
    def strategy(self) -> str | Strategy:
        """The default strategy."""
        ...

    @property
    def strategy_options(self) -> Mapping[str, Any]:
        """The default strategy's options."""
        ...

    @property
    def profile(self) -> EmbedderProfile:
        """How ``pacms`` reads the embedder's cosines."""
        ...

    def count_tokens(self, candidates: Sequence[CandidateInput]) -> list[int]:
        """Each candidate's token cost, as budgets and selections count it."""
        ...

    def resolve_options(
        self, strategy: str | Strategy | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[str | Strategy, dict[str, Any]]:
        """The strategy and keyword options a selection with these arguments would run."""
        ...

    @method_parameters_of(select_arguments)
    def select(self, *args: Any, **kwargs: Any) -> Selection:
        """Select candidates for ``query`` under ``budget`` (parameters: :func:`select_arguments`).

        A ``ratio`` budget is a share of the pool's tokens; a ``fraction`` one raises.
        """
        ...

    @method_parameters_of(select_arguments)
    async def aselect(self, *args: Any, **kwargs: Any) -> Selection:
        """Async twin of :meth:`select`."""
        ...
