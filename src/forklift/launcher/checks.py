"""The checks `forklift run` makes before it starts a job (ddlrun's): every host matches the first one's topology,
Python, forklift and torch; the command's paths exist everywhere; every host reaches the rendezvous port. Each
failed check is one line naming the host and what differs."""

from __future__ import annotations

from typing import Any

from forklift.system.topology import Topology

VERSIONS = ("python", "forklift", "torch")


def topology_summary(topology: Topology) -> str:
    """What two hosts must share for the same layout to fit both: NUMA nodes, their CPUs, threads per core."""
    nodes = topology.nodes
    sizes = sorted({len(cpus) for cpus in nodes.values()})
    per_node = "/".join(map(str, sizes))
    return (f"{len(nodes)} NUMA node{'s' if len(nodes) != 1 else ''} of {per_node} CPUs, "
            f"{topology.threads_per_core} thread{'s' if topology.threads_per_core != 1 else ''} per core")  # fmt: skip


def gpu_summary(facts: dict[str, Any]) -> str:
    count, names = len(facts.get("gpus", [])), sorted({gpu["name"] for gpu in facts.get("gpus", [])})
    return f"{count} GPU{'s' if count != 1 else ''} ({', '.join(names)})" if names else "no GPU"


def problems(facts: dict[str, dict[str, Any]], first: str) -> list[str]:
    """One line per failed check, hosts in the order given; the first host is the reference."""
    found = []
    reference = facts[first]
    for host, seen in facts.items():
        for name in VERSIONS:
            if seen.get(name) is None:
                found.append(f"{host}: {name} is not installed for {seen.get('executable', 'its Python')}")
            elif host != first and reference.get(name) is not None and seen[name] != reference[name]:
                found.append(f"{host}: {name} {seen[name]}, but {first} has {reference.get(name)}")
        if "error" in seen.get("topology", {}):
            found.append(f"{host}: cannot read its CPU topology: {seen['topology']['error']}")
        elif host != first and "error" not in reference.get("topology", {}):
            mine = topology_summary(Topology.from_json(seen["topology"], host))
            theirs = topology_summary(Topology.from_json(reference["topology"], first))
            if mine != theirs:
                found.append(f"{host}: {mine}, but {first} has {theirs}")
        if host != first and gpu_summary(seen) != gpu_summary(reference):
            found.append(f"{host}: {gpu_summary(seen)}, but {first} has {gpu_summary(reference)}")
        for path, exists in seen.get("paths", {}).items():
            if not exists:
                found.append(f"{host}: {path} does not exist there")
        port = seen.get("port", {})
        if port.get("listened") is False or port.get("reached") is False:
            found.append(f"{host}: rendezvous: {port.get('error')}")
    return found
