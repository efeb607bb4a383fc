"""The app without a login (loopback) acts for the machine's own pages and programs only: another site's page in
the machine's browser can neither change its data (a form, a `no-cors` fetch) nor read it by rebinding its own
name to 127.0.0.1."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import core_parts
import httpx
import pytest
from app_helpers import FLAGS, app_client, fresh_database, png, start_app

from forklift.serve.process import free_port


def test_the_local_app_refuses_other_names_and_other_sites(tmp_path: Path) -> None:
    data = tmp_path / "app"
    data.mkdir()
    with app_client(data, fresh_database(None, data)) as client:
        made = client.post("/api/datasets", json={"name": "mine"})  # a program (no Origin) acts as before
        assert made.status_code == 201
        rebound = client.get("/api/datasets", headers={"host": "attacker.example:8080"})
        assert rebound.status_code == 403 and rebound.json()["error"].startswith("Host 'attacker.example:8080'")
        assert client.get("/", headers={"host": "attacker.example"}).status_code == 403  # the page too
        for host in ("localhost:8080", "127.0.0.1:8080", "[::1]:8080", "127.0.0.2"):
            assert client.get("/api/datasets", headers={"host": host}).status_code == 200, host
        for origin in ("http://evil.example", "http://127.0.0.1:9999", "null"):
            sent = client.post("/api/datasets", json={"name": "theirs"}, headers={"origin": origin})
            assert sent.status_code == 403 and "cross-site request" in sent.json()["error"], origin
        fetched = client.post("/api/datasets/1/duplicate", headers={"sec-fetch-site": "cross-site"})
        assert fetched.status_code == 403
        assert client.get("/api/datasets", headers={"origin": "http://evil.example"}).status_code == 200  # a read
        img = {"sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors"}  # an <img> of another site's page
        embedded = client.get("/api/datasets/1/export", headers=img)
        assert embedded.status_code == 403 and embedded.headers["x-content-type-options"] == "nosniff"
        linked = client.get("/", headers={"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate"})
        assert linked.status_code == 200  # a link to the app from another site opens it
        for odd in ({"host": "[::1"}, {"origin": "http://["}):  # no browser sends these: a 403, not a 500
            assert client.post("/api/datasets", json={"name": "odd"}, headers=odd).status_code == 403, odd
        page = {"origin": "http://127.0.0.1:8080", "sec-fetch-site": "same-origin"}
        own = client.post("/api/datasets", json={"name": "ours"}, headers=page)
        assert own.status_code == 201  # the app's own page
        assert sorted(d["name"] for d in client.get("/api/datasets").json()) == ["mine", "ours"]


def test_an_app_with_accounts_is_not_held_to_loopback_names(tmp_path: Path) -> None:
    data = tmp_path / "app"
    data.mkdir()
    with app_client(data, fresh_database(None, data), host="0.0.0.0") as client:
        assert client.get("/api/session", headers={"host": "forklift.example"}).status_code == 401  # its login's


@contextmanager
def _other_site(page: str) -> Iterator[int]:
    """A page of another site, served on a loopback port of its own."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page.encode()
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_another_sites_page_in_chromium_changes_and_reads_nothing(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    port = free_port()
    server = start_app(tmp_path / "data", port)
    app = f"http://127.0.0.1:{port}"
    try:
        dataset = httpx.post(f"{app}/api/datasets", json={"name": "mine"}).json()["id"]
        attack = f"""<html><body>
          <form id="f" method="POST" action="{app}/api/datasets/{dataset}/duplicate"></form>
          <script>
            const form = new FormData();
            form.append("files", new Blob([new Uint8Array({list(png())})], {{type: "image/png"}}), "planted.png");
            fetch("{app}/api/datasets/{dataset}/images", {{method: "POST", mode: "no-cors", body: form}})
              .finally(() => document.getElementById("f").submit());
          </script></body></html>"""
        with _other_site(attack) as other, sync_playwright() as playwright:
            rebind = "--host-resolver-rules=MAP evil.test 127.0.0.1"  # the attacker's name, rebound to loopback
            browser = playwright.chromium.launch(executable_path=str(core_parts.chromium()), args=[*FLAGS, rebind])
            try:
                page = browser.new_page()
                page.goto(f"http://evil.test:{other}/")
                page.wait_for_url(f"{app}/**")  # the form's post, after the fetch, answered
                page.wait_for_load_state()
                assert "cross-site request" in page.inner_text("body")
                rebound = browser.new_page()  # the attacker's name, now resolving to the app: its own origin
                answer = rebound.goto(f"http://evil.test:{port}/")
                assert answer is not None and answer.status == 403
                read = rebound.evaluate("fetch('/api/datasets').then((r) => r.status)")
                assert read == 403
                mine = browser.new_page()  # the app's own page, by either of the machine's names, still changes data
                for name in ("127.0.0.1", "localhost"):
                    made = mine.evaluate(f"""fetch("http://{name}:{port}/api/datasets", {{method: "POST",
                        headers: {{"content-type": "application/json"}}, body: JSON.stringify({{name: "{name}"}})}})
                        .then((r) => r.status)""") if mine.goto(f"http://{name}:{port}/") else None  # fmt: skip
                    assert made == 201, name
            finally:
                browser.close()
        sets = httpx.get(f"{app}/api/datasets").json()
        assert sorted(d["name"] for d in sets) == ["127.0.0.1", "localhost", "mine"]  # no copy made
        assert httpx.get(f"{app}/api/datasets/{dataset}/images").json()["total"] == 0  # nothing planted
    finally:
        server.terminate()
        server.wait(20)
