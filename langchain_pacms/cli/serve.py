"""``pacms serve``: run the selection service and the inspector page with uvicorn."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
from typing import Any

__all__ = ["is_loopback", "register", "uvicorn_options"]

logger = logging.getLogger(__name__)

SERVER_INSTALL = 'pip install "langchain-pacms[server]"'
"""The line ``pacms serve`` prints when the ``server`` extra (FastAPI, uvicorn) is missing."""
TOKEN_ENV = "PACMS_SERVE_TOKEN"
MAX_HEADER_BYTES = 16 * 1024  # a request's line and headers, buffered before they are parsed
KEEP_ALIVE_SECONDS = 5  # an idle kept-alive connection is closed after this
MAX_CONNECTIONS = 1000  # connections and requests in flight; more are answered 503
SHUTDOWN_SECONDS = 3  # on exit, open event streams are closed after this


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine.

    Example:
        >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
        (True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from langchain_pacms.server import create_app
    except ImportError as err:
        print(f"pacms serve needs the 'server' extra ({err}); install it with:", file=sys.stderr)
        print(SERVER_INSTALL, file=sys.stderr)
        return 2
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if not is_loopback(args.host):
        if token is None and not args.insecure:
            print(
                f"pacms serve: binding {args.host} exposes the service beyond this machine; "
                f"give a token (--token or {TOKEN_ENV}) or pass --insecure"
            )
            return 2
        logger.warning("binding %s: the service is reachable from other machines", args.host)
        print(
            f"warning: binding {args.host} exposes the service beyond this machine "
            f"({'bearer token required' if token else 'no authentication'}; plain HTTP)"
        )
    app = create_app(
        max_candidates=args.max_candidates,
        max_body_bytes=args.max_body_bytes,
        selection_threads=args.selection_threads,
        allowed_hosts=["127.0.0.1", "localhost", "[::1]", args.host, *args.allow_host],
        token=token,
        watch=args.watch,
    )
    print(f"pacms service and inspector on http://{args.host}:{args.port}/")
    if args.watch is not None:
        print(f"following {args.watch}: http://{args.host}:{args.port}/?follow=watch")
    uvicorn.run(app, log_level=args.log_level, **uvicorn_options(args.host, args.port))
    return 0


def uvicorn_options(host: str, port: int) -> dict[str, Any]:
    """The uvicorn settings ``pacms serve`` runs with: bounded headers and idle connections.

    The pure-Python ``h11`` parser is used because it bounds a request's line and headers
    (:data:`MAX_HEADER_BYTES`; larger is answered 400); idle kept-alive connections close after
    :data:`KEEP_ALIVE_SECONDS`, and beyond :data:`MAX_CONNECTIONS` connections or requests in
    flight new requests are answered 503. On exit, requests still open after
    :data:`SHUTDOWN_SECONDS` (the page's event streams never end by themselves) are closed.

    Example:
        >>> uvicorn_options("127.0.0.1", 8077)["h11_max_incomplete_event_size"]
        16384
    """
    return {
        "host": host,
        "port": port,
        "http": "h11",
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
        "timeout_keep_alive": KEEP_ALIVE_SECONDS,
        "limit_concurrency": MAX_CONNECTIONS,
        "timeout_graceful_shutdown": SHUTDOWN_SECONDS,
    }


def _positive(value: str) -> int:
    number = int(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
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
    parser.add_argument("--port", type=int, default=8077, help="port (default 8077)")
    parser.add_argument(
        "--max-candidates",
        type=_positive,
        default=2000,
        help="largest pool accepted (default 2000)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=_positive,
        default=8 * 1024 * 1024,
        help="largest request body accepted (default 8 MiB)",
    )
    parser.add_argument(
        "--selection-threads",
        type=_positive,
        default=None,
        help="most selections worked on at once; more wait their turn "
        "(default: the number of CPUs, at least 2)",
    )
    parser.add_argument(
        "--token",
        default=None,
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
        default=None,
        metavar="PATH",
        help="follow a hook's JSONL selection log (its log_path): the page shows each new "
        "record live (session 'watch')",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="allow binding beyond loopback without a token",
    )
    parser.add_argument(
        "--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"]
    )
    parser.set_defaults(func=_run)
