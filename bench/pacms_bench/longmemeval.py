"""Loader for LongMemEval (Wu et al., ICLR 2025) question records.

The loader turns upstream records into :class:`Question` objects whose history is
a flat, chronologically ordered tuple of :class:`Round` objects. It reads every
on-disk layout we use, and it never extracts anything to disk:

* a folder of per-question JSON files, such as the ``oracle/`` folder
  (``<N>_<question_id>.json``, one record per file);
* a tar archive such as ``longmemeval_s_cleaned.lme_jsons.tar.xz`` (members
  ``lme_jsons/<N>_<question_id>.json``). The archive is *streamed*
  (``tarfile.open(path, "r|xz")``);
* an official single JSON file that holds a list of records (for example
  ``longmemeval_oracle.json``), or a single record object.

Rounds:
    A *round* is one user turn plus the assistant reply that follows it, within
    one session. Irregular sessions are handled like this:

    * An assistant turn with no preceding unpaired user turn (an *orphan*)
      becomes a round with empty ``user`` text. For example, a session that
      starts with an assistant turn, or a second assistant turn in a row.
    * A user turn that is followed by another user turn, or that ends the
      session, becomes a round with empty ``assistant`` text.
    * Turns are never merged and never dropped.

    A round is evidence (``is_evidence``) if either of its turns carries
    ``has_answer: true``. This is turn-level evidence that *includes*
    assistant-side evidence. The official retrieval metric counts user turns
    only, so some ``single-session-assistant`` questions have evidence rounds
    here but none in the official metric.

Chronology:
    Sessions are ordered by their parsed ``haystack_dates`` (a stable sort, so
    ties keep their upstream order). ``Round.index`` is the global position of
    the round in that order. ``Round.session_index`` is the position of its
    session in the upstream ``haystack_sessions`` list. The upstream order is
    sorted by day but not always by time within a day (34 oracle files, 210 S
    files). If any date fails to parse, the upstream order is kept. Pass
    ``chronological=False`` to keep the upstream order in all cases.

Only the standard library is used here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pacms_bench.paths import repo_root

__all__ = [
    "ENV_VAR",
    "ORACLE_DIRNAME",
    "QUESTION_TYPES",
    "S_ARCHIVE_NAME",
    "Question",
    "Round",
    "build_rounds",
    "default_data_dir",
    "iter_questions",
    "parse_date",
    "question_from_record",
    "resolve_source",
    "sample_questions",
    "split_of",
]

ENV_VAR = "PACMS_LONGMEMEVAL_DIR"
"""Environment variable that overrides :func:`default_data_dir`."""

ORACLE_DIRNAME = "oracle"
"""Name of the oracle folder inside the data directory."""

S_ARCHIVE_NAME = "longmemeval_s_cleaned.lme_jsons.tar.xz"
"""File name of the LongMemEval_S archive inside the data directory."""

QUESTION_TYPES: tuple[str, ...] = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "temporal-reasoning",
    "knowledge-update",
    "multi-session",
)
"""The six upstream question types."""

_MEMBER_RE = re.compile(r"^(\d+)_(.+)\.json$")
_DATE_RE = re.compile(
    r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\([A-Za-z]{3}\))?\s+(\d{1,2}):(\d{2})\s*$"
)
_TAR_SUFFIXES = (".tar", ".tar.xz", ".txz", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2")


@dataclass(frozen=True)
class Round:
    """One user turn plus the assistant reply that follows it.

    Attributes:
        index: Global chronological index of the round within its question
            (0-based, contiguous).
        session_id: Upstream id of the session the round belongs to.
        session_index: Position of that session in the upstream
            ``haystack_sessions`` list (not its chronological rank).
        date: Session timestamp as given upstream, e.g. ``"2023/05/30 (Tue) 23:40"``.
        user: User text (empty for an orphan assistant turn).
        assistant: Assistant text (empty if the user turn got no reply).
        is_evidence: True if either turn carries ``has_answer: true``.
    """

    index: int
    session_id: str
    session_index: int
    date: str
    user: str
    assistant: str
    is_evidence: bool

    @property
    def text(self) -> str:
        r"""Readable rendering: ``"[date] user: ...\nassistant: ..."``.

        Empty sides are left out, so an orphan assistant turn renders as
        ``"[date] assistant: ..."``.
        """
        parts = []
        if self.user:
            parts.append(f"user: {self.user}")
        if self.assistant:
            parts.append(f"assistant: {self.assistant}")
        body = "\n".join(parts)
        return f"[{self.date}] {body}" if self.date else body


@dataclass(frozen=True)
class Question:
    """A LongMemEval question together with its flattened history.

    Attributes:
        question_id: Upstream id. A ``_abs`` suffix marks an abstention question.
        question_type: One of :data:`QUESTION_TYPES`.
        question: The question text.
        answer: The reference answer. Integer answers (32 upstream records)
            are converted to ``str``. For abstention questions it explains why
            the question is unanswerable. For ``single-session-preference`` it
            is a rubric.
        question_date: Timestamp of the question, e.g. ``"2023/05/30 (Tue) 23:40"``.
        rounds: The history, in chronological order (see the module docstring).
        answer_session_ids: Upstream session-level evidence ids.
    """

    question_id: str
    question_type: str
    question: str
    answer: str
    question_date: str
    rounds: tuple[Round, ...]
    answer_session_ids: tuple[str, ...] = ()

    @property
    def is_abstention(self) -> bool:
        """True for abstention questions (``question_id`` ends with ``_abs``)."""
        return self.question_id.endswith("_abs")

    @property
    def evidence_indices(self) -> tuple[int, ...]:
        """``Round.index`` of every evidence round, in ascending order."""
        return tuple(r.index for r in self.rounds if r.is_evidence)


def parse_date(value: str) -> datetime | None:
    """Parse an upstream timestamp such as ``"2023/05/30 (Tue) 23:40"``.

    Args:
        value: The timestamp string. The weekday in parentheses is optional.

    Returns:
        The naive datetime, or ``None`` if the string does not match.
    """
    m = _DATE_RE.match(value)
    if m is None:
        return None
    year, month, day, hour, minute = (int(g) for g in m.groups())
    try:
        return datetime(year, month, day, hour, minute)
    except ValueError:
        return None


def _turn_text(turn: Mapping[str, Any] | None) -> str:
    if turn is None:
        return ""
    content = turn.get("content")
    return "" if content is None else str(content)


def _turn_evidence(turn: Mapping[str, Any] | None) -> bool:
    return bool(turn is not None and turn.get("has_answer", False))


def build_rounds(
    sessions: Sequence[Sequence[Mapping[str, Any]]],
    session_ids: Sequence[str],
    dates: Sequence[str],
    *,
    chronological: bool = True,
) -> tuple[Round, ...]:
    """Pair the turns of every session into rounds and number them globally.

    Args:
        sessions: Upstream ``haystack_sessions``: one list of turns (``role``,
            ``content``, optional ``has_answer``) per session.
        session_ids: Upstream ``haystack_session_ids``, parallel to ``sessions``.
        dates: Upstream ``haystack_dates``, parallel to ``sessions``.
        chronological: Order sessions by parsed date (a stable sort). If False,
            or if any date fails to parse, the upstream order is kept.

    Returns:
        The rounds, with ``index`` running 0..n-1 in the chosen session order.

    Raises:
        ValueError: If the three sequences differ in length, or a turn has a
            role other than ``user`` or ``assistant``.
    """
    if not (len(sessions) == len(session_ids) == len(dates)):
        raise ValueError(
            f"haystack_sessions ({len(sessions)}), haystack_session_ids "
            f"({len(session_ids)}) and haystack_dates ({len(dates)}) differ in length"
        )
    order = list(range(len(sessions)))
    if chronological:
        parsed = [parse_date(d) for d in dates]
        if all(p is not None for p in parsed):
            order.sort(key=lambda i: parsed[i])  # type: ignore[arg-type, return-value]

    rounds: list[Round] = []

    def emit(s_idx: int, user: Mapping[str, Any] | None, asst: Mapping[str, Any] | None) -> None:
        rounds.append(
            Round(
                index=len(rounds),
                session_id=str(session_ids[s_idx]),
                session_index=s_idx,
                date=str(dates[s_idx]),
                user=_turn_text(user),
                assistant=_turn_text(asst),
                is_evidence=_turn_evidence(user) or _turn_evidence(asst),
            )
        )

    for s_idx in order:
        pending_user: Mapping[str, Any] | None = None
        for turn in sessions[s_idx]:
            role = turn.get("role")
            if role == "user":
                if pending_user is not None:  # two user turns in a row
                    emit(s_idx, pending_user, None)
                pending_user = turn
            elif role == "assistant":
                emit(s_idx, pending_user, turn)  # pending_user None -> orphan
                pending_user = None
            else:
                raise ValueError(f"unexpected turn role {role!r} in session {session_ids[s_idx]!r}")
        if pending_user is not None:
            emit(s_idx, pending_user, None)
    return tuple(rounds)


def question_from_record(record: Mapping[str, Any], *, chronological: bool = True) -> Question:
    """Build a :class:`Question` from one upstream record.

    Args:
        record: A decoded upstream JSON object.
        chronological: Passed on to :func:`build_rounds`.

    Returns:
        The parsed question.

    Raises:
        ValueError: If a required field is missing or the record is malformed (see
            :func:`build_rounds`).
    """
    if not isinstance(record, Mapping):
        raise ValueError(f"a question record must be a JSON object, got {type(record).__name__}")
    missing = [k for k in _REQUIRED_FIELDS if k not in record]
    if missing:
        raise ValueError(f"not a LongMemEval question record: missing {', '.join(missing)}")
    rounds = build_rounds(
        record["haystack_sessions"],
        record["haystack_session_ids"],
        record["haystack_dates"],
        chronological=chronological,
    )
    return Question(
        question_id=str(record["question_id"]),
        question_type=str(record["question_type"]),
        question=str(record["question"]),
        answer=str(record["answer"]),
        question_date=str(record["question_date"]),
        rounds=rounds,
        answer_session_ids=tuple(str(s) for s in record.get("answer_session_ids", ())),
    )


_REQUIRED_FIELDS = (
    "question_id",
    "question_type",
    "question",
    "answer",
    "question_date",
    "haystack_sessions",
    "haystack_session_ids",
    "haystack_dates",
)


def _questions(
    records: Iterable[Mapping[str, Any]], origin: str, filt: _Filter, chronological: bool
) -> Iterator[Question]:
    """Parse ``records`` (read from ``origin``) and yield those ``filt`` accepts."""
    for rec in records:
        try:
            q = question_from_record(rec, chronological=chronological)
        except ValueError as err:
            raise ValueError(f"{origin}: {err}") from err
        if filt.accept(q.question_id):
            yield q
            if filt.done:
                return


def _qid_from_name(name: str) -> str | None:
    """Return the question id encoded in ``<N>_<qid>.json``, or None."""
    m = _MEMBER_RE.match(name.rsplit("/", 1)[-1])
    return m.group(2) if m else None


class _Filter:
    """Tracks an optional id filter and whether every wanted id was seen."""

    def __init__(self, ids: Collection[str] | None) -> None:
        if isinstance(ids, str):
            raise TypeError("ids must be a collection of question ids, not a single str")
        self.wanted = None if ids is None else frozenset(ids)
        self.remaining = None if self.wanted is None else set(self.wanted)

    def skip_name(self, name: str) -> bool:
        """True if the file name proves the record is not wanted."""
        if self.wanted is None:
            return False
        qid = _qid_from_name(name)
        return qid is not None and qid not in self.wanted

    def accept(self, question_id: str) -> bool:
        if self.wanted is None:
            return True
        if question_id not in self.wanted:
            return False
        assert self.remaining is not None
        self.remaining.discard(question_id)
        return True

    @property
    def done(self) -> bool:
        return self.remaining is not None and not self.remaining


def _records_from_json_bytes(data: bytes | str) -> list[Mapping[str, Any]]:
    obj = json.loads(data)
    if isinstance(obj, list):
        return obj
    if isinstance(obj, dict):
        return [obj]
    raise ValueError(f"expected a JSON object or list of objects, got {type(obj).__name__}")


def _is_tar(path: Path) -> bool:
    return path.name.lower().endswith(_TAR_SUFFIXES)


def iter_questions(
    source: str | os.PathLike[str],
    *,
    ids: Collection[str] | None = None,
    chronological: bool = True,
) -> Iterator[Question]:
    """Yield the questions stored at ``source``.

    Args:
        source: A folder of per-question JSON files (e.g. ``oracle/``), a tar
            archive of such files (e.g. the ``.tar.xz``, streamed and never
            extracted), or one JSON file that holds a list of records (or a
            single record).
        ids: If given, yield only these question ids. A folder or archive
            member named ``<N>_<qid>.json`` whose id is not wanted is skipped
            without JSON parsing. A skipped tar member is still decompressed,
            because the archive is one xz stream, but it is never extracted.
            Iteration stops as soon as every wanted id has been yielded, so each
            id is yielded at most once.
        chronological: Passed on to :func:`build_rounds`.

    Yields:
        Questions in source order. Folders are read in sorted file-name order,
        and archives in member order.

    Raises:
        FileNotFoundError: If ``source`` does not exist or a folder holds no
            ``*.json`` files.
        ValueError: If the file type is not recognised or a record is malformed.
    """
    path = Path(source)
    filt = _Filter(ids)
    if filt.done:  # empty ids collection
        return
    if path.is_dir():
        yield from _iter_dir(path, filt, chronological)
    elif not path.exists():
        raise FileNotFoundError(f"LongMemEval source not found: {path}")
    elif _is_tar(path):
        yield from _iter_tar(path, filt, chronological)
    elif path.suffix.lower() == ".json":
        yield from _questions(
            _records_from_json_bytes(path.read_bytes()), str(path), filt, chronological
        )
    else:
        raise ValueError(f"unrecognised LongMemEval source (expected folder, tar, .json): {path}")


def _iter_dir(path: Path, filt: _Filter, chronological: bool) -> Iterator[Question]:
    files = sorted(p for p in path.iterdir() if p.suffix.lower() == ".json" and p.is_file())
    if not files:
        raise FileNotFoundError(f"no *.json files in {path}")
    for f in files:
        if filt.skip_name(f.name):
            continue
        yield from _questions(_records_from_json_bytes(f.read_bytes()), str(f), filt, chronological)
        if filt.done:
            return


def _iter_tar(path: Path, filt: _Filter, chronological: bool) -> Iterator[Question]:
    name = path.name.lower()
    mode: Literal["r|xz", "r|*"] = "r|xz" if name.endswith((".xz", ".txz")) else "r|*"
    with tarfile.open(path, mode) as tf:
        for member in tf:
            if not member.isfile() or not member.name.lower().endswith(".json"):
                continue
            if filt.skip_name(member.name):
                continue  # stream mode skips the data without handing it to us
            fh = tf.extractfile(member)
            if fh is None:  # pragma: no cover - isfile() members always have data
                continue
            origin = f"{path}:{member.name}"
            yield from _questions(_records_from_json_bytes(fh.read()), origin, filt, chronological)
            if filt.done:
                return


def _rank_key(seed: int, question_id: str) -> bytes:
    return hashlib.sha256(f"{seed}\x00{question_id}".encode()).digest()


def sample_questions(
    questions: Iterable[Question],
    n: int | None = 100,
    seed: int = 0,
    *,
    recall_only: bool = False,
) -> list[Question]:
    r"""Draw a seeded sample that is stratified uniformly over question types.

    The procedure:

    1. If ``recall_only``, drop abstention questions and questions without an
       evidence round.
    2. Every question gets a pseudo-random rank
       ``sha256(f"{seed}\0{question_id}")``. This makes the draw independent of
       the input order. With one seed, sources that share ids (oracle and S)
       give the same picks, except where a question is missing from one of them.
    3. The strata are the question types present, in alphabetical order. Each
       stratum gets ``n // k`` slots, and the first ``n % k`` strata get one
       more. If a stratum has too few questions, its unused slots go round-robin
       (in the same order) to the strata that still have questions left.
    4. Each stratum takes its lowest-ranked questions.

    Args:
        questions: The candidate questions (any iterable, consumed once).
        n: Sample size. ``None`` means all (after filtering). If ``n`` exceeds
            the number of candidates, all candidates are returned.
        seed: Seed of the ranking.
        recall_only: Apply the filter in step 1 before sampling.

    Returns:
        The sample, sorted by ``question_id``.

    Raises:
        ValueError: If ``n`` is negative.
    """
    pool = list(questions)
    if recall_only:
        pool = [q for q in pool if not q.is_abstention and q.evidence_indices]
    if n is None:
        return sorted(pool, key=lambda q: q.question_id)
    if n < 0:
        raise ValueError(f"n must be >= 0 or None, got {n}")
    by_type: dict[str, list[Question]] = {}
    for q in pool:
        by_type.setdefault(q.question_type, []).append(q)
    types = sorted(by_type)
    if not types or n == 0:
        return []
    for t in types:
        by_type[t].sort(key=lambda q: (_rank_key(seed, q.question_id), q.question_id))

    base, rem = divmod(n, len(types))
    want = {t: base + (1 if i < rem else 0) for i, t in enumerate(types)}
    quota = {t: min(want[t], len(by_type[t])) for t in types}
    leftover = min(n, len(pool)) - sum(quota.values())
    while leftover > 0:
        for t in types:
            if leftover and quota[t] < len(by_type[t]):
                quota[t] += 1
                leftover -= 1
    chosen = [q for t in types for q in by_type[t][: quota[t]]]
    return sorted(chosen, key=lambda q: q.question_id)


def default_data_dir() -> Path | None:
    """Locate the LongMemEval data directory.

    The lookup order:

    1. The environment variable :data:`ENV_VAR` (``PACMS_LONGMEMEVAL_DIR``).
       If it is set, its value is returned even if the path does not exist.
    2. ``../shared/data/longmemeval`` relative to the current working directory.
    3. ``../shared/data/longmemeval`` relative to the repository checkout that
       holds ``bench/`` (:func:`~pacms_bench.paths.repo_root`).

    Returns:
        The directory (resolved for steps 2 and 3), or ``None`` if none exists.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    rel = Path("..") / "shared" / "data" / "longmemeval"
    candidates = [Path.cwd() / rel]
    root = repo_root()
    if root is not None:
        candidates.append(root / rel)
    for c in candidates:
        if c.is_dir():
            return c.resolve()
    return None


_SPLITS = ("oracle", "s")
# Official file names: longmemeval_oracle.json, longmemeval_s.json, longmemeval_s_cleaned.json, ...
_OFFICIAL_NAME = re.compile(r"longmemeval_(oracle|s)(?:[_.]|$)")


def split_of(path: str | os.PathLike[str]) -> str | None:
    """The LongMemEval split a source holds, read from its name (None if the name does not say).

    The data directory's ``oracle`` folder and S archive, and the official
    ``longmemeval_<split>*.json`` files, are recognised; any other folder or file is not.

    Example:
        >>> split_of("data/longmemeval_s_cleaned.json"), split_of("oracle"), split_of("my.json")
        ('s', 'oracle', None)
    """
    name = Path(path).name.lower()
    if name == ORACLE_DIRNAME:
        return "oracle"
    if name == S_ARCHIVE_NAME:
        return "s"
    match = _OFFICIAL_NAME.match(name)
    return match.group(1) if match else None


def resolve_source(data: str | os.PathLike[str] | None, split: str = "s") -> Path:
    """Find what :func:`iter_questions` should read, from a ``--data`` argument or the defaults.

    Args:
        data: A data directory (holding ``oracle/`` and the S archive, or the official
            ``longmemeval_<split>*.json`` files), or directly a folder of per-question JSON
            files, an archive or a JSON file. None: :func:`default_data_dir`
            (``$PACMS_LONGMEMEVAL_DIR``, else ``../shared/data/longmemeval`` from the working
            directory or the repository).
        split: ``"oracle"`` or ``"s"``, used when ``data`` is a data directory.

    Returns:
        The source path.

    Raises:
        FileNotFoundError: If nothing usable is found.
        ValueError: For an unknown split, or several official files of the split.
    """
    if split not in _SPLITS:
        raise ValueError(f"split must be 'oracle' or 's', got {split!r}")
    base = Path(data).expanduser() if data is not None else default_data_dir()
    if base is None:
        raise FileNotFoundError(
            "no LongMemEval data found: pass --data, or set PACMS_LONGMEMEVAL_DIR, or place it "
            "at ../shared/data/longmemeval"
        )
    if base.is_file():
        return base
    if base.is_dir():
        candidate = base / (ORACLE_DIRNAME if split == "oracle" else S_ARCHIVE_NAME)
        if candidate.exists():
            return candidate
        # The official single-JSON files (longmemeval_oracle.json, longmemeval_s.json,
        # longmemeval_s_cleaned.json, ...): only the split's own, never every file.
        official = sorted(base.glob("longmemeval_*.json"))
        if official:
            mine = [f for f in official if split_of(f) == split]
            if len(mine) == 1:
                return mine[0]
            if len(mine) > 1:
                names = ", ".join(f.name for f in mine)
                raise ValueError(
                    f"several LongMemEval {split!r} files in {base} ({names}); "
                    "pass one of them with --data"
                )
            raise FileNotFoundError(
                f"no LongMemEval {split!r} file among "
                f"{', '.join(f.name for f in official)} in {base}"
            )
        if any(base.glob("*.json")):
            return base
    raise FileNotFoundError(f"no LongMemEval {split!r} data under {base}")
