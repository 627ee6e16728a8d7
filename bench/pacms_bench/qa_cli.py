"""The ``pacms-bench longmemeval qa`` command: its options, model checks and resumable runs.

:func:`add_qa_arguments` declares the options, :func:`qa_from_args` builds the reader, the
judge and the selector from them, checks each model with one short prompt
(:func:`check_model`), and runs :func:`~pacms_bench.qa.arun_qa`, appending each answer
to the output folder as it comes so that ``--resume`` can go on after a stop
(:func:`load_partial_run`).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage

from langchain_pacms import ContextSelector
from langchain_pacms.core import get_strategy
from langchain_pacms.embeddings import model_identity
from pacms_bench._calls import Exhausted, run_sync, with_retries
from pacms_bench._options import add_check, add_sample, add_split, fail
from pacms_bench.backends import EMBEDDINGS_HELP
from pacms_bench.longmemeval import (
    Question,
    iter_questions,
    resolve_source,
    sample_questions,
)
from pacms_bench.qa import (
    BUDGET_BASES,
    DEFAULT_STRATEGIES,
    build_pool,
    pool_budget,
    run_qa,
)
from pacms_bench.qa_report import QARecord
from pacms_bench.redundancy import STYLES

__all__ = [
    "CHECK_PROMPT",
    "DEFAULT_MAX_TOKENS",
    "JUDGE_NUM_CTX",
    "RECORDS_FILE",
    "RUN_FILE",
    "acheck_model",
    "add_qa_arguments",
    "auto_num_ctx",
    "check_model",
    "load_partial_run",
    "qa_from_args",
    "read_ids",
]


def add_qa_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``pacms-bench longmemeval qa`` options to ``parser``.

    Args:
        parser: The sub-command parser.

    Returns:
        The same parser.
    """
    parser.add_argument(
        "--data",
        default=None,
        help="LongMemEval data dir (with oracle/ and the S archive), or a folder/archive/JSON "
        "of questions (default: $PACMS_LONGMEMEVAL_DIR or ../shared/data/longmemeval)",
    )
    add_split(parser, "which split to read from a data dir (default: s)")
    add_sample(parser, "questions to sample (default: 100)", "use every question")
    parser.add_argument(
        "--ids",
        default=None,
        help="file of question ids to use instead of sampling (one per line, or a JSON list), "
        "e.g. to pin the recall run's questions",
    )
    parser.add_argument("--seed", type=int, default=0, help="sample and injection seed")
    parser.add_argument("--level", type=int, default=2, help="redundancy level R (default: 2)")
    parser.add_argument(
        "--budget", type=float, default=0.45, help="budget ratio in (0, 1] (default: 0.45)"
    )
    parser.add_argument("--style", choices=STYLES, default="recap", help="restatement style")
    parser.add_argument(
        "--budget-base",
        choices=BUDGET_BASES,
        default="pool",
        help="budget is a fraction of the padded pool or of the original history",
    )
    parser.add_argument(
        "--strategies",
        default=",".join(DEFAULT_STRATEGIES),
        help="comma-separated strategies (default: %(default)s)",
    )
    parser.add_argument(
        "--reader",
        required=True,
        help="reader model spec: ollama:<model> (e.g. ollama:llama3.1), any <provider>:<model> "
        "LangChain's init_chat_model knows (e.g. openai:gpt-4o-mini; needs langchain and the "
        "provider's package), python:<module>:<name>, or fake:<reply> for a dry run",
    )
    parser.add_argument(
        "--judge", default=None, help="judge model spec (default: same as --reader)"
    )
    parser.add_argument(
        "--embeddings",
        default="default",
        help=f"embeddings spec: {EMBEDDINGS_HELP} (default: %(default)s)",
    )
    parser.add_argument(
        "--cache-dir", default=None, help="on-disk embedding cache folder (default: none)"
    )
    parser.add_argument(
        "--ollama-url", default=None, help="Ollama server (default: $OLLAMA_HOST or Ollama's)"
    )
    parser.add_argument(
        "--num-ctx",
        type=int,
        default=0,
        help="context window of an ollama: reader (default 0: sized from the largest budget); "
        f"an ollama: judge that is not the reader gets {JUDGE_NUM_CTX}",
    )
    parser.add_argument(
        "--temperature",
        type=_temperature,
        default=0.0,
        metavar="T",
        help="sampling temperature of ollama: and <provider>: models (default: 0); 'none' "
        "leaves it to the model, for models that reject the parameter",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=DEFAULT_MAX_TOKENS,
        metavar="N",
        help="cap on each reply of ollama: (num_predict) and <provider>: (max_tokens) models, "
        "so a model caught in a loop cannot hold a call forever; leave room for a reasoning "
        f"model's thinking (default: {DEFAULT_MAX_TOKENS}; 0: no cap)",
    )
    parser.add_argument("--concurrency", type=int, default=4, help="model calls in flight")
    parser.add_argument("--retries", type=int, default=2, help="retries per failed call")
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds per model call (default: none)"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="output folder (default: results/qa/<reader>_judge-<judge>_<split>_<style>_"
        "<budget base>_R<level>_b<budget>_seed<seed>); answers are appended to its "
        "qa_records.jsonl as they come in",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="go on with the run saved in the output folder (e.g. after Ctrl-C): its answers "
        "are kept and only the missing or failed (question, strategy) pairs are run; the "
        "settings and the question sample must match",
    )
    add_check(
        parser,
        "skip the test prompt sent to the reader and the judge before the run (it finds "
        "a missing model, a server that is down or a missing key before hundreds of calls do)",
        "no progress bar",
    )
    return parser


RUN_FILE = "qa_run.json"
"""Settings of a CLI run, saved in its output folder so that ``--resume`` can check them."""
RECORDS_FILE = "qa_records.jsonl"
"""Answers of a CLI run, one JSON record per line, appended as they come in."""


def load_partial_run(out: str | Path, settings: Mapping[str, Any]) -> list[QARecord]:
    """Read the answers an earlier CLI run left in ``out``, to go on with it.

    Records of failed pairs (``error`` set) and a last line cut short by an interruption are
    dropped, so those pairs run again.

    Args:
        out: The run's output folder.
        settings: The settings of the run about to start; they must equal the saved ones.

    Returns:
        The reusable records (empty when ``out`` holds no answers).

    Raises:
        ValueError: If ``out`` holds answers without saved settings, or other settings.
    """
    folder = Path(out)
    records_path = folder / RECORDS_FILE
    if not records_path.exists():
        return []
    run_path = folder / RUN_FILE
    if not run_path.exists():
        raise ValueError(f"{folder} holds answers but no {RUN_FILE}; use another --out")
    saved = json.loads(run_path.read_text(encoding="utf-8"))
    differ = sorted(k for k in {*saved, *settings} if saved.get(k) != settings.get(k))
    if differ:
        detail = "; ".join(f"{k}: {saved.get(k)!r} there, {settings.get(k)!r} now" for k in differ)
        raise ValueError(f"{folder} holds a run with other settings ({detail}); use another --out")
    records = []
    for line in records_path.read_text(encoding="utf-8").splitlines():
        try:
            record = QARecord(**json.loads(line))
        except (ValueError, TypeError):
            continue  # empty, or cut short when the run was stopped
        if record.error is None:
            records.append(record)
    return records


def read_ids(path: str | Path) -> list[str]:
    """Read question ids from a file: a JSON list, or one id per line (``#`` comments).

    Args:
        path: The file.

    Returns:
        The ids, in file order, without duplicates.

    Raises:
        OSError: If the file cannot be read.
        ValueError: If it holds no ids.
    """
    text = Path(path).read_text(encoding="utf-8")
    stripped = text.strip()
    if stripped.startswith("["):
        ids = [str(x) for x in json.loads(stripped)]
    else:
        ids = [ln.split("#", 1)[0].strip() for ln in text.splitlines()]
    ids = list(dict.fromkeys(i for i in ids if i))
    if not ids:
        raise ValueError(f"no question ids in {path}")
    return ids


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-") or "model"


def auto_num_ctx(
    questions: Sequence[Question],
    count: Callable[[str], int],
    *,
    level: int,
    budget_ratio: float,
    style: str = "recap",
    budget_base: str = "pool",
    seed: int = 0,
) -> int:
    """A context window that fits the largest reader prompt of a run, with headroom.

    Reader prompts hold at most the budget plus a few hundred tokens of instructions; the
    budget is counted with the selector's tokenizer, and a local model's tokenizer can need
    more tokens for the same text, so the largest budget is scaled by 1.3 and padded by
    1024 tokens, then rounded up to a multiple of 4096 (at least 8192).

    Args:
        questions: The run's questions.
        count: The selector's token counter.
        level: Redundancy level.
        budget_ratio: Budget ratio.
        style: Restatement style.
        budget_base: Budget base.
        seed: Injection seed.

    Returns:
        The window size in tokens (for Ollama's ``num_ctx``).
    """
    largest = max(
        (
            pool_budget(
                build_pool(q, level, style=style, seed=seed), count, budget_ratio, budget_base
            )
            for q in questions
        ),
        default=0,
    )
    need = math.ceil(1.3 * largest) + 1024
    return max(8192, 4096 * math.ceil(need / 4096))


def _temperature(text: str) -> float | None:
    """``--temperature``: a number >= 0, or ``none`` to leave the model's own default."""
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'none', got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"temperature must be >= 0, got {text!r}")
    return value


JUDGE_NUM_CTX = 8192
"""``num_ctx`` of an ``ollama:`` judge that is not also the reader (its prompts are short)."""

DEFAULT_MAX_TOKENS = 2048
"""Default cap on a reply's tokens (``--max-tokens``): far above a LongMemEval answer or a
verdict, with room for a reasoning model's thinking."""

CHECK_PROMPT = "Reply with the single word OK."
"""The test prompt the CLI sends to each model before a run (skipped with ``--no-check``)."""


async def acheck_model(model: Any, *, retries: int = 2, timeout: float | None = None) -> str | None:
    """Send :data:`CHECK_PROMPT` to a chat model, with the run's retry rules.

    A run makes hundreds of calls; this one call finds a model that does not exist, a server
    that is down or a missing key before any of them (and before a working reader's answers
    are spent on a judge that cannot grade them). The reply's content is not checked.

    Run it on the event loop the run will use (:func:`check_model` and :func:`run_qa` share
    their thread's loop): an async client's pooled connections belong to one loop.

    Args:
        model: A LangChain chat model.
        retries: Retries after a failed call (HTTP client errors are not retried).
        timeout: Seconds per call (None: no limit).

    Returns:
        None if the model answered, else the error, as ``"<type>: <message>"``.

    Example:
        >>> import asyncio
        >>> from langchain_core.language_models import FakeListChatModel
        >>> asyncio.run(acheck_model(FakeListChatModel(responses=["OK"]))) is None
        True
    """
    try:
        await with_retries(
            lambda: model.ainvoke([HumanMessage(CHECK_PROMPT)]),
            sem=asyncio.Semaphore(1),
            retries=retries,
            backoff=1.0,
            timeout=timeout,
        )
    except Exhausted as failed:
        return f"{type(failed.error).__name__}: {failed.error}"
    return None


def check_model(model: Any, *, retries: int = 2, timeout: float | None = None) -> str | None:
    """Sync twin of :func:`acheck_model`.

    Example:
        >>> from langchain_core.language_models import FakeListChatModel
        >>> class Down(FakeListChatModel):
        ...     async def ainvoke(self, *args, **kwargs):
        ...         raise ConnectionError("refused")
        >>> check_model(FakeListChatModel(responses=["OK"])) is None
        True
        >>> check_model(Down(responses=[]), retries=0)
        'ConnectionError: refused'
    """
    return run_sync(acheck_model(model, retries=retries, timeout=timeout))


def _most_common_error(records: Sequence[QARecord]) -> str:
    errors = Counter(r.error for r in records if r.error)
    if not errors:
        return ""
    error, count = errors.most_common(1)[0]
    return f"; the most common error ({count} of {len(records)} answers): {error}"


def _check_backends(
    args: argparse.Namespace,
    models: Mapping[str, Any],
    judge_spec: str,
    emb_spec: str,
    selector: ContextSelector,
) -> str | None:
    """Try each model and the embedder once before a run; return the first problem, if any.

    ``fake:``, ``python:`` and the built-in embedders run in this process and are not tried.
    """
    for spec in dict.fromkeys((args.reader, judge_spec)):
        if spec.strip().partition(":")[0].lower() in ("fake", "python"):
            continue
        role = " and ".join(
            name for name, s in (("reader", args.reader), ("judge", judge_spec)) if s == spec
        )
        if not args.quiet:
            print(f"checking the {role} {spec} ...", file=sys.stderr)
        problem = check_model(models[spec], retries=args.retries, timeout=args.timeout)
        if problem:
            hint = "; for a model that takes no temperature, --temperature none" * (
                "temperature" in problem.lower()
            )
            return f"the {role} {spec} did not answer a test prompt: {problem}{hint}"
    from pacms_bench import backends  # looked up per call, so tests can swap it

    return backends.check_embeddings(emb_spec, selector.embeddings)


def qa_from_args(args: argparse.Namespace) -> int:
    """Run ``pacms-bench longmemeval qa`` from parsed arguments.

    Model specs are resolved with ``pacms_bench.backends``, looked up at call time.
    For ``ollama:`` specs the models get ``temperature`` (default 0), ``seed``, ``num_ctx``
    (default: :func:`auto_num_ctx`, so long prompts are not cut by Ollama's small default
    window) and ``num_predict`` (``--max-tokens``); other ``<provider>:<model>`` specs get
    ``temperature`` and ``max_tokens``; ``fake:`` and ``python:`` models are built as they
    are. A ``temperature`` of ``None`` (``--temperature none``) and a ``--max-tokens`` of 0
    are not passed at all.

    Args:
        args: Namespace built by a parser that went through :func:`add_qa_arguments`.

    Returns:
        Exit code: 0 on success, 1 if every reader/judge call failed, 2 for bad input, 130
        when stopped with Ctrl-C.
    """
    try:
        return _qa_command(args)
    except KeyboardInterrupt:  # before the run (a run stopped midway is handled inside)
        print("\ninterrupted before any answer was asked for", file=sys.stderr)
        return 130


def _qa_command(args: argparse.Namespace) -> int:
    strategies = tuple(s.strip() for s in str(args.strategies).split(",") if s.strip())
    try:  # before anything is built or written
        for name in strategies:
            get_strategy(name)
    except ValueError as err:
        return fail(str(err))
    try:
        source = resolve_source(args.data, args.split)
    except FileNotFoundError as err:
        return fail(str(err))
    from pacms_bench import backends  # looked up per call, so tests can swap it

    judge_spec = args.judge or args.reader
    ollama_url = getattr(args, "ollama_url", None)
    emb_spec = getattr(args, "embeddings", None) or "default"
    temperature = getattr(args, "temperature", 0.0)
    sampling: dict[str, Any] = {} if temperature is None else {"temperature": temperature}
    num_ctx = getattr(args, "num_ctx", None) or None
    max_tokens = getattr(args, "max_tokens", DEFAULT_MAX_TOKENS)
    if max_tokens < 0:
        return fail(f"--max-tokens must be >= 0, got {max_tokens}")

    def is_ollama(spec: str) -> bool:
        return spec.strip().lower().startswith("ollama:")

    def build(spec: str) -> Any:
        kind = spec.strip().partition(":")[0].lower()
        if kind in ("fake", "python"):
            return backends.chat_model_from_spec(spec)
        if kind != "ollama":
            cap: dict[str, Any] = {"max_tokens": max_tokens} if max_tokens else {}
            return backends.chat_model_from_spec(spec, **sampling, **cap)
        # The window is sized for the reader's prompts; a judge of its own reads short ones
        # (a larger window would only hold memory, or make Ollama reload a shared model).
        window = num_ctx if spec == args.reader else JUDGE_NUM_CTX
        cap = {"num_predict": max_tokens} if max_tokens else {}
        return backends.chat_model_from_spec(
            spec, ollama_url=ollama_url, seed=args.seed, num_ctx=window, **sampling, **cap
        )

    # Build the models before the (slow) data load, so a bad spec fails fast. An ollama: reader
    # without --num-ctx is only checked here: its window is sized from the questions below.
    models: dict[str, Any] = {}
    try:
        for spec in dict.fromkeys((args.reader, judge_spec)):
            if is_ollama(spec) and num_ctx is None and spec == args.reader:
                backends.chat_model_from_spec(spec)
            else:
                models[spec] = build(spec)
        selector = backends.selector_from_spec(
            emb_spec, cache_dir=getattr(args, "cache_dir", None), ollama_url=ollama_url
        )
    except Exception as err:
        return fail(f"{type(err).__name__}: {err}")
    if not args.quiet:
        print(f"loading questions from {source} ...", file=sys.stderr)
    ids_file = getattr(args, "ids", None)
    try:
        if ids_file:
            wanted = read_ids(ids_file)
            questions = sorted(iter_questions(source, ids=wanted), key=lambda q: q.question_id)
            missing = sorted(set(wanted) - {q.question_id for q in questions})
            if missing:
                print(f"warning: {len(missing)} ids not found in {source}", file=sys.stderr)
        else:
            questions = sample_questions(
                iter_questions(source), None if args.all else args.n, seed=args.seed
            )
    except (OSError, ValueError) as err:
        return fail(str(err))
    if not questions:
        return fail("no questions selected")

    try:
        if num_ctx is None and is_ollama(args.reader):
            num_ctx = auto_num_ctx(
                questions,
                selector.token_counter,
                level=args.level,
                budget_ratio=args.budget,
                style=args.style,
                budget_base=args.budget_base,
                seed=args.seed,
            )
        for spec in dict.fromkeys((args.reader, judge_spec)):
            if spec not in models:
                models[spec] = build(spec)
    except Exception as err:
        return fail(f"{type(err).__name__}: {err}")
    reader, judge = models[args.reader], models[judge_spec]
    if getattr(args, "check", True):
        problem = _check_backends(args, models, judge_spec, emb_spec, selector)
        if problem:
            return fail(f"{problem} (--no-check skips this test)")
    meta = {
        "reader": args.reader,
        "judge": judge_spec,
        "embeddings": emb_spec,
        "split": args.split,
        "source": str(source),
        "sample_n": None if args.all or ids_file else args.n,
        "ids_file": str(ids_file) if ids_file else None,
        "num_ctx": num_ctx,
        "temperature": temperature,
        "max_tokens": max_tokens or None,
    }
    settings = {
        "reader": args.reader,
        "judge": judge_spec,
        "embeddings": emb_spec,
        # What the spec builds, which can change between versions (ollama: task prefixes).
        "embeddings_identity": model_identity(selector.embeddings.embeddings),
        "split": args.split,
        "source": str(source),
        "style": args.style,
        "budget_base": args.budget_base,
        "level": args.level,
        "budget": args.budget,
        "seed": args.seed,
        "temperature": temperature,
        "max_tokens": max_tokens or None,
        # The sample itself, so that a resumed run answers the questions it started with.
        "questions": len(questions),
        "question_ids_sha256": hashlib.sha256(
            "\n".join(sorted(q.question_id for q in questions)).encode()
        ).hexdigest(),
    }
    out = (
        Path(args.out)
        if args.out
        else Path("results")
        / "qa"
        / (
            f"{_slug(args.reader)}_judge-{_slug(judge_spec)}_{args.split}_{args.style}_"
            f"{args.budget_base}_R{args.level}_b{round(100 * args.budget)}_seed{args.seed}"
        )
    )
    resume = bool(getattr(args, "resume", False))
    try:
        done = load_partial_run(out, settings) if resume else []
        out.mkdir(parents=True, exist_ok=True)
        (out / RUN_FILE).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        sink = (out / RECORDS_FILE).open("a" if resume else "w", encoding="utf-8")
    except (OSError, ValueError) as err:
        return fail(str(err))
    if done and not args.quiet:
        print(f"resuming: {len(done)} answers kept from {out / RECORDS_FILE}", file=sys.stderr)

    def keep(record: QARecord) -> None:
        sink.write(json.dumps(asdict(record), ensure_ascii=False) + "\n")
        sink.flush()

    try:
        report = run_qa(
            questions,
            strategies=strategies,
            level=args.level,
            budget_ratio=args.budget,
            style=args.style,
            budget_base=args.budget_base,
            reader=reader,
            judge=judge,
            selector=selector,
            concurrency=args.concurrency,
            retries=args.retries,
            seed=args.seed,
            progress=not args.quiet,
            timeout=args.timeout,
            meta=meta,
            done=done,
            on_record=keep,
        )
    except ValueError as err:
        return fail(str(err))
    except KeyboardInterrupt:
        print(
            f"\ninterrupted: the answers so far are in {out / RECORDS_FILE}; run the same "
            "command with --resume to go on",
            file=sys.stderr,
        )
        return 130
    finally:
        sink.close()
    paths = report.save(out)
    print(report.to_markdown())
    print(f"saved: {', '.join(str(p) for p in paths.values())}", file=sys.stderr)
    totals = report.totals()
    if totals["records"] and totals["failures"] == totals["records"]:
        print(
            "error: every reader/judge call failed; is the model reachable?"
            + _most_common_error(report.records),
            file=sys.stderr,
        )
        return 1
    if totals["failures"]:
        print(
            f"warning: {totals['failures']} answers failed and count as wrong"
            + _most_common_error(report.records),
            file=sys.stderr,
        )
    return 0
