"""The app's API fuzzed from its own OpenAPI schema (schemathesis): whatever it is sent, no answer is a 5xx. Twice:
on loopback (one local user, no login), and served beyond it with accounts, where each request takes its turn at
the ways a request can come: with a session cookie and its CSRF token, an API token, a cookie without the token,
a forged cookie, an unknown token, nothing; good credentials are taken, and none but a login or a logout gets
anything without them.

Times on this 2-core machine: about 12 s each, 24 s for the file (12 cases an operation on loopback, 6 with
accounts)."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from starlette.types import ASGIApp, Receive, Scope, Send

from forklift.app.accounts import add_token, add_user
from forklift.app.config import AppConfig
from forklift.app.database import sqlite_url
from forklift.app.security import COOKIE, CSRF_HEADER, SAFE_METHODS
from forklift.app.server import create_app

pytestmark = pytest.mark.slow


def _on_loopback(app: ASGIApp) -> ASGIApp:
    """The app as asked by its own name: schemathesis's ASGI client names the host "testserver", which the local
    app refuses (a name rebound to loopback: forklift.app.local_guard)."""

    async def asked(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            others = [(key, value) for key, value in scope["headers"] if key != b"host"]
            scope = {**scope, "headers": [*others, (b"host", b"127.0.0.1:8080")]}
        await app(scope, receive, send)

    return asked


_DATA = Path(tempfile.mkdtemp(prefix="forklift-fuzz-"))
APP = create_app(AppConfig(_DATA, sqlite_url(_DATA)))
schema = schemathesis.openapi.from_asgi("/openapi.json", _on_loopback(APP))

_ACCOUNTS_DATA = Path(tempfile.mkdtemp(prefix="forklift-fuzz-accounts-"))
ACCOUNTS_APP = create_app(AppConfig(_ACCOUNTS_DATA, sqlite_url(_ACCOUNTS_DATA), host="0.0.0.0"))
accounts_schema = schemathesis.openapi.from_asgi("/openapi.json", ACCOUNTS_APP)
PASSWORD = "fuzzing password"
with ACCOUNTS_APP.state.sessionmaker() as _session:
    add_user(_session, "fuzz", "admin", PASSWORD)
    TOKEN = add_token(_session, "fuzz", "fuzzing")
OPEN = ("/api/login", "/api/logout")  # what answers without credentials
WAYS = itertools.cycle(("cookie", "token", "cookie without csrf", "forged cookie", "unknown token", "nothing"))
# no lifespan: only to log in again after a fuzzed logout ended the session; from an address of its own, which the
# fuzzed logins' failures (from "testclient") do not lock out
_login = TestClient(ACCOUNTS_APP, client=("127.0.0.2", 50000))
_cookie: dict[str, str] = {}


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_request_makes_the_api_fail(case: schemathesis.Case) -> None:
    response = case.call()
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.status_code} {response.text}"
    assert response.status_code != 403, response.text  # the local user may do anything: a refusal here is no test


def _session() -> tuple[str, str]:
    """(a good session cookie, its CSRF token): the last one while the app still takes it, else a new login."""
    if not _cookie or _login.get("/api/session", headers={"Cookie": f"{COOKIE}={_cookie['value']}"}).status_code != 200:
        answer = _login.post("/api/login", json={"name": "fuzz", "password": PASSWORD})
        _cookie.update(value=answer.cookies[COOKIE], csrf=answer.json()["csrf"])
    return _cookie["value"], _cookie["csrf"]


@accounts_schema.parametrize()
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_request_makes_the_api_fail_with_accounts(case: schemathesis.Case) -> None:
    way = next(WAYS)
    # the credentials the description declares (a bearer token, the cookie, the CSRF header) are this test's to give
    case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() not in ("authorization", CSRF_HEADER)}
    case.cookies = {k: v for k, v in (case.cookies or {}).items() if k != COOKIE}
    cookie, csrf = _session() if "cookie" in way else ("", "")
    headers = {}
    if way in ("cookie", "cookie without csrf"):
        headers["Cookie"] = f"{COOKIE}={cookie}"
        if way == "cookie":
            headers[CSRF_HEADER] = csrf
    elif way == "forged cookie":
        headers["Cookie"] = f"{COOKIE}={cookie[:-4]}{'BBBB' if cookie.endswith('AAAA') else 'AAAA'}"
    elif way in ("token", "unknown token"):
        headers["Authorization"] = f"Bearer {TOKEN if way == 'token' else 'fk_' + 'x' * 43}"
    response = case.call(headers=headers)
    said = f"{way}: {case.method} {case.formatted_path}: {response.status_code} {response.text}"
    assert response.status_code < 500, said
    if way in ("cookie", "token") and case.path != "/api/login":
        assert response.status_code != 401, said  # good credentials are taken
    if way in ("forged cookie", "unknown token", "nothing") and case.path not in OPEN:
        assert response.status_code >= 400, said
    if way == "cookie without csrf" and case.method.upper() not in SAFE_METHODS and case.path != "/api/login":
        assert response.status_code >= 400, said
