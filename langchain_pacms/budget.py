"""The token budget of a selection: one value, checked once, from the agent's call to the core."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_ANSWER_RESERVE", "Budget", "BudgetInput", "max_input_tokens"]

DEFAULT_ANSWER_RESERVE = 4096
"""Tokens a window budget leaves for the answer unless told otherwise."""

_KINDS = ("tokens", "ratio", "context_window", "fraction")
_TUPLES = ("tokens", "ratio", "fraction")


def _integer(value: Any) -> int | None:
    """``value`` as an ``int`` when it is an integer (Python's or numpy's, not a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return None
    return int(value)


def _share(name: str, value: Any) -> float:
    """``value`` as a ``float`` in ``(0, 1]``, or ``ValueError`` naming ``name``."""
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real)
    if not ok or not 0 < float(value) <= 1:
        raise ValueError(f"Budget({name}=...) must be a number in (0, 1], got {value!r}")
    return float(value)


def _positive(name: str, value: Any) -> int:
    """``value`` as a positive ``int``, or ``ValueError`` naming ``name``."""
    number = _integer(value)
    if number is None or number <= 0:
        raise ValueError(f"Budget({name}=...) must be a positive int, got {value!r}")
    return number


def max_input_tokens(model: Any) -> int | None:
    """A chat model's ``profile["max_input_tokens"]``, or ``None`` when it has none."""
    profile = getattr(model, "profile", None)
    if not isinstance(profile, Mapping):
        return None
    limit = _integer(profile.get("max_input_tokens"))
    return limit if limit is not None and limit > 0 else None


@dataclass(frozen=True)
class Budget:
    """The token budget of each selection: absolute, a share of the pool, or of the model's window.

    Give exactly one of ``tokens``, ``ratio``, ``fraction`` or ``context_window``.

    Attributes:
        tokens: A number of tokens.
        ratio: A share in ``(0, 1]`` of the tokens selected from (for the hook and the
            middleware, of the conversation).
        fraction: A share in ``(0, 1]`` of the chat model's ``profile["max_input_tokens"]``.
        context_window: The model's input window; the budget: ``(window - answer_reserve) * fill``.
        answer_reserve: Tokens a window budget leaves for the answer (``>= 0``).
        fill: Share in ``(0, 1]`` of ``context_window - answer_reserve`` to fill.

    Example:
        >>> Budget(context_window=5000, answer_reserve=4000, fill=0.5).resolve()
        500
    """

    tokens: int | None = None
    ratio: float | None = None
    fraction: float | None = None
    context_window: int | None = None
    answer_reserve: int = DEFAULT_ANSWER_RESERVE
    fill: float = 1.0

    def __post_init__(self) -> None:
        given = [name for name in _KINDS if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                "give one budget: Budget(tokens=n), Budget(ratio=x), Budget(fraction=x) or "
                "Budget(context_window=w)"
                + (f", not {' and '.join(given)}" if given else "")
                + ' (or budget=n, ("tokens", n), ("ratio", x), ("fraction", x))'
            )
        for name, check in (("tokens", _positive), ("ratio", _share), ("fraction", _share)):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check(name, getattr(self, name)))
        object.__setattr__(self, "fill", _share("fill", self.fill))
        reserve = _integer(self.answer_reserve)
        if reserve is None or reserve < 0:
            raise ValueError(
                f"Budget(answer_reserve=...) must be an int >= 0, got {self.answer_reserve!r}"
            )
        object.__setattr__(self, "answer_reserve", reserve)
        unused = [
            f"{name}={value!r}"
            for name, value, default in (
                ("answer_reserve", reserve, DEFAULT_ANSWER_RESERVE),
                ("fill", self.fill, 1.0),
            )
            if value != default
        ]
        if self.context_window is None and unused:
            raise ValueError(
                f"Budget({', '.join(unused)}) applies to a context_window budget only "
                f"(given: {given[0]})"
            )
        if self.context_window is not None:
            window = _positive("context_window", self.context_window)
            object.__setattr__(self, "context_window", window)
            if window <= reserve:
                raise ValueError(
                    f"Budget(context_window={window}) must exceed answer_reserve ({reserve})"
                )

    @classmethod
    def coerce(cls, budget: BudgetInput) -> Budget:
        """The :class:`Budget` that ``budget`` means, else ``ValueError``.

        ``budget``: a :class:`Budget`, a positive ``int`` (tokens), or LangChain's
        ``("tokens", n)``, ``("ratio", x)`` or ``("fraction", x)``.

        Example:
            >>> Budget.coerce(("ratio", 0.5)).ratio
            0.5
        """
        if isinstance(budget, Budget):
            return budget
        tokens = _integer(budget)
        if tokens is not None:
            return cls(tokens=tokens)
        if isinstance(budget, tuple) and len(budget) == 2 and budget[0] in _TUPLES:
            kind: dict[str, Any] = {budget[0]: budget[1]}
            return cls(**kind)
        raise ValueError(
            "budget must be a Budget, a positive int (tokens), or ('tokens', n), "
            f"('ratio', x) or ('fraction', x), got {budget!r}"
        )

    @property
    def kind(self) -> str:
        """Which budget this is: ``tokens``, ``ratio``, ``fraction`` or ``context_window``.

        Example:
            >>> Budget(fraction=0.5).kind
            'fraction'
        """
        return next(name for name in _KINDS if getattr(self, name) is not None)

    def resolve(self, total: int = 0, model: Any = None) -> int:
        """The number of tokens this budget allows (at least 1).

        Args:
            total: The tokens selected from (for a ``ratio`` budget).
            model: The chat model (for a ``fraction`` budget).

        Raises:
            ValueError: For a ``fraction`` budget without a model that has a profile.

        Example:
            >>> class Model:
            ...     profile = {"max_input_tokens": 900}
            >>> Budget(fraction=0.5).resolve(model=Model()), Budget(ratio=0.25).resolve(total=1000)
            (450, 250)
        """
        if self.tokens is not None:
            return self.tokens
        if self.ratio is not None:
            return max(1, math.floor(total * self.ratio))
        if self.context_window is not None:
            return max(1, int((self.context_window - self.answer_reserve) * self.fill))
        assert self.fraction is not None  # a Budget has exactly one kind
        if model is None:
            raise ValueError(
                f'budget=("fraction", {self.fraction}) is a share of a chat model\'s '
                'profile["max_input_tokens"]: resolve it with the model, or pass a number of '
                "tokens"
            )
        limit = max_input_tokens(model)
        if limit is None:
            raise ValueError(
                f'budget=("fraction", {self.fraction}) is a share of the chat model\'s '
                f'profile["max_input_tokens"], and {type(model).__name__} has none: give the '
                'model one (ChatModel(..., profile={"max_input_tokens": ...})) or pass a '
                "number of tokens"
            )
        return max(1, int(limit * self.fraction))


BudgetInput = Budget | int | tuple[str, float]
"""What a ``budget`` argument takes: a :class:`Budget`, a positive ``int`` or a tuple."""
