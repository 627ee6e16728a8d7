"""``pacms-bench``: the evaluation harnesses.

``pacms-bench longmemeval recall`` runs the evidence-round recall sweep of the study's Table 1
(:mod:`pacms_bench.recall`); ``pacms-bench longmemeval qa`` runs the end-to-end QA harness
(:mod:`pacms_bench.qa`, its options in :mod:`pacms_bench.qa_cli`); ``pacms-bench longmemeval
probe`` compares the built-in embedder's top-k recall with sparse lexical references
(:mod:`pacms_bench.lexical_probe`); ``pacms-bench lifecycle`` replays the lifecycle policies on
recorded agent runs (:mod:`pacms_bench.lifecycle_cli`).

Example:
    >>> build_parser().parse_args(["longmemeval", "recall", "--n", "5"]).n
    5
"""

from __future__ import annotations

import argparse
import functools
import re
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pacms_bench import __version__
from pacms_bench._options import (
    add_check,
    add_result_cache,
    add_sample,
    add_split,
    add_values,
    fail,
)
from pacms_bench.lifecycle_cli import add_lifecycle_parser
from pacms_bench.longmemeval import split_of

__all__ = ["build_parser", "main"]

_SPLIT_NAMES = {"s": "LongMemEval_S", "oracle": "LongMemEval oracle"}

_RECALL_DESCRIPTION = """\
Evidence-round recall of every strategy on a LongMemEval sample, under injected redundancy
and several token budgets (the layout of the study's Table 1).

What is measured: LongMemEval marks the rounds (one user turn plus the assistant reply) that
hold the evidence for each question. For every question, strategy, redundancy level and
budget, recall = (evidence rounds the strategy kept) / (evidence rounds). Only questions with
at least one evidence round and no abstention questions are sampled (seeded, stratified over
the six question types).

R (redundancy level): every non-evidence round is restated R times (short recaps or full
paraphrased copies, see --style); the restatements are shuffled and appended after the
original history, so the most recent part of the pool is paraphrased filler. R = 0 is the
plain history. Restatements never count as evidence.

Budget: each --budgets value is a fraction of the --budget-base: "pool" (tokens of the padded
pool; the study's reading, so the budget grows with R) or "original" (tokens of the original
history; the budget stays fixed while the pool grows). Tokens are counted with o200k_base.

Data: --data may be the LongMemEval data folder (holding oracle/ and
longmemeval_s_cleaned.lme_jsons.tar.xz; --split picks one), or directly a folder of
per-question JSON files, an archive or a JSON file. Without --data the folder is looked for in
$PACMS_LONGMEMEVAL_DIR, then ../shared/data/longmemeval from the working directory, then from
the repository root. Nothing is extracted or copied.

Caching: computed cells are kept in --cache-dir (default .pacms-cache) and reused by later runs
with the same code, data, embedder and settings (--result-cache off to recompute). Each code
version and embedder gets a folder of its own under recall-cells/; --prune-result-cache deletes
the others. Embedding vectors are cached there too for model backends such as ollama:<model>.

Outputs (in --out): <name>.json (per-question rows and run metadata), <name>.md (tables) and
<name>.png (recall vs budget, one panel per R). The tables are also printed.
"""

_RECALL_EPILOG = """\
examples:
  pacms-bench longmemeval recall --n 20 --levels 0 2 --out /tmp/recall
  pacms-bench longmemeval recall --strategies topk mmr pacms \\
      "pacms:relevance_weight=0.3" "mmr:lambda_mult=0.7"
  pacms-bench longmemeval recall --split oracle --all --budget-base original
"""


_SOURCE_SUFFIXES = (".tar.xz", ".tar.gz", ".tar.bz2", ".txz", ".tgz", ".tbz2", ".tar", ".json")


def source_label(source: Path) -> tuple[str | None, str]:
    """The LongMemEval split ``source`` holds (None if unknown) and a label for file names.

    ``--split`` only chooses among the sources of a data directory; a folder, archive or file
    given directly is named by what it is, so its results are not labelled with a split they
    may not hold. The label is the full name without a known file-type suffix, so
    ``lme.v1.json`` and ``lme.v2.json`` get different labels, and ``.`` or ``..`` is named by
    the folder it stands for.

    Example:
        >>> source_label(Path("data/longmemeval_oracle.json")), source_label(Path("my qs"))
        (('oracle', 'oracle'), (None, 'my-qs'))
        >>> source_label(Path("runs/lme.v2.tar.xz"))
        (None, 'lme.v2')
    """
    split = split_of(source)
    if split is not None:
        return split, split
    name = source.resolve().name if source.name in ("", "..") else source.name
    for suffix in _SOURCE_SUFFIXES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
            break
    return None, re.sub(r"[^A-Za-z0-9_.]+", "-", name).strip("-.") or "custom"


def _at_least(minimum: int) -> Any:
    """An argparse type: an int no smaller than ``minimum`` (else argparse exits 2)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def _load_by_ids(source: Path, ids: list[str], say: Any) -> list[Any]:
    """The eligible questions among ``ids``; warns about ids the source lacks or rules out."""
    from pacms_bench.longmemeval import iter_questions, sample_questions

    found = list(iter_questions(source, ids=ids))
    missing = sorted(set(ids) - {q.question_id for q in found})
    if missing:
        shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        print(f"warning: {len(missing)} ids not found in {source}: {shown}", file=sys.stderr)
    questions = sample_questions(found, None, recall_only=True)
    if len(questions) < len(found):
        say(
            f"{len(found) - len(questions)} ids left out: abstention questions or no evidence round"
        )
    return questions


def _recall(args: argparse.Namespace) -> int:
    from pacms_bench.backends import check_embeddings, selector_from_spec
    from pacms_bench.longmemeval import resolve_source
    from pacms_bench.recall import load_questions, run_recall
    from pacms_bench.recall_cache import ResultCache
    from pacms_bench.recall_config import RecallConfig

    say = (lambda *_: None) if args.quiet else functools.partial(print, file=sys.stderr)
    started = time.perf_counter()
    try:
        config = RecallConfig.create(
            levels=args.levels,
            budgets=args.budgets,
            strategies=args.strategies,
            style=args.style,
            budget_base=args.budget_base,
            seed=args.seed,
        )
        source = resolve_source(args.data, args.split)
        factory = functools.partial(
            selector_from_spec,
            args.embeddings,
            cache_dir=args.cache_dir,
            cache=args.cache,
            ollama_url=args.ollama_url,
        )
        selector = factory()
    except (ValueError, FileNotFoundError, ImportError) as err:
        return fail(str(err))
    problem = check_embeddings(args.embeddings, selector.embeddings) if args.check else None
    if problem:
        return fail(f"{problem} (--no-check skips this test)")
    if args.prune_result_cache:
        files, size = ResultCache.for_selector(args.cache_dir, selector).prune()
        say(
            f"result cache: removed {files} cells of other code, embedders or tokenizers "
            f"({size / 2**20:.1f} MiB)"
        )
    split, label = source_label(source)
    say(f"loading questions from {source} ...")
    try:
        if args.ids:
            questions = _load_by_ids(source, args.ids, say)
        else:
            questions = load_questions(source, n=None if args.all else args.n, seed=args.seed)
    except (ValueError, FileNotFoundError) as err:
        return fail(str(err))
    if not questions:
        return fail("no eligible questions (need evidence rounds, no abstention)")
    load_seconds = time.perf_counter() - started
    say(
        f"{len(questions)} questions, levels {list(config.levels)}, budgets "
        f"{list(config.budgets)}, strategies {list(config.labels)}"
    )
    meta: dict[str, Any] = {
        "command": _command(args),
        "split": split,
        "source": str(source),
        "sample": "all" if args.all or args.ids else args.n,
        "embeddings_spec": args.embeddings,
        "load_seconds": round(load_seconds, 3),
    }
    try:
        report = run_recall(
            questions,
            config,
            selector=selector,
            selector_factory=factory,
            workers=args.workers,
            blas_threads_limit=None if args.blas_threads == 0 else args.blas_threads,
            link_budgets=not args.exact,
            cache_dir=args.cache_dir if args.result_cache == "on" else None,
            progress=not args.quiet,
            meta=meta,
        )
    except Exception as err:  # e.g. the embedding server went away mid-sweep
        kept = (
            f"the questions finished so far are kept in {args.cache_dir}, so the same command "
            "goes on from there"
            if args.result_cache == "on"
            else "nothing was kept (--result-cache off)"
        )
        print(f"error: the sweep stopped: {type(err).__name__}: {err}; {kept}", file=sys.stderr)
        return 1
    report.meta["total_seconds"] = round(time.perf_counter() - started, 3)
    scope = "all-" if args.all else "ids-" if args.ids else ""
    stem = args.name or f"recall-{label}-{scope}{args.style}-{args.budget_base}"
    title = f"Evidence-round recall: {_SPLIT_NAMES[split] if split else source.name}"
    paths = report.save(args.out, stem, title=title)
    print(report.to_markdown(title=title))
    say(
        f"runtime {report.meta['runtime_seconds']:.1f}s sweep, "
        f"{report.meta['total_seconds']:.1f}s total; wrote "
        + ", ".join(str(p) for p in paths.values())
    )
    return 0


def _command(args: argparse.Namespace) -> str:
    """The run as a canonical command line.

    Every option that can change the results is explicit, and so are the cache folder and the
    Ollama server (when given); only the output location and display flags are left out.
    """
    parts = ["pacms-bench", "longmemeval", "recall", "--split", args.split]
    if args.data is not None:
        parts += ["--data", str(args.data)]
    if args.ids:
        parts += ["--ids", *args.ids]
    elif args.all:
        parts.append("--all")
    else:
        parts += ["--n", str(args.n)]
    parts += ["--seed", str(args.seed), "--levels", *map(str, args.levels)]
    parts += ["--budgets", *map(repr, args.budgets)]
    parts += ["--strategies", *args.strategies, "--style", args.style]
    parts += ["--budget-base", args.budget_base, "--embeddings", args.embeddings]
    if args.ollama_url is not None:
        parts += ["--ollama-url", args.ollama_url]
    parts += ["--cache-dir", str(args.cache_dir), "--cache", args.cache]
    parts += ["--result-cache", args.result_cache, "--workers", str(args.workers)]
    parts += ["--blas-threads", str(args.blas_threads)]
    if args.exact:
        parts.append("--exact")
    return shlex.join(parts)


def _add_recall_parser(sub: Any) -> None:
    from pacms_bench.backends import EMBEDDINGS_HELP
    from pacms_bench.recall_config import (
        BUDGET_BASES,
        DEFAULT_BUDGETS,
        DEFAULT_LEVELS,
        DEFAULT_STRATEGIES,
    )
    from pacms_bench.redundancy import STYLES

    p = sub.add_parser(
        "recall",
        help="evidence-round recall sweep (strategies x redundancy x budget)",
        description=_RECALL_DESCRIPTION,
        epilog=_RECALL_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = p.add_argument_group("data")
    data.add_argument(
        "--data",
        default=None,
        metavar="PATH",
        help="LongMemEval data folder, or a question folder/archive/JSON file "
        "(default: $PACMS_LONGMEMEVAL_DIR or ../shared/data/longmemeval)",
    )
    add_split(
        data,
        "oracle (evidence sessions only) or s (LongMemEval_S, ~115k-token haystacks) "
        "when --data is a data folder (default: s)",
    )
    size = add_sample(
        data,
        "questions to sample, stratified over the 6 types (default: 100)",
        "use every eligible question",
        _at_least(1),
    )
    size.add_argument("--ids", nargs="+", metavar="ID", help="use exactly these question ids")
    data.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the sample and of the redundancy injection (default: 0)",
    )

    sweep = p.add_argument_group("sweep")
    add_values(
        sweep, "--levels", DEFAULT_LEVELS, "R", "redundancy levels R (default: 0 2 4 8)", int
    )
    add_values(
        sweep,
        "--budgets",
        DEFAULT_BUDGETS,
        "FRACTION",
        "budgets as fractions of the budget base (default: 0.05 0.10 0.20 0.45 0.70)",
        float,
    )
    add_values(
        sweep,
        "--strategies",
        DEFAULT_STRATEGIES,
        "SPEC",
        "columns: strategy names, or variants as name:key=value,key=value (e.g. "
        "pacms:relevance_weight=0.5,cost_exponent=0); the spec is the column label "
        "(default: topk mmr lastk pacms rag). pacms without a similarity_threshold, "
        "min_gain or relevance_feedback uses the embedder's, as ContextSelector does; the "
        "JSON's meta.strategy_options "
        "records what each column ran with",
    )
    sweep.add_argument(
        "--style",
        choices=STYLES,
        default="recap",
        help="restatements: recap (short quoted leads) or full (whole round, "
        "lightly paraphrased) (default: recap)",
    )
    sweep.add_argument(
        "--budget-base",
        choices=BUDGET_BASES,
        default="pool",
        help="budget fractions of the padded pool (the study) or of the "
        "original history (default: pool)",
    )

    model = p.add_argument_group("embeddings")
    model.add_argument(
        "--embeddings",
        default="default",
        metavar="SPEC",
        help=f"{EMBEDDINGS_HELP} (default: default)",
    )
    model.add_argument(
        "--ollama-url",
        default=None,
        metavar="URL",
        help="Ollama server (default: $OLLAMA_HOST or http://127.0.0.1:11434)",
    )
    model.add_argument(
        "--cache-dir",
        default=".pacms-cache",
        metavar="DIR",
        help="on-disk embedding cache folder (default: .pacms-cache)",
    )
    model.add_argument(
        "--cache",
        choices=("auto", "on", "off"),
        default="auto",
        help="use the disk cache: auto = for every backend except the built-in lexical one, "
        "which recomputes faster than it reads back (default: auto)",
    )
    add_result_cache(
        model,
        "keep every computed cell (question, R, budget, strategy) in --cache-dir and "
        "reuse it when the code, data, embedder and settings are unchanged, so reruns and "
        "added --strategies columns only compute what is new (default: on)",
        "before the run, delete the result cache's cells of any other code version, "
        "embedder or tokenizer (they are never read again; each table leaves thousands); "
        "not while another sweep uses the same --cache-dir",
    )

    run = p.add_argument_group("run")
    run.add_argument(
        "--out",
        default="results/longmemeval",
        metavar="DIR",
        help="output folder (default: results/longmemeval)",
    )
    run.add_argument(
        "--name",
        default=None,
        help="output file stem (default: recall-<split>-<style>-<budget-base>, "
        "with all- or ids- before <style> for --all or --ids)",
    )
    run.add_argument(
        "--workers",
        type=_at_least(1),
        default=1,
        metavar="N",
        help="worker processes, one question at a time each (default: 1)",
    )
    run.add_argument(
        "--blas-threads",
        type=_at_least(0),
        default=1,
        metavar="N",
        help="OpenBLAS threads per process while sweeping; 0 leaves the "
        "library default (default: 1, fastest for the mmr ranking). The count "
        "can tip near-ties, so the result cache keeps each count's cells apart",
    )
    run.add_argument(
        "--exact",
        action="store_true",
        help="prepare every budget's problem afresh, as select does, instead "
        "of linking a level's budgets so that they share the budget-independent "
        "work (cosine matrix, coverage kernel, mmr ranking); same picks, slower",
    )
    add_check(
        run,
        "skip the test text embedded before the sweep (it finds a model "
        "that is missing or a server that is down before the data is loaded)",
    )
    p.set_defaults(func=_recall)


def _qa_fallback(args: argparse.Namespace) -> int:
    try:
        from pacms_bench.qa_cli import qa_from_args
    except ImportError as err:
        return fail(f"the QA harness is unavailable ({err})")
    return int(qa_from_args(args) or 0)


def _add_qa_parser(sub: Any) -> None:
    description = (
        "End-to-end QA accuracy: select context for each LongMemEval question with every "
        "strategy, let a reader model answer from the kept context, and let a judge model "
        "grade the answer with the per-type LongMemEval criterion (the study's Table 2). "
        "Models are given as specs: ollama:<model> (server from --ollama-url/$OLLAMA_HOST), "
        "any <provider>:<model> LangChain's init_chat_model knows (e.g. openai:gpt-4o-mini, "
        "with langchain and the provider's package installed), python:<module>:<name>, "
        "or fake:<reply> for dry runs."
    )
    p = sub.add_parser(
        "qa", help="end-to-end QA accuracy with a reader and a judge model", description=description
    )
    try:
        from pacms_bench.qa_cli import add_qa_arguments, qa_from_args
    except ImportError:
        p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        p.set_defaults(func=_qa_fallback)
        return
    add_qa_arguments(p)
    p.set_defaults(func=qa_from_args)


def _probe(args: argparse.Namespace) -> int:
    import json

    from langchain_pacms import ContextSelector
    from pacms_bench.lexical_probe import RECIPES, probe_topk
    from pacms_bench.longmemeval import resolve_source
    from pacms_bench.recall import load_questions
    from pacms_bench.redundancy import inject_redundancy

    started = time.perf_counter()
    source = resolve_source(args.data, args.split)
    questions = load_questions(source, n=None if args.all else args.n, seed=args.seed)
    selector = ContextSelector()
    pools = []
    for q in questions:
        pool = inject_redundancy(q.rounds, 0)
        texts = [p.text for p in pool]
        tokens = [selector.token_counter(t) for t in texts]
        evidence = {i for i, p in enumerate(pool) if p.is_evidence}
        pools.append((texts, q.question, tokens, evidence))

    def builtin(texts: Any, query: str) -> Any:
        return selector.prepare(texts, query, budget=("ratio", 1.0)).relevance

    table = probe_topk(pools, args.budgets, RECIPES, builtin=builtin)
    head = "| relevance | " + " | ".join(f"{b:.0%}" for b in args.budgets) + " |"
    lines = [head, "|---|" + "---:|" * len(args.budgets)]
    lines += [
        f"| {name} | " + " | ".join(f"{v:.3f}" for v in row) + " |" for name, row in table.items()
    ]
    text = "\n".join(lines)
    print(f"top-k evidence recall, R = 0, {len(pools)} questions of {source.name}")
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "lexical-probe.md").write_text(text + "\n", encoding="utf-8")
        meta = {
            "questions": len(pools),
            "seed": args.seed,
            "source": str(source),
            "budgets": args.budgets,
            "seconds": round(time.perf_counter() - started, 1),
            "command": _probe_command(args),
        }
        (args.out / "lexical-probe.json").write_text(
            json.dumps({"meta": meta, "recall": table}, indent=1), encoding="utf-8"
        )
    return 0


def _probe_command(args: argparse.Namespace) -> str:
    words = [
        "pacms-bench",
        "longmemeval",
        "probe",
        "--split",
        args.split,
        "--seed",
        str(args.seed),
        *(["--all"] if args.all else ["--n", str(args.n)]),
        "--budgets",
        *(str(b) for b in args.budgets),
    ]
    if args.data is not None:
        words += ["--data", str(args.data)]
    return shlex.join(words)


def _add_probe_parser(sub: Any) -> None:
    p = sub.add_parser(
        "probe",
        help="top-k recall of the built-in embedder vs sparse lexical references",
        description="Top-k evidence recall at R = 0 with the selector's own relevance and with "
        "sparse hashed TF-IDF recipes (bucket count, tokens, signs, bigrams, idf scope), to see "
        "where the built-in 4,096-bucket embedder loses relevance. The references are exact "
        "sparse cosines and are not selector defaults.",
    )
    p.add_argument(
        "--data",
        default=None,
        metavar="PATH",
        help="LongMemEval data folder or question folder/archive/JSON file",
    )
    add_split(p, "split when --data is a data folder (default: s)")
    add_sample(
        p,
        "questions to sample, as the recall sweep samples (default: 100)",
        "use every eligible question",
        _at_least(1),
    )
    p.add_argument("--seed", type=int, default=0, help="sample seed (default: 0)")
    add_values(
        p,
        "--budgets",
        [0.05, 0.10, 0.20],
        "FRACTION",
        "budgets as fractions of the pool's tokens (default: 0.05 0.10 0.20)",
        float,
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="write lexical-probe.md and lexical-probe.json here",
    )
    p.set_defaults(func=_probe)


def build_parser() -> argparse.ArgumentParser:
    """Build the ``pacms-bench`` argument parser (``longmemeval`` and ``lifecycle``)."""
    parser = argparse.ArgumentParser(
        prog="pacms-bench",
        description="Evaluation harnesses of langchain-pacms. Benchmarks: longmemeval, lifecycle.",
    )
    parser.add_argument("--version", action="version", version=f"pacms-bench {__version__}")
    benches = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    lme = benches.add_parser(
        "longmemeval",
        help="LongMemEval (Wu et al., ICLR 2025): recall sweep and QA accuracy",
        description="LongMemEval harnesses: 'recall' (evidence-round recall sweep) and 'qa' "
        "(end-to-end QA accuracy with a reader and a judge).",
    )
    tasks = lme.add_subparsers(dest="task", metavar="TASK")
    _add_recall_parser(tasks)
    _add_qa_parser(tasks)
    _add_probe_parser(tasks)
    add_lifecycle_parser(benches)

    def _usage(parser: argparse.ArgumentParser) -> Any:
        def show(_: argparse.Namespace) -> int:
            parser.print_help()
            return 2

        return show

    parser.set_defaults(func=_usage(parser))
    lme.set_defaults(func=_usage(lme))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``pacms-bench`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
