"""Large model support (forklift.lms): the disk tier, the shared pack/unpack hooks and their limits, and (marked
`gpu`, run with `make test-gpu` on a machine with a CUDA GPU) the CUDA tier.

Training with swapping must give bitwise the same gradients and parameters as without it, since unpack returns
exactly the bytes and strides that were saved. Without a GPU, the CUDA tier's pinned pool's bookkeeping is tested.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import forklift.lms
from forklift.errors import ForkliftError
from forklift.lms.disk import DiskTier, remove_stale_dirs
from forklift.lms.pinned_pool import PinnedPool, size_class
from forklift.lms.stats import Stats
from forklift.lms.tensor_bytes import flat_bytes, restore, swappable

SMALL = 4096  # min_bytes for the tests: the nets below are small, so this makes most activations swap


def conv_bn_net() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, stride=2),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )


class Residual(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.body(x))


def residual_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), Residual(8), Residual(8), nn.Flatten(), nn.LazyLinear(4))


class TinySegmenter(nn.Module):
    """An encoder/decoder with a skip connection: what a segmentation net saves, at a size that runs in ms."""

    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.down = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.head = nn.Conv2d(16, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = self.stem(x)
        up = nn.functional.interpolate(self.up(self.down(skip)), size=x.shape[-2:], mode="bilinear")
        return self.head(torch.cat([skip, up], dim=1))


def segmentation_loss(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    target = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    return nn.functional.cross_entropy(net(x), target)


def classification_loss(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(net(x), torch.arange(x.shape[0], device=x.device) % 4)


Run = tuple[list[torch.Tensor], list[torch.Tensor]]  # final gradients, final state_dict tensors


def train(
    make: Callable[[], nn.Module],
    loss_of: Callable[[nn.Module, torch.Tensor], torch.Tensor],
    context: Callable[[], contextlib.AbstractContextManager],
    steps: int = 3,
    *,
    device: str = "cpu",
    shape: tuple[int, ...] = (4, 3, 32, 32),
) -> Run:
    """Seeded steps of SGD with momentum, each inside `context()`: the final gradients and state (incl. BN stats)."""
    torch.manual_seed(0)
    net = make().to(device)
    x = torch.randn(shape).to(device)
    net(x)  # materialises lazy modules before the optimizer sees the parameters
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        optimizer.zero_grad()
        with context():
            loss_of(net, x).backward()
        optimizer.step()
    return [p.grad.clone() for p in net.parameters()], [t.clone() for t in net.state_dict().values()]


def assert_identical(a: Run, b: Run) -> None:
    """Bitwise the same gradients and the same state (parameters and buffers)."""
    for what, x_list, y_list in (("gradient", a[0], b[0]), ("state", a[1], b[1])):
        assert len(x_list) == len(y_list)
        for i, (x, y) in enumerate(zip(x_list, y_list, strict=True)):
            assert torch.equal(x, y), f"{what} {i} differs"


@pytest.fixture
def spill(tmp_path: Path) -> Iterator[Path]:
    """A spill directory that must be empty again when the test ends."""
    yield tmp_path
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("make", "loss_of"),
    [(conv_bn_net, classification_loss), (residual_net, classification_loss), (TinySegmenter, segmentation_loss)],
    ids=["conv-bn", "residual", "segmentation"],
)
@pytest.mark.parametrize("keep_last", [0, 2])
def test_training_is_bitwise_identical(make, loss_of, keep_last: int, spill: Path) -> None:
    swapped: list[Stats] = []

    @contextlib.contextmanager
    def lms() -> Iterator[None]:
        with forklift.lms.swapping(tier="disk", min_bytes=SMALL, keep_last=keep_last, spill_dir=spill) as stats:
            yield
        swapped.append(stats)

    assert_identical(train(make, loss_of, contextlib.nullcontext), train(make, loss_of, lms))
    assert all(s.swapped_out_count > 0 and s.swapped_in_count >= s.swapped_out_count for s in swapped)


def wide_net() -> nn.Module:
    """Activations of 64 MiB each at batch 8, 256x256: copies that take long enough for a missed stream wait to show."""
    layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU()]
    for _ in range(5):
        layers += [nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 4))


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("make", "loss_of", "shape"),
    [
        (conv_bn_net, classification_loss, (4, 3, 32, 32)),
        (residual_net, classification_loss, (4, 3, 32, 32)),
        (TinySegmenter, segmentation_loss, (4, 3, 32, 32)),
        (wide_net, classification_loss, (8, 3, 256, 256)),
    ],
    ids=["conv-bn", "residual", "segmentation", "wide"],
)
@pytest.mark.parametrize("keep_last", [0, 2])
def test_cuda_tier_training_is_bitwise_identical(make, loss_of, shape, keep_last: int) -> None:
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False  # the same kernels each run
    swapped: list[Stats] = []

    @contextlib.contextmanager
    def lms() -> Iterator[None]:
        with forklift.lms.swapping(tier="cuda", min_bytes=SMALL, keep_last=keep_last) as stats:
            yield
        swapped.append(stats)

    plain = train(make, loss_of, contextlib.nullcontext, device="cuda", shape=shape)
    assert_identical(plain, train(make, loss_of, lms, device="cuda", shape=shape))
    assert all(s.swapped_out_count > 0 and s.swapped_in_count >= s.swapped_out_count for s in swapped)


@pytest.mark.gpu
def test_cuda_tier_lowers_the_peak_device_memory_of_a_step() -> None:
    net = wide_net().cuda()
    x = torch.randn(8, 3, 256, 256, device="cuda")

    def peak(context: contextlib.AbstractContextManager) -> int:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with context:
            classification_loss(net, x).backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    peak(contextlib.nullcontext())  # warm-up: cuDNN workspaces and gradients exist from here on
    plain = peak(contextlib.nullcontext())
    swapped = peak(forklift.lms.swapping(tier="cuda", min_bytes=1 << 20, keep_last=1))
    # an H100 measured 898 MiB without and 450 with: the last layer's activations and the copies in flight stay
    assert swapped < 0.6 * plain, f"peak MiB without lms {plain >> 20}, with lms {swapped >> 20}"


def big_and_small_step(**settings) -> Stats:
    """Saves exactly two big tensors (exp's results) and one small one, then runs backward."""
    big = torch.randn(64, 64, requires_grad=True)  # 16 KiB
    small = torch.randn(8, requires_grad=True)
    with forklift.lms.swapping(**{"tier": "disk", "min_bytes": SMALL, "keep_last": 0, **settings}) as stats:
        (big.exp().exp().sum() + small.exp().sum()).backward()
    return stats


def test_small_tensors_stay_in_place(spill: Path) -> None:
    stats = big_and_small_step(spill_dir=spill)
    assert (stats.swapped_out_count, stats.swapped_out_bytes) == (2, 2 * 64 * 64 * 4)
    assert stats.swapped_in_count == 2
    assert stats.kept["small"] == 1
    stats = big_and_small_step(min_bytes=64 * 64 * 4 + 1, spill_dir=spill)
    assert stats.swapped_out_count == 0
    assert stats.kept["small"] == 3


def test_parameters_and_their_views_stay_in_place(spill: Path) -> None:
    linear = nn.Linear(256, 256)  # F.linear saves the weight; matmul on weight.t() saves a view of a parameter
    x = torch.randn(16, 256, requires_grad=True)
    with forklift.lms.swapping(tier="disk", min_bytes=1, keep_last=0, spill_dir=spill) as stats:
        (linear(x) @ linear.weight.t()).sum().backward()
    assert stats.kept["parameter"] >= 2
    assert stats.swapped_out_count >= 1  # the activation


def test_keep_last_limit_and_spill_limit(spill: Path) -> None:
    tensor_bytes = 64 * 64 * 4
    assert big_and_small_step(keep_last=1, spill_dir=spill).kept["last"] == 1
    stats = big_and_small_step(limit=tensor_bytes, spill_dir=spill)
    assert (stats.kept["limit"], stats.swapped_out_count) == (1, 1)
    stats = big_and_small_step(spill_limit=tensor_bytes, spill_dir=spill)
    assert (stats.kept["full"], stats.swapped_out_count) == (1, 1)


def test_a_tensor_saved_twice_is_swapped_once(spill: Path) -> None:
    x = torch.randn(64, 64, requires_grad=True)
    with forklift.lms.swapping(tier="disk", min_bytes=SMALL, keep_last=0, spill_dir=spill) as stats:
        y = x.exp()  # exp saves its result, mul saves both its inputs: the same tensor, three times
        (y * y).sum().backward()
    assert stats.swapped_out_count == 1
    assert torch.equal(x.grad, 2 * x.detach().exp() ** 2)


def test_in_place_change_after_saving_still_raises(spill: Path) -> None:
    x = torch.randn(64, 64, requires_grad=True)
    with forklift.lms.swapping(tier="disk", min_bytes=SMALL, spill_dir=spill):
        y = x.exp()
        y.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_no_grad_swaps_nothing(spill: Path) -> None:
    net = conv_bn_net()
    with forklift.lms.swapping(tier="disk", min_bytes=SMALL, spill_dir=spill) as stats, torch.no_grad():
        net(torch.randn(4, 3, 32, 32))
    assert stats.swapped_out_count == 0 and not stats.kept


def test_autocast_bfloat16(spill: Path) -> None:
    def amp() -> contextlib.AbstractContextManager:
        return torch.autocast("cpu", dtype=torch.bfloat16)

    @contextlib.contextmanager
    def amp_lms() -> Iterator[None]:
        with forklift.lms.swapping(tier="disk", min_bytes=SMALL, keep_last=0, spill_dir=spill) as stats, amp():
            yield
        assert stats.swapped_out_count > 0

    assert_identical(train(TinySegmenter, segmentation_loss, amp), train(TinySegmenter, segmentation_loss, amp_lms))


class Checkpointed(TinySegmenter):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = checkpoint(self.stem, x, use_reentrant=False)
        up = nn.functional.interpolate(self.up(self.down(skip)), size=x.shape[-2:], mode="bilinear")
        return self.head(torch.cat([skip, up], dim=1))


def test_activation_checkpointing_inside(spill: Path) -> None:
    """Checkpointing recomputes the stem in backward (updating its BN statistics twice), so compare with itself."""

    def lms() -> contextlib.AbstractContextManager:
        return forklift.lms.swapping(tier="disk", min_bytes=SMALL, keep_last=0, spill_dir=spill)

    checkpointed = train(Checkpointed, segmentation_loss, contextlib.nullcontext)
    assert_identical(checkpointed, train(Checkpointed, segmentation_loss, lms))
    plain = train(TinySegmenter, segmentation_loss, contextlib.nullcontext)
    assert_identical((plain[0], []), (checkpointed[0], []))


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_torch_compile_runs_with_swapping(spill: Path) -> None:
    def compiled() -> nn.Module:
        return torch.compile(conv_bn_net(), backend="aot_eager")

    def lms() -> contextlib.AbstractContextManager:
        return forklift.lms.swapping(tier="disk", min_bytes=SMALL, keep_last=0, spill_dir=spill)

    assert_identical(
        train(compiled, classification_loss, contextlib.nullcontext), train(compiled, classification_loss, lms)
    )


def test_refuses_to_run_inside_a_compiled_trace(spill: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(64, 64, requires_grad=True)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    with (
        pytest.raises(ForkliftError, match=r"torch\.compile"),
        forklift.lms.swapping(tier="disk", min_bytes=SMALL, spill_dir=spill),
    ):
        x.exp()


def test_spill_files_exist_during_the_step_and_go_after_it(spill: Path) -> None:
    x = torch.randn(64, 64, requires_grad=True)
    with forklift.lms.swapping(tier="disk", min_bytes=SMALL, keep_last=0, spill_dir=spill):
        loss = x.exp().exp().sum()
        (own,) = spill.iterdir()
        assert len(list(own.iterdir())) == 2
        loss.backward()
        assert list(own.iterdir()) == []
    assert not own.exists()


def test_spill_files_go_when_the_block_raises(spill: Path) -> None:
    x = torch.randn(64, 64, requires_grad=True)
    with pytest.raises(ValueError, match="boom"), forklift.lms.swapping(tier="disk", min_bytes=SMALL, spill_dir=spill):
        loss = x.exp().exp().exp().exp().sum()
        assert list(spill.iterdir())
        raise ValueError("boom")
    with pytest.raises(ForkliftError, match="spill file"):
        loss.backward()  # the graph outlived its block


@pytest.mark.slow  # a process of its own, seconds
def test_spill_files_go_when_the_process_dies_of_an_exception(spill: Path) -> None:
    script = f"""
        import os, torch, forklift.lms
        x = torch.randn(64, 64, requires_grad=True)
        forklift.lms.enable(tier="disk", min_bytes=4096, keep_last=0, spill_dir={str(spill)!r})
        y = x.exp().exp().sum()
        (own,) = os.listdir({str(spill)!r})
        if len(os.listdir(os.path.join({str(spill)!r}, own))) == 2:
            raise RuntimeError("died after spilling")
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "RuntimeError: died after spilling" in done.stderr


def test_stale_directories_of_dead_processes_are_removed(spill: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = spill / f"forklift-lms-{dead.stdout.strip()}@{os.uname().nodename}@abc123"
    stale.mkdir()
    (stale / "0.bin").write_bytes(b"x")
    remove_stale_dirs(spill)
    assert not stale.exists()


def test_enable_and_disable_for_a_whole_script(spill: Path) -> None:
    x = torch.randn(64, 64, requires_grad=True)
    live = forklift.lms.enable(tier="disk", min_bytes=SMALL, keep_last=0, spill_dir=spill)
    try:
        x.exp().exp().sum().backward()
        assert forklift.lms.stats() is live and live.swapped_out_count == 2
    finally:
        final = forklift.lms.disable()
    assert final is live and forklift.lms.stats() is None and forklift.lms.disable() is None
    x.exp().exp().sum().backward()  # hooks are gone
    assert final.swapped_out_count == 2
    assert json.loads(json.dumps(final.to_json()))["swapped_out_count"] == 2
    assert final.summary().startswith("lms[disk]: out 2 (0.0 MiB), in 2")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"limit": -1}, "limit=-1 must be a whole number >= 0"),
        ({"min_bytes": 1.5}, "min_bytes=1.5"),
        ({"spill_limit": -5}, "spill_limit=-5"),
        ({"tier": "tape"}, "tier='tape' is not one of"),
        ({"tier": "disk", "spill_dir": "/nonexistent/lms"}, "spill_dir /nonexistent/lms does not exist"),
        ({"tier": "disk", "spill_dir": "/proc"}, "/proc"),  # unwritable even for root
    ],
)
def test_bad_settings_are_refused(settings: dict, message: str) -> None:
    with pytest.raises(ForkliftError, match=message), forklift.lms.swapping(**settings):
        pass


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_cuda_tier_without_a_gpu_is_refused() -> None:
    with pytest.raises(ForkliftError, match="tier='cuda' needs a CUDA device"):
        forklift.lms.enable(tier="cuda")


def test_layout_keeps_strides_of_dense_and_gapped_tensors() -> None:
    channels_last = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    gapped = torch.randn(6, 8)[:, ::2]
    for tensor in (channels_last, gapped, torch.randn(3, 4).t(), torch.tensor([True, False])):
        data, layout = flat_bytes(tensor)
        back = restore(data.clone(), layout)
        assert torch.equal(back, tensor) and back.dtype == tensor.dtype
    assert restore(*flat_bytes(channels_last)).stride() == channels_last.stride()
    assert not swappable(torch.randn(4, dtype=torch.cfloat).conj())  # its bytes are not its values


def test_disk_tier_round_trip_and_limit(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path, spill_limit=64 * 4, min_bytes=1 << 20, stats=Stats())
    tensor = torch.arange(64, dtype=torch.float32).reshape(8, 8).t()
    slot = tier.put(tensor)
    assert tier.put(tensor) is None  # over the spill limit
    tier.prefetch(slot)
    assert torch.equal(tier.get(slot), tensor)
    tier.free(slot)
    tier.close(error=False)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_keeps_the_tensor_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    tier = DiskTier(tmp_path, spill_limit=None, min_bytes=1 << 20, stats=Stats())
    monkeypatch.setattr("forklift.lms.disk.open", no_space, raising=False)
    assert tier.put(torch.randn(8, 8)) is None
    tier.close(error=False)
    assert list(tmp_path.iterdir()) == []


def test_backward_twice_with_retain_graph(spill: Path) -> None:
    x = torch.randn(64, 64, requires_grad=True)
    with forklift.lms.swapping(tier="disk", min_bytes=SMALL, keep_last=0, spill_dir=spill) as stats:
        loss = x.exp().exp().sum()
        loss.backward(retain_graph=True)
        loss.backward()
    assert stats.swapped_in_count == 2 * stats.swapped_out_count == 4
    expected = x.detach().exp() * x.detach().exp().exp()
    assert torch.equal(x.grad, expected + expected)


def test_pinned_pool_reuses_buffers_by_size_class() -> None:
    assert [size_class(n) for n in (1, 4096, 4097, 1 << 20, (1 << 20) + 1)] == [4096, 4096, 8192, 1 << 20, 1310720]
    pool = PinnedPool(pin=False)
    first, event = pool.acquire(5000, limit=None)
    assert event is None and first.numel() == size_class(5000)
    pool.release(first, "done")
    again, event = pool.acquire(5100, limit=None)
    assert again is first and event == "done"
    assert pool.acquire(1 << 20, limit=pool.allocated) is None
    pool.release(again, None)
    assert pool.acquire(8192, limit=8192) is not None  # the free 5 KiB-class buffer is given back to make room


PEAK_SCRIPT = """
import json, sys, torch, forklift.lms

def vm(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024

class Deep(torch.nn.Module):  # activations dominate: 32 saved 4 MiB tensors, 4 KiB of parameters
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(32, 16, 1, 1))
        self.shift = torch.nn.Parameter(torch.zeros(32, 16, 1, 1))
    def forward(self, x):
        for scale, shift in zip(self.scale, self.shift):
            x = torch.tanh(x * scale + shift)
        return x

torch.manual_seed(0)
net, x = Deep(), torch.randn(1, 16, 256, 256)
def step():
    net.zero_grad()
    net(x).mean().backward()
if sys.argv[1] == "lms":
    forklift.lms.enable(tier="disk", spill_dir=sys.argv[2], keep_last=0)
step()  # warm-up: code paged in, lazy allocations made
before = vm("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets VmHWM to the current resident size
step()
print(json.dumps({"peak": vm("VmHWM") - before}))
"""


def step_peak(mode: str, spill: Path) -> int:
    """Peak resident growth of one step in a fresh process; malloc returns large frees to the system in both
    modes (the disk tier sets that itself, see forklift.lms.disk), so the difference is what swapping saves."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
    done = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, mode, str(spill)], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["peak"]


@pytest.mark.slow  # a process of its own, seconds
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc to reset VmHWM")
def test_disk_tier_halves_the_peak_resident_memory_of_a_step(spill: Path) -> None:
    plain, swapped = step_peak("plain", spill), step_peak("lms", spill)
    assert plain > 96 << 20, "the plain step should hold its 128 MiB of saved activations"
    assert swapped < plain / 2, f"peak with lms {swapped >> 20} MiB, without {plain >> 20} MiB"
