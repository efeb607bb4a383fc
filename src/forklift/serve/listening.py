"""The listening sockets of a server (`forklift serve`, the app, a pod's NGINX), bound before the server says where it
listens: uvicorn binds only once it starts, so a port in use was announced as listening, then ended the process with
exit code 3 and a log line; bound first, it is one line naming the port (exit code 2) before anything is started."""

from __future__ import annotations

import errno
import socket

from forklift.errors import ForkliftError

LOOPBACK = {"0.0.0.0": "127.0.0.1", "::": "::1"}  # where a server listening on every address answers on this machine


def listening_sockets(host: str, port: int) -> list[socket.socket]:
    """TCP sockets bound to each address `host` names (`localhost`: 127.0.0.1 and ::1), as uvicorn binds them (an
    IPv6 one takes IPv6 only); not yet listening (the server listens on them with its backlog), and not inherited
    by the processes the server starts."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ForkliftError(f"--host {host}: not an address this machine knows ({exc.strerror})") from None
    bound: list[socket.socket] = []
    try:
        for family, address in dict.fromkeys((family, address) for family, _, _, _, address in found):
            one = socket.socket(family, socket.SOCK_STREAM)
            bound.append(one)
            one.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port left in TIME_WAIT by a stopped server
            if family == socket.AF_INET6:
                one.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            one.bind(address)
    except OSError as exc:
        for one in bound:
            one.close()
        raise ForkliftError(_refusal(host, port, exc)) from None
    return bound


def _refusal(host: str, port: int, exc: OSError) -> str:
    """What a failed bind means, in the options that caused it."""
    if exc.errno == errno.EADDRINUSE:
        in_use = f"{host}:{port} is in use (another server listens there)"
        return f"--port {port}: {in_use}; choose another --port or stop that server"
    if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
        return f"--host {host}: not an address of this machine"
    if exc.errno == errno.EACCES:
        return f"--port {port}: below 1024, only a privileged user may listen on it"
    return f"--host {host} --port {port}: cannot listen there: {exc.strerror}"


def local_url(host: str, port: int) -> str:
    """Where a server listening on `host` answers on this machine: loopback when it listens on every address (of
    its family: a server on `::` takes IPv6 only, a pod's NGINX on `::` both)."""
    reached = LOOPBACK.get(host, host)
    return f"http://[{reached}]:{port}" if ":" in reached else f"http://{reached}:{port}"
