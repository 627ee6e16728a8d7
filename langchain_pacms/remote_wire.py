"""What goes over the wire between ``RemoteSelector`` and ``pacms serve``.

The request's body, its session and token rules, and the checks and size limit of the answer.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import httpx

from langchain_pacms.errors import PACMSError
from langchain_pacms.selector.selection import Candidate, Selection

__all__ = [
    "DROPPED_CONNECTION",
    "KEEPALIVE_EXPIRY",
    "MAX_INT",
    "SESSION_HEADER",
    "TOKEN_PATTERN",
    "AnswerReader",
    "RemoteAnswerError",
    "RemoteRequestError",
    "answer_limit",
    "bearer_token",
    "check_answer",
    "json_body",
    "named_here",
    "session_id",
    "wire_ids",
]

MAX_INT = 2**53
"""Largest integer the service takes (JSON's exact integers); sums of them stay exact."""
ANSWER_BASE_BYTES = 64 * 1024
"""Bytes an answer may take whatever its pool (totals, timings, the strategy's ``info``)."""
ANSWER_BYTES_PER_CANDIDATE = 1024
"""Bytes an answer may take per candidate sent, besides its id."""
ANSWER_BYTES_PER_ID_CHARACTER = 3 * 12
"""Bytes an answer may take per character of a candidate's id: the service writes each kept id
three times (``kept_ids``, ``pick_order``, its verdict), a character as at most 12 bytes (the
JSON escape of one outside the Basic Multilingual Plane, such as an emoji: ``\\ud83d\\udcc4``)."""
SESSION_HEADER = "X-Pacms-Session"
"""Request header naming the session a selection belongs to (``RemoteSelector(session=...)``)."""
_SESSION = re.compile(r"[A-Za-z0-9._:-]{1,64}")
TOKEN_PATTERN = re.compile(r"[!-~](?:[ -~]*[!-~])?")  # visible ASCII, inner spaces: a header value
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
KEEPALIVE_EXPIRY = 2.0
"""Seconds a client keeps an idle connection to the service for reuse: well below the 5 s after
which ``pacms serve`` closes one, so a request never goes out on a connection being closed."""
DROPPED_CONNECTION = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
"""What a request meets on a kept-alive connection the service closed as it was sent: a
selection is idempotent, so it is sent once more (on a new connection)."""
_REFUSED_FIELDS = ("strategy", "strategy_options")
"""The fields of a request whose refusal (a 422) is the caller's mistake, raised, not a fallback."""


class RemoteAnswerError(PACMSError, ValueError):
    """The service's answer does not fit the request it answers (see :func:`check_answer`)."""


class RemoteRequestError(PACMSError, ValueError):
    """The service refused the caller's strategy or its options (raised, never a fallback)."""


def session_id(value: str) -> str:
    """``value`` if it is 1-64 letters, digits, ``.``, ``_``, ``:`` or ``-``; else ValueError.

    Example:
        >>> session_id("my agent")
        Traceback (most recent call last):
        ...
        ValueError: X-Pacms-Session: a session id is 1-64 letters, digits or '._:-', got 'my agent'
    """
    if not isinstance(value, str) or not _SESSION.fullmatch(value):
        shown = value[:80] if isinstance(value, str) else value
        raise ValueError(
            f"{SESSION_HEADER}: a session id is 1-64 letters, digits or '._:-', got {shown!r}"
        )
    return value


def bearer_token(value: str) -> str:
    r"""``value`` if an ``Authorization: Bearer`` header can carry it as it is; else ValueError.

    That is visible ASCII characters, with spaces only between them: HTTP strips a header
    value's outer whitespace and cannot carry control characters, so a client could never
    send such a token back.

    Example:
        >>> bearer_token("s3cret token")
        's3cret token'
        >>> bearer_token("secret\r")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: token must be visible ASCII characters, with spaces only between them ...
    """
    if not isinstance(value, str) or not TOKEN_PATTERN.fullmatch(value):
        raise ValueError(
            "token must be visible ASCII characters, with spaces only between them "
            "(it is sent in the Authorization header)"
        )
    return value


def answer_limit(payload: Mapping[str, Any]) -> int:
    """The most bytes an answer to ``payload`` may take (36 more per character of each id).

    Example:
        >>> answer_limit({"candidates": [{"id": "a"}, {"id": "bb"}]})
        67692
    """
    return ANSWER_BASE_BYTES + sum(
        ANSWER_BYTES_PER_CANDIDATE + ANSWER_BYTES_PER_ID_CHARACTER * len(c["id"])
        for c in payload["candidates"]
    )


def _wired(text: str) -> str:
    """``text`` as UTF-8 carries it: each lone surrogate as U+FFFD (a word splits there alike)."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def json_body(payload: Any) -> bytes:
    r"""``payload`` as UTF-8 JSON, each lone surrogate in it as U+FFFD.

    UTF-8 cannot carry a lone surrogate (as a file name decoded with ``surrogateescape`` holds),
    and the service refuses JSON's escape of one.

    Example:
        >>> json_body({"text": "report-\udcff.txt"})
        b'{"text":"report-\xef\xbf\xbd.txt"}'
    """
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _wired(text).encode()


def wire_ids(ids: Sequence[str]) -> dict[str, str]:
    r"""The id to send for each of ``ids`` that holds a lone surrogate (UTF-8 cannot carry it).

    Its surrogates become U+FFFD, and ``~n`` is added while that names another id of the pool.

    Example:
        >>> wire_ids(["x\ud800", "x\udfff", "x\ufffd"])
        {'x\ud800': 'x\ufffd~1', 'x\udfff': 'x\ufffd~2'}
    """
    taken = {i for i in ids if not _LONE_SURROGATE.search(i)}
    wire: dict[str, str] = {}
    for cid in dict.fromkeys(ids):
        if cid in taken or cid in wire:
            continue
        sent, n = _wired(cid), 0
        while sent in taken:
            n += 1
            sent = f"{_wired(cid)}~{n}"
        taken.add(sent)
        wire[cid] = sent
    return wire


def named_here(body: Any, wire: Mapping[str, str]) -> Any:
    """``body`` with each id that went out changed (:func:`wire_ids`) named as here."""
    here = {sent: cid for cid, sent in wire.items()}
    if not here or not isinstance(body, dict):
        return body

    def name(value: Any) -> Any:
        return here.get(value, value) if isinstance(value, str) else value

    named = dict(body)
    for key in ("kept_ids", "pick_order"):
        if isinstance(named.get(key), list):
            named[key] = [name(cid) for cid in named[key]]
    if isinstance(named.get("candidates"), list):
        named["candidates"] = [
            {**v, "id": name(v.get("id"))} if isinstance(v, dict) else v
            for v in named["candidates"]
        ]
    return named


def _ids(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RemoteAnswerError(f"{name} is not a list of ids")
    if len(set(value)) != len(value):
        raise RemoteAnswerError(f"{name} repeats an id")
    return value


def _number(value: Any, name: str) -> float:
    with contextlib.suppress(OverflowError):  # an int too large for a float
        if not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value):
            return float(value)
    raise RemoteAnswerError(f"{name} is not a finite number")


def _scores(
    body: Mapping[str, Any], ids: Sequence[str]
) -> tuple[dict[str, float], dict[str, float]]:
    """Relevance and gains from the answer's verdicts, which must cover exactly ``ids``."""
    verdicts = body.get("candidates")
    if not isinstance(verdicts, list) or not all(isinstance(v, dict) for v in verdicts):
        raise RemoteAnswerError("candidates is not a list of verdicts")
    if not all(isinstance(v.get("id"), str) for v in verdicts):
        raise RemoteAnswerError("a verdict's id is not a string")
    if sorted(v["id"] for v in verdicts) != sorted(ids) or len(verdicts) != len(ids):
        raise RemoteAnswerError("the service answered for other candidates than were sent")
    relevance = {v["id"]: _number(v.get("relevance"), "a relevance") for v in verdicts}
    gains = {v["id"]: _number(v["gain"], "a gain") for v in verdicts if v.get("gain") is not None}
    return relevance, gains


def check_answer(
    cands: Sequence[Candidate],
    tokens: Sequence[int],
    budget: int,
    body: Any,
    timings: Mapping[str, float] | None = None,
) -> Selection:
    """The :class:`Selection` a service's answer gives, or :class:`RemoteAnswerError`.

    Token totals, budget and ``over_budget`` are the sender's; the service's timings join as
    ``server_*``.
    """
    if not isinstance(body, dict):
        raise RemoteAnswerError("the answer is not a JSON object")
    ids = [str(c.id) for c in cands]
    cost = dict(zip(ids, (int(t) for t in tokens)))
    kept = set(_ids(body.get("kept_ids"), "kept_ids"))
    unknown = sorted(kept - set(ids))
    if unknown:
        raise RemoteAnswerError(
            f"kept_ids names {len(unknown)} id(s) not sent, e.g. {unknown[0]!r}"
        )
    order = _ids(body.get("pick_order"), "pick_order")
    if set(order) != kept:
        raise RemoteAnswerError("pick_order does not list the kept ids")
    mandatory = [cid for cid, c in zip(ids, cands) if c.mandatory]
    dropped = [cid for cid in mandatory if cid not in kept]
    if dropped:
        raise RemoteAnswerError(f"the answer drops mandatory id {dropped[0]!r}")
    kept_tokens = sum(cost[cid] for cid in kept)
    over = sum(cost[cid] for cid in mandatory) > budget
    if kept_tokens > budget and not (over and kept == set(mandatory)):
        raise RemoteAnswerError(f"the answer keeps {kept_tokens} tokens over a budget of {budget}")
    relevance, gains = _scores(body, ids)
    server = body.get("timings")
    info, error = body.get("info") or {}, body.get("error")
    if not isinstance(server, dict) or not isinstance(info, dict):
        raise RemoteAnswerError("timings or info is not an object")
    if not isinstance(body.get("strategy"), str) or not isinstance(body.get("fell_back"), bool):
        raise RemoteAnswerError("strategy or fell_back is missing")
    if error is not None and not isinstance(error, str):
        raise RemoteAnswerError("error is not a string")
    seconds = {f"server_{k}": _number(v, "a timing") for k, v in server.items()}
    total = sum(cost.values())
    return Selection(
        candidates=tuple(cands),
        kept_ids=tuple(cid for cid in ids if cid in kept),
        pick_order=tuple(order),
        relevance=MappingProxyType(relevance),
        gains=MappingProxyType({k: g for k, g in gains.items() if k in kept}),
        tokens=MappingProxyType(cost),
        tokens_total=total,
        tokens_kept=kept_tokens,
        tokens_dropped=total - kept_tokens,
        budget=budget,
        strategy=body["strategy"],
        over_budget=over,
        fell_back=body["fell_back"],
        error=error,
        timings=MappingProxyType({**(timings or {}), **seconds}),
        info=MappingProxyType(info),
    )


class AnswerReader:
    """Reads one answer's raw bytes; refuses one over ``limit``, late, or content-encoded."""

    def __init__(self, response: httpx.Response, limit: int, deadline: float, timeout: float):
        self.response, self.limit, self.deadline, self.timeout = response, limit, deadline, timeout
        self.chunks: list[bytes] = []
        self.size = 0
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise RemoteAnswerError(f"the answer declares {declared} bytes, over {limit}")
        if response.headers.get("content-encoding", "identity") != "identity":
            raise RemoteAnswerError("the answer is content-encoded; identity was asked for")

    def feed(self, chunk: bytes) -> None:
        """Take one chunk, or raise once the answer is too large or too late."""
        self.size += len(chunk)
        if self.size > self.limit:
            raise RemoteAnswerError(f"the answer exceeds {self.limit} bytes")
        if time.monotonic() > self.deadline:
            raise TimeoutError(f"no complete answer within {self.timeout}s")
        self.chunks.append(chunk)

    def answer(self) -> Any:
        """The decoded answer, or the service's error as ``RuntimeError``.

        A 422 refusing the strategy or its options (its ``errors`` name the field) raises
        :class:`RemoteRequestError`: the caller's mistake, not a failure to fall back from.
        """
        data = b"".join(self.chunks)
        status = self.response.status_code
        if status == 200:
            return json.loads(data)
        try:
            problem = json.loads(data)
            detail, errors = problem["detail"], problem.get("errors") or []
            fields = [str(e["field"]) for e in errors]
        except (ValueError, TypeError, KeyError, AttributeError):
            detail, fields = data[:200].decode(errors="replace"), []
        if status == 422 and any(f.split(".")[0] in _REFUSED_FIELDS for f in fields):
            raise RemoteRequestError(f"the service refused the request: {detail}")
        raise RuntimeError(f"service answered {status}: {detail}")
