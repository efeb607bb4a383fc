"""`forklift pod`: the original deployment on one machine, N single-model instances behind a real NGINX.

Each instance is a `forklift serve` on its own port, started with its CPU affinity set to its plan's CPU set
(so its own workers stay inside it); NGINX listens on the front port and sends each request to the instance
with the fewest in flight. The processes run on after the command returns; `forklift pod stop` ends them.
What was started is written to a state file, so `stop` finds it again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from forklift.deployment.serving import nginx_conf
from forklift.errors import ForkliftError
from forklift.model_files.model_dir import open_model_dir
from forklift.serve.listening import listening_sockets, local_url
from forklift.serve.process import interrupts_held, wait_until_answering
from forklift.system.placement import Plan, make_plan
from forklift.system.topology import current

NGINX_CANDIDATES = ("/usr/sbin/nginx", "/usr/bin/nginx")


def state_dir(port: int) -> Path:
    """Under the temporary folder: NGINX's workers (often another user) must reach their temporary files."""
    return Path(tempfile.gettempdir()) / f"forklift-pod-{port}"


def find_nginx() -> str:
    found = shutil.which("nginx") or next((p for p in NGINX_CANDIDATES if os.path.exists(p)), None)
    if found is None:
        raise ForkliftError("nginx is not installed (Debian: apt-get install nginx); forklift pod runs it in front")
    return found


def _pinned(cpus: tuple[int, ...]):
    def apply() -> None:
        os.sched_setaffinity(0, cpus)

    return apply


def _start_instance(model_dir: Path, port: int, cpus: tuple[int, ...], log: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "forklift.cli", "serve", str(model_dir), "--port", str(port),
               "--instances", "1", "--threads", str(len(cpus))]  # fmt: skip
    with log.open("w") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_pinned(cpus),
                                start_new_session=True)  # fmt: skip


def start_pod(
    model_dir: Path, *, instances: int, port: int, host: str = "127.0.0.1", cpus_per_instance: int | None = None
) -> dict:
    """Start the instances (on 127.0.0.1) and NGINX in front of them on `host`, wait until all answer, and record
    them; the state as a dict."""
    open_model_dir(model_dir)
    nginx = find_nginx()
    folder = state_dir(port)
    if (folder / "pod.json").exists():
        raise ForkliftError(f"a pod already runs on port {port} (state in {folder}); 'forklift pod stop --port {port}'")
    plan: Plan = make_plan(current(), instances=instances, cpus_per_instance=cpus_per_instance, base_port=port + 1,
                           front_port=port)  # fmt: skip
    for free in listening_sockets(host, port):  # said in one line, not by NGINX's log after the wait for it fails
        free.close()
    for instance in plan.instances:
        try:
            sockets = listening_sockets("127.0.0.1", instance.port)
        except ForkliftError as exc:  # it names the instance's port as --port, which is the pod's front
            reason = str(exc).split(": ", 1)[-1]
            raise ForkliftError(f"--port {port}: instance {instance.index} of the pod takes port {instance.port} "
                                f"(instances take the ports after --port): {reason}") from None  # fmt: skip
        for free in sockets:
            free.close()
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    state: dict = {"port": port, "model": str(model_dir), "instances": [], "nginx_pid": None}
    _save(folder, state)  # before anything starts: an interrupt's stop finds the pod, and each process as it starts
    try:
        started = []
        for i in plan.instances:
            with interrupts_held():
                started.append((i, _start_instance(model_dir, i.port, i.cpus, folder / f"instance-{i.index}.log")))
                state["instances"].append({"pid": started[-1][1].pid, "port": i.port, "cpus": list(i.cpus)})
                _save(folder, state)
        for instance, process in started:
            wait_until_answering(
                f"http://127.0.0.1:{instance.port}/healthz", process, folder / f"instance-{instance.index}.log"
            )
        config = folder / "nginx.conf"
        config.write_text(nginx_conf(plan, listen=port, host=host, runtime_dir=folder))
        log = folder / "nginx.log"
        with log.open("w") as out, interrupts_held():
            front = subprocess.Popen([nginx, "-p", str(folder), "-c", str(config), "-e", str(folder / "error.log"),
                                      "-g", "daemon off;"], stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # fmt: skip
            state["nginx_pid"] = front.pid
            _save(folder, state)
        wait_until_answering(f"{local_url(host, port)}/healthz", front, log)
    except BaseException:
        stop_pod(port)
        raise
    return state


def _save(folder: Path, state: dict) -> None:
    (folder / "pod.json").write_text(json.dumps(state, indent=2) + "\n")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_pod(port: int) -> list[int]:
    """SIGTERM NGINX and every instance (they drain), wait for them; the pids that were stopped."""
    folder = state_dir(port)
    try:
        state = json.loads((folder / "pod.json").read_text())
    except (OSError, ValueError) as exc:
        raise ForkliftError(f"no pod runs on port {port} (no state in {folder})") from exc
    pids = [p for p in [state.get("nginx_pid"), *(i["pid"] for i in state["instances"])] if p]
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        _reap(pids)
        time.sleep(0.2)
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    _reap(pids)
    shutil.rmtree(folder, ignore_errors=True)
    return pids


def _reap(pids: list[int]) -> None:
    """Collect children of this process that have exited (when stop runs in the process that started them)."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
