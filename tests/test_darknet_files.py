"""Darknet cfg parsing and .weights reading/writing: byte-exact round trips and one-line errors."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CFGS, shared

from forklift.errors import ForkliftError
from forklift.model_files.darknet_cfg import parse_cfg, read_cfg
from forklift.model_files.darknet_weights import DarknetWeights, WeightsHeader, read_weights, write_weights
from forklift.nets.darknet import DarknetNet, build_darknet, load_weights, save_weights
from forklift.nets.fresh_weights import initialise

TINY_CFG = CFGS / "v3-spp-groups.cfg"


@pytest.mark.parametrize(
    ("header", "header_bytes"),
    [
        (WeightsHeader(0, 2, 0, 32_013_312), 20),  # current Darknet: seen as int64
        (WeightsHeader(0, 1, 0, 128), 16),  # old Darknet (YOLOv2 era): seen as int32
        (WeightsHeader(1, 0, 0, 7), 20),
        (WeightsHeader(1000, 0, 0, 9), 16),  # major >= 1000: int32 again, as Darknet reads it
    ],
)
def test_weights_round_trip_is_byte_exact(tmp_path: Path, header: WeightsHeader, header_bytes: int) -> None:
    net = initialise(DarknetNet(read_cfg(TINY_CFG)), seed=3)
    first = tmp_path / "first.weights"
    save_weights(net, first, header)
    assert first.stat().st_size == header_bytes + 4 * net.weights_count()
    again = DarknetNet(read_cfg(TINY_CFG))
    read_header = load_weights(again, first)
    assert read_header == header
    second = tmp_path / "second.weights"
    save_weights(again, second, read_header)
    assert first.read_bytes() == second.read_bytes()
    for a, b in zip(net.parameter_arrays(), again.parameter_arrays(), strict=True):
        assert torch.equal(a, b)


def test_weights_file_rewritten_unchanged(tmp_path: Path) -> None:
    """read_weights then write_weights gives the same bytes, whatever the values."""
    values = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    original = tmp_path / "a.weights"
    original.write_bytes(struct.pack("<3iq", 0, 2, 5, 123456789) + values.tobytes())
    copy = tmp_path / "b.weights"
    write_weights(copy, read_weights(original))
    assert copy.read_bytes() == original.read_bytes()


@pytest.mark.parametrize(("delta", "problem"), [(-4, "truncated"), (+8, "too long")])
def test_wrong_weights_size_says_expected_and_found(tmp_path: Path, delta: int, problem: str) -> None:
    net = DarknetNet(read_cfg(TINY_CFG))
    path = tmp_path / "bad.weights"
    save_weights(net, path)
    data = path.read_bytes()
    path.write_bytes(data[:delta] if delta < 0 else data + b"\0" * delta)
    with pytest.raises(ForkliftError) as err:
        load_weights(DarknetNet(read_cfg(TINY_CFG)), path)
    message = str(err.value)
    assert problem in message
    assert f"expected {len(data)} bytes, found {len(data) + delta}" in message
    assert str(path) in message and "\n" not in message


HUGE_CFG = (
    """[net]
width=32
height=32
channels=3
"""
    + "".join(
        f"""
[convolutional]
filters={filters}
size=3
stride=1
pad=1
activation=leaky
"""
        for filters in (8000, 8000, 18)
    )
    + """
[yolo]
mask=0,1,2
anchors=10,14, 23,27, 37,58
classes=1
num=3
"""
)


def test_a_weights_file_too_small_for_its_cfg_is_found_before_the_net_is_made(tmp_path: Path) -> None:
    """A cfg of two 8,000-filter layers (2.3 GB of weights) over a 1 KB weights file, as a model zip uploaded to the
    app may hold: the web process took 2.2 GB to find it truncated. The count is taken from a net built on no
    memory; measured in a process of its own, whose peak is its own."""
    (tmp_path / "huge.cfg").write_text(HUGE_CFG)
    (tmp_path / "huge.weights").write_bytes(b"\0" * 1000)
    probe = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "from forklift.nets.darknet import build_darknet\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "try:\n"
        f"    build_darknet(Path({str(tmp_path / 'huge.cfg')!r}), Path({str(tmp_path / 'huge.weights')!r}))\n"
        "except Exception as exc:\n"
        "    print(exc)\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    said, grown_mib = done.stdout.strip().splitlines()
    assert said == f"{tmp_path / 'huge.weights'}: truncated for huge.cfg: expected 2310112088 bytes, found 1000"
    assert int(grown_mib) < 200, grown_mib  # the old way: about 2,200


def test_empty_weights_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.weights"
    path.write_bytes(b"")
    with pytest.raises(ForkliftError, match="too short for a Darknet weights header"):
        read_weights(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "[net]\nwidth=32\n[convolutional]\nfilters=4\n[lstm]\noutput=4\n",
            "x.cfg:5: unknown section or layer type [lstm]",
        ),
        ("[net]\n[convolutional]\nactivation=gelu\n", "x.cfg:3: unknown activation 'gelu'"),
        ("[net]\n[convolutional]\nfilters=four\n", "x.cfg:3: 'filters=four' is not a whole number"),
        ("[net]\n[route]\nlayers=-3\n", "x.cfg:3: 'layers' points to a layer that does not come before it"),
        ("width=3\n[net]\n", "x.cfg:1: 'width=3' comes before any [section]"),
        ("[convolutional]\nfilters=1\n", "x.cfg: a Darknet cfg starts with a [net] section"),
    ],
)
def test_cfg_errors_name_file_and_line(text: str, expected: str) -> None:
    with pytest.raises(ForkliftError) as err:
        DarknetNet(parse_cfg(text, "x.cfg"))
    assert expected in str(err.value)


def test_head_filter_count_checked() -> None:
    text = (
        "[net]\nwidth=32\nheight=32\n[convolutional]\nfilters=20\nsize=1\n"
        "[yolo]\nmask=0,1,2\nanchors=1,1,2,2,3,3\nclasses=80\n"
    )
    with pytest.raises(ForkliftError, match=r"x.cfg:7: .* 3 anchors x \(5 \+ 80 classes\) needs 255"):
        DarknetNet(parse_cfg(text, "x.cfg"))


def test_every_shared_cfg_parses_with_known_weight_counts() -> None:
    """The counts match the published weights files' sizes (yolov3.weights: 248,007,048 bytes)."""
    sizes = {"yolov3": 248_007_048, "yolov3-tiny": 35_434_956, "yolov4-tiny": 24_251_276}
    for name, size in sizes.items():
        net = build_darknet(shared(f"darknet/{name}.cfg"))
        assert 20 + 4 * net.weights_count() == size


def test_initialise_is_reproducible_by_seed() -> None:
    a = initialise(DarknetNet(read_cfg(TINY_CFG)), seed=7)
    b = initialise(DarknetNet(read_cfg(TINY_CFG)), seed=7)
    c = initialise(DarknetNet(read_cfg(TINY_CFG)), seed=8)
    for x, y in zip(a.parameter_arrays(), b.parameter_arrays(), strict=True):
        assert torch.equal(x, y)
    assert not all(torch.equal(x, z) for x, z in zip(a.parameter_arrays(), c.parameter_arrays(), strict=True))


def test_darknet_weights_dataclass_holds_float32(tmp_path: Path) -> None:
    path = tmp_path / "w.weights"
    write_weights(path, DarknetWeights(WeightsHeader(), np.arange(5, dtype=np.float64)))
    assert read_weights(path).values.dtype == np.float32
