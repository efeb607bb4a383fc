"""`forklift app`: the web app for data sets, labelling and video frames, and its accounts."""

from __future__ import annotations

import argparse
import contextlib
import getpass
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forklift.cli.common import check_folder_to_write, port, positive, verb_parser
from forklift.errors import ForkliftError
from forklift.extras import Extra

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

DEFAULT_DATA = Path("forklift-app")


def register(verbs: Any) -> None:
    app = verb_parser(
        verbs,
        "app",
        "The web app: data sets, labelling (boxes, polygons, classes), video frames and augmentation in the browser, "
        "with a JSON API documented at /docs. Records in SQLite in the data directory (or --db postgresql://...), "
        "files under it. On 127.0.0.1 it runs for you alone without a login; on any other address it needs "
        "accounts (forklift app user add NAME --role admin) and refuses to start without an admin.",
        "forklift app --data-dir ~/forklift-app            # then open http://127.0.0.1:8080\n"
        "  forklift app user add ana --role admin --data-dir ~/forklift-app\n"
        "  forklift app --host 0.0.0.0 --db postgresql://forklift@db/forklift --data-dir /srv/forklift",
        extra=Extra.APP,
    )
    _where(app)
    app.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: no login)")
    app.add_argument("--port", type=port, default=8080, help="(default 8080)")
    app.add_argument(
        "--login",
        action="store_true",
        help="ask for a login even on 127.0.0.1 (a machine several people log in to); needs an admin account",
    )
    app.add_argument(
        "--jobs-per-device",
        type=positive,
        default=1,
        metavar="N",
        help="training jobs at once on the CPU (each pinned to its own CPU set) and on each GPU (default 1)",
    )
    app.add_argument(
        "--forwarded-allow-ips",
        metavar="ADDRESSES",
        help="behind a reverse proxy: its addresses (comma-separated), whose X-Forwarded-For header names the client "
        "that logins are counted by; default none: the header is ignored (anyone could send one, and log in untold "
        "times under addresses not theirs)",
    )
    app.set_defaults(handler=run_app)
    accounts = app.add_subparsers(dest="what", metavar="user|token")
    user = verb_parser(accounts, "user", "Accounts: add NAME --role ROLE, list, remove NAME.",
                       "forklift app user add ana --role admin --data-dir out/my-app", extra=Extra.APP)  # fmt: skip
    user_verbs = user.add_subparsers(dest="action", metavar="add|list|remove", required=True)
    add = verb_parser(user_verbs, "add", "Add an account; the password is asked for (or read from stdin).",
                      "forklift app user add ed --role editor --data-dir out/my-app   # then type the password",
                      extra=Extra.APP)  # fmt: skip
    add.add_argument("name")
    add.add_argument("--role", choices=("viewer", "editor", "admin"), default="editor")
    add.add_argument("--password-stdin", action="store_true", help="read the password from stdin (for scripts)")
    _where(add)
    add.set_defaults(handler=run_user_add)
    listing = verb_parser(user_verbs, "list", "The accounts and their roles.",
                          "forklift app user list --data-dir out/my-app", extra=Extra.APP)  # fmt: skip
    _where(listing)
    listing.set_defaults(handler=run_user_list)
    remove = verb_parser(user_verbs, "remove", "Remove an account and its API tokens (not the last admin).",
                         "forklift app user remove ed --data-dir out/my-app", extra=Extra.APP)  # fmt: skip
    remove.add_argument("name")
    _where(remove)
    remove.set_defaults(handler=run_user_remove)
    token = verb_parser(accounts, "token",
                        "API tokens for scripts: add NAME --user USER (printed once), list, remove NAME --user USER.",
                        "forklift app token add ci --user ana --data-dir out/my-app", extra=Extra.APP)  # fmt: skip
    token_verbs = token.add_subparsers(dest="action", metavar="add|list|remove", required=True)
    token_add = verb_parser(token_verbs, "add", "A new token, printed once (only its hash is kept).",
                            "forklift app token add ci --user ana --data-dir out/my-app", extra=Extra.APP)  # fmt: skip
    token_add.add_argument("name", help="what the token is for")
    token_add.add_argument("--user", required=True, help="the account the token acts as")
    _where(token_add)
    token_add.set_defaults(handler=run_token_add)
    token_list = verb_parser(token_verbs, "list", "The tokens: account, name, when made.",
                             "forklift app token list --data-dir out/my-app", extra=Extra.APP)  # fmt: skip
    _where(token_list)
    token_list.set_defaults(handler=run_token_list)
    token_remove = verb_parser(
        token_verbs, "remove", "Revoke a token at once (the app need not restart).",
        "forklift app token remove ci --user ana --data-dir out/my-app", extra=Extra.APP,
    )  # fmt: skip
    token_remove.add_argument("name", help="the token's name, as given to add")
    token_remove.add_argument("--user", required=True, help="its account")
    _where(token_remove)
    token_remove.set_defaults(handler=run_token_remove)


def _where(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", type=Path, default=DEFAULT_DATA, help=f"files and records (default {DEFAULT_DATA})"
    )
    parser.add_argument("--db", metavar="URL", help="database URL (default: sqlite in the data directory)")


def _no_app_yet(args: argparse.Namespace) -> bool:
    """No database yet: no --db, and no SQLite file in the data directory."""
    from forklift.app.database import sqlite_file

    return args.db is None and not sqlite_file(args.data_dir).is_file()


def _session(args: argparse.Namespace, *, new: bool = False) -> Session:
    """The app's database; `new`: made where there is none yet (the first account, before the app first runs), else
    a data directory without one is refused (a typo listed no users, and left a database in the misspelt folder)."""
    from forklift.app.config import make_data_dir
    from forklift.app.database import make_engine, session_factory, sqlite_url, upgrade

    if not new and _no_app_yet(args):
        raise ForkliftError(f"--data-dir {args.data_dir}: no app here (no app.db); give the folder 'forklift app' uses")
    make_data_dir(args.data_dir)
    engine = make_engine(args.db or sqlite_url(args.data_dir))
    upgrade(engine)
    return session_factory(engine)()


def run_app(args: argparse.Namespace) -> int:
    import uvicorn

    from forklift.app.accounts import has_admin
    from forklift.app.config import AppConfig, is_loopback
    from forklift.app.database import sqlite_url
    from forklift.app.server import create_app
    from forklift.serve.http_protocol import http_config
    from forklift.serve.listening import listening_sockets, local_url

    check_folder_to_write(args.data_dir, what="--data-dir")
    listening = listening_sockets(args.host, args.port)  # a port in use is said before the data directory is made
    config = AppConfig(args.data_dir, args.db or sqlite_url(args.data_dir), host=args.host, port=args.port,
                       jobs_per_device=args.jobs_per_device, login=args.login)  # fmt: skip
    if not config.local:
        with contextlib.nullcontext(None) if _no_app_yet(args) else _session(args) as session:  # none made here
            if session is None or not has_admin(session):
                why = "--login" if is_loopback(args.host) else f"--host {args.host}: served beyond this machine"
                raise ForkliftError(
                    f"{why}: the app needs accounts, and there is no admin; "
                    f"add one with: forklift app user add NAME --role admin --data-dir {args.data_dir}"
                )
    app = create_app(config)
    print(f"forklift app: {local_url(args.host, args.port)}/  (data in {args.data_dir}; API docs at /docs)", flush=True)
    proxies = args.forwarded_allow_ips  # None: X-Forwarded-For ignored, the connection's address counted
    server = http_config(app, host=args.host, port=args.port, log_level="warning", proxy_headers=bool(proxies),
                         forwarded_allow_ips=proxies)  # fmt: skip
    uvicorn.Server(server).run(sockets=listening)
    return 0


def run_user_add(args: argparse.Namespace) -> int:
    from forklift.app.accounts import add_user

    if not args.password_stdin and not sys.stdin.isatty():  # getpass would fail on no terminal, in a traceback
        raise ForkliftError("no terminal to ask the password on: give it on stdin with --password-stdin")
    password = (
        sys.stdin.readline().rstrip("\n") if args.password_stdin else getpass.getpass(f"password for {args.name}: ")
    )
    with _session(args, new=True) as session:
        add_user(session, args.name, args.role, password)
    print(f"added {args.name} ({args.role})")
    return 0


def run_user_list(args: argparse.Namespace) -> int:
    from sqlalchemy import select

    from forklift.app.tables import User

    with _session(args) as session:
        for user in session.scalars(select(User).order_by(User.name)):
            print(f"{user.name}\t{user.role}")
    return 0


def run_user_remove(args: argparse.Namespace) -> int:
    from forklift.app.accounts import remove_user

    with _session(args) as session:
        user = remove_user(session, args.name)
    print(f"removed {user.name} ({user.role})")
    return 0


def run_token_add(args: argparse.Namespace) -> int:
    from forklift.app.accounts import add_token

    with _session(args) as session:
        print(add_token(session, args.user, args.name))
    return 0


def run_token_list(args: argparse.Namespace) -> int:
    from forklift.app.accounts import tokens

    with _session(args) as session:
        for user, name, made in tokens(session):
            print(f"{user}\t{name}\t{made}")
    return 0


def run_token_remove(args: argparse.Namespace) -> int:
    from forklift.app.accounts import remove_tokens

    with _session(args) as session:
        count = remove_tokens(session, args.user, args.name)
    print(f"removed {count} token(s) {args.name!r} of {args.user}")
    return 0
