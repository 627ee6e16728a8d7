"""One selection request's work, start to end: ``POST /select`` and ``POST /select_debug``."""

from __future__ import annotations

import inspect
import json
import re
from datetime import datetime, timezone
from typing import Any

from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from langchain_pacms.budget import Budget
from langchain_pacms.core import available_strategies, check_options, get_strategy
from langchain_pacms.selector import Candidate, Selection, Selector, relevant_mask
from langchain_pacms.server.front import problem_response
from langchain_pacms.server.live import SessionLog, session_id
from langchain_pacms.server.schemas import SelectRequest, SelectResponse

__all__ = [
    "MAX_TEXT_CHARS",
    "REFUSAL_CHARS",
    "TEXT_PREVIEW",
    "WORD_CAP",
    "Service",
    "capped_words",
    "strategy_info",
]

MAX_TEXT_CHARS = 4_000_000
"""Default work budget of one request: characters of candidate texts and query together."""
WORD_CAP = 256
"""Longest run of non-whitespace characters counted or embedded as one word."""
_LONG_RUN = re.compile(rf"(?<!\S)\S{{{WORD_CAP + 1},}}")


def _split_run(match: re.Match[str]) -> str:
    run = match.group(0)
    return " ".join(run[i : i + WORD_CAP] for i in range(0, len(run), WORD_CAP))


def capped_words(text: str) -> str:
    """``text`` with each run of more than :data:`WORD_CAP` non-space characters split by spaces.

    Example:
        >>> [len(w) for w in capped_words("ok " + "x" * 600).split()]
        [2, 256, 256, 88]
    """
    if len(text) <= WORD_CAP:
        return text
    return _LONG_RUN.sub(_split_run, text)


def _field(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in (p for p in loc if p != "body"):
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def strategy_info(name: str, selector: Selector) -> dict[str, Any]:
    """A strategy's keyword options with the values the service runs it with."""
    params = list(inspect.signature(get_strategy(name)).parameters.values())[1:]
    defaults = {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}
    runs = {**defaults, **selector.resolve_options(name, {})[1]}
    plain = (bool, int, float, str, type(None))  # other values, and no default, show as null
    options = {key: runs[key] if isinstance(runs[key], plain) else None for key in defaults}
    return {"name": name, "options": options}


def _candidates(req: SelectRequest) -> list[Candidate]:
    """The request's candidates with ids and positions resolved and long runs split."""
    return [
        Candidate(
            capped_words(c.text),
            str(i) if c.id is None else c.id,
            c.kind,
            i if c.position is None else c.position,
            c.mandatory,
            c.tokens,
        )
        for i, c in enumerate(req.candidates)
    ]


def _invalid(err: ValidationError) -> JSONResponse:
    """The 4xx for a body that is not JSON (400) or not a valid request (422)."""
    found = err.errors(include_url=False, include_context=False, include_input=False)
    errors = [{"field": _field(tuple(e["loc"])), "message": e["msg"]} for e in found]
    if any(e["type"] == "json_invalid" for e in found):
        return problem_response(400, "body: malformed JSON", errors=errors)
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
    return problem_response(422, detail, errors=errors)


class _Refused(ValueError):
    """The request's ``field`` is refused (a 422 naming it), as options the strategy rejects."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


REFUSAL_CHARS = 2_000
"""Most characters of a refusal's message (a refused options dict is quoted in it)."""


def _refusal(field: str, message: str) -> JSONResponse:
    """The 422 refusing the request's ``field`` (``strategy_options``, ``relevant_ids``, ...).

    Its ``errors`` name the field, as a validation error's do, so a client tells the caller's
    mistake (``strategy``, ``strategy_options``) from other bad input and a limit of the service.
    A message longer than :data:`REFUSAL_CHARS` is cut there (it may quote the request back).
    """
    if len(message) > REFUSAL_CHARS:
        message = message[:REFUSAL_CHARS] + " ..."
    return problem_response(
        422, f"{field}: {message}", errors=[{"field": field, "message": message}]
    )


TEXT_PREVIEW = 200
"""Characters of each candidate's text kept with a session's record (for the page's detail)."""


def _live_record(req: SelectRequest, sel: Selection) -> dict[str, Any]:
    """What a session keeps of one selection: a hook log record's fields, with text previews."""
    ids = [str(i) if c.id is None else c.id for i, c in enumerate(req.candidates)]
    return {
        "timestamp": datetime.now(timezone.utc).isoformat(),
        "source": "service",
        "query": req.query[:TEXT_PREVIEW],
        **sel.to_dict(),
        "texts": {i: c.text[:TEXT_PREVIEW] for i, c in zip(ids, req.candidates)},
    }


class Service:
    """One request's work (parse, validate, select, answer) as one call on a worker thread."""

    def __init__(
        self,
        selector: Selector,
        max_candidates: int,
        live: SessionLog,
        *,
        max_text_chars: int = MAX_TEXT_CHARS,
    ) -> None:
        self.selector, self.max_candidates, self.live = selector, max_candidates, live
        self.max_text_chars = max_text_chars

    def select(self, raw: bytes, session: str | None = None) -> Response:
        """``POST /select``: the verdict in brief."""
        return self._answer(raw, session, debug=False)

    def select_debug(self, raw: bytes, session: str | None = None) -> Response:
        """``POST /select_debug``: the verdict with every candidate's scores."""
        return self._answer(raw, session, debug=True)

    def _values(self, req: SelectRequest) -> dict[str, Any]:
        """``values=`` for ``pacms`` if every candidate gives them; refused if only some do."""
        given = [c.values is not None for c in req.candidates]
        if not any(given):
            return {}
        if not all(given):
            missing = given.index(False)
            raise _Refused(f"candidates[{missing}].values", "give values for every candidate")
        name, _ = self.selector.resolve_options(req.strategy, req.strategy_options)
        if name != "pacms":  # a property of the candidates that only pacms reads
            return {}
        return {"values": [frozenset(c.values or ()) for c in req.candidates]}

    def _check_options(self, strategy: str | None, options: dict[str, Any]) -> None:
        """Check a strategy-and-options pair (``check_options`` remembers a built-in's answer)."""
        name, opts = self.selector.resolve_options(strategy, options)
        try:
            check_options(name, **opts)
        except ValueError as err:
            raise _Refused("strategy_options", str(err)) from err

    @staticmethod
    def _check_relevant(cands: list[Candidate], relevant_ids: list[str]) -> None:
        """Refuse ``relevant_ids`` naming no candidate (as the selector would, but by its field)."""
        try:
            relevant_mask(cands, relevant_ids)
        except ValueError as err:
            raise _Refused("relevant_ids", str(err).removeprefix("relevant_ids ")) from err

    def _answer(self, raw: bytes, session: str | None, *, debug: bool) -> Response:
        try:
            if session is not None:
                session_id(session)
        except ValueError as err:
            return problem_response(400, str(err))
        try:
            req = SelectRequest.model_validate_json(raw)
        except ValidationError as err:
            return _invalid(err)
        if len(req.candidates) > self.max_candidates:
            return _refusal(
                "candidates",
                f"{len(req.candidates)} candidates exceed the limit of "
                f"{self.max_candidates} (max_candidates)",
            )
        chars = sum(len(c.text) + sum(map(len, c.values or ())) for c in req.candidates)
        chars += len(req.query)
        if chars > self.max_text_chars:
            return problem_response(
                413,
                f"candidates: the texts and the query total {chars} characters, over the work "
                f"budget of {self.max_text_chars} per request (max_text_chars)",
            )
        if req.strategy is not None and req.strategy not in available_strategies():
            return _refusal(
                "strategy",
                f"unknown strategy {req.strategy!r}; choose from {available_strategies()}",
            )
        cands = _candidates(req)
        seen: set[str] = set()
        for index, cid in enumerate(str(c.id) for c in cands):
            if cid in seen:
                return _refusal(f"candidates[{index}].id", f"duplicate id {cid!r}")
            seen.add(cid)
        try:  # each input is checked by its field first
            self._check_options(req.strategy, req.strategy_options)
            values = self._values(req)
            self._check_relevant(cands, req.relevant_ids)
            sel = self.selector.select(
                cands,
                capped_words(req.query),
                Budget(tokens=req.budget_tokens, ratio=req.budget_ratio),
                strategy=req.strategy,
                relevant_ids=req.relevant_ids,
                **req.strategy_options,
                **values,
            )
        except _Refused as err:
            return _refusal(err.field, str(err))
        except TypeError as err:  # the strategy takes no such option
            return _refusal("strategy_options", str(err))
        except ValueError as err:  # the fields above are checked: the selector's own message
            if req.strategy_options:  # a strategy rejecting an option's value as it runs
                return _refusal("strategy_options", str(err))
            return problem_response(422, str(err))
        if session is not None:
            self.live.add(session, _live_record(req, sel))
        body = {name: getattr(sel, name) for name in SelectResponse.model_fields}
        body["timings"] = dict(sel.timings)
        if debug:
            body.update(candidates=[v.__dict__ for v in sel.verdicts()], info=dict(sel.info))
        data = json.dumps(body, separators=(",", ":"), default=str).encode()
        return Response(data, media_type="application/json")
