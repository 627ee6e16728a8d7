"""Numeric core: arrays in, indices out. Imports numpy only (no LangChain)."""

from langchain_pacms.core.cosines import NearPairs, rows_stable, unit_rows
from langchain_pacms.core.fill import distinct_fill, diverse_fill, relevance_fill
from langchain_pacms.core.greedy import (
    COST_EXPONENT_RANGE,
    GreedyResult,
    budgeted_greedy,
    lazy_greedy,
    plain_greedy,
)
from langchain_pacms.core.mmr import MmrRanking, mmr_ranking
from langchain_pacms.core.objective import CoverageObjective
from langchain_pacms.core.pacms import PAPER_OPTIONS, auto_relevance_weight, feedback_relevance
from langchain_pacms.core.pick import Pick, Strategy, check_flag
from langchain_pacms.core.problem import COSINE_MATRIX_LIMIT, SIMILARITY_CEILING, Problem
from langchain_pacms.core.registry import (
    StrategyError,
    available_strategies,
    check_options,
    get_strategy,
    register_strategy,
    rejection,
    solve,
)

__all__ = [
    "COSINE_MATRIX_LIMIT",
    "COST_EXPONENT_RANGE",
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
    "check_flag",
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
