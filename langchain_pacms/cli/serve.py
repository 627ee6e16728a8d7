"""``pacms serve``: run the selection service and the inspector page with uvicorn."""

from __future__ import annotations

import argparse
import ipaddress
import logging
from typing import Any

__all__ = ["is_loopback", "register"]

logger = logging.getLogger(__name__)


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
        print(f"pacms serve: {err}")
        return 2
    if not is_loopback(args.host):
        logger.warning(
            "binding %s: the service is reachable from other machines and has no authentication",
            args.host,
        )
        print(f"warning: binding {args.host} exposes the service beyond this machine")
    app = create_app(
        max_candidates=args.max_candidates,
        max_body_bytes=args.max_body_bytes,
        selection_threads=args.selection_threads,
    )
    print(f"pacms service and inspector on http://{args.host}:{args.port}/")
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


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
        "--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"]
    )
    parser.set_defaults(func=_run)
