"""The app's API fuzzed from its own OpenAPI schema (schemathesis): whatever it is sent, no answer is a 5xx."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from forklift.app.config import AppConfig
from forklift.app.database import sqlite_url
from forklift.app.server import create_app

pytestmark = pytest.mark.slow

_DATA = Path(tempfile.mkdtemp(prefix="forklift-fuzz-"))
APP = create_app(AppConfig(_DATA, sqlite_url(_DATA)))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_request_makes_the_api_fail(case: schemathesis.Case) -> None:
    response = case.call()
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.status_code} {response.text}"
