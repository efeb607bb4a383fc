"""What `forklift run` asks each host before it starts a job; this file's source is sent over ssh to the host's
Python and run there, so it imports nothing but the standard library at the top (a host whose forklift is
another version, or missing, must still answer). It prints one JSON object:

    {"hostname", "python", "forklift", "torch", "topology" (forklift's Topology.to_json, or an "error"),
     "gpus": [{"name", "node"}], "paths": {path: exists}, "port": {"listened" | "reached": bool, "error"}}

Arguments: `--path P` (repeatable): paths the command needs; `--listen PORT SECONDS`: on the first host, bind the
rendezvous port (it must be free) and accept the others' test connections for up to SECONDS, or until `--expect
N` connections came; `--connect HOST PORT SECONDS`: on the others, connect to the first host's port, retrying
until SECONDS pass.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time


def _version(package: str) -> str | None:
    if package == "forklift":  # the package Python imports (what runs), not only what pip recorded
        try:
            import forklift

            return str(forklift.__version__)
        except ImportError:
            return None
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _topology() -> dict:
    try:
        from forklift.system.topology import current

        return current().to_json()
    except Exception as exc:  # any failure is a fact of the host, which the launcher reports
        return {"error": f"{type(exc).__name__}: {exc}"}


def _gpus() -> list[dict]:
    """Each GPU's name and NUMA node (-1 where the system does not say), as nvidia-smi lists them."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        listing = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,pci.bus_id", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in listing.stdout.splitlines():
        name, _, bus = line.rpartition(",")
        domain, _, rest = bus.strip().lower().partition(":")
        try:
            with open(f"/sys/bus/pci/devices/{domain[-4:]}:{rest}/numa_node", encoding="ascii") as handle:
                node = int(handle.read().strip())
        except (OSError, ValueError):
            node = -1
        gpus.append({"name": name.strip(), "node": node})
    return gpus


def _listen(port: int, seconds: float, expect: int) -> dict:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind(("", port))
    except OSError as exc:
        return {"listened": False, "error": f"port {port} is taken ({exc.strerror})"}
    server.listen(16)
    server.settimeout(0.1)
    deadline, came = time.monotonic() + seconds, 0
    while came < expect and time.monotonic() < deadline:
        try:
            connection, _ = server.accept()
        except TimeoutError:
            continue
        connection.close()
        came += 1
    server.close()
    return {"listened": True, "connections": came}


def _connect(host: str, port: int, seconds: float) -> dict:
    deadline, error = time.monotonic() + seconds, ""
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return {"reached": True}
        except OSError as exc:
            error = exc.strerror or str(exc)
            time.sleep(0.05)
    return {"reached": False, "error": f"{host}:{port} not reachable ({error})"}


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--path", action="append", default=[])
    parser.add_argument("--listen", nargs=2, type=float, metavar=("PORT", "SECONDS"))
    parser.add_argument("--expect", type=int, default=0)
    parser.add_argument("--connect", nargs=3, metavar=("HOST", "PORT", "SECONDS"))
    args = parser.parse_args(argv)
    port: dict = {}
    if args.listen:
        port = _listen(int(args.listen[0]), args.listen[1], args.expect)
    elif args.connect:
        port = _connect(args.connect[0], int(args.connect[1]), float(args.connect[2]))
    return {
        "hostname": platform.node(),
        "python": platform.python_version(),
        "executable": sys.executable,
        "forklift": _version("forklift"),
        "torch": _version("torch"),
        "topology": _topology(),
        "gpus": _gpus(),
        "paths": {path: os.path.exists(path) for path in args.path},
        "port": port,
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
