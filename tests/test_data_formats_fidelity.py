"""Other tools' exports as they come (Roboflow's per-split COCO and YOLO zips, macOS zips, zips whose UTF-8 names
are unflagged, a byte-order mark) and a labelling state carried through exports: nothing read wrong, nothing
changed unsaid."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import yaml
from PIL import Image, PngImagePlugin

from forklift.data.dataset import Box, Dataset, FoundBy, ImageRecord, load_dataset, save_dataset
from forklift.data.interchange import export_dataset, import_dataset
from forklift.data.interchange.common import image_size
from forklift.errors import ForkliftError
from forklift.vocabulary import Task


def _picture(path: Path, size: tuple[int, int] = (40, 30)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, "white").save(path)
    return path


def _coco(file_name: str, *, width: int = 40, height: int = 30) -> dict:
    return {"images": [{"id": 1, "file_name": file_name, "width": width, "height": height}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 7, "bbox": [2, 3, 10, 12], "area": 120,
                             "iscrowd": 0}],
            "categories": [{"id": 7, "name": "thing"}]}  # fmt: skip


def _labelled_set(root: Path) -> Dataset:
    """Three images: one a person boxed, one a model boxed (unreviewed), one nobody has labelled yet."""
    for name in ("person.png", "model.png", "nobody.png"):
        _picture(root / "images" / name)
    auto = Box("thing", 5, 6, 20, 25, found_by=FoundBy("detector-v2", 0.42))
    images = [
        ImageRecord("images/person.png", 40, 30, "train", [Box("thing", 1, 2, 11, 12)]),
        ImageRecord("images/model.png", 40, 30, "train", [auto]),
        ImageRecord("images/nobody.png", 40, 30, "val", [], unlabelled=True),
    ]
    dataset = Dataset(Task.DETECT, ["thing"], images, root)
    save_dataset(dataset, root)
    return dataset


def test_a_roboflow_coco_zip_of_a_json_per_split_imports_every_split(tmp_path: Path) -> None:
    """Roboflow's layout: train/, valid/ and test/, each its images beside its _annotations.coco.json."""
    with zipfile.ZipFile(tmp_path / "roboflow.zip", "w") as archive:
        for folder in ("train", "valid", "test"):
            archive.writestr(f"{folder}/_annotations.coco.json", json.dumps(_coco(f"{folder}-0.png")))
            archive.write(_picture(tmp_path / f"{folder}-0.png"), f"{folder}/{folder}-0.png")
        archive.writestr("README.roboflow.txt", "exported from roboflow.com")
    summary = import_dataset("coco", tmp_path / "roboflow.zip", tmp_path / "back")
    assert (summary.images, summary.boxes, summary.skipped) == (3, 3, 0), summary.lines()
    imported = load_dataset(tmp_path / "back")
    assert {Path(i.file).name: i.split for i in imported.images} == {
        "train-0.png": "train", "valid-0.png": "val", "test-0.png": "test"}  # fmt: skip
    assert imported.classes == ["thing"]


def test_coco_jsons_whose_names_do_not_tell_their_splits_apart_are_refused_by_name(tmp_path: Path) -> None:
    """COCO's own annotations/ folder: captions_, instances_ and person_keypoints_ files of one split. Reading the
    first found (the captions) and saying nothing else imported one file of three."""
    folder = tmp_path / "coco2017"
    for name in ("captions_val2017", "instances_val2017", "person_keypoints_val2017"):
        (folder / "annotations").mkdir(parents=True, exist_ok=True)
        (folder / "annotations" / f"{name}.json").write_text(json.dumps(_coco("a.png")))
    with pytest.raises(ForkliftError, match=r"3 COCO JSONs \(annotations/captions_val2017.json, .*import one of them"):
        import_dataset("coco", folder, tmp_path / "back")
    assert not (tmp_path / "back").exists()


def test_exports_of_a_label_file_per_image_leave_out_images_nobody_labelled(tmp_path: Path) -> None:
    """An empty VOC XML, YOLO .txt or PowerAI XML says "nothing here" to every trainer: an image nobody has labelled
    yet is left out, and the summary says so."""
    dataset = _labelled_set(tmp_path / "set")
    for kind, out in (("voc", tmp_path / "voc"), ("yolo", tmp_path / "yolo"), ("powerai", tmp_path / "p.zip")):
        summary = export_dataset(kind, dataset.root, out)
        assert summary.images == 2, kind
        assert summary.notes[0] == "left out 1 image no person has labelled (an empty label file says nothing is there)"
    assert sorted(p.name for p in (tmp_path / "voc" / "JPEGImages").iterdir()) == ["model.png", "person.png"]
    assert "nobody.png" not in zipfile.ZipFile(tmp_path / "p.zip").namelist()


def test_coco_carries_an_unlabelled_image_and_a_models_unreviewed_box_back(tmp_path: Path) -> None:
    """Exported to COCO and imported again, the image nobody labelled is still unlabelled (not "nothing here"),
    and the model's box is still the model's, with its confidence: not a person's label."""
    dataset = _labelled_set(tmp_path / "set")
    export_dataset("coco", dataset.root, tmp_path / "coco")
    document = json.loads((tmp_path / "coco" / "annotations.json").read_text())
    assert all(annotation["segmentation"] == [] for annotation in document["annotations"])  # a box: none, as CVAT
    import_dataset("coco", tmp_path / "coco", tmp_path / "back")
    back = {Path(image.file).name: image for image in load_dataset(tmp_path / "back").images}
    assert back["nobody.png"].unlabelled and not back["person.png"].unlabelled
    assert back["model.png"].boxes[0].found_by == FoundBy("detector-v2", 0.42)
    assert back["person.png"].boxes[0].found_by is None


@pytest.mark.parametrize("kind", ["coco", "voc"])
def test_an_image_of_another_size_than_its_labels_say_is_skipped_by_name(kind: str, tmp_path: Path) -> None:
    """The JSON or XML says 40x30, the file is 80x60 (replaced, or turned by its EXIF tag after labelling): its
    boxes were drawn on another picture, so it is skipped, saying why, not imported with them."""
    folder = tmp_path / "export"
    if kind == "coco":
        _picture(folder / "a.png", (80, 60))
        _picture(folder / "b.png")
        document = _coco("a.png")
        document["images"].append({"id": 2, "file_name": "b.png", "width": 40, "height": 30})
        (folder / "annotations.json").write_text(json.dumps(document))
    else:
        export_dataset("voc", _labelled_set(tmp_path / "set").root, folder)
        _picture(folder / "JPEGImages" / "person.png", (80, 60))
    summary = import_dataset(kind, folder, tmp_path / "back")
    name = "a.png" if kind == "coco" else "person.png"
    assert summary.images == 1
    assert summary.lines()[1:] == [
        f"skipped 1 image whose size is not the one its labels are for ({name}: labels for 40x30, the image 80x60)"
    ]


def test_voc_keeps_the_split_of_a_name_with_spaces_and_finds_an_image_named_like_a_pattern(tmp_path: Path) -> None:
    dataset = _labelled_set(tmp_path / "set")
    (tmp_path / "set" / "images" / "model.png").rename(tmp_path / "set" / "images" / "val one.png")
    dataset.images[1].file, dataset.images[1].split = "images/val one.png", "val"
    save_dataset(dataset, dataset.root)
    export_dataset("voc", dataset.root, tmp_path / "voc")
    assert (tmp_path / "voc" / "ImageSets" / "Main" / "val.txt").read_text() == "val one\n"
    xml = tmp_path / "voc" / "Annotations" / "person.xml"  # no <filename>: found by its stem, brackets and all
    xml.write_text(xml.read_text().replace("<filename>person.png</filename>", ""))
    xml.rename(xml.with_name("a[1].xml"))
    (tmp_path / "voc" / "JPEGImages" / "person.png").rename(tmp_path / "voc" / "JPEGImages" / "a[1].png")
    summary = import_dataset("voc", tmp_path / "voc", tmp_path / "back")
    assert summary.skipped == 0, summary.lines()
    splits = {Path(i.file).name: i.split for i in load_dataset(tmp_path / "back").images}
    assert splits == {"val one.png": "val", "a[1].png": "train"}


def test_a_powerai_zip_made_on_a_mac_under_a_top_folder_keeps_its_classes(tmp_path: Path) -> None:
    """Zipped in macOS's Finder: a top folder, and __MACOSX/._* copies of each file's metadata (not XML)."""
    dataset = _labelled_set(tmp_path / "set")
    dataset.classes = ["zebra", "thing", "unused"]
    save_dataset(dataset, dataset.root)
    export_dataset("powerai", dataset.root, tmp_path / "flat.zip")
    with zipfile.ZipFile(tmp_path / "flat.zip") as flat, zipfile.ZipFile(tmp_path / "mac.zip", "w") as mac:
        for name in flat.namelist():
            mac.writestr(f"mydata/{name}", flat.read(name))
            mac.writestr(f"__MACOSX/mydata/._{name}", b"\x00\x05\x16\x07 Mac OS X resource fork")
    summary = import_dataset("powerai", tmp_path / "mac.zip", tmp_path / "back")
    assert (summary.images, summary.skipped) == (2, 0), summary.lines()
    assert load_dataset(tmp_path / "back").classes == ["zebra", "thing", "unused"]  # prop.json's order, all of it


def test_a_zip_whose_utf8_names_are_not_flagged_so_is_read_as_utf8(tmp_path: Path) -> None:
    """Info-ZIP's `zip` stores a name's UTF-8 bytes without the flag that says so; read as code page 437 (the
    format's default) the name no longer matched the JSON's `file_name`."""
    name = "ünï cødé.png"
    placeholder = "x" * (len(name.encode("utf-8")) - len(".png")) + ".png"  # as long, so the bytes can be swapped
    with zipfile.ZipFile(tmp_path / "plain.zip", "w") as archive:
        archive.writestr("annotations.json", json.dumps(_coco(f"images/{name}")))
        archive.write(_picture(tmp_path / "a.png"), f"images/{placeholder}")
        assert not archive.getinfo(f"images/{placeholder}").flag_bits & 0x800
    raw = (tmp_path / "plain.zip").read_bytes()
    (tmp_path / "unflagged.zip").write_bytes(raw.replace(placeholder.encode(), name.encode("utf-8")))
    with zipfile.ZipFile(tmp_path / "unflagged.zip") as archive:
        assert f"images/{name}" not in archive.namelist()  # Python reads it as code page 437, as the format says
    summary = import_dataset("coco", tmp_path / "unflagged.zip", tmp_path / "back")
    assert (summary.images, summary.skipped) == (1, 0), summary.lines()
    assert [image.file for image in load_dataset(tmp_path / "back").images] == [f"images/{name}"]


def test_a_roboflow_yolo_zip_naming_its_splits_from_above_and_a_label_file_with_a_bom_import(tmp_path: Path) -> None:
    """Roboflow's data.yaml names `../train/images` (Ultralytics reads it as `train/images` beside the yaml when
    the first is not there); Windows' Notepad starts a file with a byte-order mark."""
    config = {"train": "../train/images", "val": "../valid/images", "nc": 1, "names": ["thing"]}
    with zipfile.ZipFile(tmp_path / "roboflow.zip", "w") as archive:
        archive.writestr("data.yaml", yaml.safe_dump(config))
        for folder in ("train", "valid"):
            archive.write(_picture(tmp_path / "a.png"), f"{folder}/images/{folder}.png")
            archive.writestr(f"{folder}/labels/{folder}.txt", "\ufeff0 0.5 0.5 0.5 0.5\n".encode())
    summary = import_dataset("yolo", tmp_path / "roboflow.zip", tmp_path / "back")
    assert (summary.images, summary.boxes, summary.skipped) == (2, 2, 0), summary.lines()
    splits = {Path(i.file).name: i.split for i in load_dataset(tmp_path / "back").images}
    assert splits == {"train.png": "train", "valid.png": "val"}


def test_an_image_uploaded_without_a_suffix_exports_with_its_files(tmp_path: Path) -> None:
    """An app upload named `snapshot` (a PNG): YOLO trainers find images by their suffix, so the export names it
    `snapshot.png`, and reading the export back finds it."""
    dataset = _labelled_set(tmp_path / "set")
    dataset.images[0].original = "snapshot"
    dataset.images = [image for image in dataset.images if not image.unlabelled]
    save_dataset(dataset, dataset.root)
    export_dataset("yolo", dataset.root, tmp_path / "yolo")
    assert (tmp_path / "yolo" / "images" / "train" / "snapshot.png").is_file()
    summary = import_dataset("yolo", tmp_path / "yolo" / "data.yaml", tmp_path / "back")
    assert (summary.images, summary.skipped) == (2, 0), summary.lines()


def test_an_images_size_is_read_from_its_header_without_decoding_it(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Each image of an import has its size checked: a PNG's getexif() decodes the whole image (to look for EXIF
    after its pixels), which made an import of 20 photos of 3 MP 18 times slower. A PNG with EXIF in its header
    still turns by it."""
    decoded: list[str] = []
    load = PngImagePlugin.PngImageFile.load
    monkeypatch.setattr(PngImagePlugin.PngImageFile, "load", lambda self: decoded.append("png") or load(self))
    plain = _picture(tmp_path / "plain.png", (40, 30))
    assert image_size(plain, "plain.png") == (40, 30) and decoded == []
    turned = Image.new("RGB", (40, 30))
    exif = turned.getexif()
    exif[0x0112] = 6  # rotated 90°: shown 30 x 40
    turned.save(tmp_path / "turned.png", exif=exif)
    assert image_size(tmp_path / "turned.png", "turned.png") == (30, 40)
