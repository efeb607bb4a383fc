"""Placement plans: their properties over many layouts of the Power10 sandbox, the errors, the emitters, the CLI."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import uuid
from collections import Counter
from pathlib import Path
from typing import Literal

import pytest
import yaml
from core_parts import missing
from helpers import forklift, sandbox, shared

from forklift.deployment.kubernetes import SERVE_IMAGE
from forklift.deployment.serving import compose_yaml, container_script, emit, k8s_yaml, nginx_conf
from forklift.errors import ForkliftError
from forklift.system.placement import FRONT_PORT, Plan, describe_plan, fit_per_node, make_plan
from forklift.system.topology import Cpu, Topology

NGINX = Path("/usr/sbin/nginx")


def check_plan(topology: Topology, plan: Plan, base_port: int = 5001) -> None:
    """What every plan promises (see make_plan)."""
    node_of = {cpu.id: cpu.node for cpu in topology.cpus}
    core_of = {cpu: core for core, siblings in topology.cores.items() for cpu in siblings}
    first_threads = {siblings[0] for siblings in topology.cores.values()}
    used = [cpu for instance in plan.instances for cpu in instance.cpus]
    assert len(used) == len(set(used)), "a CPU is used twice"
    assert set(used) | set(plan.unused) == set(topology.online_cpus) and not set(used) & set(plan.unused)
    for index, instance in enumerate(plan.instances):
        assert {node_of[cpu] for cpu in instance.cpus} == {instance.node}, "a CPU set straddles NUMA nodes"
        assert instance.threads == len(instance.cpus) == plan.cpus_per_instance
        assert instance.index == index and instance.port == base_port + index
        assert instance.cores == len({core_of[cpu] for cpu in instance.cpus})
        assert list(instance.cpus) == sorted(instance.cpus)
    per_node = Counter(instance.node for instance in plan.instances)
    for node, count in per_node.items():
        cores = topology.node_cores(node)
        node_used = {cpu for instance in plan.instances if instance.node == node for cpu in instance.cpus}
        if node_used - first_threads:  # a sibling in use: every core of the node must have its first thread in use
            assert {siblings[0] for siblings in cores} <= node_used, "a sibling is used while a core is idle"
        if count * plan.cpus_per_instance <= len(cores):  # cores enough: K distinct cores' first threads each
            assert node_used <= first_threads
    # in proportion to the nodes' sizes: a node with room left gets its share of instances, give or take one
    sizes = {node: len(cpus) for node, cpus in topology.nodes.items()}
    fit = fit_per_node(topology, plan.cpus_per_instance)
    for node, size in sizes.items():
        share = len(plan.instances) * size / sum(sizes.values())
        assert per_node[node] == fit[node] or abs(per_node[node] - share) < 1


@pytest.mark.parametrize("smt", [2, 8])
@pytest.mark.slow  # over 1 s: left out of make test-fast
def test_plan_properties(smt: int) -> None:
    topology = sandbox(smt)
    largest = max(len(cpus) for cpus in topology.nodes.values())
    plans = 0
    for size in range(1, largest + 1):
        fit = sum(fit_per_node(topology, size).values())
        for count in range(1, fit + 1):
            check_plan(topology, make_plan(topology, instances=count, cpus_per_instance=size))
            plans += 1
        check_plan(topology, make_plan(topology, instances=None, cpus_per_instance=size))
    for count in range(1, len(topology.online_cpus) + 1):
        check_plan(topology, make_plan(topology, instances=count, base_port=6000), base_port=6000)
    assert plans > 50


def test_plan_layouts() -> None:
    smt2, smt8 = sandbox(2), sandbox(8)
    # auto: one whole core per instance: node0 (3 cores) holds 3, node1 (9) 9, node2 (4) 4
    auto = make_plan(smt2)
    assert auto.cpus_per_instance == 2 and Counter(i.node for i in auto.instances) == {0: 3, 1: 9, 2: 4}
    assert all(i.cores == 1 for i in auto.instances)  # each instance is one core's SMT siblings
    assert make_plan(smt8).cpus_per_instance == 8 and len(make_plan(smt8).instances) == 16
    # 4 instances of 3 CPUs at SMT=8 (node1 gets 2): each on 3 cores' first threads, no siblings
    spread = make_plan(smt8, instances=4, cpus_per_instance=3)
    assert [i.node for i in spread.instances] == [0, 1, 1, 2]
    assert all(cpu % 8 == 0 for i in spread.instances for cpu in i.cpus)
    assert [i.cores for i in spread.instances] == [3, 3, 3, 3]
    # 4 instances of 4: node0 has 3 cores, so its instance takes one sibling
    assert [i.cores for i in make_plan(smt8, instances=4, cpus_per_instance=4).instances] == [3, 4, 4, 4]
    # instances only: the largest size at which that many fit (6: node0 1, node1 3, node2 1)
    assert make_plan(smt2, instances=4).cpus_per_instance == 6
    two = make_plan(smt2, instances=2)  # 9 CPUs each fit on node 1, splitting a core: 8 each, on nodes 1 and 2
    assert two.cpus_per_instance == 8 and [i.node for i in two.instances] == [1, 2]
    core_of = {cpu: core for core, cpus in smt2.cores.items() for cpu in cpus}
    assert not {core_of[c] for c in two.instances[0].cpus} & {core_of[c] for c in two.instances[1].cpus}
    # more instances than cores on a node: each instance stays on one core
    assert all(i.cores == 1 for i in make_plan(smt8, instances=None, cpus_per_instance=2).instances)
    # a machine of one small node: the instance takes all of it
    tiny = Topology((Cpu(0, 0, 0, 0), Cpu(1, 0, 0, 0)), "tiny")
    assert [i.cpus for i in make_plan(tiny).instances] == [(0, 1)]


def test_plan_does_not_fit() -> None:
    topology = sandbox(2)
    with pytest.raises(ForkliftError, match=r"8 instances of 4 CPUs do not fit; 7 fit \(node0 1, node1 4, node2 2\)"):
        make_plan(topology, instances=8, cpus_per_instance=4)
    with pytest.raises(ForkliftError, match=r"instances of 19 CPUs do not fit; 0 fit"):
        make_plan(topology, instances=None, cpus_per_instance=19)
    with pytest.raises(ForkliftError, match=r"33 instances of 1 CPU do not fit; 32 fit"):
        make_plan(topology, instances=33)
    with pytest.raises(ForkliftError, match="must be positive"):
        make_plan(topology, instances=0)
    with pytest.raises(ForkliftError, match="--base-port 4998"):
        make_plan(topology, instances=4, cpus_per_instance=4, base_port=4998)


def test_describe_plan() -> None:
    text = describe_plan(make_plan(sandbox(2), instances=None, cpus_per_instance=4))
    lines = text.splitlines()
    assert lines[1].split() == ["instance", "port", "node", "cpus", "cores", "threads"]
    assert lines[2].split() == ["0", "5001", "0", "72-73,96,120", "3", "4"]
    assert lines[-1] == "unused CPUs: 9,17,97,121 (left to NGINX and the system)"


@pytest.fixture(scope="module")
def plan() -> Plan:
    return make_plan(sandbox(2), instances=5, cpus_per_instance=4)


@pytest.mark.parametrize("engine", ["podman", "docker"])
def test_container_script(plan: Plan, engine: Literal["podman", "docker"], tmp_path: Path) -> None:
    """The script's text, parsed by sh -n; podman's own parser takes each `podman run` line's options (run with
    --pull=never on an image that is not there, so it stops at the image: nothing is started). Docker is not run."""
    script = container_script(plan, "/srv/my models/yolo", engine)
    path = tmp_path / "serve.sh"
    path.write_text(script)
    subprocess.run(["sh", "-n", str(path)], check=True)  # the shell parses it
    assert "MODEL_DIR=${MODEL_DIR:-'/srv/my models/yolo'}" in script
    assert nginx_conf(plan) in script  # written by the heredoc
    runs = [line for line in script.splitlines() if line.startswith(f"{engine} run") and " serve /model " in line]
    assert len(runs) == len(plan.instances)
    for line, instance in zip(runs, plan.instances, strict=True):
        assert f"--cpuset-cpus={instance.cpuset} --cpuset-mems={instance.node}" in line
        assert f"-e OMP_NUM_THREADS={instance.threads}" in line
        host = "--host 0.0.0.0 " if engine == "podman" else ""  # in the pod's own network namespace
        expected = f"{SERVE_IMAGE} serve /model {host}--port {instance.port} --instances 1 --threads {instance.threads}"
        assert line.endswith(expected)  # the image's entrypoint is forklift
    if engine == "podman":
        assert f"podman pod create --name forklift -p {FRONT_PORT}:{FRONT_PORT}" in script
        assert all("--pod forklift" in line for line in runs)
        if not shutil.which("podman"):
            missing("podman is not installed (.ci/run installs Debian's)")
        absent = f"localhost/forklift-absent-{uuid.uuid4().hex}"
        for line in runs:
            mounted = line.replace('"$MODEL_DIR"', str(tmp_path))
            words = shlex.split(mounted.replace(f" {SERVE_IMAGE} ", f" {absent} "))
            tried = subprocess.run([*words[:2], "--pull=never", *words[2:]], capture_output=True, text=True)
            assert tried.returncode == 125 and f"{absent}: image not known" in tried.stderr, tried.stderr
    else:
        assert all("--network host" in line for line in runs)
    assert '-v "$PWD/nginx.conf":/etc/nginx/nginx.conf:ro,z' in script


def test_compose(plan: Plan) -> None:
    services = yaml.safe_load(compose_yaml(plan, "/srv/models/yolo"))["services"]
    assert set(services) == {f"forklift-{i.index}" for i in plan.instances} | {"nginx"}
    for instance in plan.instances:
        service = services[f"forklift-{instance.index}"]
        assert service["cpuset"] == instance.cpuset
        assert service["environment"] == {"OMP_NUM_THREADS": str(instance.threads)}
        assert service["command"][-6:] == ["--port", str(instance.port), "--instances", "1", "--threads",
                                           str(instance.threads)]  # fmt: skip
        assert service["volumes"] == ["/srv/models/yolo:/model:ro,z"]
    assert len(services["nginx"]["depends_on"]) == len(plan.instances)
    priced = yaml.safe_load(compose_yaml(plan, "/srv/models/$HOME"))["services"]["forklift-0"]  # compose reads
    assert priced["volumes"] == ["/srv/models/$$HOME:/model:ro,z"]  # `$$` as `$`, and `$HOME` as the variable


def test_k8s(plan: Plan) -> None:
    text = k8s_yaml(plan, "/srv/models/yolo")
    assert "topologyManagerPolicy: single-numa-node" in text and "&id" not in text
    deployment, service = yaml.safe_load_all(text)
    assert deployment["kind"] == "Deployment" and service["kind"] == "Service"
    assert deployment["spec"]["replicas"] == len(plan.instances)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    resources = container["resources"]
    assert resources["requests"] == resources["limits"] and resources["requests"]["cpu"] == plan.cpus_per_instance
    assert {"name": "OMP_NUM_THREADS", "value": "4"} in container["env"]
    assert container["args"][container["args"].index("--host") + 1] == "0.0.0.0"  # the Service reaches the pod
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert service["spec"]["ports"] == [{"name": "http", "port": FRONT_PORT, "targetPort": "http"}]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert 'full-pcpus-only: "true"' in text  # 4 CPUs: two whole cores of 2 threads
    odd = k8s_yaml(make_plan(sandbox(2), instances=2, cpus_per_instance=7), "/srv/models/yolo")  # the kubelet's
    assert 'full-pcpus-only: "true"' not in odd and "it refuses a pod of 7 CPUs on cores of 2 threads" in odd  # own


def test_nginx(plan: Plan, tmp_path: Path) -> None:
    text = emit(plan, "nginx")
    assert "least_conn;" in text and "client_max_body_size 0;" in text and f"listen {FRONT_PORT};" in text
    assert [line.strip() for line in text.splitlines() if line.strip().startswith("server 127")] == [
        f"server 127.0.0.1:{i.port};" for i in plan.instances
    ]
    if not NGINX.exists():
        missing(f"{NGINX} is not installed (apt-get install -y nginx): the config's syntax is not checked")
    (tmp_path / "logs").mkdir()
    # every address, one, or every address of IPv4 and IPv6 (`forklift pod --host`; NGINX's [::] alone is IPv6 only)
    for host, listen in ((None, f"listen {FRONT_PORT};"), ("127.0.0.1", f"listen 127.0.0.1:{FRONT_PORT};"),
                         ("::", f"listen [::]:{FRONT_PORT} ipv6only=off;")):  # fmt: skip
        text = nginx_conf(plan, FRONT_PORT, host=host) if host else text
        assert f"        {listen}\n" in text
        (tmp_path / "nginx.conf").write_text(text)
        command = [str(NGINX), "-t", "-c", str(tmp_path / "nginx.conf"), "-p", f"{tmp_path}/", "-e", "logs/error.log"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr


def test_emit_unknown(plan: Plan) -> None:
    with pytest.raises(ForkliftError, match="--emit helm"):
        emit(plan, "helm")


def test_cli_plan() -> None:
    path = shared("topology/power10-sandbox-smt2.lscpu-p")
    table = forklift("plan", "--lscpu", path, "--cpus-per-instance", "4", check=False)
    assert table.returncode == 0, table.stderr
    assert "7 instances of 4 CPUs" in table.stdout and "5007" in table.stdout
    result = forklift("plan", "--lscpu", path, "--instances", "3", "--base-port", "6001", "--json", check=False)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [i["port"] for i in data["instances"]] == [6001, 6002, 6003]
    assert all(i["threads"] == data["cpus_per_instance"] == len(i["cpus"]) for i in data["instances"])
    k8s = forklift("plan", "--lscpu", path, "--emit", "k8s", "--model", "models/yolo", check=False)
    assert k8s.returncode == 0, k8s.stderr
    deployment, _ = yaml.safe_load_all(k8s.stdout)
    assert deployment["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"].endswith("/models/yolo")
    assert forklift("plan", "--json", check=False).returncode == 0  # this machine


def test_cli_plan_help() -> None:
    text = forklift("plan", "--help", check=False).stdout
    for words in ("example:", "NUMA node", "SMT siblings", "execution units", "oversubscribed", "caches warm"):
        assert words in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--instances", "8", "--cpus-per-instance", "4"], "8 instances of 4 CPUs do not fit; 7 fit"),
        (["--cpus-per-instance", "40"], "instances of 40 CPUs do not fit; 0 fit"),
    ],
)
def test_cli_plan_errors(args: list[str], message: str) -> None:
    result = forklift("plan", "--lscpu", shared("topology/power10-sandbox-smt2.lscpu-p"), *args, check=False)
    assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1


def test_cli_plan_bad_lscpu(tmp_path: Path) -> None:
    path = tmp_path / "lscpu.txt"
    path.write_text("CPU,Core\nzero,one\n")
    result = forklift("plan", "--lscpu", path, check=False)
    assert result.returncode == 2
    assert result.stderr == f"forklift: error: {path} line 1: 'CPU,Core' is neither an `lscpu -p` row " \
        "(CPU,CORE,SOCKET,NODE) nor NUMA text\n"  # fmt: skip


def test_cli_emit_podman() -> None:
    """`forklift plan --emit podman` prints the script; podman itself is not run (nor needed on the machine)."""
    result = forklift(
        "plan", "--lscpu", shared("topology/power10-sandbox-smt8.lscpu-p"), "--emit", "podman", check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("#!/bin/sh\n") and result.stdout.count(f"{SERVE_IMAGE} serve /model") == 16
