"""The files that run a placement plan: a podman or docker script, a compose file, Kubernetes objects, and the NGINX
front that balances the instances (`forklift plan --emit`, `forklift pod`)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any, Literal

from forklift.deployment.kubernetes import (
    CONTAINER_MODEL,
    SERVE_IMAGE,
    ServingSpec,
    objects_yaml,
    serve_args,
    serving_objects,
)
from forklift.errors import ForkliftError
from forklift.system.placement import FRONT_PORT, Plan, cpus_phrase

EMITTERS = ("podman", "docker", "compose", "k8s", "nginx")
NGINX_IMAGE = "docker.io/library/nginx:stable"
MODEL_PLACEHOLDER = "/path/to/model-dir"


def emit(plan: Plan, kind: str, model: str = MODEL_PLACEHOLDER) -> str:
    """The plan as the text `kind` (one of EMITTERS) runs, serving the model directory `model`."""
    match kind:
        case "podman" | "docker":
            return container_script(plan, model, kind)
        case "compose":
            return compose_yaml(plan, model)
        case "k8s":
            return k8s_yaml(plan, model)
        case "nginx":
            return nginx_conf(plan)
    raise ForkliftError(f"--emit {kind}: choose one of {', '.join(EMITTERS)}")


def _header(plan: Plan, kind: str) -> str:
    return (
        f"# forklift plan --emit {kind}, for {plan.source}:\n"
        f"# {len(plan.instances)} instances of {cpus_phrase(plan.cpus_per_instance)}, each pinned to one NUMA node "
        f"and its memory, behind port {FRONT_PORT}.\n"
    )


def container_script(
    plan: Plan, model: str = MODEL_PLACEHOLDER, engine: Literal["podman", "docker"] = "podman", image: str = SERVE_IMAGE
) -> str:
    """A shell script that starts each instance pinned with --cpuset-cpus/--cpuset-mems, and NGINX in front.

    podman puts them in one pod that publishes only the front port; docker runs them on the host network. Either
    way the instances listen on 127.0.0.1:PORT, where the NGINX config written by the script finds them.
    """
    network = ["--pod", "forklift"] if engine == "podman" else ["--network", "host"]
    lines = [
        "#!/bin/sh",
        _header(plan, engine).rstrip(),
        "set -eu",
        f"MODEL_DIR=${{MODEL_DIR:-{shlex.quote(model)}}}",
        "cat > nginx.conf <<'EOF'",
        nginx_conf(plan).rstrip(),
        "EOF",
    ]
    if engine == "podman":
        lines.append(shlex.join(["podman", "pod", "create", "--name", "forklift", "-p", f"{FRONT_PORT}:{FRONT_PORT}"]))
    for i in plan.instances:
        run = [engine, "run", "-d", *network, "--name", f"forklift-{i.index}", f"--cpuset-cpus={i.cpuset}",
               f"--cpuset-mems={i.node}", "-e", f"OMP_NUM_THREADS={i.threads}"]  # fmt: skip
        mount = f'-v "$MODEL_DIR":{CONTAINER_MODEL}:ro,z'
        serve = serve_args(i.port, i.threads, own_network=engine == "podman")
        lines.append(f"{shlex.join(run)} {mount} {shlex.join([image, *serve])}")
    nginx = [engine, "run", "-d", *network, "--name", "forklift-nginx"]
    lines.append(f'{shlex.join(nginx)} -v "$PWD/nginx.conf":/etc/nginx/nginx.conf:ro,z {NGINX_IMAGE}')
    return "\n".join(lines) + "\n"


def compose_yaml(plan: Plan, model: str = MODEL_PLACEHOLDER, image: str = SERVE_IMAGE) -> str:
    """A docker-compose file: one service per instance with its `cpuset`, and NGINX (its config from --emit nginx)."""
    services: dict[str, Any] = {
        f"forklift-{i.index}": {
            "image": image,
            "command": serve_args(i.port, i.threads, own_network=False),
            "cpuset": i.cpuset,
            "environment": {"OMP_NUM_THREADS": str(i.threads)},
            "network_mode": "host",
            "volumes": [f"{model.replace('$', '$$')}:{CONTAINER_MODEL}:ro,z"],  # `$` as written, not a variable
        }
        for i in plan.instances
    }
    services["nginx"] = {
        "image": NGINX_IMAGE,
        "network_mode": "host",
        "volumes": ["./nginx.conf:/etc/nginx/nginx.conf:ro,z"],
        "depends_on": list(services),
    }
    note = (
        "# Compose has no cpuset-mems: memory is allocated on first touch, on the node of the pinned CPUs.\n"
        "# Write nginx.conf beside this file with `forklift plan --emit nginx > nginx.conf`.\n"
    )
    return _header(plan, "compose") + note + objects_yaml([{"services": services}])


def k8s_yaml(plan: Plan, model: str = MODEL_PLACEHOLDER, image: str = SERVE_IMAGE, memory: str = "4Gi") -> str:
    """The plan's instances as the pods of one Deployment (whole CPUs, requests == limits) and a Service in front:
    the objects the Helm chart renders for a model with the same values."""
    spec = ServingSpec(
        name=k8s_name(f"forklift-{Path(model).name}"),
        image=image,
        replicas=len(plan.instances),
        cpus=plan.cpus_per_instance,
        memory=memory,
        model_volume={"hostPath": {"path": model, "type": "Directory"}},
    )
    smt = plan.threads_per_core
    whole_cores = (
        '#   cpuManagerPolicyOptions: {full-pcpus-only: "true"}   # whole cores, not stray SMT siblings\n'
        if plan.cpus_per_instance % smt == 0
        else f"# (not full-pcpus-only: it refuses a pod of {plan.cpus_per_instance} CPUs on cores of {smt} threads; "
        f"plan a multiple of {smt} CPUs an instance to pin whole cores)\n"
    )
    note = (
        "# The kubelet chooses the CPUs: requests == limits in whole CPUs (Guaranteed QoS) let its static CPU manager\n"
        "# give each pod exclusive CPUs, and the node's kubelet config should say\n"
        "#   cpuManagerPolicy: static\n"
        "#   topologyManagerPolicy: single-numa-node   # the pod's CPUs and memory on one NUMA node, as in the plan\n"
        f"{whole_cores}"
        f"# Each pod has its own address, so all listen on {FRONT_PORT} and the Service balances them.\n"
    )
    return _header(plan, "k8s") + note + objects_yaml(serving_objects(spec))


def k8s_name(text: str) -> str:
    """`text` as a Kubernetes object name (DNS label: lower-case letters, digits and '-', at most 63)."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].rstrip("-") or "forklift"


def nginx_conf(
    plan: Plan, listen: int = FRONT_PORT, *, host: str | None = None, runtime_dir: Path | None = None
) -> str:
    """An nginx.conf whose front port spreads requests over the instances, least busy first; on every address, or
    on `host`'s only.

    With `runtime_dir`, nginx keeps its pid, logs and temporary files there, so an unprivileged or second
    nginx (`forklift pod`) runs beside the system's own.
    """
    servers = "".join(f"        server 127.0.0.1:{i.port};\n" for i in plan.instances)
    own_files = ""
    http_files = ""
    if runtime_dir is not None:
        own_files = f"pid {runtime_dir}/nginx.pid;\nerror_log {runtime_dir}/error.log warn;\n"
        http_files = f"    access_log off;\n    client_body_temp_path {runtime_dir}/client_body;\n"
        http_files += "".join(
            f"    {kind}_temp_path {runtime_dir}/{kind};\n" for kind in ("proxy", "fastcgi", "uwsgi", "scgi")
        )
    return (
        f"# forklift: {len(plan.instances)} serving instances behind port {listen}; least_conn sends each request\n"
        "# to the instance with the fewest requests in flight, which suits requests of uneven cost.\n"
        f"{own_files}"
        "worker_processes auto;\n"
        "events {}\n"
        "http {\n"
        f"{http_files}"
        "    map $http_upgrade $connection_upgrade {  # a WebSocket (/stream/MODEL, /live) is passed on as one;\n"
        "        default upgrade;                       # other requests keep the instances' connections open\n"
        "        '' '';\n"
        "    }\n"
        "    upstream forklift {\n"
        "        least_conn;\n"
        f"{servers}"
        "        keepalive 32;\n"
        "    }\n"
        "    server {\n"
        f"        listen {_address(host, listen)};\n"
        "        location / {\n"
        "            proxy_pass http://forklift;\n"
        "            proxy_http_version 1.1;\n"
        "            proxy_set_header Upgrade $http_upgrade;\n"
        "            proxy_set_header Connection $connection_upgrade;\n"
        "            client_max_body_size 0;  # the instances' own limits (--max-upload-mb, --max-tensor-mb) answer\n"
        "            proxy_request_buffering off;  # a body too big, in JSON, as the body streams to them\n"
        "            proxy_read_timeout 300s;\n"
        "        }\n"
        "    }\n"
        "}\n"
    )


def _address(host: str | None, port: int) -> str:
    """NGINX's listen address: the port alone (every IPv4 address), host:port, [host]:port for IPv6, and for `::`
    every address of both (NGINX's [::] alone takes IPv6 only)."""
    if host is None:
        return str(port)
    if host == "::":
        return f"[::]:{port} ipv6only=off"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
