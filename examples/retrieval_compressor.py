"""PACMS compressor vs LangChain's MMR and top-k retrievers, offline.

A bundled corpus (``examples/data/corpus.json``: ~60 short team-wiki notes on six topics, with
near-duplicate restatements of the most common facts) goes into LangChain's
``InMemoryVectorStore`` with the package's offline ``HashedTfidfEmbeddings``. For three questions
it compares:

* ``pacms``: a ``ContextualCompressionRetriever`` whose base retriever fetches ``--fetch-k``
  candidates and whose compressor (:class:`PACMSCompressor`) keeps what fits in
  ``--budget`` tokens;
* ``mmr``: ``as_retriever(search_type="mmr")`` with ``k`` documents out of ``fetch_k``;
* ``top-k``: ``as_retriever(search_type="similarity")`` with ``k`` documents.

For each it prints how many documents and tokens were kept and which of the question's key
facts survived. No network, no model download, no LLM. MMR and top-k cannot take a token budget,
so their ``k`` is set to land near it; compare the tokens column too. The lexical embedder does no
stemming, so facts worded unlike the question can be missed by every method.

Needs the ``compare`` extra (``langchain-classic``): ``pip install "langchain-pacms[compare]"``.

Run:
    python examples/retrieval_compressor.py            # table
    python examples/retrieval_compressor.py --json     # machine-readable
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from _extras import needs_extra

with needs_extra("compare"):
    from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_pacms import ContextSelector, HashedTfidfEmbeddings
from langchain_pacms.integrations.compressor import PACMSCompressor

CORPUS = Path(__file__).parent / "data" / "corpus.json"


def load_corpus(path: Path = CORPUS) -> tuple[list[Document], list[dict[str, Any]]]:
    """Read the documents and the queries (each with its key facts) from ``path``."""
    data = json.loads(path.read_text(encoding="utf-8"))
    docs = [
        Document(d["text"], id=d["id"], metadata={"topic": d["topic"]}) for d in data["documents"]
    ]
    return docs, data["queries"]


def build_retrievers(
    docs: list[Document], *, budget: int, k: int, fetch_k: int
) -> tuple[dict[str, BaseRetriever], ContextSelector]:
    """The three retrievers over one vector store; also the selector (for its token counter)."""
    embeddings = HashedTfidfEmbeddings()
    store = InMemoryVectorStore(embeddings)
    store.add_documents(docs)
    selector = ContextSelector(embeddings)
    pacms = ContextualCompressionRetriever(
        base_compressor=PACMSCompressor(budget, selector=selector),
        base_retriever=store.as_retriever(search_kwargs={"k": fetch_k}),
    )
    retrievers: dict[str, BaseRetriever] = {
        "pacms": pacms,
        "mmr": store.as_retriever(search_type="mmr", search_kwargs={"k": k, "fetch_k": fetch_k}),
        "top-k": store.as_retriever(search_type="similarity", search_kwargs={"k": k}),
    }
    return retrievers, selector


def compare(budget: int = 80, k: int = 5, fetch_k: int = 20) -> dict[str, Any]:
    """Run every retriever on every query and score key-fact survival.

    Args:
        budget: PACMS token budget.
        k: Documents returned by the MMR and top-k retrievers.
        fetch_k: Candidates fetched before PACMS compression and MMR re-ranking.

    Returns:
        A JSON-ready dict: settings and, per query and method, kept ids, tokens and facts.
    """
    docs, queries = load_corpus()
    retrievers, selector = build_retrievers(docs, budget=budget, k=k, fetch_k=fetch_k)
    count = selector.token_counter
    results = []
    for q in queries:
        methods = {}
        for name, retriever in retrievers.items():
            kept = retriever.invoke(q["query"])
            text = "\n".join(d.page_content for d in kept).lower()
            methods[name] = {
                "ids": [d.id for d in kept],
                "docs": len(kept),
                "tokens": sum(count(d.page_content) for d in kept),
                "facts": {label: s.lower() in text for label, s in q["facts"].items()},
            }
        results.append({"query": q["query"], "methods": methods})
    return {
        "settings": {"budget": budget, "k": k, "fetch_k": fetch_k, "documents": len(docs)},
        "results": results,
    }


def render(report: dict[str, Any]) -> str:
    """A plain-text table of :func:`compare`'s report."""
    s = report["settings"]
    lines = [
        f"{s['documents']} documents; pacms: budget {s['budget']} tokens over the top "
        f"{s['fetch_k']}; mmr: k={s['k']} of fetch_k={s['fetch_k']}; top-k: k={s['k']}",
    ]
    totals: dict[str, list[int]] = {}
    for r in report["results"]:
        lines += ["", f"Q: {r['query']}", f"  {'method':<7} {'docs':>4} {'tokens':>6}  facts"]
        for name, m in r["methods"].items():
            got = sum(m["facts"].values())
            facts = ", ".join(f"{'+' if ok else '-'}{label}" for label, ok in m["facts"].items())
            lines.append(
                f"  {name:<7} {m['docs']:>4} {m['tokens']:>6}  {got}/{len(m['facts'])}  {facts}"
            )
            t = totals.setdefault(name, [0, 0, 0])
            t[0] += got
            t[1] += len(m["facts"])
            t[2] += m["tokens"]
    lines += ["", "Total key facts kept (tokens):"]
    lines += [f"  {name:<7} {t[0]}/{t[1]} ({t[2]} tokens)" for name, t in totals.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=80, help="PACMS token budget")
    parser.add_argument("--k", type=int, default=5, help="documents for mmr and top-k")
    parser.add_argument("--fetch-k", type=int, default=20, help="candidates fetched first")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    report = compare(args.budget, args.k, args.fetch_k)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
