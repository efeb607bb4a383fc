"""The Kubernetes objects that serve a model and train across nodes: the one source of `forklift plan --emit k8s`,
`forklift run --emit k8s` and the Helm chart's serving and training templates (`forklift.deployment.chart` writes
those from these builders, with Helm expressions where the chart's values decide).

Serving: a Deployment whose pods each run one instance on whole CPUs with requests == limits (Guaranteed QoS, so
the kubelet's static CPU manager gives them exclusive CPUs), readiness and liveness on /healthz, Prometheus scrape
annotations, and a Service in front. Training: an Indexed Job of one pod per node, each running torchrun with c10d
rendezvous on pod 0, found through a headless Service (no custom resource or operator needed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from forklift.system.placement import FRONT_PORT

SERVE_IMAGE = "localhost/forklift-serve:latest"  # the slim image (`make images`): the core, no PyTorch
TRAIN_IMAGE = "localhost/forklift:latest"  # everything
CONTAINER_MODEL = "/model"  # where the model directory is mounted inside a container
METRICS_PATH = "/metrics"
HEALTH_PATH = "/healthz"
RENDEZVOUS_PORT = 29500  # torchrun's c10d rendezvous on the first node (pod)
# Each rendezvous round gets a fresh store for the ranks: torchrun's default shares the first round's store across
# restarts, where the ranks of a restarted job read the previous round's addresses and cannot connect.
FRESH_STORE_ENV = ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")


class Expr(str):
    """A Helm template expression (without its braces) standing where the chart's values decide a value: the chart
    is written from these builders with Exprs, `--emit k8s` with plain values."""


Number = int | Expr
Json = dict[str, Any] | list[Any]


def text(value: Number | str) -> str:
    """`value` as a string field (an env value, an argument): a number written out, or its Expr quoted."""
    return Expr(f"({value}) | quote") if isinstance(value, Expr) else str(value)


def structure(value: Json | Expr) -> Json | Expr:
    """A mapping or list field: given whole, or in the chart written from the values as JSON (which YAML reads)."""
    return Expr(f"({value}) | toJson") if isinstance(value, Expr) else value


def serve_args(port: int, threads: Number, *, own_network: bool) -> list[str]:
    """What follows the image's entrypoint (`forklift`) in a container serving one instance. In a network namespace of
    its own (a pod) it listens on every address there, so its Service or a published port reaches it; on the host's
    network (docker, compose) only on loopback, where the NGINX front finds it."""
    host = ["--host", "0.0.0.0"] if own_network else []
    return ["serve", CONTAINER_MODEL, *host, "--port", str(port), "--instances", "1", "--threads", text(threads)]


def _labels(name: str | Expr, component: str) -> dict[str, Any]:
    return {"app.kubernetes.io/name": "forklift", "app.kubernetes.io/component": component,
            "app.kubernetes.io/instance": name}  # fmt: skip


@dataclass(frozen=True)
class ServingSpec:
    """One model served by `replicas` pods of `cpus` whole CPUs each (each pod one instance of `cpus` threads)."""

    name: str | Expr  # of the Deployment and its Service
    image: str | Expr
    replicas: Number
    cpus: Number
    memory: str | Expr  # each pod's, e.g. 4Gi
    model_volume: Json | Expr  # a Kubernetes volume source holding the model directory, e.g. {"hostPath": {...}}
    port: int = FRONT_PORT


def serving_objects(spec: ServingSpec) -> list[dict[str, Any]]:
    """The Deployment and its Service."""
    labels = _labels(spec.name, "serving")
    resources = {"cpu": spec.cpus, "memory": spec.memory}
    probe: dict[str, Any] = {"httpGet": {"path": HEALTH_PATH, "port": spec.port}}
    container: dict[str, Any] = {
        "name": "serve",
        "image": spec.image,
        "args": serve_args(spec.port, spec.cpus, own_network=True),
        "env": [{"name": "OMP_NUM_THREADS", "value": text(spec.cpus)}],
        "ports": [{"name": "http", "containerPort": spec.port}],
        "resources": {"requests": resources, "limits": resources},
        "readinessProbe": {**probe, "periodSeconds": 5},
        "livenessProbe": {**probe, "initialDelaySeconds": 30, "periodSeconds": 20, "failureThreshold": 3},
        "volumeMounts": [{"name": "model", "mountPath": CONTAINER_MODEL, "readOnly": True}],
    }
    scrape = {"prometheus.io/scrape": "true", "prometheus.io/port": str(spec.port), "prometheus.io/path": METRICS_PATH}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": spec.name, "labels": labels},
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": scrape},
                "spec": {"containers": [container], "volumes": [_named_volume("model", spec.model_volume)]},
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": spec.name, "labels": labels},
        "spec": {"selector": labels, "ports": [{"name": "http", "port": spec.port, "targetPort": "http"}]},
    }
    return [deployment, service]


def _named_volume(name: str, source: Json | Expr) -> dict[str, Any] | Expr:
    """A pod's volume: its name and its source (hostPath, persistentVolumeClaim, nfs, ...), in the chart the
    values' mapping merged in."""
    if isinstance(source, Expr):
        return Expr(f'merge (dict "name" "{name}") ({source}) | toJson')
    assert isinstance(source, dict)
    return {"name": name, **source}


@dataclass(frozen=True)
class TrainingSpec:
    """`nodes` pods of `nproc` ranks each (a CPU each; with `gpus`, that many GPUs per pod) running the ranks'
    arguments under torchrun, in `workdir` on the volume `work_volume` (the data set and the output)."""

    name: str | Expr  # of the Job and its headless Service
    image: str | Expr
    nodes: Number
    nproc: Number
    gpus: Number
    port: int  # of the rendezvous on pod 0
    max_restarts: Number
    rank_args: list[str] | Expr  # after torchrun's own: `-m forklift.cli train ...`
    workdir: str | Expr
    work_volume: Json | Expr


def training_objects(spec: TrainingSpec) -> list[dict[str, Any]]:
    """The headless Service that gives pod 0 its name, and the Indexed Job whose pods rendezvous there."""
    labels = _labels(spec.name, "training")
    endpoint = (
        Expr(f'printf "%s-0.%s:{spec.port}" ({spec.name}) ({spec.name}) | quote')
        if isinstance(spec.name, Expr)
        else f"{spec.name}-0.{spec.name}:{spec.port}"
    )
    torchrun = ["python", "-m", "torch.distributed.run", "--nnodes", text(spec.nodes), "--nproc-per-node",
                text(spec.nproc), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id",
                spec.name, "--max-restarts", text(spec.max_restarts)]  # fmt: skip
    container = _rank_container(spec, name="train", command=torchrun)
    container["ports"] = [{"name": "rendezvous", "containerPort": spec.port}]
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": spec.name, "labels": labels},
        "spec": {
            "clusterIP": "None",
            "selector": labels,
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": spec.port}],
        },
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": spec.name, "labels": labels},
        "spec": {
            "completionMode": "Indexed",
            "completions": spec.nodes,
            "parallelism": spec.nodes,
            "backoffLimit": 0,  # torchrun restarts the ranks (--max-restarts); a failed pod fails the job
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "subdomain": spec.name,  # pod 0 is {name}-0.{name}: the rendezvous endpoint
                    "restartPolicy": "Never",
                    "containers": [container],
                    "volumes": [_named_volume("work", spec.work_volume)],
                },
            },
        },
    }
    return [service, job]


def _rank_container(spec: TrainingSpec, *, name: str, command: list[str]) -> dict[str, Any]:
    """The container of one node's ranks: torchrun (`command`) and the ranks' arguments, in the work volume."""
    return {
        "name": name,
        "image": spec.image,
        "workingDir": spec.workdir,
        "command": command,
        "args": structure(spec.rank_args),
        "env": [dict(zip(("name", "value"), FRESH_STORE_ENV, strict=True))],
        "resources": _rank_resources(spec.nproc, spec.gpus),
        "volumeMounts": [{"name": "work", "mountPath": spec.workdir}],
    }


def _rank_resources(nproc: Number, gpus: Number) -> dict[str, Any] | Expr:
    """A CPU per rank, requests == limits, and the GPUs when there are any."""
    if isinstance(nproc, Expr) or isinstance(gpus, Expr):
        cpu = f'"cpu" (int ({nproc}))'
        with_gpus = f'dict "requests" (dict {cpu}) "limits" (dict {cpu} "nvidia.com/gpu" (int ({gpus})))'
        return Expr(f'ternary ({with_gpus}) (dict "requests" (dict {cpu}) "limits" (dict {cpu})) '
                    f"(gt (int ({gpus})) 0) | toJson")  # fmt: skip
    limits: dict[str, Any] = {"cpu": nproc}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    return {"requests": {"cpu": nproc}, "limits": limits}


def pytorch_job(spec: TrainingSpec) -> dict[str, Any]:
    """The same training as a Kubeflow PyTorchJob, for clusters that run the training operator (it sets up the c10d
    rendezvous and hands torchrun its settings as PET_* variables)."""
    container = _rank_container(spec, name="pytorch", command=["python", "-m", "torch.distributed.run"])
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": spec.name, "labels": _labels(spec.name, "training")},
        "spec": {
            "nprocPerNode": text(spec.nproc),
            "elasticPolicy": {
                "rdzvBackend": "c10d",
                "minReplicas": spec.nodes,
                "maxReplicas": spec.nodes,
                "maxRestarts": spec.max_restarts,
            },
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": spec.nodes,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "spec": {"containers": [container], "volumes": [_named_volume("work", spec.work_volume)]}
                    },
                }
            },
        },
    }


def objects_yaml(objects: list[dict[str, Any]]) -> str:
    """The objects as a YAML stream; each Expr written as a Helm action `{{ ... }}` (unquoted, so the chart's
    rendering gives numbers, lists and mappings their own type)."""
    exprs: list[Expr] = []

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:  # shared objects written out in full, never as &id001
            return True

    def placeholder(dumper: yaml.SafeDumper, expr: Expr) -> yaml.ScalarNode:
        exprs.append(expr)
        return dumper.represent_str(f"forklift-expr-{len(exprs) - 1}")

    Dumper.add_representer(Expr, placeholder)
    written = yaml.dump_all(objects, Dumper=Dumper, sort_keys=False, width=1000)
    for index in reversed(range(len(exprs))):  # the tenth before the first: no placeholder is a prefix of another
        written = written.replace(f"forklift-expr-{index}", "{{ " + exprs[index] + " }}")
    return written
