"""A real PostgreSQL server of the test's own: a fresh cluster in a temp folder on a free loopback port, trust
authentication, stopped and its folder removed when the test ends.

Debian's server refuses to run as root, so as root the cluster belongs to the `postgres` user, in a folder of its
own under the system's temp folder (pytest's temp folders are closed to other users).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core_parts import missing

from forklift.serve.process import free_port

DEBIAN = Path("/usr/lib/postgresql")  # Debian's server binaries, by major version


def _server_binaries() -> Path:
    versions = sorted(DEBIAN.glob("*/bin"), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    for folder in (*reversed(versions), *(Path(p) for p in os.environ.get("PATH", "").split(os.pathsep))):
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    missing("PostgreSQL's server (initdb, pg_ctl) is not installed; .ci/run installs Debian's postgresql")


@contextmanager
def postgres_server(database: str = "forklift") -> Iterator[str]:
    """Start a cluster; yields its URL as a user writes it (postgresql://; SQLAlchemy drives it with psycopg 3)."""
    binaries = _server_binaries()
    folder = Path(tempfile.mkdtemp(prefix="forklift-postgres-"))
    data, port = folder / "pgdata", free_port()
    as_user: list[str] = []
    user = pwd.getpwuid(os.getuid()).pw_name
    if os.getuid() == 0:
        user, as_user = "postgres", ["runuser", "-u", "postgres", "--"]
        shutil.chown(folder, "postgres")

    def run(*args: object) -> None:
        done = subprocess.run([*as_user, *map(str, args)], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{Path(str(args[0])).name} failed ({done.returncode}): {done.stderr or done.stdout}")

    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
    try:
        run(binaries / "initdb", "-D", data, "-A", "trust", "-U", user, "--no-sync")
        run(binaries / "pg_ctl", "-D", data, "-o", options, "-l", folder / "server.log", "-w", "start")
        try:
            run(binaries / "createdb", "-h", "127.0.0.1", "-p", port, "-U", user, database)
            yield f"postgresql://{user}@127.0.0.1:{port}/{database}"
        finally:
            run(binaries / "pg_ctl", "-D", data, "-m", "immediate", "stop")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
