"""A `forklift run` job as a cluster's scheduler takes it (`forklift run --emit slurm|k8s`): the scheduler places
the ranks, so nothing here asks a host; torchrun starts each node's ranks with c10d rendezvous on the first."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from forklift.deployment.kubernetes import (
    FRESH_STORE_ENV,
    TRAIN_IMAGE,
    TrainingSpec,
    objects_yaml,
    pytorch_job,
    training_objects,
)

FRESH_STORE = ("env", "=".join(FRESH_STORE_ENV))


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


def training_spec(job: SchedulerJob) -> TrainingSpec:
    """The job as the Kubernetes builders take it: its working directory on the claim `forklift-work` (the data set
    and the output; create it, or edit the volume)."""
    return TrainingSpec(
        name="forklift-train",
        image=TRAIN_IMAGE,
        nodes=job.nodes,
        nproc=job.nproc,
        gpus=job.gpus,
        port=job.port,
        max_restarts=job.max_restarts,
        rank_args=list(job.rank_args),
        workdir=job.workdir,
        work_volume={"persistentVolumeClaim": {"claimName": "forklift-work"}},
    )


def k8s_job(job: SchedulerJob) -> str:
    """An Indexed Job of `nodes` pods and the headless Service its ranks rendezvous through (kubectl apply)."""
    note = (
        "# forklift run --emit k8s: the same job for Kubernetes (kubectl apply -f THIS_FILE): an Indexed Job of one\n"
        "# pod per node, torchrun's c10d rendezvous on pod 0 through the headless Service\n"
    )
    return note + objects_yaml(training_objects(training_spec(job)))


def pytorch_job_yaml(job: SchedulerJob) -> str:
    """The job as a Kubeflow PyTorchJob (for clusters with the training operator)."""
    note = "# forklift run --emit pytorchjob: the same job as a Kubeflow PyTorchJob (kubectl apply -f THIS_FILE)\n"
    return note + objects_yaml([pytorch_job(training_spec(job))])


# What `forklift run --emit NAME` writes for each scheduler; none of them asks a host.
WRITERS = {"slurm": slurm_script, "k8s": k8s_job, "pytorchjob": pytorch_job_yaml}
