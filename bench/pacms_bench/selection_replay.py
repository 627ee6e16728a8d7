"""Per-call selection as a lifecycle replay policy: what the hook would send at each cut.

Two policy families, each ``<family>:<strategy>@<kept share>``:

* ``select:pacms@0.5``: the hook's selection with its defaults, keeping that share of the
  prefix's tokens; dropped tool spans vanish;
* ``select+stubs:pacms@0.5``: the same with ``fold_stubs=True``: a tool span may be sent as its
  lifecycle fold stub instead (pointer, one line, locators) at the stub's cost, and the stubs
  that are sent have their payloads in the sidecar store (the judge's *with recovery* column);
* ``life+select:pacms@0.5``: the lifecycle in front: the replay applies the heuristic planner's
  plan first, and the selection (with fold stubs) then fits what is left into that share of
  the *original* prefix's tokens, as an agent with both middlewares would send it.

Example:
    >>> policy = selection_policy("select+stubs:lastk@0.5")
    >>> policy.strategy, policy.ratio, policy.stubs
    ('lastk', 0.5, True)
    >>> is_selection("select:mmr@0.3"), is_selection("heuristic")
    (True, False)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.store.memory import InMemoryStore

from langchain_pacms import Budget, ContextSelector, StrategyOptions
from langchain_pacms.integrations import SelectionConfig, SelectionRunner
from langchain_pacms.lifecycle import SidecarStore
from langchain_pacms.tokens import TokenCounter

__all__ = [
    "SELECTION_LIFE",
    "SELECTION_STUBS",
    "SelectionPolicy",
    "behind_lifecycle",
    "is_selection",
    "selection_policy",
]

_LIFE = "life+select"
_FAMILIES = {"select": False, "select+stubs": True, _LIFE: True}
_THREAD = "replay"

SELECTION_STUBS = tuple(
    f"select+stubs:{s}@{r}" for r in (0.5, 0.3, 0.7) for s in ("pacms", "topk", "mmr", "lastk")
)
"""Per-call selection with fold stubs (each strategy keeping 50%, 30% and 70% of the tokens)."""

SELECTION_LIFE = (
    *(f"{_LIFE}:{s}@0.5" for s in ("pacms", "topk", "mmr", "lastk")),
    f"{_LIFE}:pacms@0.7",
)
"""Per-call selection with fold stubs behind the lifecycle's heuristic planner (each strategy
keeping 50% of the tokens, and ``pacms`` keeping 70%)."""


def is_selection(policy: str) -> bool:
    """Whether ``policy`` names a per-call selection policy (any family of the module docs)."""
    return policy.partition(":")[0] in _FAMILIES


def behind_lifecycle(policy: str) -> bool:
    """Whether ``policy`` selects behind the lifecycle (``life+select:``)."""
    return policy.partition(":")[0] == _LIFE


@dataclass
class SelectionPolicy:
    """One per-call selection policy, ready to run on prefixes.

    Attributes:
        strategy: The selection strategy.
        ratio: The kept share of the prefix's tokens.
        stubs: Offer fold stubs for dropped tool spans.
        selector: The selector (one embedding cache for every cut).
        options: More :class:`SelectionConfig` fields (e.g. ``query_mode``, or ``strategy``
            as a ``StrategyOptions`` with options), for trying settings on the development
            split.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> policy = selection_policy("select+stubs:pacms@0.5")
        >>> policy.options = {"query_mode": "task"}
        >>> view, sidecars = policy([HumanMessage("fix the crash")])
        >>> [m.content for m in view], sidecars
        (['fix the crash'], {})
    """

    strategy: str
    ratio: float
    stubs: bool
    selector: ContextSelector
    options: Mapping[str, Any] = field(default_factory=dict)

    def __call__(
        self, prefix: Sequence[BaseMessage], base: Sequence[BaseMessage] | None = None
    ) -> tuple[list[BaseMessage], dict[str, str]]:
        """What the model would see for ``prefix`` and the sidecars it could recover from.

        ``base`` (default: ``prefix``) is the conversation whose tokens the kept share is of:
        behind the lifecycle, the prefix before its folds.
        """
        fields: dict[str, Any] = {
            "budget": Budget(ratio=self.ratio),
            "strategy": StrategyOptions(self.strategy),
            "selector": self.selector,
            **self.options,
        }
        config = SelectionConfig(**fields)
        if base is not None:
            pool = SelectionRunner(config).candidates(base, (), ())
            config = dataclasses.replace(config, budget=Budget(tokens=pool.budget))
        if not self.stubs:
            return SelectionRunner(config, source="replay").run(prefix), {}
        store = InMemoryStore()
        stubs = dataclasses.replace(config.tool_loop, fold_stubs=True, sidecar_store=store)
        config = dataclasses.replace(config, tool_loop=stubs)
        runner = SelectionRunner(config, source="replay")
        view = runner.run(prefix, config={"configurable": {"thread_id": _THREAD}})
        sidecars = SidecarStore(store, _THREAD)
        return view, {i: sidecars.get(i).payload for i in sidecars.list_ids()}


def selection_policy(policy: str, counter: TokenCounter | None = None) -> SelectionPolicy:
    """Parse ``<family>:<strategy>@<kept share>`` into a :class:`SelectionPolicy`.

    Raises:
        ValueError: For another family, a missing or bad share.
    """
    family, _, spec = policy.partition(":")
    strategy, _, share = spec.partition("@")
    try:
        ratio = float(share)
    except ValueError:
        ratio = -1.0
    if family not in _FAMILIES or not strategy or not 0 < ratio <= 1:
        raise ValueError(
            f"policy {policy!r}: expected select:<strategy>@<kept share> or "
            "select+stubs:<strategy>@<kept share>, share in (0, 1]"
        )
    selector = ContextSelector(token_counter=counter or TokenCounter())
    return SelectionPolicy(strategy, ratio, _FAMILIES[family], selector)
