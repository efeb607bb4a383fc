"""The local app (loopback, no login) answers only the machine's own pages and programs.

Without a login every request acts as the local admin, so the browser on this machine is the thing to guard: any
site it visits can post to 127.0.0.1 (a form, a `no-cors` fetch) and, by rebinding its own name to 127.0.0.1, read
the answers as its own origin. Two checks stop both: the Host a request names must be a loopback name (a rebound
name arrives as the attacker's), and a request that changes something must not come from another origin (the
browser says where it comes from in `Origin` and `Sec-Fetch-Site`; programs such as curl or httpx send neither).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from forklift.app.config import is_loopback
from forklift.serve.responses import error_response

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def host_name(host: str) -> str:
    """The name of a Host header's value without its port (`[::1]:8080` → `::1`)."""
    return urlsplit(f"//{host}").hostname or ""


def refusal(headers: Headers, method: str) -> str | None:
    """Why a request to the local app is refused, or None."""
    host = headers.get("host")
    if host is not None and not is_loopback(host_name(host)):
        return (f"Host {host!r}: the app without a login answers only on this machine's own names (127.0.0.1, "
                "localhost); to serve other names, start it with --login or on their address")  # fmt: skip
    if method in SAFE_METHODS:
        return None
    origin = headers.get("origin")
    if origin is not None and (origin == "null" or urlsplit(origin).netloc != host):
        return f"Origin {origin!r}: a change sent from another site's page is refused (cross-site request)"
    if headers.get("sec-fetch-site") in ("cross-site", "same-site"):
        return "a change sent from another site's page is refused (cross-site request)"
    return None


class LocalOnly:
    """ASGI middleware for the local app: requests from another site, or to another name, get a 403."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            method = scope.get("method", "GET") if scope["type"] == "http" else "WEBSOCKET"
            why = refusal(Headers(scope=scope), method)
            if why is not None:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008, "reason": why[:120]})
                    return
                await error_response(403, why)(scope, receive, send)
                return
        await self.app(scope, receive, send)
