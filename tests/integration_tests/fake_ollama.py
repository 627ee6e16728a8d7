"""A fake Ollama server on 127.0.0.1 for the integration tests.

It speaks the parts of Ollama's HTTP API that ``langchain_ollama`` uses: ``POST /api/embed``
(deterministic hashed bag-of-words vectors for :data:`MODEL`) and, when it is given a ``chat``
function, ``POST /api/chat`` (streamed as newline-delimited JSON with the usage counts in the
last line, like the real server); plus ``GET /``, ``/api/version`` and ``/api/tags``.
Connections are kept alive like the real one's, and :meth:`FakeOllama.stop` closes them all,
like a crash.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import sys
import threading
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

__all__ = ["DIM", "MODEL", "ChatReply", "FakeOllama", "fake_vector"]

MODEL = "nomic-embed-text"
"""The one embedding model the server knows."""
DIM = 256
"""Size of the server's vectors."""
_WORD = re.compile(r"[a-z0-9]+")


def fake_vector(text: str, dim: int = DIM) -> list[float]:
    """Deterministic unit vector: signed hashed bag of words (plus a constant bias feature)."""
    vec = np.zeros(dim)
    vec[0] = 0.05
    for word in _WORD.findall(text.lower()):
        h = zlib.crc32(word.encode())
        vec[1 + h % (dim - 1)] += 1.0 if h & 0x8000_0000 else -1.0
    return (vec / np.linalg.norm(vec)).tolist()


class _Server(ThreadingHTTPServer):
    """Loopback server that stays quiet when a client hangs up before the reply (timeouts)."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return  # the client gave up, as the timeout tests make it do
        super().handle_error(request, client_address)


ChatReply = Callable[[str, list[dict[str, Any]]], "str | int"]
"""``chat(model, messages)``: the reply's text, or an HTTP status code to fail with."""


def _words(text: str) -> int:
    return len(text.split())


class FakeOllama:
    """A minimal Ollama HTTP server on 127.0.0.1 that records what it is asked.

    Args:
        port: Port to bind (0: an ephemeral one, kept across :meth:`stop`/:meth:`start`).
        stall: Seconds to hold every ``/api/embed`` request before answering (bounded;
            :meth:`release` ends a stall early).
        chat: Answers ``/api/chat`` (without it the server has no chat models). The reply is
            streamed in word-sized chunks; the last line reports ``prompt_eval_count`` (the
            words of every message) and ``eval_count`` (the reply's words).
        embed_status: ``embed_status(texts)`` may name an HTTP status to fail an
            ``/api/embed`` request with (after it is recorded and stalled); None answers it.
    """

    def __init__(
        self,
        port: int = 0,
        stall: float = 0.0,
        chat: ChatReply | None = None,
        embed_status: Callable[[list[str]], int | None] | None = None,
    ) -> None:
        self.port = port
        self.stall = stall
        self.chat = chat
        self.embed_status = embed_status
        self.requests: list[dict[str, Any]] = []  # /api/embed bodies, in arrival order
        self.chats: list[dict[str, Any]] = []  # /api/chat bodies, in arrival order
        self.usage: dict[str, list[int]] = {}  # model -> [prompt_eval_count, eval_count] sums
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def embedded(self) -> list[str]:
        """Every text the server has embedded, in order (one entry per text per request)."""
        with self._lock:
            out: list[str] = []
            for body in self.requests:
                inp = body["input"]
                out.extend([inp] if isinstance(inp, str) else inp)
            return out

    def release(self) -> None:
        """End any stall now (and skip future ones)."""
        self.stall = 0.0
        self._released.set()

    def start(self) -> FakeOllama:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as Ollama's Go server does

            def setup(self) -> None:
                super().setup()
                with fake._lock:
                    fake._conns.add(self.connection)

            def finish(self) -> None:
                with fake._lock:
                    fake._conns.discard(self.connection)
                super().finish()

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _reply(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/":
                    data = b"Ollama is running"
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                elif self.path == "/api/version":
                    self._reply(200, {"version": "0.0.0-fake"})
                elif self.path == "/api/tags":
                    self._reply(200, {"models": [{"name": f"{MODEL}:latest", "model": MODEL}]})
                else:
                    self._reply(404, {"error": "not found"})

            def _stream(self, model: str, reply: str, prompt_words: int) -> None:
                lines = [
                    {
                        "model": model,
                        "created_at": "2026-01-01T00:00:00Z",
                        "message": {"role": "assistant", "content": chunk},
                        "done": False,
                    }
                    for chunk in [*re.findall(r"\S+\s*", reply), ""]
                ]
                lines[-1].update(
                    done=True,
                    done_reason="stop",
                    total_duration=1000,
                    prompt_eval_count=prompt_words,
                    eval_count=_words(reply),
                )
                data = "".join(json.dumps(line) + "\n" for line in lines).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _chat(self, body: dict[str, Any]) -> None:
                with fake._lock:
                    fake.chats.append(body)
                model, messages = str(body.get("model", "")), list(body.get("messages", []))
                reply = fake.chat(model, messages) if fake.chat else 404
                if isinstance(reply, int):
                    self._reply(reply, {"error": f"fake failure {reply} for {model!r}"})
                    return
                words = sum(_words(str(m.get("content", ""))) for m in messages)
                with fake._lock:
                    totals = fake.usage.setdefault(model, [0, 0])
                    totals[0] += words
                    totals[1] += _words(reply)
                if not body.get("stream", True):
                    self._reply(400, {"error": "this fake only streams chat replies"})
                    return
                self._stream(model, reply, words)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path == "/api/chat":
                    self._chat(body)
                    return
                if self.path != "/api/embed":
                    self._reply(404, {"error": "not found"})
                    return
                model = str(body.get("model", "")).removesuffix(":latest")
                if model != MODEL:
                    msg = f'model "{body.get("model")}" not found, try pulling it first'
                    self._reply(404, {"error": msg})
                    return
                with fake._lock:
                    fake.requests.append(body)
                if fake.stall:
                    fake._released.wait(fake.stall)
                inputs = body.get("input", [])
                texts = [inputs] if isinstance(inputs, str) else list(inputs)
                status = fake.embed_status(texts) if fake.embed_status else None
                if status is not None:
                    self._reply(status, {"error": f"fake failure {status}"})
                    return
                self._reply(
                    200,
                    {
                        "model": body["model"],
                        "embeddings": [fake_vector(t) for t in texts],
                        "total_duration": 1000,
                        "load_duration": 10,
                        "prompt_eval_count": sum(len(t.split()) for t in texts),
                    },
                )

        self._server = _Server(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop like a crash: close the listening socket and every open connection."""
        self._released.set()
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        assert self._thread is not None
        self._thread.join(5)
        self._server = None
        self._released = threading.Event()
