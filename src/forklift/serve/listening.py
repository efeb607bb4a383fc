"""The listening socket of a server (`forklift serve`, the app), bound before the server says where it listens:
uvicorn binds only once it starts, so a port in use was announced as listening, then ended the process with exit
code 3 and a log line; bound first, it is one line naming the port (exit code 2) before anything is started."""

from __future__ import annotations

import errno
import socket

from forklift.errors import ForkliftError


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (IPv6 where host has a colon), as uvicorn would bind it; not yet listening
    (uvicorn's server listens on it with its backlog). Not inherited by the processes the server starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    bound = socket.socket(family, socket.SOCK_STREAM)
    bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port left in TIME_WAIT by a stopped server
    try:
        bound.bind((host, port))
    except OSError as exc:
        bound.close()
        if exc.errno == errno.EADDRINUSE:
            raise ForkliftError(f"--port {port}: {host}:{port} is in use (another server listens there); choose "
                                f"another --port or stop that server") from None  # fmt: skip
        if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            raise ForkliftError(f"--host {host}: not an address of this machine") from None
        if exc.errno == errno.EACCES:
            raise ForkliftError(f"--port {port}: below 1024, only a privileged user may listen on it") from None
        raise ForkliftError(f"--host {host} --port {port}: cannot listen there: {exc.strerror}") from None
    except socket.gaierror as exc:
        bound.close()
        raise ForkliftError(f"--host {host}: not an address this machine knows ({exc.strerror})") from None
    return bound
