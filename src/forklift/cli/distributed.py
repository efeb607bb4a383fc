"""`forklift run`: one training job across hosts over ssh, checked, laid out and started with torchrun."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from forklift.cli.common import port, positive, verb_parser
from forklift.deployment.kubernetes import RENDEZVOUS_PORT
from forklift.deployment.scheduler import WRITERS
from forklift.errors import ForkliftError
from forklift.extras import Extra


def register(verbs: Any) -> None:
    run = verb_parser(
        verbs,
        "run",
        "Run a training job across hosts (ddlrun's way, on torchrun): over ssh, read the first host's topology "
        "and check that every host matches it, has the same Python, forklift and torch, has the command's paths "
        "and reaches the rendezvous port (one line per failed check); lay out the ranks (host, CPUs, memory node, "
        "GPU) and print the table; print and run each host's torchrun line (c10d rendezvous on the first host), "
        "streaming every rank's output with its host and rank. A failed rank, Ctrl-C or SIGTERM stops every rank "
        "on every host. The command runs in the current directory's path on every host, with this Python's path.",
        "forklift run -H node1,node2 --nproc-per-node 2 -- forklift train --data data/shapes "
        "--cfg ../shared/data/darknet/yolov3-tiny.cfg "
        "--batch 8 --sync-bn out/ddp\n"
        "  forklift run --emit slurm --nodes 2 --nproc-per-node 2 -- forklift train ... > job.sbatch",
        extra=Extra.TRAIN,
    )
    hosts = run.add_mutually_exclusive_group()
    hosts.add_argument(
        "-H", "--hosts", metavar="HOST[:SLOTS],...", help="ssh destinations; the first hosts the rendezvous"
    )
    hosts.add_argument(
        "--hostfile", type=Path, metavar="FILE", help="one host per line: HOST, HOST:SLOTS or HOST slots=N"
    )
    run.add_argument(
        "--nproc-per-node",
        default="auto",
        metavar="N|auto",
        help="ranks per host (default auto: one per GPU, or one per NUMA node on hosts without GPUs)",
    )
    run.add_argument("--dry-run", action="store_true", help="check, print the layout and commands, run nothing")
    run.add_argument("--skip-checks", action="store_true", help="start without comparing the hosts")
    run.add_argument("--ssh-port", type=positive, metavar="P", help="ssh port of every host")
    run.add_argument("--ssh-config", type=Path, metavar="FILE", help="ssh client config file (ssh -F)")
    run.add_argument("--port", type=port, default=RENDEZVOUS_PORT,
                     help=f"rendezvous port on the first host (default {RENDEZVOUS_PORT})")  # fmt: skip
    run.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        metavar="R",
        help="restart every rank up to R times after a failure; forklift train resumes from its last checkpoint",
    )
    run.add_argument("--python", metavar="PATH", help=f"Python on every host (default: this one, {sys.executable})")
    run.add_argument("--emit", choices=("rankfile", *WRITERS), help="print the job instead of "
                     "running it: an MPI rankfile, an sbatch script, a Kubernetes Indexed Job with its headless "
                     "Service (as the Helm chart renders it), or a Kubeflow PyTorchJob (all but rankfile ask no host: "
                     "the scheduler places the ranks)")  # fmt: skip
    run.add_argument("--nodes", type=positive, metavar="N",
                     help="with a scheduler's --emit: nodes to ask for (default: the hosts given, else 1)")  # fmt: skip
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="forklift train ... or a script")
    run.set_defaults(handler=run_run)


def run_run(args: argparse.Namespace) -> int:
    from forklift.launcher.hosts import parse_host_list, read_hostfile
    from forklift.launcher.job import LaunchOptions, run_job
    from forklift.launcher.remote import Ssh

    command = tuple(args.command[1:] if args.command[:1] == ["--"] else args.command)
    if args.nproc_per_node == "auto":
        nproc = None
    elif args.nproc_per_node.isdigit() and int(args.nproc_per_node) > 0:
        nproc = int(args.nproc_per_node)
    else:
        raise ForkliftError(f"--nproc-per-node {args.nproc_per_node}: a whole number of at least 1, or auto")
    if args.max_restarts < 0:
        raise ForkliftError(f"--max-restarts {args.max_restarts}: must be 0 or more")
    if args.nodes is not None and args.emit not in WRITERS:
        raise ForkliftError(f"--nodes {args.nodes}: only for --emit {'|'.join(WRITERS)} (else the hosts say how many)")
    if args.hosts is not None:
        hosts = parse_host_list(args.hosts)
    elif args.hostfile is not None:
        hosts = read_hostfile(args.hostfile)
    else:
        hosts = []
    options = LaunchOptions(
        hosts=hosts,
        nproc_per_node=nproc,
        ssh=Ssh(args.ssh_config, args.ssh_port),
        port=args.port,
        max_restarts=args.max_restarts,
        python=args.python or sys.executable,
        workdir=os.getcwd(),
        dry_run=args.dry_run,
        skip_checks=args.skip_checks,
        emit=args.emit,
        nodes=args.nodes,
        train_out=train_out,
    )
    return run_job(command, options)


def train_out(args: list[str]) -> str | None:
    """OUT of `forklift train ARGS`, read by the train verb's own parser wherever it stands among the options;
    None when the command is wrong (argparse has said why, as its ranks would)."""
    from forklift.cli import build_parser

    try:
        parsed, _ = build_parser().parse_known_args(["train", *args])
    except SystemExit:
        return None
    return str(parsed.out)
