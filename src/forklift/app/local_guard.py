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
from forklift.app.security import SAFE_METHODS
from forklift.serve.responses import error_response


def host_name(host: str) -> str:
    """The name of a Host header's value without its port (`[::1]:8080` → `::1`; "" for no name)."""
    try:
        return urlsplit(f"//{host}").hostname or ""
    except ValueError:  # `[::1` and the like: no name a browser sends
        return ""


def origin_place(origin: str) -> str | None:
    """An Origin header's host and port as a Host header gives them (None: not an origin, or `null`)."""
    try:
        return urlsplit(origin).netloc or None
    except ValueError:
        return None


def refusal(headers: Headers, method: str) -> str | None:
    """Why a request to the local app is refused, or None."""
    host = headers.get("host")
    if host is not None and not is_loopback(host_name(host)):
        return (f"Host {host!r}: the app without a login answers only on this machine's own names (127.0.0.1, "
                "localhost); behind a proxy or under other names, start it with --login")  # fmt: skip
    fetched = headers.get("sec-fetch-site") in ("cross-site", "same-site")
    if fetched and headers.get("sec-fetch-mode") != "navigate":  # an <img>, a script, a no-cors fetch of the API
        return "a request from another site's page is refused (cross-site request)"
    if method in SAFE_METHODS:
        return None
    origin = headers.get("origin")
    if origin is not None and origin_place(origin) != host:
        return f"Origin {origin!r}: a change sent from another site's page is refused (cross-site request)"
    if fetched:
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
