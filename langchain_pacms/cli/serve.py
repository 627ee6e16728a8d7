"""``pacms serve``: run the selection service and the inspector page with uvicorn."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import logging
import math
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

__all__ = ["is_loopback", "register", "uvicorn_options"]

logger = logging.getLogger(__name__)

SERVER_INSTALL = 'pip install "langchain-pacms[server]"'
"""The line ``pacms serve`` prints when the ``server`` extra (FastAPI, uvicorn) is missing."""
TOKEN_ENV = "PACMS_SERVE_TOKEN"
APP_FACTORY = "langchain_pacms.server.app:app_from_env"
"""What uvicorn calls in each worker process to build the app (settings: ``PACMS_SERVE_CONFIG``)."""
MAX_HEADER_BYTES = 16 * 1024  # a request's line and headers, buffered before they are parsed
KEEP_ALIVE_SECONDS = 5  # an idle kept-alive connection is closed after this
HEADER_TIMEOUT_SECONDS = 10.0  # a request's line and headers must arrive within this (default)
MAX_CONNECTIONS = 1000  # connections and requests in flight; more are answered 503
SHUTDOWN_SECONDS = 3  # on exit, open event streams are closed after this


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine.

    Example:
        >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
        (True, True, False)
    """
    with contextlib.suppress(ValueError):
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    return False


def _cache_problem(url: str) -> str | None:
    """Why the embedding cache at ``url`` cannot be used (``None``: it answers)."""
    try:
        from langchain_pacms.embeddings.redis_store import RedisByteStore
    except ImportError as err:
        return str(err)
    try:
        store = RedisByteStore(url, socket_connect_timeout=5)
        store.client.ping()
        store.close()
    except Exception as err:  # any connection or URL error is reported the same way
        return f"cannot use the cache at {url!r}: {err}"
    return None


def _check_watch(path: str) -> bool:
    """Whether ``--watch PATH`` can be followed; warn (stderr) when nothing is there yet.

    A directory can never be the log: refused. A missing file (or folder) is only warned about,
    as the hook or middleware creates it (folders too) on its first write.
    """
    where = Path(path)
    if where.is_dir():
        print(f"pacms serve: --watch {path} is a directory, not a JSONL log", file=sys.stderr)
        return False
    if not where.exists():
        missing = "" if where.parent.is_dir() else f" (nor does its folder {where.parent})"
        print(
            f"warning: --watch {path} does not exist{missing}; nothing shows until a hook or "
            "middleware writes it (log=PATH)",
            file=sys.stderr,
        )
    return True


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """Set an environment variable for the block (worker processes inherit it), then undo."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def _run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from langchain_pacms.server.app import CONFIG_ENV
    except ImportError as err:
        print(f"pacms serve needs the 'server' extra ({err}); install it with:", file=sys.stderr)
        print(SERVER_INSTALL, file=sys.stderr)
        return 2
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if token is not None:
        from langchain_pacms.remote_wire import bearer_token

        try:  # the rule RemoteSelector(token=...) applies: a token every request can carry
            bearer_token(token)
        except ValueError as err:
            given = "--token" if args.token else TOKEN_ENV
            print(f"pacms serve: {given}: {err}", file=sys.stderr)  # not the secret itself
            return 2
    if not is_loopback(args.host):
        if token is None and not args.insecure:
            print(
                f"pacms serve: binding {args.host} exposes the service beyond this machine; "
                f"give a token (--token or {TOKEN_ENV}) or pass --insecure",
                file=sys.stderr,
            )
            return 2
        logger.warning("binding %s: the service is reachable from other machines", args.host)
        print(
            f"warning: binding {args.host} exposes the service beyond this machine "
            f"({'bearer token required' if token else 'no authentication'}; plain HTTP)",
            file=sys.stderr,
        )
    if args.watch is not None and not _check_watch(args.watch):
        return 2
    problem = None if args.cache_url is None else _cache_problem(args.cache_url)
    if problem is not None:
        print(f"pacms serve: {problem}", file=sys.stderr)
        return 2
    try:
        port = _free_port(args.host, args.port)
    except OSError as err:
        print(f"pacms serve: cannot listen on {args.host} port {args.port}: {err}", file=sys.stderr)
        return 2
    # Linux's SO_REUSEPORT spreads new connections over a port's listeners (one per worker)
    reuse_port = args.workers > 1 and sys.platform == "linux" and hasattr(socket, "SO_REUSEPORT")
    threads = args.selection_threads
    if threads is None and reuse_port:  # connections spread: the CPUs shared among the workers
        threads = max(1, (os.cpu_count() or 1) // args.workers)
    config = {
        "max_candidates": args.max_candidates,
        "max_text_chars": args.max_text_chars,
        "max_body_bytes": args.max_body_bytes,
        "selection_threads": threads,
        "allowed_hosts": ["127.0.0.1", "localhost", "[::1]", args.host, *args.allow_host],
        "token": token,
        "watch": args.watch,
        "cache_url": args.cache_url,
        "live_prefix": args.live_prefix,
    }
    where = f"http://[{args.host}]:{port}" if ":" in args.host else f"http://{args.host}:{port}"
    print(f"pacms service and inspector on {where}/")
    if args.workers > 1:
        listener = "a listener each (SO_REUSEPORT)" if reuse_port else "one shared listener"
        cache = "one shared cache" if args.cache_url else "a cache each (no --cache-url)"
        running = f"{threads} selection thread{'s' * (threads != 1)}" if threads else "the default"
        print(f"{args.workers} worker processes, each running {running}; {listener}; {cache}")
    if args.watch is not None:
        print(f"following {args.watch}: {where}/?follow=watch")
    options: dict[str, Any] = {
        "factory": True,
        "workers": args.workers,
        "log_level": args.log_level,
        **uvicorn_options(args.host, port, args.header_timeout),
    }
    with _environment(CONFIG_ENV, json.dumps(config)):
        if not reuse_port:
            uvicorn.run(APP_FACTORY, **options)
            return 0
        from uvicorn.config import STARTUP_FAILURE
        from uvicorn.supervisors import Multiprocess

        listeners = [_Listener(family, address) for family, address in _addresses(args.host, port)]
        # each worker unpickles the listeners as sockets of its own (see _Listener)
        supervisor = Multiprocess(
            uvicorn.Config(APP_FACTORY, **options), cast("list[socket.socket]", listeners)
        )
        supervisor.run()
    failed = any(process.exitcode == STARTUP_FAILURE for process in supervisor.processes)
    return STARTUP_FAILURE if failed else 0


def _addresses(host: str, port: int) -> list[tuple[int, tuple[Any, ...]]]:
    """(family, socket address) of each address ``host`` names, to listen on ``port``."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return list(dict.fromkeys((family, address) for family, _, _, _, address in found))


def _free_port(host: str, port: int) -> int:
    """Bind ``port`` plainly on every address of ``host`` and let go: the port (picked, for 0).

    Without ``SO_REUSEPORT`` it fails (``OSError``) while anything listens there, another
    ``pacms serve``'s workers included, or when ``host`` does not resolve.
    """
    held: list[socket.socket] = []
    try:
        for family, address in _addresses(host, port):
            sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            held.append(sock)
            if os.name == "posix":  # a stopped server's closing connections do not count
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address[0], port, *address[2:]))
            port = sock.getsockname()[1]
    finally:
        for sock in held:
            sock.close()
    return port


def _reuse_port_socket(family: int, address: tuple[Any, ...]) -> socket.socket:
    """A socket bound to ``address`` in the port's ``SO_REUSEPORT`` group.

    On failure the worker exits with uvicorn's startup-failure code, so the supervisor stops
    instead of restarting it again and again.
    """
    from uvicorn.config import STARTUP_FAILURE

    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(address)
    except OSError as err:
        sock.close()
        print(
            f"pacms serve worker {os.getpid()}: cannot listen on {address}: {err}", file=sys.stderr
        )
        sys.exit(STARTUP_FAILURE)
    return sock


class _Listener:
    """A listening address that unpickles (in each uvicorn worker) as a new socket bound to it.

    With a socket each in the port's ``SO_REUSEPORT`` group the kernel spreads connections over
    the workers; one shared socket goes to whichever wakes first, often a whole burst to one.
    """

    def __init__(self, family: int, address: tuple[Any, ...]) -> None:
        self.family = family
        self.address = address

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reuse_port_socket, (self.family, self.address))


def uvicorn_options(
    host: str, port: int, header_timeout: float = HEADER_TIMEOUT_SECONDS
) -> dict[str, Any]:
    """The uvicorn settings ``pacms serve`` runs with (needs the ``server`` extra).

    Headers are bounded (:data:`MAX_HEADER_BYTES`) and due within ``header_timeout`` seconds
    (:class:`~langchain_pacms.server.protocol.HeaderTimeoutProtocol`); idle connections close
    after :data:`KEEP_ALIVE_SECONDS`, requests beyond :data:`MAX_CONNECTIONS` get 503, and on
    exit open requests close after :data:`SHUTDOWN_SECONDS`.

    Example:
        >>> options = uvicorn_options("127.0.0.1", 8077, header_timeout=5)
        >>> options["h11_max_incomplete_event_size"], options["http"].keywords
        (16384, {'header_timeout': 5.0})
    """
    from langchain_pacms.server.protocol import header_timeout_protocol

    return {
        "host": host,
        "port": port,
        "http": header_timeout_protocol(header_timeout),
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
        "timeout_keep_alive": KEEP_ALIVE_SECONDS,
        "limit_concurrency": MAX_CONNECTIONS,
        "timeout_graceful_shutdown": SHUTDOWN_SECONDS,
    }


def _whole(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {value!r}") from None


def _port(value: str) -> int:
    number = _whole(value)
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0-65535 (0: any free port), got {value}")
    return number


def _positive(value: str) -> int:
    number = _whole(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return number


def _key_prefix(value: str) -> str:
    if not value or len(value) > 100 or any(c.isspace() for c in value):
        raise argparse.ArgumentTypeError(f"must be 1-100 characters, no spaces, got {value!r}")
    return value


def _seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {value!r}") from None
    if not (math.isfinite(number) and number > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value}")
    return number


def register(subparsers: Any) -> None:
    """Add the ``serve`` sub-command."""
    parser = subparsers.add_parser(
        "serve",
        help="run the selection service and the inspector page",
        description="Serve POST /select, POST /select_debug, GET /strategies and the "
        "inspector page at / (needs the 'server' extra).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=_port, default=8077, help="port, 0-65535 (0: any free port; default 8077)"
    )
    parser.add_argument(
        "--max-candidates",
        type=_positive,
        default=2000,
        help="largest pool accepted (default 2000)",
    )
    parser.add_argument(
        "--max-text-chars",
        type=_positive,
        default=4_000_000,
        metavar="N",
        help="work budget of one request: the most characters of candidate texts and query "
        "together it may have tokenized and embedded; more is refused with 413 before any work "
        "(default 4000000, about a million tokens)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=_positive,
        default=8 * 1024 * 1024,
        help="largest request body accepted (default 8 MiB)",
    )
    parser.add_argument(
        "--header-timeout",
        type=_seconds,
        default=HEADER_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="close a connection that has not sent a request's line and headers within "
        f"SECONDS (with 408 if it sent part of them; default {HEADER_TIMEOUT_SECONDS:g})",
    )
    parser.add_argument(
        "--selection-threads",
        type=_positive,
        help="most selections a worker works on at once; more wait their turn (default: the "
        "number of CPUs, at least 2; with --workers N on Linux, where each worker has a "
        "listener of its own, the CPUs divided among the workers, at least 1 each)",
    )
    parser.add_argument(
        "--workers",
        type=_positive,
        default=1,
        help="worker processes, each with its own selector (on Linux, each with its own "
        "listener on the port, which spreads connections over them); give them one embedding "
        "cache with --cache-url (default 1)",
    )
    parser.add_argument(
        "--cache-url",
        metavar="URL",
        help="keep the embedding cache in Redis at URL (redis://host:port/db), shared by "
        "every worker and host that names it (needs the 'redis' extra)",
    )
    parser.add_argument(
        "--live-prefix",
        type=_key_prefix,
        metavar="PREFIX",
        help="with --cache-url, the Redis key prefix of live mode's sessions (default: "
        "'pacms-live:' and, with a token, a hash of it, so deployments sharing a Redis "
        "database but not a token never see each other's sessions)",
    )
    parser.add_argument(
        "--token",
        help=f"require 'Authorization: Bearer TOKEN' on every request (default: ${TOKEN_ENV})",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also accept requests whose Host header names NAME (repeatable; '*' accepts any); "
        "loopback names and --host are always accepted",
    )
    parser.add_argument(
        "--watch",
        metavar="PATH",
        help="follow the JSONL selection log a hook or middleware writes (log=PATH): each new "
        "record shows live on the page (session 'watch')",
    )
    parser.add_argument(
        "--insecure", action="store_true", help="allow binding beyond loopback without a token"
    )
    parser.add_argument(
        "--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"]
    )
    parser.set_defaults(func=_run)
