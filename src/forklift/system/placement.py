"""Placement plans: the CPUs and the NUMA memory node of each serving instance, and the files that apply them.

A plan pins every serving instance to CPUs of one NUMA node and to that node's memory, so its memory stays local
and its caches warm. Whole cores come before SMT siblings because siblings share a core's execution units, and
each instance runs as many threads as it has CPUs, so nothing is oversubscribed. The emitters turn a plan into what
runs it: a podman or docker script, a compose file, Kubernetes objects, and the NGINX front that balances them.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass
from itertools import islice, pairwise
from pathlib import Path
from typing import Any, Literal

import yaml

from forklift.errors import ForkliftError
from forklift.system.topology import Topology, format_cpu_list

# The "auto" unit: one whole core (all its SMT threads) per instance. Inference engines scale better across
# processes than across threads of one process (measured for yolov3-tiny on 2 cores: 2 x 1 thread serves
# 47-50 requests/s, 1 x 2 threads 34-41), so many small instances is the sound default; `forklift sweep`
# measures the alternatives.
CORES_PER_INSTANCE = 1
FRONT_PORT = 5000  # where clients connect (NGINX, or the Kubernetes Service)
BASE_PORT = 5001  # the first instance's port; instance i listens on BASE_PORT + i
EMITTERS = ("podman", "docker", "compose", "k8s", "nginx")
IMAGE = "forklift"
NGINX_IMAGE = "docker.io/library/nginx:stable"
MODEL_PLACEHOLDER = "/path/to/model-dir"
CONTAINER_MODEL = "/model"  # where the model directory is mounted inside a container


@dataclass(frozen=True)
class Instance:
    """One serving instance: its CPUs, all on NUMA node `node` whose memory it uses, and its port."""

    index: int
    port: int
    node: int
    cpus: tuple[int, ...]
    cores: int  # distinct cores its CPUs are on

    @property
    def threads(self) -> int:
        """One thread per CPU: more would oversubscribe the set, fewer would leave CPUs idle."""
        return len(self.cpus)

    @property
    def cpuset(self) -> str:
        return format_cpu_list(self.cpus)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "cpus": list(self.cpus), "cpuset": self.cpuset, "threads": self.threads}


@dataclass(frozen=True)
class Plan:
    """Instances of `cpus_per_instance` CPUs each, and the online CPUs no instance uses."""

    instances: tuple[Instance, ...]
    cpus_per_instance: int
    unused: tuple[int, ...]
    source: str

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "cpus_per_instance": self.cpus_per_instance,
            "instances": [instance.to_json() for instance in self.instances],
            "unused": list(self.unused),
        }


def fit_per_node(topology: Topology, cpus_per_instance: int) -> dict[int, int]:
    """NUMA node -> how many instances of that many CPUs it holds (an instance never straddles nodes)."""
    return {node: len(cpus) // cpus_per_instance for node, cpus in topology.nodes.items()}


def make_plan(
    topology: Topology,
    *,
    instances: int | None = None,
    cpus_per_instance: int | None = None,
    base_port: int = BASE_PORT,
) -> Plan:
    """Place `instances` of `cpus_per_instance` CPUs each; either may be None ("auto") and left to these rules:

    - both given: they must fit, or a ForkliftError says how many instances of that size fit;
    - instances only: the largest size at which that many fit;
    - size only: as many instances as fit;
    - neither ("auto"): instances of CORES_PER_INSTANCE core's worth of CPUs (1 x threads per core), or of all
      of the largest node where that is smaller; as many as each node holds. Two cores let a model's threads scale
      while leaving room for many instances. A node with cores to spare spreads its instances over them, and what
      is left over stays unused, for NGINX and the system.

    Instances go to nodes in proportion to the nodes' online CPUs, and on each node whole cores come before SMT
    siblings (see `_fill_node`). Instance i listens on base_port + i and runs one thread per CPU.
    """
    count, size = _count_and_size(topology, instances, cpus_per_instance)
    _check_ports(base_port, count)
    sets = [(node, cpus) for node, n in _spread(topology, count, size).items()
            for cpus in _fill_node(topology.node_cores(node), n, size)]  # fmt: skip
    core_of = {cpu: core for core, siblings in topology.cores.items() for cpu in siblings}
    placed = tuple(
        Instance(index, base_port + index, node, tuple(sorted(cpus)), len({core_of[cpu] for cpu in cpus}))
        for index, (node, cpus) in enumerate(sets)
    )
    used = {cpu for instance in placed for cpu in instance.cpus}
    return Plan(placed, size, tuple(cpu for cpu in topology.online_cpus if cpu not in used), topology.source)


def _count_and_size(topology: Topology, instances: int | None, size: int | None) -> tuple[int, int]:
    """(instances, CPUs each) from what was asked, by the rules of make_plan."""
    if (instances is not None and instances < 1) or (size is not None and size < 1):
        raise ForkliftError(f"instances ({instances}) and CPUs per instance ({size}) must be positive")
    largest = max(len(cpus) for cpus in topology.nodes.values())
    if size is None:
        if instances is None:
            size = min(CORES_PER_INSTANCE * topology.threads_per_core, largest)
        else:
            fitting = (k for k in range(largest, 0, -1) if sum(fit_per_node(topology, k).values()) >= instances)
            size = next(fitting, 1)  # none fits even at 1 CPU: the error below says so
    fit = fit_per_node(topology, size)
    count = sum(fit.values()) if instances is None else instances
    if count > sum(fit.values()) or count == 0:
        asked = "instances" if instances is None else f"{instances} instances"
        nodes = ", ".join(f"node{node} {n}" for node, n in fit.items())
        raise ForkliftError(
            f"{topology.source}: {asked} of {_cpus(size)} do not fit; {sum(fit.values())} fit ({nodes}), "
            f"as an instance stays inside one NUMA node"
        )
    return count, size


def _cpus(count: int) -> str:
    return f"{count} CPU" if count == 1 else f"{count} CPUs"


def _check_ports(base_port: int, count: int) -> None:
    last = base_port + count - 1
    if base_port < 1 or last > 65535 or base_port <= FRONT_PORT <= last:
        raise ForkliftError(
            f"--base-port {base_port}: instance ports {base_port}-{last} must be valid and leave {FRONT_PORT} "
            f"to the front"
        )


def _spread(topology: Topology, count: int, size: int) -> dict[int, int]:
    """NUMA node -> instances, in proportion to the nodes' online CPUs (Sainte-Laguë), none beyond what fits."""
    weight = {node: len(cpus) for node, cpus in topology.nodes.items()}
    fit = fit_per_node(topology, size)
    given = dict.fromkeys(weight, 0)
    for _ in range(count):
        node = max((n for n in weight if given[n] < fit[n]), key=lambda n: (weight[n] / (2 * given[n] + 1), -n))
        given[node] += 1
    return {node: n for node, n in given.items() if n}


def _fill_node(cores: list[list[int]], count: int, size: int) -> list[list[int]]:
    """COUNT CPU sets of SIZE from one node's cores (each a list of its SMT threads), whole cores before siblings.

    The cores are split into COUNT runs, as even as possible, and each instance takes its run's first threads, then
    (only when the node has fewer cores than its instances need CPUs) the run's second threads, and so on. So an
    instance of K CPUs gets K distinct cores' first threads whenever the node has K cores per instance, and no
    sibling is used while a core of the node is idle. An instance still short (more instances than cores) takes
    leftover threads core by core, to share as few cores as it can.
    """
    bounds = [i * (len(cores) // count) + min(i, len(cores) % count) for i in range(count + 1)]
    sets = [_thread_major(cores[start:end])[:size] for start, end in pairwise(bounds)]
    taken = {cpu for cpus in sets for cpu in cpus}
    leftovers = iter([cpu for siblings in cores for cpu in siblings if cpu not in taken])
    return [cpus + list(islice(leftovers, size - len(cpus))) for cpus in sets]


def _thread_major(cores: list[list[int]]) -> list[int]:
    """The first thread of every core, then every second thread, and so on."""
    depth = max(map(len, cores), default=0)
    return [siblings[thread] for thread in range(depth) for siblings in cores if thread < len(siblings)]


def describe_plan(plan: Plan) -> str:
    """The plan as a table for people: one row per instance, then the CPUs left unused."""
    rows = [("instance", "port", "node", "cpus", "cores", "threads")]
    rows += [(str(i.index), str(i.port), str(i.node), i.cpuset, str(i.cores), str(i.threads)) for i in plan.instances]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = [
        f"{plan.source}: {len(plan.instances)} instances of {_cpus(plan.cpus_per_instance)}, "
        f"each with the memory of its NUMA node",
        *("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows),
    ]
    if plan.unused:
        lines.append(f"unused CPUs: {format_cpu_list(plan.unused)} (left to NGINX and the system)")
    return "\n".join(lines)


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


def _serve_command(port: int, threads: int) -> list[str]:
    return ["forklift", "serve", CONTAINER_MODEL, "--port", str(port), "--threads", str(threads)]


def _header(plan: Plan, kind: str) -> str:
    return (
        f"# forklift plan --emit {kind}, for {plan.source}:\n"
        f"# {len(plan.instances)} instances of {_cpus(plan.cpus_per_instance)}, each pinned to one NUMA node and its "
        f"memory, behind port {FRONT_PORT}.\n"
    )


class _Dumper(yaml.SafeDumper):
    """Writes shared objects out in full: anchors and aliases (&id001) would only puzzle a reader."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def container_script(
    plan: Plan, model: str = MODEL_PLACEHOLDER, engine: Literal["podman", "docker"] = "podman", image: str = IMAGE
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
        lines.append(f"{shlex.join(run)} {mount} {shlex.join([image, *_serve_command(i.port, i.threads)])}")
    nginx = [engine, "run", "-d", *network, "--name", "forklift-nginx"]
    lines.append(f'{shlex.join(nginx)} -v "$PWD/nginx.conf":/etc/nginx/nginx.conf:ro,z {NGINX_IMAGE}')
    return "\n".join(lines) + "\n"


def compose_yaml(plan: Plan, model: str = MODEL_PLACEHOLDER, image: str = IMAGE) -> str:
    """A docker-compose file: one service per instance with its `cpuset`, and NGINX (its config from --emit nginx)."""
    services: dict[str, Any] = {
        f"forklift-{i.index}": {
            "image": image,
            "command": _serve_command(i.port, i.threads),
            "cpuset": i.cpuset,
            "environment": {"OMP_NUM_THREADS": str(i.threads)},
            "network_mode": "host",
            "volumes": [f"{model}:{CONTAINER_MODEL}:ro,z"],
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
    return _header(plan, "compose") + note + yaml.dump({"services": services}, Dumper=_Dumper, sort_keys=False)


def k8s_yaml(plan: Plan, model: str = MODEL_PLACEHOLDER, image: str = IMAGE, memory: str = "4Gi") -> str:
    """A Deployment of the plan's instances with whole-CPU requests == limits, and a Service in front."""
    cpus = str(plan.cpus_per_instance)
    resources = {"cpu": cpus, "memory": memory}
    container = {
        "name": "forklift",
        "image": image,
        "command": _serve_command(FRONT_PORT, plan.cpus_per_instance),
        "env": [{"name": "OMP_NUM_THREADS", "value": cpus}],
        "ports": [{"containerPort": FRONT_PORT}],
        "resources": {"requests": resources, "limits": resources},
        "volumeMounts": [{"name": "model", "mountPath": CONTAINER_MODEL, "readOnly": True}],
    }
    labels = {"app": "forklift"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "forklift", "labels": labels},
        "spec": {
            "replicas": len(plan.instances),
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [container],
                    "volumes": [{"name": "model", "hostPath": {"path": model, "type": "Directory"}}],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "forklift", "labels": labels},
        "spec": {"selector": labels, "ports": [{"port": FRONT_PORT, "targetPort": FRONT_PORT}]},
    }
    note = (
        "# The kubelet chooses the CPUs: requests == limits in whole CPUs (Guaranteed QoS) let its static CPU manager\n"
        "# give each pod exclusive CPUs, and the node's kubelet config should say\n"
        "#   cpuManagerPolicy: static\n"
        "#   topologyManagerPolicy: single-numa-node   # the pod's CPUs and memory on one NUMA node, as in the plan\n"
        '#   cpuManagerPolicyOptions: {full-pcpus-only: "true"}   # whole cores, not stray SMT siblings\n'
        f"# Each pod has its own address, so all listen on {FRONT_PORT} and the Service balances them.\n"
    )
    return _header(plan, "k8s") + note + yaml.dump_all([deployment, service], Dumper=_Dumper, sort_keys=False)


def nginx_conf(plan: Plan, listen: int = FRONT_PORT, runtime_dir: Path | None = None) -> str:
    """An nginx.conf whose front port spreads requests over the instances, least busy first.

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
        "    upstream forklift {\n"
        "        least_conn;\n"
        f"{servers}"
        "        keepalive 32;\n"
        "    }\n"
        "    server {\n"
        f"        listen {listen};\n"
        "        location / {\n"
        "            proxy_pass http://forklift;\n"
        "            proxy_http_version 1.1;\n"
        '            proxy_set_header Connection "";\n'
        "            client_max_body_size 20m;\n"
        "            client_body_buffer_size 2m;  # photos stay in memory, not in temporary files\n"
        "            proxy_read_timeout 300s;\n"
        "        }\n"
        "    }\n"
        "}\n"
    )
