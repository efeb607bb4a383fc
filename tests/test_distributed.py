"""Data-parallel training on one host (`forklift train --nproc`): N ranks train exactly like one process with N
times the batch, resume exactly, and refuse what cannot work in one line."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from helpers import CFGS, SHARED, forklift, sandbox

from forklift.data.synth import synth_shapes
from forklift.errors import ForkliftError
from forklift.launcher.commands import needed_paths, worker_args
from forklift.launcher.hosts import HostSpec, parse_host_list, read_hostfile
from forklift.launcher.layout import HostFacts, lay_out, rankfile, ranks_per_host
from forklift.system.topology import format_cpu_list
from forklift.train.loader import global_batches, steps_per_epoch
from forklift.train.lr_scaling import lr_factor

CLASSIFIER = CFGS / "shapes-classifier.cfg"
PLAIN = ("--optimizer", "momentum", "--lr", "0.01", "--aug-scale", "0", "--aug-shift", "0", "--aug-hsv", "0")


def test_ranks_share_each_global_batch_without_overlap() -> None:
    order = [7, 3, 9, 1, 4, 0, 8, 2, 6, 5]  # 10 images, batch 3 per rank, 2 ranks: global batches of 6
    zero = global_batches(order, 3, rank=0, world=2)
    one = global_batches(order, 3, rank=1, world=2)
    assert zero == [[7, 3, 9], [8, 2]] and one == [[1, 4, 0], [6, 5]]
    assert global_batches(order, 6, rank=0, world=1) == [order[:6], order[6:]]  # one process, twice the batch
    odd = order[:9]  # padded with the first image, so both ranks take as many steps
    assert [len(b) for b in global_batches(odd, 3, rank=0, world=2)] == [3, 2]
    assert [len(b) for b in global_batches(odd, 3, rank=1, world=2)] == [3, 2]
    for images, batch, world in ((10, 3, 2), (9, 3, 2), (64, 8, 3), (5, 16, 4)):
        assert steps_per_epoch(images, batch, world) == len(global_batches(list(range(images)), batch, rank=0,
                                                                           world=world))  # fmt: skip


def test_learning_rate_rules() -> None:
    assert lr_factor("auto", "momentum", 4) == ("linear", 4.0)
    assert lr_factor("auto", "adamw", 4) == ("sqrt", 2.0)
    assert lr_factor("none", "sgd", 8)[1] == 1.0
    assert lr_factor("linear", "adam", 1)[1] == 1.0


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ddp") / "data"
    synth_shapes(root, 64, 64, seed=0, task="classify")
    return root


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / "checkpoints" / "last.pt", weights_only=False)["model"]


def _largest_difference(a: Path, b: Path) -> float:
    one, two = _weights(a), _weights(b)
    assert one.keys() == two.keys()
    return max(float((one[k].double() - two[k].double()).abs().max()) for k in one)


@pytest.mark.slow
def test_two_ranks_train_like_one_process_with_twice_the_batch(data: Path, tmp_path: Path) -> None:
    common = ("--data", data, "--cfg", CLASSIFIER, "--epochs", "2", *PLAIN)
    forklift("train", *common, "--batch", "16", tmp_path / "one")
    run = forklift("train", "--nproc", "2", *common, "--batch", "8", "--sync-bn", "--lr-scaling", "none",
                   tmp_path / "two")  # fmt: skip
    assert "2 ranks; rank 0 on CPUs" in run.stdout
    assert "learning rate: --lr 0.01 x 1 (none rule for a global batch of 16 = 2 ranks x 8) = 0.01" in run.stdout
    assert run.stdout.count("epoch 2/2:") == 1  # rank 0 alone reports (and validates)
    assert _largest_difference(tmp_path / "one", tmp_path / "two") < 1e-4
    with (tmp_path / "two" / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["epoch"] for row in rows] == ["1", "2"] and all(row["top1"] for row in rows)
    assert (tmp_path / "two" / "shapes-classifier.onnx").is_file() and (tmp_path / "two" / "eval").is_dir()
    # without --sync-bn each rank normalises by its own half of the batch: the weights drift apart
    forklift("train", "--nproc", "2", *common, "--batch", "8", "--lr-scaling", "none", tmp_path / "local-bn")
    assert _largest_difference(tmp_path / "one", tmp_path / "local-bn") > 1e-3


@pytest.mark.slow
def test_a_data_parallel_run_resumes_exactly(data: Path, tmp_path: Path) -> None:
    common = ("--nproc", "2", "--data", data, "--cfg", CLASSIFIER, "--epochs", "3", "--batch", "8", "--sync-bn")
    forklift("train", *common, tmp_path / "whole")
    stopped = forklift("train", *common, "--minutes", "0.0001", tmp_path / "parts")  # stops after epoch 1
    assert "stopping before epoch 2/3" in stopped.stdout
    resumed = forklift("train", "--nproc", "2", "--resume", tmp_path / "parts")
    assert "epoch 3/3:" in resumed.stdout
    assert _largest_difference(tmp_path / "whole", tmp_path / "parts") == 0.0
    refused = forklift("train", "--resume", tmp_path / "parts", check=False)
    assert refused.returncode == 2
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .endswith("resume with the same number (--nproc 2, or the same hosts and --nproc-per-node of forklift run)")
    )


@pytest.mark.slow  # a process of its own, seconds
def test_nproc_checks_what_it_can_before_starting_ranks(data: Path, tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    refused = forklift("train", "--nproc", "2", "--data", data, "--cfg", CLASSIFIER, tmp_path / "full", check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "already exists" in refused.stderr
    failed = forklift("train", "--nproc", "2", "--data", data, "--cfg", CFGS / "missing.cfg", tmp_path / "o",
                      check=False)  # fmt: skip
    assert failed.returncode == 2
    assert "missing.cfg: no such cfg file" in failed.stderr
    assert failed.stderr.strip().splitlines()[-1].startswith("forklift: error: --nproc 2: rank ")


@pytest.fixture(scope="module")
def every_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from forklift.train.perceptual import random_vgg16_weights

    root = tmp_path_factory.mktemp("ddp-tasks")
    synth_shapes(root / "detect", 32, 96, seed=0)
    synth_shapes(root / "segment", 24, 64, seed=0, task="segment")
    synth_shapes(root / "two-stage", 16, 128, seed=0, objects=(1, 2), object_size=(32, 56))
    random_vgg16_weights(root / "vgg16.pth")
    return root


TASKS = {
    "detect": ("--data", "detect", "--cfg", str(CFGS / "tiny-detector.cfg"), "--batch", "4", "--sync-bn"),
    "segment": ("--data", "segment", "--arch", "lraspp_mobilenet_v3_large", "--img", "64", "--batch", "4", "--sync-bn"),
    "two-stage": ("--data", "two-stage", "--arch", "fasterrcnn_mobilenet_v3_large_320_fpn", "--img", "128", "--batch",
                  "2", "--roi-samples", "64"),
    "style": ("--task", "style", "--data", str(SHARED / "images"), "--style-image", str(SHARED / "images" / "dog.jpg"),
              "--loss-net-weights", "vgg16.pth", "--img", "64", "--batch", "2"),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS)
def test_every_task_trains_data_parallel(every_task: Path, task: str) -> None:
    out = every_task / f"out-{task}"
    args = [every_task / arg if (every_task / arg).exists() else arg for arg in TASKS[task]]
    run = forklift("train", "--nproc", "2", "--epochs", "1", *args, out)
    assert "2 ranks; rank 0 on CPUs" in run.stdout and run.stdout.count("epoch 1/1:") == 1
    with (out / "metrics.csv").open(newline="") as handle:
        assert [row["epoch"] for row in csv.DictReader(handle)] == ["1"]
    assert list(out.glob("*.onnx")), sorted(path.name for path in out.iterdir())


def test_hosts_from_a_list_and_a_hostfile(tmp_path: Path) -> None:
    assert parse_host_list("node1:4, node2") == [HostSpec("node1", 4), HostSpec("node2")]
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the cluster\nnode1 slots=2\nnode2:1  # a comment\n\nroot@198.18.0.9\n")
    assert read_hostfile(hostfile) == [HostSpec("node1", 2), HostSpec("node2", 1), HostSpec("root@198.18.0.9")]
    for bad, said in (("node1,node1", "node1 is named twice"), ("node1:0", "slots must be at least 1"),
                      ("node1:x", "is not HOST, HOST:SLOTS")):  # fmt: skip
        with pytest.raises(ForkliftError, match=said):
            parse_host_list(bad)


def test_what_a_command_runs_and_needs() -> None:
    train = ("forklift", "train", "--data", "data/shapes", "--cfg=tiny.cfg", "--batch", "8", "out")
    assert worker_args(train) == ["-m", "forklift.cli", *train[1:]]
    assert needed_paths(train) == ["data/shapes", "tiny.cfg"]
    assert needed_paths(("forklift", "train", "--resume", "out/run")) == []  # rank 0's host alone reads OUT
    assert worker_args(("python", "train.py", "--lr", "1")) == ["train.py", "--lr", "1"]
    assert needed_paths(("train.py",)) == ["train.py"]
    assert worker_args(("python3", "-m", "pkg.train")) == ["-m", "pkg.train"]
    with pytest.raises(ForkliftError, match="give `forklift VERB"):
        worker_args(("bash", "-c", "true"))


def test_layout_follows_placement_and_the_rendezvous_numbering() -> None:
    power10 = sandbox(8)  # the reference Power10 LPAR: its NUMA nodes and SMT-8 cores
    nodes = len(power10.nodes)
    far = HostFacts("b-host", "10.0.0.2", power10)
    near = HostFacts("a-host", "10.0.0.10", power10)  # as text, "10.0.0.10" < "10.0.0.2": the rendezvous's order
    slots = lay_out([(far, ranks_per_host(far, None, None)), (near, 2)], gpus=False)
    assert [(s.rank, s.host, s.local_rank) for s in slots][:3] == [(0, "a-host", 0), (1, "a-host", 1), (2, "b-host", 0)]
    assert len(slots) == 2 + nodes  # auto: one rank per NUMA node on a host without GPUs
    for slot in slots:
        assert set(slot.cpus) <= set(power10.nodes[slot.node])  # NUMA-local
    a_host = [s for s in slots if s.host == "a-host"]
    assert not set(a_host[0].cpus) & set(a_host[1].cpus)  # no CPU shared between ranks
    with_gpus = HostFacts("g", "10.0.0.3", power10, gpu_nodes=(0, 0, 1, 1) if nodes > 1 else (0, 0))
    gpu_slots = lay_out([(with_gpus, len(with_gpus.gpu_nodes))], gpus=True)
    assert sorted(s.gpu for s in gpu_slots) == list(range(len(with_gpus.gpu_nodes)))
    assert all(with_gpus.gpu_nodes[s.gpu] == s.node for s in gpu_slots if s.gpu is not None)
    assert rankfile(slots[:1]).splitlines()[1] == f"rank 0=a-host slot={format_cpu_list(slots[0].cpus)}"
