"""Accounts of an app served beyond loopback: a tampered or logged-out session cookie is refused, an editor changes
data but not accounts, `forklift app user remove` (never the last admin), and password guessing is refused."""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import stat
import statistics
import threading
import time
from pathlib import Path

import httpx
import pytest
from app_helpers import app_client, fresh_database, png, start_app
from fastapi.testclient import TestClient

from forklift.app.login_guard import HASHING_AT_ONCE, PER_ACCOUNT, PER_ADDRESS, LoginGuard
from forklift.app.security import COOKIE
from forklift.cli import main
from forklift.serve.process import free_port
from forklift.serve.responses import HttpError

PASSWORD = "correct horse"


def _where(data: Path, db: str) -> list[str]:
    return ["--data-dir", str(data), "--db", db]


def _add(where: list[str], name: str, role: str) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
        assert main(["app", "user", "add", name, "--role", role, "--password-stdin", *where]) == 0


def _accounts(app_database: str | None, tmp_path: Path, *users: tuple[str, str]) -> tuple[Path, str]:
    data = tmp_path / "app"
    data.mkdir()
    db = fresh_database(app_database, data)
    for name, role in users:
        _add(_where(data, db), name, role)
    return data, db


def _login(client: TestClient, name: str) -> tuple[str, str]:
    """(the session cookie, its CSRF token)."""
    answer = client.post("/api/login", json={"name": name, "password": PASSWORD})
    assert answer.status_code == 200, answer.text
    return answer.cookies[COOKIE], answer.json()["csrf"]


def test_a_tampered_or_logged_out_cookie_is_refused(app_database: str | None, tmp_path: Path) -> None:
    data, db = _accounts(app_database, tmp_path, ("ana", "admin"))
    with app_client(data, db, host="0.0.0.0") as client:
        cookie, csrf = _login(client, "ana")
        assert client.get("/api/datasets").status_code == 200
        payload, _, signature = cookie.rpartition(".")
        for forged in (f"{payload}.{signature[::-1]}", f"{payload[:-2]}xx.{signature}", "nonsense"):
            client.cookies.set(COOKIE, forged)
            refused = client.get("/api/datasets")
            assert refused.status_code == 401 and refused.json()["error"] == "log in first", forged
        client.cookies.set(COOKIE, cookie)
        assert client.post("/api/logout").status_code == 403  # a logout is a change: it needs the CSRF token too
        assert client.get("/api/datasets").status_code == 200
        assert client.post("/api/logout", headers={"X-CSRF-Token": csrf}).status_code == 204
        client.cookies.set(COOKIE, cookie)  # a copy of the cookie, kept from before the logout
        ended = client.get("/api/datasets")
        assert ended.status_code == 401 and "logged out" in ended.json()["error"]
        assert client.post("/api/datasets", json={"name": "x"}, headers={"X-CSRF-Token": csrf}).status_code == 401
        assert client.post("/api/logout").status_code == 204  # logging out of an ended session: only the cookie goes
        again, _ = _login(client, "ana")
        client.cookies.set(COOKIE, again)
        assert client.get("/api/datasets").status_code == 200


def test_a_logout_with_an_api_token_says_how_to_revoke_it(app_database: str | None, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    data, db = _accounts(app_database, tmp_path, ("ana", "admin"))
    capsys.readouterr()
    assert main(["app", "token", "add", "ci", "--user", "ana", *_where(data, db)]) == 0
    bearer = {"Authorization": f"Bearer {capsys.readouterr().out.strip()}"}
    with app_client(data, db, host="0.0.0.0") as client:
        refused = client.post("/api/logout", headers=bearer)
        assert refused.status_code == 422 and "forklift app token remove" in refused.json()["error"]
        assert client.get("/api/datasets", headers=bearer).status_code == 200  # as the answer says: still good


@pytest.mark.slow  # over 1 s: left out of make test-fast
def test_an_editor_changes_data_but_not_accounts(app_database: str | None, tmp_path: Path) -> None:
    data, db = _accounts(app_database, tmp_path, ("ana", "admin"), ("ed", "editor"), ("vic", "viewer"))
    with app_client(data, db, host="0.0.0.0") as client:
        _cookie, csrf = _login(client, "ed")
        changing = {"X-CSRF-Token": csrf}
        made = client.post("/api/datasets", json={"name": "by ed"}, headers=changing)
        assert made.status_code == 201
        dataset = made.json()["id"]
        image = client.post(f"/api/datasets/{dataset}/images", files={"files": ("a.png", png())}, headers=changing)
        assert image.status_code == 201
        shapes = [{"kind": "box", "label": "cat", "points": [1, 1, 9, 9]}]
        saved = client.put(f"/api/images/{image.json()['added'][0]['id']}/annotations",
                           json={"version": 1, "shapes": shapes}, headers=changing)  # fmt: skip
        assert saved.status_code == 200
        assert client.post(f"/api/datasets/{dataset}/labels", json={"name": "dog"}, headers=changing).status_code == 201
        listed = client.get("/api/users")
        assert listed.status_code == 403 and listed.json()["error"] == "ed is an editor; this needs an admin or more"
        assert client.delete("/api/users/vic", headers=changing).status_code == 403
        client.cookies.clear()
        _cookie, csrf = _login(client, "ana")
        admin = {"X-CSRF-Token": csrf}
        assert [(u["name"], u["role"]) for u in client.get("/api/users").json()] == [
            ("ana", "admin"), ("ed", "editor"), ("vic", "viewer")
        ]  # fmt: skip
        assert client.delete("/api/users/vic", headers=admin).status_code == 204
        assert client.delete("/api/users/vic", headers=admin).status_code == 404
        assert client.delete("/api/users/v%00ic", headers=admin).status_code == 422  # PostgreSQL cannot look it up
        last = client.delete("/api/users/ana", headers=admin)
        assert last.status_code == 409 and "the last admin" in last.json()["error"]


@pytest.mark.slow  # over 1 s: left out of make test-fast
def test_user_remove(app_database: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, db = _accounts(app_database, tmp_path, ("ana", "admin"), ("ed", "editor"))
    where = _where(data, db)
    assert main(["app", "token", "add", "script", "--user", "ed", *where]) == 0
    token = capsys.readouterr().out.strip()
    with app_client(data, db, host="0.0.0.0") as client:
        ed_cookie, _ = _login(client, "ed")
    assert main(["app", "user", "remove", "ed", *where]) == 0
    assert capsys.readouterr().out == "removed ed (editor)\n"
    assert main(["app", "user", "list", *where]) == 0
    assert capsys.readouterr().out == "ana\tadmin\n"
    with app_client(data, db, host="0.0.0.0") as client:  # its session and its API token went with it
        assert client.get("/api/datasets", headers={"Authorization": f"Bearer {token}"}).status_code == 401
        client.cookies.set(COOKIE, ed_cookie)
        assert client.get("/api/datasets").status_code == 401
    assert main(["app", "user", "remove", "ed", *where]) == 2
    assert capsys.readouterr().err == "forklift: error: user ed: no such user (forklift app user list shows them)\n"
    assert main(["app", "user", "remove", "ana", *where]) == 2
    said = capsys.readouterr().err
    assert said == "forklift: error: user ana: the last admin cannot be removed (add another admin first)\n"
    _add(where, "bea", "admin")  # on SQLite she may get the id ed had
    with app_client(data, db, host="0.0.0.0") as client:
        client.cookies.set(COOKIE, ed_cookie)
        assert client.get("/api/users").status_code == 401  # ed's old cookie does not pass as bea's
    assert main(["app", "user", "remove", "ana", *where]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as shown:
        main(["app", "user", "remove", "--help"])  # as `forklift app --help` advertises it
    assert shown.value.code == 0 and capsys.readouterr().out.startswith("usage: forklift app user remove")


@pytest.mark.slow  # over 1 s: left out of make test-fast
def test_a_token_is_listed_and_revoked_alone(
    app_database: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, db = _accounts(app_database, tmp_path, ("ana", "admin"))
    where = _where(data, db)
    capsys.readouterr()
    made = {}
    for name in ("ci", "notebook"):
        assert main(["app", "token", "add", name, "--user", "ana", *where]) == 0
        made[name] = capsys.readouterr().out.strip()
    assert main(["app", "token", "list", *where]) == 0
    assert [line.split("\t")[:2] for line in capsys.readouterr().out.splitlines()] == [
        ["ana", "ci"],
        ["ana", "notebook"],
    ]
    with app_client(data, db, host="0.0.0.0") as client:  # revoked while the app runs: refused from the next request
        bearer = {name: {"Authorization": f"Bearer {token}"} for name, token in made.items()}
        assert client.get("/api/datasets", headers=bearer["ci"]).status_code == 200
        assert main(["app", "token", "remove", "ci", "--user", "ana", *where]) == 0
        assert capsys.readouterr().out == "removed 1 token(s) 'ci' of ana\n"
        assert client.get("/api/datasets", headers=bearer["ci"]).status_code == 401
        assert client.get("/api/datasets", headers=bearer["notebook"]).status_code == 200  # the other one stays
    assert main(["app", "token", "remove", "ci", "--user", "ana", *where]) == 2
    assert "token 'ci' of user ana: none such" in capsys.readouterr().err
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
        assert main(["app", "user", "add", "bad/../name", "--password-stdin", *where]) == 2
    assert "user 'bad/../name': letters, digits and . _ @ - only" in capsys.readouterr().err
    with pytest.MonkeyPatch.context() as patch:  # no terminal and no --password-stdin: getpass's traceback
        patch.setattr("sys.stdin", io.StringIO(""))
        assert main(["app", "user", "add", "ed", *where]) == 2
    assert "no terminal to ask the password on: give it on stdin with --password-stdin" in capsys.readouterr().err
    typo = tmp_path / "misspelt"  # listed no users, and left a database there
    assert main(["app", "user", "list", "--data-dir", str(typo)]) == 2
    assert "no app here (no app.db)" in capsys.readouterr().err and not typo.exists()


def _login_answer(client: TestClient, name: str, password: str) -> tuple[int, float]:
    started = time.perf_counter()
    answer = client.post("/api/login", json={"name": name, "password": password})
    return answer.status_code, time.perf_counter() - started


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_guessing_is_refused_and_the_time_tells_no_names(tmp_path: Path) -> None:
    data, db = _accounts(None, tmp_path, ("ana", "admin"))
    with app_client(data, db, host="0.0.0.0") as client:
        known = [_login_answer(client, "ana", "wrong password") for _ in range(3)]
        unknown = [_login_answer(client, "nobody", "wrong password") for _ in range(3)]
        assert {code for code, _ in known + unknown} == {401}
        # an unknown name costs a password check too: its answer is not the quicker one
        assert min(s for _, s in unknown) > 0.3 * statistics.median(s for _, s in known)
        for _ in range(PER_ADDRESS.amount - 6):
            assert _login_answer(client, "ana", "still wrong")[0] == 401
        refused = client.post("/api/login", json={"name": "ana", "password": PASSWORD})  # even the right one
        assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 60
        assert refused.json()["error"].startswith("too many failed logins from testclient: try again in ")
        assert client.post("/api/login", json={"name": "ana", "password": "x" * 1025}).status_code == 422


@pytest.mark.slow  # two app processes
def test_a_forwarded_for_header_counts_only_from_the_proxies_named(tmp_path: Path) -> None:
    """The app as it runs (uvicorn): X-Forwarded-For is ignored unless --forwarded-allow-ips names the proxy that
    sends it (uvicorn trusted it from loopback, so anyone there guessed passwords without end, each try under an
    address made up for it); behind a proxy named so, each client is counted by its own address."""
    data, db = _accounts(None, tmp_path, ("ana", "admin"))
    for more, limited in (((), True), (("--forwarded-allow-ips", "127.0.0.1"), False)):
        port = free_port()
        server = start_app(data, port, db=db, login=True, more=more)
        try:
            answers = [httpx.post(f"http://127.0.0.1:{port}/api/login", json={"name": "ana", "password": "wrong"},
                                  headers={"X-Forwarded-For": f"10.9.0.{k}"}).status_code
                       for k in range(PER_ADDRESS.amount + 1)]  # fmt: skip
        finally:
            server.terminate()
            server.wait(20)
        assert answers[-1] == (429 if limited else 401) and set(answers[:-1]) == {401}, (more, answers)


def test_an_account_guessed_at_from_many_addresses_is_locked() -> None:
    guard = LoginGuard()
    for address in range(PER_ACCOUNT.amount):
        with guard.attempt(f"10.0.0.{address}", "ana"):
            pass  # not found to match: failed
    with (
        pytest.raises(HttpError, match="too many failed logins to this account") as refused,
        guard.attempt("10.0.1.1", "ana"),
    ):
        pass
    assert refused.value.status == 429 and 3000 < int(refused.value.headers["Retry-After"]) <= 3600
    with guard.attempt("10.0.1.1", "bea") as attempt:  # another account is not locked with it
        attempt.failed = False


@pytest.mark.slow  # over 2 s of password checks
def test_logins_sent_at_once_are_held_to_the_same_count(tmp_path: Path) -> None:
    """60 wrong logins from one address at once: 10 checked, the rest refused (each was admitted before the
    first was counted: 49 were checked)."""
    data, db = _accounts(None, tmp_path, ("ana", "admin"))
    with app_client(data, db, host="0.0.0.0") as client:

        def login(k: int) -> int:
            return client.post("/api/login", json={"name": "ana", "password": f"guess {k}"}).status_code

        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(login, range(60)))
    assert (answers.count(401), answers.count(429)) == (PER_ADDRESS.amount, 60 - PER_ADDRESS.amount), answers


def test_password_checks_run_two_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each Argon2 check takes 64 MiB: 16 logins at once must not take 16 times that."""
    running, most = 0, 0
    lock = threading.Lock()

    def check(password_hash: str, password: str) -> bool:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        return password == "right"

    monkeypatch.setattr("forklift.app.login_guard.password_matches", check)
    guard = LoginGuard()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda i: guard.password_matches(f"hash{i}", "right"), range(16)))
    assert answers == [True] * 16 and most == HASHING_AT_ONCE == 2
    assert guard.password_matches(None, "right") is False  # no account: never a match


def test_a_data_directory_the_app_makes_is_its_owners_alone(tmp_path: Path) -> None:
    """It holds every upload and the accounts' hashes: the default umask left them readable to every user."""
    made = tmp_path / "new" / "app"
    _add(["--data-dir", str(made)], "ana", "admin")  # the first account, before the app first runs
    with app_client(tmp_path / "other", fresh_database(None, tmp_path / "other")):
        pass
    for folder in (made, tmp_path / "other"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    there = tmp_path / "shared"
    there.mkdir(mode=0o750)
    with app_client(there, fresh_database(None, there)):
        pass
    assert stat.S_IMODE(there.stat().st_mode) == 0o750  # its owner's choice, kept


def test_logins_still_being_checked_ask_for_a_second_not_a_minute() -> None:
    """Refused only for the logins in flight, nothing having failed yet: the wait is theirs (it said a minute)."""
    guard = LoginGuard()
    with contextlib.ExitStack() as held:
        for _ in range(PER_ADDRESS.amount):
            held.enter_context(guard.attempt("10.0.2.1", "ana")).failed = False
        with (
            pytest.raises(HttpError, match="still being checked: try again in 1 s") as refused,
            guard.attempt("10.0.2.1", "ana"),
        ):
            pass
    assert refused.value.headers == {"Retry-After": "1"}
    with guard.attempt("10.0.2.1", "ana") as attempt:  # answered, and none failed: room again
        attempt.failed = False
