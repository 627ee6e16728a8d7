"""Without its extra, ``pacms serve`` and every example print the one install line they need.

Each check runs in a fresh interpreter whose import system refuses the modules the extras bring
(as on a base install: ``pip install langchain-pacms``), so what a user sees is what is tested.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# What each example needs beyond a base install (None: it runs on one).
EXTRA_OF = {
    "coding_agent_defaults": "middleware",
    "langgraph_agent_hook": None,
    "lifecycle_sqlite": "lifecycle",
    "lifecycle_with_selection": "middleware",
    "live_inspector": "server",
    "middleware_agent": "middleware",
    "retrieval_compressor": "compare",
    "tool_loop_fold_stubs": "lifecycle",
}

# Modules that only the extras install (langchain_core, langgraph, httpx and anyio are in the base).
OPTIONAL = (
    "langchain",
    "langchain_classic",
    "langchain_ollama",
    "langchain_text_splitters",
    "langgraph.store.sqlite",
    "langgraph.store.postgres",
    "langgraph.checkpoint.sqlite",
    "langgraph.checkpoint.postgres",
    "psycopg",
    "psycopg_pool",
    "fastapi",
    "starlette",
    "uvicorn",
    "matplotlib",
    "tqdm",
    "redis",
)

HIDE = f"""
import sys

class HideOptional:
    def find_spec(self, name, path=None, target=None):
        if any(name == h or name.startswith(h + ".") for h in {OPTIONAL!r}):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, HideOptional())
"""


def run_without_extras(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDE + code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def install_line(extra: str) -> str:
    return f'pip install "langchain-pacms[{extra}]"'


def test_the_hidden_modules_are_really_hidden(tmp_path: Path) -> None:
    done = run_without_extras("import langchain_core, langgraph\nimport langchain.agents", tmp_path)
    assert done.returncode == 1 and "No module named 'langchain'" in done.stderr


def test_pacms_serve_names_the_server_extra(tmp_path: Path) -> None:
    done = run_without_extras(
        "from langchain_pacms.cli.main import main\nsys.exit(main(['serve']))", tmp_path
    )
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert install_line("server") in lines
    assert "'server' extra" in done.stderr and "uvicorn" in done.stderr


def test_the_redis_store_and_serve_cache_url_name_the_redis_extra(tmp_path: Path) -> None:
    done = run_without_extras("import langchain_pacms.embeddings.redis_store", tmp_path)
    assert done.returncode == 1 and install_line("redis") in done.stderr
    assert '"redis" extra' in done.stderr
    only_redis = HIDE.replace(repr(OPTIONAL), repr(("redis",)))  # the server extra is there
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            only_redis + "from langchain_pacms.cli.main import main\n"
            "sys.exit(main(['serve', '--cache-url', 'redis://127.0.0.1:1/0']))",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert install_line("redis") in done.stderr


def test_every_example_is_listed() -> None:
    found = {p.stem for p in EXAMPLES.glob("*.py") if not p.stem.startswith("_")}
    assert found == set(EXTRA_OF)


@pytest.mark.parametrize("name", sorted(EXTRA_OF))
def test_the_docstring_names_the_extra(name: str) -> None:
    doc = ast.get_docstring(ast.parse((EXAMPLES / f"{name}.py").read_text(encoding="utf-8")))
    assert doc is not None
    extra = EXTRA_OF[name]
    if extra is None:
        assert "Needs no extra" in doc
    else:
        assert f"``{extra}`` extra" in doc and install_line(extra) in doc


@pytest.mark.parametrize("name", sorted(EXTRA_OF))
def test_an_example_without_its_extra_prints_the_install_line(name: str, tmp_path: Path) -> None:
    path = str(EXAMPLES / f"{name}.py")
    done = run_without_extras(
        f"sys.path.insert(0, {str(EXAMPLES)!r})\nsys.argv = [{path!r}]\n"
        f"import runpy\nrunpy.run_path({path!r}, run_name='__main__')",
        tmp_path,
    )
    extra = EXTRA_OF[name]
    if extra is None:
        assert done.returncode == 0, done.stderr[-2000:]
        assert "pip install" not in done.stdout + done.stderr
        return
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert lines[-1] == install_line(extra)
    assert sum("pip install" in line for line in lines) == 1
    assert f'"{extra}" extra' in done.stderr and "No module named" in done.stderr
