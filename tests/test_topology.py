"""CPU topology readers: the Power10 sandbox files agree with what its README says, a fake sysfs, the CLI verb."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from helpers import forklift, sandbox, shared

from forklift.errors import ForkliftError
from forklift.system.topology import (
    Cpu,
    Topology,
    current,
    format_cpu_list,
    load_topology,
    parse_cpu_list,
    parse_lscpu,
    parse_lscpu_numa,
    parse_lscpu_p,
    read_lscpu,
    read_sysfs,
)

# node -> CPUs of the sandbox at SMT=8, from power10-sandbox-numa.txt
SANDBOX_NODES = {0: "72-79,96-103,120-127", 1: "0-47,56-63,80-87,104-111", 2: "48-55,64-71,88-95,112-119"}


def core_sets(topology: Topology) -> set[frozenset[int]]:
    return {frozenset(cpus) for cpus in topology.cores.values()}


def test_cpu_lists() -> None:
    assert parse_cpu_list("0-3,16-17") == [0, 1, 2, 3, 16, 17]
    assert parse_cpu_list(" 5\n") == [5]
    assert parse_cpu_list("") == []
    assert parse_cpu_list("8,0-1") == [0, 1, 8]
    assert format_cpu_list([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert format_cpu_list([]) == ""
    for cpus in ([0], [1, 3, 5], [*range(0, 128, 8), 9]):
        assert parse_cpu_list(format_cpu_list(cpus)) == sorted(cpus)
    for bad in ("7-3", "a", "1,,2", "0-"):
        with pytest.raises(ForkliftError, match="not a CPU list"):
            parse_cpu_list(bad, "cpulist")


@pytest.mark.parametrize("smt", [2, 8])
def test_sandbox_lscpu_p(smt: int) -> None:
    topology = sandbox(smt)
    assert topology.sockets == [0]
    assert len(topology.cores) == 16
    assert topology.threads_per_core == smt
    assert core_sets(topology) == {frozenset(range(8 * k, 8 * k + smt)) for k in range(16)}
    expected = {node: [cpu for cpu in parse_cpu_list(cpus) if cpu % 8 < smt] for node, cpus in SANDBOX_NODES.items()}
    assert topology.nodes == expected
    assert len(topology.online_cpus) == 16 * smt
    # every core lies in one node: node0 has cores 9, 12, 15; node2 has 6, 8, 11, 14
    assert [len(topology.node_cores(node)) for node in (0, 1, 2)] == [3, 9, 4]


def test_sandbox_numa_text() -> None:
    smt2, smt8 = parse_lscpu_numa(shared("topology/power10-sandbox-numa.txt").read_text(), "numa.txt")
    # SMT=2 shows its holes (8k, 8k+1 online of 8k..8k+7): the cores are inferred as lscpu -p has them
    assert smt2.nodes == sandbox(2).nodes
    assert core_sets(smt2) == core_sets(sandbox(2))
    assert smt2.threads_per_core == 2
    # SMT=8 has no holes: SMT cannot be told from separate cores, so each CPU counts as a core (documented)
    assert smt8.nodes == sandbox(8).nodes
    assert smt8.threads_per_core == 1 and len(smt8.cores) == 128


def test_numa_text_forms() -> None:
    power_smt4 = parse_lscpu("NUMA node(s): 1\nNUMA node0 CPU(s): 0-3,8-11,16-19\n")
    assert core_sets(power_smt4) == {frozenset(range(b, b + 4)) for b in (0, 8, 16)}
    x86 = parse_lscpu("NUMA node(s):  2\nNUMA node0 CPU(s):  0-7,16-23\nNUMA node1 CPU(s):  8-15,24-31\n")
    assert x86.threads_per_core == 1 and len(x86.cores) == 32
    assert x86.nodes[0] == [*range(8), *range(16, 24)]
    full = "Architecture: ppc64le\nThread(s) per core: 2\nNUMA node(s): 1\nNUMA node0 CPU(s): 0,1,8,9\nL2: 1 MiB\n"
    assert parse_lscpu(full).threads_per_core == 2
    with pytest.raises(ForkliftError, match="says 2 but 1 are listed"):
        parse_lscpu("NUMA node(s): 2\nNUMA node0 CPU(s): 0-3\n", "numa.txt")
    with pytest.raises(ForkliftError, match=re.escape("holds 2 `lscpu | grep NUMA` listings")):
        read_lscpu(shared("topology/power10-sandbox-numa.txt"))


def test_lscpu_p_forms() -> None:
    headerless = parse_lscpu_p("0,0,0,0\n1,0,0,0\n2,1,0,1\n3,1,0,1\n")
    assert headerless.nodes == {0: [0, 1], 1: [2, 3]} and headerless.threads_per_core == 2
    reordered = parse_lscpu_p("# CPU,Node,Core\n0,1,5\n1,1,5\n2,0,6\n")
    assert reordered.nodes == {0: [2], 1: [0, 1]} and core_sets(reordered) == {frozenset({0, 1}), frozenset({2})}
    # what lscpu -p prints on a machine without NUMA: an empty Node column and cache columns after it
    machine = "# CPU,Core,Socket,Node,,L1d,L1i,L2,L3\n0,0,0,,,0,0,0,0\n1,1,0,,,1,1,1,0\n"
    assert parse_lscpu(machine).nodes == {0: [0, 1]}
    offline = parse_lscpu_p("# CPU,Core,Socket,Node,Online\n0,0,0,0,Y\n1,,,,N\n2,1,0,0,Y\n")
    assert offline.online_cpus == [0, 2] and [cpu.online for cpu in offline.cpus] == [True, False, True]
    no_cores = parse_lscpu_p("# CPU,Node\n0,0\n1,0\n")
    assert len(no_cores.cores) == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0,0,0,0\n0,1,0,0\n", "CPU 0 is listed twice"),
        ("0,0,0,0\nhello\n", "line 2: 'hello' is neither"),
        ("# only comments\n", "no CPU rows"),
        ("# CPU,Core,Socket,Node,Online\n0,0,0,0,N\n", "no online CPUs"),
        ("0,x,0,0\n", "line 1"),
        ("NUMA node(s): 2\nNUMA node0 CPU(s): 0-3\nNUMA node1 CPU(s): 2-5\n", "CPU 2 is listed in node0 and node1"),
    ],
)
def test_lscpu_p_errors(text: str, message: str) -> None:
    with pytest.raises(ForkliftError, match=message):
        parse_lscpu(text, "cpus.txt")


def fake_sysfs(root: Path) -> Path:
    """Two sockets, one NUMA node each, two SMT2 cores per socket, x86 numbering (CPU i and i+4 are siblings).

    CPU 6 is offline with its topology still shown; CPU 7 is offline and the kernel dropped its topology.
    """
    cpu_dir = root / "devices" / "system" / "cpu"
    for cpu in range(8):
        topology = cpu_dir / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        if cpu != 7:
            (topology / "core_id").write_text(f"{cpu % 2}\n")
            (topology / "physical_package_id").write_text(f"{cpu % 4 // 2}\n")
    (cpu_dir / "cpu7" / "topology").rmdir()
    (cpu_dir / "cpufreq").mkdir()  # not a CPU
    (cpu_dir / "online").write_text("0-5\n")
    for node, cpus in ((0, "0-1,4-5"), (1, "2-3,6-7")):
        (root / "devices" / "system" / "node" / f"node{node}").mkdir(parents=True)
        (root / "devices" / "system" / "node" / f"node{node}" / "cpulist").write_text(cpus + "\n")
    return root


def test_sysfs(tmp_path: Path) -> None:
    topology = read_sysfs(fake_sysfs(tmp_path))
    assert [cpu.id for cpu in topology.cpus] == [0, 1, 2, 3, 4, 5, 6]
    assert topology.cpus[6] == Cpu(6, 0, 1, 1, online=False)
    assert topology.online_cpus == [0, 1, 2, 3, 4, 5]
    assert topology.sockets == [0, 1]
    assert topology.nodes == {0: [0, 1, 4, 5], 1: [2, 3]}
    assert topology.cores == {(0, 0): [0, 4], (0, 1): [1, 5], (1, 0): [2], (1, 1): [3]}
    assert topology.threads_per_core == 2
    allowed = read_sysfs(tmp_path, allowed={0, 4, 2})
    assert allowed.online_cpus == [0, 2, 4] and allowed.cores[(0, 0)] == [0, 4]
    assert load_topology(sysfs=tmp_path) == topology


def test_sysfs_errors(tmp_path: Path) -> None:
    with pytest.raises(ForkliftError, match="not a sysfs root"):
        read_sysfs(tmp_path)
    (fake_sysfs(tmp_path) / "devices" / "system" / "cpu" / "cpu0" / "topology" / "core_id").write_text("zero\n")
    with pytest.raises(ForkliftError, match="core_id: 'zero' is not a number"):
        read_sysfs(tmp_path)


def test_current_machine_respects_affinity() -> None:
    topology = current()
    assert set(topology.online_cpus) <= os.sched_getaffinity(0)
    assert topology.threads_per_core >= 1 and topology.nodes


def test_cli_topology() -> None:
    path = shared("topology/power10-sandbox-smt2.lscpu-p")
    text = forklift("topology", "--lscpu", path, check=False)
    assert text.returncode == 0, text.stderr
    assert "cores              16" in text.stdout and "threads per core   2" in text.stdout
    assert "node0            6 CPUs: 72-73,96-97,120-121" in text.stdout
    result = forklift("topology", "--lscpu", path, "--json", check=False)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["cores"] == 16 and data["threads_per_core"] == 2 and data["sockets"] == [0]
    assert data["nodes"]["0"] == [72, 73, 96, 97, 120, 121] and len(data["online"]) == 32
    assert forklift("topology", "--json", check=False).returncode == 0  # this machine


def test_cli_topology_numa_text(tmp_path: Path) -> None:
    lines = shared("topology/power10-sandbox-numa.txt").read_text().splitlines()
    one = tmp_path / "smt2.txt"
    one.write_text("\n".join(lines[:6]) + "\n")  # the header comments and the SMT=2 listing
    result = forklift("topology", "--lscpu", one, "--json", check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["threads_per_core"] == 2
    assert "names no cores" not in forklift("topology", "--lscpu", one).stdout  # SMT read from its holes
    full = tmp_path / "smt8.txt"  # every thread online: no holes to read cores from, each CPU one, and said so
    full.write_text("\n".join(lines[6:11]) + "\n")
    shown = forklift("topology", "--lscpu", full).stdout
    assert "threads per core   1; the source names no cores: each CPU is counted as a core of its own" in shown
    planned = forklift("plan", "--lscpu", full, "--instances", "2")
    assert planned.stderr == f"forklift: warning: {full}: names no cores: each CPU is counted as a core of its own " \
        "(`lscpu -p` names them)\n"  # fmt: skip


@pytest.mark.parametrize("content", ["not lscpu output\n", "NUMA node(s): 2\nNUMA node0 CPU(s): 0-3\n", None])
def test_cli_topology_bad_file(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "bad.txt"
    if content is not None:
        path.write_text(content)
    result = forklift("topology", "--lscpu", path, check=False)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"forklift: error: {path}")
    assert "Traceback" not in result.stderr
