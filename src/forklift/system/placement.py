"""Placement plans: the CPUs and the NUMA memory node of each serving instance, and the files that apply them.

A plan pins every serving instance to CPUs of one NUMA node and to that node's memory, so its memory stays local
and its caches warm. Whole cores come before SMT siblings because siblings share a core's execution units, and
each instance runs as many threads as it has CPUs, so nothing is oversubscribed. `forklift.deployment.serving` turns
a plan into what runs it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import islice, pairwise
from typing import Any

from forklift.errors import ForkliftError
from forklift.system.topology import Topology, format_cpu_list

# The "auto" unit: one whole core (all its SMT threads) per instance. Inference engines scale better across
# processes than across threads of one process (measured for yolov3-tiny on 2 cores: 2 x 1 thread serves
# 47-50 requests/s, 1 x 2 threads 34-41), so many small instances is the sound default; `forklift sweep`
# measures the alternatives.
CORES_PER_INSTANCE = 1
FRONT_PORT = 5000  # where clients connect (NGINX, or the Kubernetes Service)
BASE_PORT = 5001  # the first instance's port; instance i listens on BASE_PORT + i


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
    threads_per_core: int = 1  # the machine's SMT: a whole number of cores per instance is what Kubernetes can pin

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
    front_port: int = FRONT_PORT,
) -> Plan:
    """Place `instances` of `cpus_per_instance` CPUs each; either may be None ("auto") and left to these rules:

    - both given: they must fit, or a ForkliftError says how many instances of that size fit;
    - instances only: the largest size at which that many fit, a whole number of cores where one does (9 CPUs
      on 2-thread cores would split a core between two instances);
    - size only: as many instances as fit;
    - neither ("auto"): instances of CORES_PER_INSTANCE core's worth of CPUs (1 x threads per core), or of all
      of the largest node where that is smaller; as many as each node holds. Two cores let a model's threads scale
      while leaving room for many instances. A node with cores to spare spreads its instances over them, and what
      is left over stays unused, for NGINX and the system.

    Instances go to nodes in proportion to the nodes' online CPUs, and on each node whole cores come before SMT
    siblings (see `_fill_node`). Instance i listens on base_port + i and runs one thread per CPU; NGINX in front
    listens on `front_port` (`forklift pod`: the port just before the instances', its --port).
    """
    count, size = _count_and_size(topology, instances, cpus_per_instance)
    _check_ports(base_port, count, front_port)
    sets = [(node, cpus) for node, n in _spread(topology, count, size).items()
            for cpus in _fill_node(topology.node_cores(node), n, size)]  # fmt: skip
    core_of = {cpu: core for core, siblings in topology.cores.items() for cpu in siblings}
    placed = tuple(
        Instance(index, base_port + index, node, tuple(sorted(cpus)), len({core_of[cpu] for cpu in cpus}))
        for index, (node, cpus) in enumerate(sets)
    )
    used = {cpu for instance in placed for cpu in instance.cpus}
    unused = tuple(cpu for cpu in topology.online_cpus if cpu not in used)
    return Plan(placed, size, unused, topology.source, threads_per_core=topology.threads_per_core)


def _count_and_size(topology: Topology, instances: int | None, size: int | None) -> tuple[int, int]:
    """(instances, CPUs each) from what was asked, by the rules of make_plan."""
    if (instances is not None and instances < 1) or (size is not None and size < 1):
        raise ForkliftError(f"instances ({instances}) and CPUs per instance ({size}) must be positive")
    largest = max(len(cpus) for cpus in topology.nodes.values())
    if size is None:
        if instances is None:
            size = min(CORES_PER_INSTANCE * topology.threads_per_core, largest)
        else:
            fitting = [k for k in range(largest, 0, -1) if sum(fit_per_node(topology, k).values()) >= instances]
            whole = [k for k in fitting if k % topology.threads_per_core == 0]  # no core split between instances
            size = (whole or fitting or [1])[0]  # none fits even at 1 CPU: the error below says so
    fit = fit_per_node(topology, size)
    count = sum(fit.values()) if instances is None else instances
    if count > sum(fit.values()) or count == 0:
        asked = "instances" if instances is None else f"{instances} instances"
        nodes = ", ".join(f"node{node} {n}" for node, n in fit.items())
        raise ForkliftError(
            f"{topology.source}: {asked} of {cpus_phrase(size)} do not fit; {sum(fit.values())} fit ({nodes}), "
            f"as an instance stays inside one NUMA node"
        )
    return count, size


def cpus_phrase(count: int) -> str:
    return f"{count} CPU" if count == 1 else f"{count} CPUs"


def _check_ports(base_port: int, count: int, front_port: int) -> None:
    last = base_port + count - 1
    if front_port == base_port - 1:  # `forklift pod --port`: the instances take the ports after it
        if last > 65535:
            ports = f"port {base_port}" if count == 1 else f"{count} ports, {base_port}-{last}"
            raise ForkliftError(f"--port {front_port}: the pod's instances take the ports after it, here {ports}, "
                                "past 65535; choose a lower --port")  # fmt: skip
        return
    if base_port < 1 or last > 65535 or base_port <= front_port <= last:
        raise ForkliftError(
            f"--base-port {base_port}: instance ports {base_port}-{last} must be valid and leave {front_port} "
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
        f"{plan.source}: {len(plan.instances)} instances of {cpus_phrase(plan.cpus_per_instance)}, "
        f"each with the memory of its NUMA node",
        *("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows),
    ]
    if plan.unused:
        lines.append(f"unused CPUs: {format_cpu_list(plan.unused)} (left to NGINX and the system)")
    return "\n".join(lines)
