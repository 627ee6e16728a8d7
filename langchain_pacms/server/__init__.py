"""The selection service and the inspector page (extra ``server``: FastAPI and uvicorn)."""

from __future__ import annotations

try:
    import fastapi  # noqa: F401
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(
        "the pacms service needs FastAPI and uvicorn: pip install 'langchain-pacms[server]'"
    ) from err

from langchain_pacms.server.app import CONFIG_ENV, app_from_env, create_app
from langchain_pacms.server.front import LOOPBACK_HOSTS
from langchain_pacms.server.service import WORD_CAP, capped_words

__all__ = ["CONFIG_ENV", "LOOPBACK_HOSTS", "WORD_CAP", "app_from_env", "capped_words", "create_app"]
