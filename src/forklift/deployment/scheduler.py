"""A `forklift run` job as a cluster's scheduler takes it (`forklift run --emit slurm|k8s`): the scheduler places
the ranks, so nothing here asks a host; torchrun starts each node's ranks with c10d rendezvous on the first."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

import yaml

from forklift.deployment.serving import IMAGE

# Each rendezvous round gets a fresh store for the ranks: torchrun's default shares the first round's store across
# restarts, where the ranks of a restarted job read the previous round's addresses and cannot connect.
FRESH_STORE = ("env", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1")


@dataclass(frozen=True)
class SchedulerJob:
    """What the scheduler's files say: each rank's arguments after its interpreter, and the job's size."""

    rank_args: tuple[str, ...]  # `-m forklift.cli train ...`, `-m MODULE ...` or `SCRIPT.py ...`
    nodes: int
    nproc: int  # ranks per node
    gpus: int  # per node (0: CPUs only)
    port: int  # of the rendezvous on the first node
    max_restarts: int
    python: str  # the interpreter on every node (Slurm; the image's own on Kubernetes)
    workdir: str  # where the command runs (relative paths in it are relative to this)


def slurm_script(job: SchedulerJob) -> str:
    """An sbatch script: one torchrun per node (srun), the rendezvous on the allocation's first node, each node the
    job's alone (its CPUs are the ranks')."""
    run = [
        *FRESH_STORE, job.python, "-m", "torch.distributed.run", "--nnodes", "$SLURM_NNODES",
        "--nproc-per-node", str(job.nproc), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"$head:{job.port}",
        "--rdzv-id", "$SLURM_JOB_ID", "--max-restarts", str(job.max_restarts), *job.rank_args,
    ]  # fmt: skip
    quoted = " ".join(f'"{arg}"' if "$" in arg else shlex.quote(arg) for arg in run)  # the shell expands those
    lines = [
        "#!/bin/bash",
        "# forklift run --emit slurm: the same job for a Slurm cluster (sbatch THIS_FILE)",
        "#SBATCH --job-name=forklift",
        f"#SBATCH --nodes={job.nodes}",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --exclusive",
        *([f"#SBATCH --gpus-per-node={job.gpus}"] if job.gpus else []),
        "set -euo pipefail",
        f"cd {shlex.quote(job.workdir)}",
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        f"srun {quoted}",
    ]
    return "\n".join(lines) + "\n"


def k8s_job(job: SchedulerJob) -> str:
    """A Kubeflow PyTorchJob: `nodes` worker pods of `nproc` ranks (a CPU each, and a GPU each with CUDA), c10d
    rendezvous set up by the training operator (it hands torchrun its settings as PET_* variables)."""
    limits: dict[str, Any] = {"cpu": str(job.nproc)}
    if job.gpus:
        limits["nvidia.com/gpu"] = job.gpus
    name, value = FRESH_STORE[1].split("=")
    container = {
        "name": "pytorch",
        "image": IMAGE,
        "workingDir": job.workdir,
        "command": ["python", "-m", "torch.distributed.run", *job.rank_args],
        "env": [{"name": name, "value": value}],
        "resources": {"requests": limits, "limits": limits},
    }
    spec = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "forklift-train"},
        "spec": {
            "nprocPerNode": str(job.nproc),
            "elasticPolicy": {
                "rdzvBackend": "c10d",
                "minReplicas": job.nodes,
                "maxReplicas": job.nodes,
                "maxRestarts": job.max_restarts,
            },
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": job.nodes,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [container]}},
                }
            },
        },
    }
    note = "# forklift run --emit k8s: the same job as a Kubeflow PyTorchJob (kubectl apply -f THIS_FILE)\n"
    return note + yaml.safe_dump(spec, sort_keys=False)
