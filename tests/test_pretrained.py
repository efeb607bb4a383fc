"""`forklift models pull` and `forklift models mirror`: the catalogue's facts checked against the reference files,
then pulls from a mirror that real NGINX serves on loopback (nothing is fetched from the internet here): ready model
directories that predict and serve (a Darknet YOLO and classifier, a COCO detector and segmenter cut to their
named classes), the cache reused, a cut connection resumed with a ranged request, a changed file refused, no network
refused, weights files for training, training from them, a job started from them in the app, and a mirror folder
laid out from the cache."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import onnxruntime
import pytest
import torch
import yaml
from core_parts import nginx
from helpers import CFGS, SHARED, forklift_here, free_port, shared
from torchvision.models import _meta, detection, mobilenet_v3_large, segmentation
from torchvision.models.detection.retinanet import RetinaNetClassificationHead

from forklift.data.dataset import load_dataset
from forklift.data.synth import synth_shapes
from forklift.errors import ForkliftError
from forklift.model_files.darknet_cfg import read_cfg
from forklift.model_files.labels import read_labels
from forklift.nets.class_outputs import carry_class_outputs
from forklift.nets.darknet import DarknetNet
from forklift.nets.fresh_weights import new_darknet_dir
from forklift.nets.two_stage import load_two_stage
from forklift.pretrained.catalogue import BUILT_IN, RemoteFile, load_catalogue
from forklift.pretrained.fetch import Source
from forklift.pretrained.pull import pull
from forklift.pretrained.resolve import weights_file
from forklift.runtime.style_export import fresh_style_net
from forklift.serve.process import ServerProcess
from forklift.train.tasks import NetworkSource, make_task

TINY_WEIGHTS = "https://pjreddie.com/media/files/yolov3-tiny.weights"
STYLE_ZIP = "https://www.dropbox.com/s/lrvwfehqdcxoza8/saved_models.zip?dl=1"
LRASPP = "https://download.pytorch.org/models/lraspp_mobilenet_v3_large-d234d4ea.pth"
MOBILENET = "https://download.pytorch.org/models/mobilenet_v3_large-8738ca79.pth"
DETECTOR = "https://download.pytorch.org/models/fasterrcnn_mobilenet_v3_large_320_fpn-907ea3f9.pth"
CLASSIFIER_CFG = "https://raw.githubusercontent.com/pjreddie/darknet/master/cfg/tiny.cfg"
CLASSIFIER = "https://pjreddie.com/media/files/tiny.weights"
IMAGENET_NAMES = "https://raw.githubusercontent.com/pjreddie/darknet/master/data/imagenet.shortnames.list"
STAND_INS = (TINY_WEIGHTS, STYLE_ZIP, LRASPP, MOBILENET, DETECTOR, CLASSIFIER_CFG, CLASSIFIER, IMAGENET_NAMES)
KNOWN = ["circle", "square", "hexagon", "kit fox", "crane"]  # the stand-in classifier's classes


def test_the_catalogue_agrees_with_the_reference_files() -> None:
    """The published hashes and sizes the catalogue holds, checked where this repository's reference data has the
    same files: Darknet's cfgs and COCO names to the digest, and each weights file's size from its cfg."""
    catalogue = load_catalogue(BUILT_IN)
    files = {file.url: file for model in catalogue.values() for file in model.files}
    for name in ("yolov3", "yolov3-tiny", "yolov4-tiny"):
        cfg, weights, names = catalogue[name].files
        reference = shared(f"darknet/{name}.cfg")
        if cfg.sha256 is not None:
            assert hashlib.sha256(reference.read_bytes()).hexdigest() == cfg.sha256, name
            assert reference.stat().st_size == cfg.size, name
        assert weights.size == 20 + 4 * DarknetNet(read_cfg(reference)).weights_count(), name  # header + float32s
        assert names.sha256 == hashlib.sha256(shared("darknet/coco.names").read_bytes()).hexdigest()
    for file in files.values():  # torchvision's file names carry the first digits of the SHA-256
        stem = Path(file.relative_path).stem
        if "download.pytorch.org" in file.url:
            assert file.sha256 is not None and file.sha256.startswith(stem.rsplit("-", 1)[1]), file.url
        if file.size is not None and file.mib is not None:
            assert round(file.size / 2**20, 3) == file.mib, file.url
    assert {m.task for m in catalogue.values()} == {"detect", "classify", "segment", "style"}
    for model in catalogue.values():  # the class outputs as torchvision's weights describe them (N/A: unused ids)
        if model.labels is not None:
            published = _meta._COCO_CATEGORIES if model.task == "detect" else _meta._VOC_CATEGORIES
            assert model.labels == {i: n for i, n in enumerate(published) if i and n != "N/A"}, model.name


# -- pulls from a loopback mirror


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A mirror folder holding seeded stand-ins for three catalogue models (HOST/PATH of their URLs) beside the
    reference data's real cfg and COCO names, and a catalogue of the stand-ins' digests (catalogue.yaml)."""
    root = tmp_path_factory.mktemp("published")
    mirror = root / "mirror"
    darknet = new_darknet_dir(shared("darknet/yolov3-tiny.cfg"), shared("darknet/coco.names"), root / "tiny", seed=1)
    stand_ins = {TINY_WEIGHTS: (darknet / "yolov3-tiny.weights").read_bytes()}
    state = fresh_style_net(seed=2, width=0.25).state_dict()
    state["in1.running_mean"] = torch.zeros(8)  # as the example's old checkpoints hold them
    torch.save(state, root / "candy.pth")
    with zipfile.ZipFile(root / "saved_models.zip", "w") as archive:
        archive.write(root / "candy.pth", "saved_models/candy.pth")
    stand_ins[STYLE_ZIP] = (root / "saved_models.zip").read_bytes()
    torch.manual_seed(3)  # the real layouts: COCO's segmenter (VOC's 21 classes) and ImageNet's MobileNet-v3
    torch.save(
        segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=21).state_dict(),
        root / "lraspp.pth",
    )
    torch.save(mobilenet_v3_large(weights=None).state_dict(), root / "mobilenet.pth")
    torch.save(coco_detector().state_dict(), root / "detector.pth")  # COCO's 91 outputs, as published
    stand_ins[LRASPP] = (root / "lraspp.pth").read_bytes()
    stand_ins[MOBILENET] = (root / "mobilenet.pth").read_bytes()
    stand_ins[DETECTOR] = (root / "detector.pth").read_bytes()
    (root / "known.names").write_text("".join(f"{name}\n" for name in KNOWN))
    classifier = new_darknet_dir(CFGS / "shapes-classifier.cfg", root / "known.names", root / "classifier", seed=5)
    stand_ins[CLASSIFIER_CFG] = (CFGS / "shapes-classifier.cfg").read_bytes()
    stand_ins[CLASSIFIER] = (classifier / "shapes-classifier.weights").read_bytes()
    stand_ins[IMAGENET_NAMES] = "".join(f"{name}\n" for name in [*KNOWN, "zebra", "yak"]).encode()  # more names
    darknet_files = "https://raw.githubusercontent.com/pjreddie/darknet/master"
    real = {f"{darknet_files}/cfg/yolov3-tiny.cfg": "darknet/yolov3-tiny.cfg",
            f"{darknet_files}/data/coco.names": "darknet/coco.names"}  # fmt: skip
    for url, relative in real.items():
        stand_ins[url] = (SHARED / relative).read_bytes()
    for url, data in stand_ins.items():
        path = mirror / RemoteFile(url).relative_path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    catalogue = yaml.safe_load(BUILT_IN.read_text())
    names = ("yolov3-tiny", "candy", "lraspp_mobilenet_v3_large", "mobilenet_v3_large",
             "fasterrcnn_mobilenet_v3_large_320_fpn", "tiny-darknet")  # fmt: skip
    models = {name: catalogue["models"][name] for name in names}
    for model in models.values():
        for file in model["files"]:
            if file["url"] in STAND_INS:  # the stand-ins' own digests; the rest as published
                file["sha256"] = hashlib.sha256(stand_ins[file["url"]]).hexdigest()
                file["size"] = len(stand_ins[file["url"]])
                file.pop("mib", None)
            if "lines" in file:
                file["lines"] = len(KNOWN)
    (root / "catalogue.yaml").write_text(yaml.safe_dump({"label_sets": catalogue["label_sets"], "models": models}))
    return root


@pytest.fixture(scope="module")
def server(published: Path) -> Iterator[str]:
    """NGINX serving the mirror folder on loopback (ranged requests, as any static web server answers them)."""
    port = free_port()
    conf = published / "nginx.conf"
    conf.write_text(
        f"daemon off; master_process off; pid {published}/nginx.pid; error_log {published}/error.log;\n"
        f"events {{}}\nhttp {{ access_log {published}/access.log; server {{ listen 127.0.0.1:{port}; "
        f"root {published / 'mirror'}; }} }}\n"
    )
    process = subprocess.Popen([str(nginx()), "-c", str(conf), "-p", f"{published}/"], stderr=subprocess.PIPE)
    for _ in range(100):
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        threading.Event().wait(0.05)
    yield f"http://127.0.0.1:{port}/"
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture
def setting(published: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache and the stand-ins' catalogue for one test; returns the cache."""
    monkeypatch.setenv("FORKLIFT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FORKLIFT_CATALOGUE", str(published / "catalogue.yaml"))
    monkeypatch.delenv("FORKLIFT_MIRROR", raising=False)
    return tmp_path / "cache"


def _requests(published: Path, name: str) -> list[tuple[str, str]]:
    """(status, Range header) of each request NGINX logged for a file name."""
    lines = (published / "access.log").read_text().splitlines()
    return [(line.split('"')[2].split()[0], line) for line in lines if f"/{name}" in line]


@pytest.mark.slow  # predicts with the pulled model: seconds
def test_a_pulled_darknet_model_predicts_and_a_second_pull_uses_the_cache(
    published: Path, server: str, setting: Path, tmp_path: Path
) -> None:
    first = forklift_here("models", "pull", "yolov3-tiny", tmp_path / "tiny", "--mirror", server)
    assert "yolov3-tiny: model directory" in first.stdout
    assert sorted(p.name for p in (tmp_path / "tiny").iterdir()) == [
        "coco.names", "forklift.json", "yolov3-tiny.cfg", "yolov3-tiny.weights"
    ]  # fmt: skip
    provenance = json.loads((tmp_path / "tiny" / "forklift.json").read_text())["pretrained"]
    assert provenance["name"] == "yolov3-tiny" and TINY_WEIGHTS in provenance["files"]
    predicted = json.loads(forklift_here("predict", tmp_path / "tiny", shared("images/dog.jpg"), "--json").stdout)
    assert predicted["results"][0]["file"].endswith("dog.jpg") and predicted["results"][0]["detections"]
    fetched = len(_requests(published, "yolov3-tiny.weights"))
    forklift_here("models", "pull", "yolov3-tiny", tmp_path / "again", "--mirror", server)
    assert len(_requests(published, "yolov3-tiny.weights")) == fetched  # from the cache, not the mirror
    listed = {row["name"]: row for row in json.loads(forklift_here("models", "pull", "--list", "--json").stdout)}
    assert listed["yolov3-tiny"]["cached"] == "yes" and listed["candy"]["cached"] == "no"
    taken = forklift_here("models", "pull", "yolov3-tiny", tmp_path / "tiny", "--mirror", server, check=False)
    assert taken.returncode == 2 and "already exists and is not empty" in taken.stderr


def _cutting_server(data: bytes, keep: int) -> tuple[int, threading.Thread]:
    """A server on loopback that promises `data` and closes the connection after its first `keep` bytes."""
    listener = socket.create_server(("127.0.0.1", 0))

    def answer_once() -> None:
        connection, _ = listener.accept()
        with connection, listener:
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(data) + data[:keep])

    thread = threading.Thread(target=answer_once, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


def test_a_cut_download_resumes_with_a_ranged_request(published: Path, server: str, setting: Path,
                                                      tmp_path: Path) -> None:  # fmt: skip
    archive = (published / "mirror" / RemoteFile(STYLE_ZIP).relative_path).read_bytes()
    port, cutter = _cutting_server(archive, len(archive) // 2)
    cut = forklift_here("models", "pull", "candy", tmp_path / "candy", "--mirror", f"http://127.0.0.1:{port}",
                        check=False)  # fmt: skip
    cutter.join(timeout=10)
    assert cut.returncode == 2 and len(cut.stderr.strip().splitlines()) == 1, cut.stderr
    assert "the connection broke after" in cut.stderr and "the same command resumes it" in cut.stderr
    (part,) = setting.rglob("*.part")
    assert part.stat().st_size == len(archive) // 2 and not (tmp_path / "candy").exists()
    forklift_here("models", "pull", "candy", tmp_path / "candy", "--mirror", server)
    ((status, line),) = _requests(published, "saved_models.zip")
    assert status == "206", line  # only the rest was asked for, and sent
    assert sorted(p.name for p in (tmp_path / "candy").iterdir()) == ["candy.pth", "forklift.json"]
    assert not list(setting.rglob("*.part"))


def test_a_changed_file_no_network_and_a_full_disk_are_refused_in_one_line(
    published: Path, server: str, setting: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror = tmp_path / "changed"
    subprocess.run(["cp", "-r", published / "mirror", mirror], check=True)
    weights = mirror / RemoteFile(TINY_WEIGHTS).relative_path
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit, same size
    weights.write_bytes(bytes(data))
    changed = forklift_here("models", "pull", "yolov3-tiny", tmp_path / "out", "--mirror", mirror, check=False)
    assert changed.returncode == 2 and len(changed.stderr.strip().splitlines()) == 1
    assert "its SHA-256 is" in changed.stderr and "the download was removed" in changed.stderr
    assert not (tmp_path / "out").exists() and not list(setting.rglob("*.weights*"))
    monkeypatch.setenv("FORKLIFT_MIRROR", str(mirror))  # what a pull would come from: nothing may be pulled
    typo = forklift_here(
        "train", "--data", tmp_path / "shapez", "--model", "yolov3-tiny", tmp_path / "run", check=False
    )
    assert typo.returncode == 2 and f"--data {tmp_path / 'shapez'}: no such folder" in typo.stderr, typo.stderr
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("kept")
    taken = forklift_here("train", "--data", tmp_path, "--model", "yolov3-tiny", tmp_path / "used", check=False)
    assert taken.returncode == 2 and "already exists and is not empty" in taken.stderr, taken.stderr
    assert not list(setting.rglob("*.weights*")) and not list(setting.rglob("*.part"))  # both before any pull
    monkeypatch.delenv("FORKLIFT_MIRROR")
    offline = forklift_here("models", "pull", "candy", "--mirror", f"http://127.0.0.1:{free_port()}", check=False)
    assert offline.returncode == 2 and "cannot connect" in offline.stderr and "FORKLIFT_MIRROR" in offline.stderr
    huge = yaml.safe_load((published / "catalogue.yaml").read_text())
    huge["models"]["candy"]["files"][0]["size"] = 2**60
    (tmp_path / "huge.yaml").write_text(yaml.safe_dump(huge))
    full = forklift_here("models", "pull", "candy", "--catalogue", tmp_path / "huge.yaml", "--mirror", server,
                         check=False)  # fmt: skip
    assert full.returncode == 2 and "MiB free, saved_models.zip needs" in full.stderr
    part = setting / "pretrained" / RemoteFile(STYLE_ZIP).relative_path.with_name("saved_models.zip.part")
    assert not part.exists()  # the refusals above left no empty part behind
    part.symlink_to("/dev/full")  # every write there fails as on a full disk (ENOSPC)
    filled = forklift_here("models", "pull", "candy", tmp_path / "candy", "--mirror", server, check=False)
    assert filled.returncode == 2 and "the disk is full; the partial saved_models.zip was removed" in filled.stderr
    assert not part.is_symlink() and not (tmp_path / "candy").exists()
    unknown = forklift_here("models", "pull", "yolov9", check=False)
    assert unknown.returncode == 2 and "yolov9: not in the catalogue" in unknown.stderr


def test_a_weights_file_is_kept_for_training_and_a_mirror_folder_serves_another_machine(
    published: Path, server: str, setting: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pulled = json.loads(forklift_here("models", "pull", "mobilenet_v3_large", "--json", "--mirror",
                                      server).stdout)  # fmt: skip
    assert pulled["kind"] == "weights" and Path(pulled["path"]).is_file()
    assert torch.load(pulled["path"], weights_only=True)["classifier.3.weight"].shape[0] == 1000
    refused = forklift_here("models", "pull", "mobilenet_v3_large", tmp_path / "x", check=False)
    assert refused.returncode == 2 and "a weights file to train from" in refused.stderr
    forklift_here("models", "pull", "candy", tmp_path / "candy", "--mirror", server)
    carried = tmp_path / "usb"
    laid = forklift_here("models", "mirror", carried)
    assert "2 models" in laid.stdout  # the cached ones
    assert (carried / RemoteFile(MOBILENET).relative_path).read_bytes() == Path(pulled["path"]).read_bytes()
    monkeypatch.setenv("FORKLIFT_CACHE", str(tmp_path / "another-machine"))
    monkeypatch.setenv("FORKLIFT_MIRROR", str(carried))  # the folder itself, as mounted there
    forklift_here("models", "pull", "candy", tmp_path / "there")
    assert (tmp_path / "there" / "candy.pth").read_bytes() == (tmp_path / "candy" / "candy.pth").read_bytes()


@pytest.mark.slow  # a training run in its own process: seconds
def test_a_pulled_darknet_classifier_names_its_classes_and_fine_tunes_by_name(
    server: str, setting: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORKLIFT_MIRROR", server)
    forklift_here("models", "pull", "tiny-darknet", tmp_path / "tiny")
    assert sorted(p.name for p in (tmp_path / "tiny").iterdir()) == [
        "forklift.json", "imagenet.names", "tiny.cfg", "tiny.weights"
    ]  # fmt: skip
    assert read_labels(tmp_path / "tiny" / "imagenet.names") == KNOWN  # the names file's first lines: the model's
    data = synth_shapes(tmp_path / "kinds", 12, 64, seed=0, task="classify").root
    trained = forklift_here("train", "--data", data, "--model", "tiny-darknet", "--epochs", "1", "--batch", "4",
                            tmp_path / "out")  # fmt: skip
    kept = [name for name in load_dataset(data).classes if name in KNOWN]
    assert f"{len(kept)} of 5 classes keep the model's head weights (matched by name)" in trained.stdout
    assert (setting / "models" / "tiny-darknet" / "tiny.cfg").is_file()  # --model NAME: pulled into the cache


def coco_detector() -> torch.nn.Module:
    """A seeded Faster R-CNN with the published COCO detector's layout: 91 class outputs (COCO's ids, 0 the
    background)."""
    torch.manual_seed(4)
    return detection.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, num_classes=91)


@pytest.mark.slow  # exports two torchvision nets and predicts: seconds
def test_a_published_coco_detector_and_segmenter_become_ready_directories_of_their_classes(
    published: Path, server: str, setting: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said = forklift_here("models", "pull", "fasterrcnn_mobilenet_v3_large_320_fpn", tmp_path / "coco", "--mirror",
                         server)  # fmt: skip
    assert "exporting the net for 80 classes" in said.stderr and "model directory" in said.stdout  # progress: stderr
    coco = [name for i, name in enumerate(_meta._COCO_CATEGORIES) if i and name != "N/A"]
    net, settings, labels = load_two_stage(tmp_path / "coco")
    assert labels == coco and settings.image_size == 320 and settings.classes == 80
    kept = [i for i, name in enumerate(_meta._COCO_CATEGORIES) if name != "N/A"]
    published_net = coco_detector().eval()
    features = torch.randn(5, published_net.roi_heads.box_predictor.cls_score.in_features)
    with torch.no_grad():
        scores, boxes = net.roi_heads.box_predictor(features)
        all_scores, all_boxes = published_net.roi_heads.box_predictor(features)
    # each class keeps its own score and its own box (to rounding: a product of fewer columns on several threads
    # is summed in another order; a class off by one would be off by the scores' own size)
    torch.testing.assert_close(scores, all_scores[:, kept], rtol=0, atol=1e-6)
    torch.testing.assert_close(boxes, all_boxes.reshape(5, 91, 4)[:, kept].reshape(5, -1), rtol=0, atol=1e-6)
    assert torch.equal(net.state_dict()["backbone.body.4.block.0.0.weight"],
                       published_net.state_dict()["backbone.body.4.block.0.0.weight"])  # fmt: skip
    with ServerProcess(tmp_path / "coco", "--instances", "1") as served:  # a pulled directory serves
        dog = shared("images/dog.jpg")
        answer = httpx.post(f"{served.url}/predict/coco", files={"files": (dog.name, dog.read_bytes())}, timeout=60)
    assert answer.status_code == 200 and answer.json()["results"][0]["file"] == "dog.jpg", answer.text

    monkeypatch.setenv("FORKLIFT_MIRROR", server)
    catalogue = load_catalogue(published / "catalogue.yaml")
    segmenter = pull(catalogue["lraspp_mobilenet_v3_large"], cache=setting, source=Source.of(None),
                     out=tmp_path / "voc").path  # fmt: skip
    assert read_labels(segmenter / "lraspp_mobilenet_v3_large.names") == list(_meta._VOC_CATEGORIES[1:])
    image = torch.rand(1, 3, 520, 520)
    torch.manual_seed(3)  # the stand-in's own net, as the fixture made it
    voc = segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=21)
    voc.load_state_dict(torch.load(weights_file("coco", arch="lraspp_mobilenet_v3_large"), weights_only=True))
    with torch.no_grad():
        expected = voc.eval()(image)["out"].numpy()
    session = onnxruntime.InferenceSession(str(segmenter / "lraspp_mobilenet_v3_large.onnx"))
    (answer,) = session.run(None, {session.get_inputs()[0].name: image.numpy()})
    assert np.abs(answer - expected).max() < 1e-3


def test_retinanet_class_outputs_are_kept_anchor_by_anchor() -> None:
    """RetinaNet's class head interleaves classes within each anchor: the kept outputs of a head of many classes
    are a head of fewer classes giving the same scores for them."""

    def in_detector(head: torch.nn.Module) -> torch.nn.Module:  # the names it has inside RetinaNet
        return torch.nn.ModuleDict({"head": torch.nn.ModuleDict({"classification_head": head})})

    torch.manual_seed(5)
    full = RetinaNetClassificationHead(16, num_anchors=3, num_classes=7).eval()
    torch.nn.init.normal_(full.cls_logits.weight)  # scores that differ from class to class
    torch.nn.init.normal_(full.cls_logits.bias)
    kept = [0, 2, 3, 6]
    fewer = RetinaNetClassificationHead(16, num_anchors=3, num_classes=len(kept)).eval()
    published = in_detector(full).state_dict()
    heads = carry_class_outputs(published, in_detector(fewer).state_dict(), kept, total=7)
    in_detector(fewer).load_state_dict({**published, **heads})
    features = [torch.randn(2, 16, 4, 5), torch.randn(2, 16, 2, 3)]
    with torch.no_grad():
        torch.testing.assert_close(fewer(features), full(features)[..., kept], rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # builds two torchvision nets: seconds
def test_training_starts_from_pulled_coco_and_imagenet_weights(
    server: str, setting: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORKLIFT_MIRROR", server)
    segments = load_dataset(synth_shapes(tmp_path / "segment", 4, 64, seed=0, task="segment").root)
    coco = weights_file("coco", arch="lraspp_mobilenet_v3_large")  # pulled now: it was not cached
    assert coco.is_relative_to(setting) and coco.name == Path(LRASPP).name
    net = make_task(segments, NetworkSource(arch="lraspp_mobilenet_v3_large", img=64, weights=coco), seed=0).net
    published, own = torch.load(coco, weights_only=True), net.state_dict()
    assert torch.equal(own["backbone.16.0.weight"], published["backbone.16.0.weight"])
    head = "classifier.low_classifier.weight"  # VOC's 21 classes there, 1 + the data set's here: left fresh
    assert own[head].shape[0] == 1 + len(segments.classes) != published[head].shape[0]

    boxes = load_dataset(synth_shapes(tmp_path / "detect", 4, 128, seed=0).root)
    imagenet = weights_file("imagenet", arch="fasterrcnn_mobilenet_v3_large_320_fpn")
    source = NetworkSource(arch="fasterrcnn_mobilenet_v3_large_320_fpn", img=128, weights=imagenet)
    detector = make_task(boxes, source, seed=0).net.state_dict()
    backbone = torch.load(imagenet, weights_only=True)
    assert torch.equal(detector["backbone.body.4.block.0.0.weight"], backbone["features.4.block.0.0.weight"])

    with pytest.raises(ForkliftError, match="for torchvision architectures"):
        make_task(boxes, NetworkSource(cfg=CFGS / "tiny-detector.cfg", weights=imagenet), seed=0)
    for given, said in (("imagenet", "give --arch too"), ("candy", "is a ready style model"),
                        ("yolov9", "no such file, and the catalogue has no yolov9")):  # fmt: skip
        refused = forklift_here("train", "--data", boxes.root, "--weights", given, tmp_path / "out", check=False)
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr
    photos = ("--data", SHARED / "images", "--style-image", shared("images/dog.jpg"))
    style = forklift_here("train", "--task", "style", *photos, "--loss-net-weights", "candy", tmp_path / "out",
                          check=False)  # fmt: skip
    assert style.returncode == 2 and "--loss-net-weights candy: candy is a ready style model" in style.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # the app, Chromium and a training job in its own process: a minute
def test_a_job_started_in_the_app_from_coco_weights_pulls_them_once(
    published: Path, server: str, setting: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app_helpers import chromium_page, shapes_dataset, start_app  # the app's imports: here alone

    monkeypatch.setenv("FORKLIFT_MIRROR", server)  # the app's process and its jobs' inherit the setting
    port = free_port()
    app = start_app(tmp_path / "app", port)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            dataset = shapes_dataset(client, tmp_path / "shapes", 16)[0]
            slim = client.post(
                f"/api/datasets/{dataset}/jobs", json={"model": "yolov3-tiny-slim", "pretrained": "coco"}
            )
            assert slim.status_code == 422 and "yolov3-tiny-slim has none" in slim.json()["error"]
        with chromium_page(900) as (page, errors):
            page.goto(f"{url}/#/datasets/{dataset}")
            page.get_by_role("button", name="Train…").click()
            start_from = page.get_by_label("Start from")
            page.wait_for_selector("select[aria-label='Start from'] option[value=coco]", state="attached")
            offered = start_from.locator("option[value=coco]").inner_text()
            weighs = load_catalogue(published / "catalogue.yaml")["yolov3-tiny"].approximate_bytes or 0
            assert offered == f"from COCO-pretrained weights (downloads {round(weighs / 2**20, 1)} MiB once)"
            start_from.select_option("coco")
            for name, value in (("epochs", "1"), ("batch", "8"), ("size", "64")):
                page.get_by_label(name, exact=True).fill(value)
            page.get_by_role("button", name="Start").click()
            page.wait_for_url("**/#/jobs/*")
            job = page.url.rsplit("/", 1)[-1]
            page.wait_for_selector("[data-testid=job-state]:has-text('done')", timeout=240_000)
            assert page.locator("dt:has-text('pretrained') + dd").inner_text() == "coco"
            said = page.locator("[data-testid=start-notes]").all_inner_texts()  # the new heads are said to be new
            assert any(line.startswith("Fine-tuning: starting from the weights of ") for line in said), said
            assert any("new, from fresh weights: circle" in line for line in said), said
            page.goto(f"{url}/#/datasets/{dataset}")  # offered again: now without a download
            page.get_by_role("button", name="Train…").click()
            page.wait_for_selector("option[value=coco]:has-text('downloaded already')", state="attached")
            assert not errors, errors
    finally:
        app.terminate()
        app.wait(20)
    log = (tmp_path / "app" / "jobs" / job / "train.log").read_text()
    assert "fine-tuning: starting from the weights of" in log, log[-2000:]
    pulled = setting / "models" / "yolov3-tiny"  # the ready directory, pulled once into the cache
    assert (pulled / "yolov3-tiny.weights").read_bytes() == (setting / "pretrained" / RemoteFile(TINY_WEIGHTS)
                                                              .relative_path).read_bytes()  # fmt: skip
