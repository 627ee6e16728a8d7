"""Numeric core: arrays in, indices out. Imports numpy only (no LangChain)."""

from langchain_pacms.core.fill import distinct_fill, diverse_fill, relevance_fill
from langchain_pacms.core.greedy import GreedyResult, budgeted_greedy, lazy_greedy, plain_greedy
from langchain_pacms.core.objective import CoverageObjective
from langchain_pacms.core.problem import (
    COSINE_MATRIX_LIMIT,
    SIMILARITY_CEILING,
    NearPairs,
    Problem,
    rows_stable,
    unit_rows,
)
from langchain_pacms.core.strategies import (
    PAPER_OPTIONS,
    MmrRanking,
    Pick,
    Strategy,
    StrategyError,
    auto_relevance_weight,
    available_strategies,
    check_options,
    feedback_relevance,
    get_strategy,
    mmr_ranking,
    register_strategy,
    rejection,
    solve,
)

__all__ = [
    "COSINE_MATRIX_LIMIT",
    "PAPER_OPTIONS",
    "SIMILARITY_CEILING",
    "CoverageObjective",
    "GreedyResult",
    "MmrRanking",
    "NearPairs",
    "Pick",
    "Problem",
    "Strategy",
    "StrategyError",
    "auto_relevance_weight",
    "available_strategies",
    "budgeted_greedy",
    "check_options",
    "distinct_fill",
    "diverse_fill",
    "feedback_relevance",
    "get_strategy",
    "lazy_greedy",
    "mmr_ranking",
    "plain_greedy",
    "register_strategy",
    "rejection",
    "relevance_fill",
    "rows_stable",
    "solve",
    "unit_rows",
]
