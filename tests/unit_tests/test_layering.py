"""The package's layers (docs: ``DESIGN.md``): imports point down, and nothing hides a loop.

Every module of ``langchain_pacms`` is read with ``ast``: module-level imports, those under
``if TYPE_CHECKING:`` and those inside functions. Ranks, bottom to top (the first match wins;
a name matches itself and its submodules):

0. ``errors``, ``_lru``, ``_steps``, ``_timeout``, ``blas``, ``core``;
1. ``tokens``, ``embeddings``;
2. the selector: every module not listed here (``selector``, ``remote``, ...);
3. ``messages``: the message layer under both halves;
4. ``lifecycle`` and ``integrations``, siblings: ``integrations`` may import ``lifecycle``, only
   as ``from langchain_pacms.lifecycle import <a name of its __all__>``, at module level;
   ``lifecycle`` imports nothing of ``integrations``;
5. the faces: ``cli``, ``server``, ``demo``, and the package's own ``__init__`` (the front door,
   which imports every layer).

It fails on an import cycle among modules (their module-level imports, those that run when the
module loads), on any import from a lower rank to a higher one, on a sibling import other than
the one allowed, and on an import inside a function that crosses layers, unless the module it
imports needs an optional extra (``redis``, ``fastapi``, ``langchain``, ...): deferring that
import is what keeps the extra optional. Imports inside functions within one layer are fine.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "langchain_pacms"

RANKS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (0, ("errors", "_lru", "_steps", "_timeout", "blas", "core")),
    (1, ("tokens", "embeddings")),
    (3, ("messages",)),
    (4, ("lifecycle", "integrations")),
    (5, ("cli", "server", "demo")),
)
SELECTOR_RANK = 2  # every module not listed in RANKS
FRONT_DOOR_RANK = 5  # the package's own __init__
LAYERS = {0: "core", 1: "tokens/embeddings", 2: "selector", 3: "messages", 4: "halves", 5: "faces"}
# (importer, imported) sibling packages of rank 4 that may meet, through public package names
SIBLING_ROUTES = {("integrations", "lifecycle")}
# third-party import roots of the optional extras (pyproject.toml [project.optional-dependencies])
OPTIONAL_EXTRAS = (
    "langchain",
    "langchain_ollama",
    "langchain_classic",
    "langgraph.store.sqlite",
    "langgraph.store.postgres",
    "psycopg",
    "redis",
    "fastapi",
    "anyio",
    "uvicorn",
    "httpx",
    "uvloop",
)


@dataclass(frozen=True)
class Import:
    """One import statement's edge from a module of the package to another (or to a library)."""

    source: str  # the importing module, dotted
    path: Path
    line: int
    target: str  # the imported module, dotted
    names: tuple[str, ...]  # names taken from ``target`` that are not modules themselves
    where: str  # "module", "type-checking" or "function"

    def __str__(self) -> str:
        names = f" ({', '.join(self.names)})" if self.names else ""
        return f"{self.path}:{self.line}: {self.source} imports {self.target}{names} [{self.where}]"


def module_names(root: Path) -> dict[str, Path]:
    """Every module of the package at ``root``, by dotted name."""
    found = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, where: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import under ``node``, with where it runs."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, where
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _walk(child, "function")
        elif isinstance(child, ast.If) and _is_type_checking(child) and where == "module":
            for stmt in child.body:
                yield from _walk(ast.Module(body=[stmt], type_ignores=[]), "type-checking")
            for stmt in child.orelse:
                yield from _walk(ast.Module(body=[stmt], type_ignores=[]), where)
        else:
            yield from _walk(child, where)


def imports_of(root: Path) -> list[Import]:
    """Every import of every module of the package at ``root`` (library imports included)."""
    modules = module_names(root)
    out = []
    for source, path in sorted(modules.items()):
        package = source if path.name == "__init__.py" else source.rpartition(".")[0]
        for node, where in _walk(ast.parse(path.read_text(encoding="utf-8")), "module"):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    out.append(Import(source, path, node.lineno, alias.name, (), where))
                continue
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            names = []
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    out.append(Import(source, path, node.lineno, f"{base}.{alias.name}", (), where))
                else:
                    names.append(alias.name)
            if names:
                out.append(Import(source, path, node.lineno, base, tuple(names), where))
    return out


def _relative(name: str, root: Path) -> str:
    return name.removeprefix(root.name).removeprefix(".")


def rank(name: str, root: Path = PACKAGE) -> int:
    """The rank of a module of the package at ``root`` (see the module docs)."""
    relative = _relative(name, root)
    if not relative:
        return FRONT_DOOR_RANK
    for level, prefixes in RANKS:
        if any(relative == p or relative.startswith(p + ".") for p in prefixes):
            return level
    return SELECTOR_RANK


def _top(name: str, root: Path) -> str:
    return _relative(name, root).split(".")[0]


def _internal(imports: list[Import], root: Path) -> list[Import]:
    modules = module_names(root)
    return [i for i in imports if i.target in modules and i.target != i.source]


def _loop_through(
    start: str, edges: dict[str, dict[str, Import]], skip: set[str]
) -> list[Import] | None:
    """The shortest chain of imports from ``start`` back to it (not through ``skip``), or None."""
    came: dict[str, Import] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target, imp in sorted(edges.get(node, {}).items()):
                if target == start:
                    chain = [imp]
                    while chain[0].source != start:
                        chain.insert(0, came[chain[0].source])
                    return chain
                if target not in came and target not in skip:
                    came[target] = imp
                    following.append(target)
        frontier = following
    return None


def cycles(imports: list[Import], root: Path) -> list[list[Import]]:
    """One cycle through each group of modules that import one another when they load."""
    edges: dict[str, dict[str, Import]] = {}
    for imp in _internal(imports, root):
        if imp.where == "module":
            edges.setdefault(imp.source, {}).setdefault(imp.target, imp)
    found = []
    done: set[str] = set()  # a later search does not pass through them: each cycle shows once
    for start in sorted(edges):
        loop = _loop_through(start, edges, done)
        if loop is not None:
            found.append(loop)
        done.add(start)
    return found


def _public_names(package: str, root: Path) -> set[str]:
    tree = ast.parse(module_names(root)[package].read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return set()


def _defers_extra(module: str, imports: list[Import]) -> bool:
    """Whether ``module`` imports an optional extra when it loads (so importing it is deferred)."""
    return any(
        i.source == module
        and i.where == "module"
        and any(i.target == e or i.target.startswith(e + ".") for e in OPTIONAL_EXTRAS)
        for i in imports
    )


def violations(imports: list[Import], root: Path) -> dict[str, list[str]]:
    """The imports that break a rule, by rule (see the module docs)."""
    out: dict[str, list[str]] = {"upward": [], "sibling": [], "hidden": []}
    for imp in _internal(imports, root):
        low, high = rank(imp.source, root), rank(imp.target, root)
        source_top, target_top = _top(imp.source, root), _top(imp.target, root)
        sibling = low == high == 4 and source_top != target_top
        if low < high:
            out["upward"].append(
                f"{imp}: rank {low} ({LAYERS[low]}) imports rank {high} ({LAYERS[high]})"
            )
        if sibling:
            public = _public_names(f"{root.name}.{target_top}", root)
            allowed = (
                (source_top, target_top) in SIBLING_ROUTES
                and imp.target == f"{root.name}.{target_top}"
                and set(imp.names) <= public
                and imp.where == "module"
            )
            if not allowed:
                out["sibling"].append(
                    f"{imp}: {source_top} may use {target_top} only through "
                    f"`from {root.name}.{target_top} import <public name>` at module level"
                    if (source_top, target_top) in SIBLING_ROUTES
                    else f"{imp}: {source_top} must not import {target_top}"
                )
        crosses = low != high or sibling
        if imp.where == "function" and crosses and not _defers_extra(imp.target, imports):
            out["hidden"].append(
                f"{imp}: an import inside a function crosses layers; import it at module level"
            )
    return out


IMPORTS = imports_of(PACKAGE)


def test_no_import_cycles():
    found = cycles(IMPORTS, PACKAGE)
    assert not found, "import cycles:\n" + "\n\n".join("\n".join(map(str, c)) for c in found)


@pytest.mark.parametrize("rule", ["upward", "sibling", "hidden"])
def test_imports_follow_the_layers(rule: str):
    broken = violations(IMPORTS, PACKAGE)[rule]
    assert not broken, "\n".join(broken)


def _fake_package(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    files = {
        "__init__.py": "from pkg.selector import Selector\n",
        "core/__init__.py": "",
        "selector.py": "import pkg.messages.spans\n",  # upward: 2 -> 3
        "messages/__init__.py": "",
        "messages/spans.py": "from pkg import selector\n",  # with selector.py: a cycle
        "lifecycle/__init__.py": "from pkg.lifecycle.store import Store\n__all__ = ['Store']\n",
        "lifecycle/store.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from pkg.integrations import Hook\n"  # sibling, wrong way
            "class Store: ...\n"
        ),
        "integrations/__init__.py": "from pkg.lifecycle import Store\n",  # the allowed route
        "integrations/hook.py": (
            "from pkg.lifecycle.store import Store\n"  # sibling internals
            "def hook():\n    from pkg.core import x\n"  # hidden, crosses layers
            "def served():\n    from pkg.server import app\n"  # upward, needs an extra
        ),
        "server/__init__.py": "",
        "server/app.py": "import fastapi\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_checks_catch_each_kind_of_violation(tmp_path: Path):
    root = _fake_package(tmp_path)
    imports = imports_of(root)
    loop = cycles(imports, root)
    assert [sorted(i.source for i in c) for c in loop] == [["pkg.messages.spans", "pkg.selector"]]
    found = violations(imports, root)
    assert [v.split(": ")[1] for v in found["upward"]] == [
        "pkg.integrations.hook imports pkg.server.app [function]",
        "pkg.selector imports pkg.messages.spans [module]",
    ]
    assert [v.split(": ")[1] for v in found["sibling"]] == [
        "pkg.integrations.hook imports pkg.lifecycle.store (Store) [module]",
        "pkg.lifecycle.store imports pkg.integrations (Hook) [type-checking]",
    ]
    # the server's app needs an extra (fastapi): deferring it is what a function import is for
    assert [v.split(": ")[1] for v in found["hidden"]] == [
        "pkg.integrations.hook imports pkg.core (x) [function]"
    ]
