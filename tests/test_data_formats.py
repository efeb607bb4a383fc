"""Import/export between forklift's data-set layout and COCO, VOC, YOLO and PowerAI Vision, checked by round trips
and by independent readers of the foreign files."""

from __future__ import annotations

import io
import json
import shutil
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
import yaml
from helpers import forklift
from PIL import Image

from forklift.data.dataset import Box, Dataset, ImageRecord, load_dataset, save_dataset
from forklift.data.interchange import export_dataset, import_dataset
from forklift.data.masks import load_mask
from forklift.data.synth import synth_shapes
from forklift.errors import ForkliftError
from forklift.vocabulary import Task


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return synth_shapes(tmp_path_factory.mktemp("formats") / "shapes", n=12, size=96, seed=1)


def _boxes(dataset: Dataset) -> dict[str, list[tuple[str, float, float, float, float]]]:
    return {Path(i.file).name: [(b.label, b.x1, b.y1, b.x2, b.y2) for b in i.boxes] for i in dataset.images}


def _assert_boxes(expected: dict[str, list], found: dict[str, list], tolerance: float) -> None:
    assert found.keys() == expected.keys()
    for name, boxes in expected.items():
        assert len(found[name]) == len(boxes), name
        for want, got in zip(boxes, found[name], strict=True):
            assert got[0] == want[0]
            assert got[1:] == pytest.approx(want[1:], abs=tolerance, rel=0)


def _assert_same(original: Dataset, imported: Dataset, tolerance: float, splits: bool) -> None:
    assert len(imported.images) == len(original.images)
    _assert_boxes(_boxes(original), _boxes(imported), tolerance)
    if splits:
        assert {Path(i.file).name: i.split for i in imported.images} == {
            Path(i.file).name: i.split for i in original.images
        }


def _source(format_name: str, exported: Path) -> Path:
    return {"coco": exported / "annotations.json", "voc": exported, "yolo": exported / "data.yaml"}.get(
        format_name, exported
    )


@pytest.mark.parametrize(
    ("format_name", "tolerance", "splits", "ordered"),
    [("coco", 1e-6, True, True), ("voc", 0.0, True, False), ("yolo", 1e-3, True, True), ("powerai", 0.0, False, True)],
)
def test_round_trip(
    shapes: Dataset, tmp_path: Path, format_name: str, tolerance: float, splits: bool, ordered: bool
) -> None:
    exported = tmp_path / ("out.zip" if format_name == "powerai" else "out")
    written = export_dataset(format_name, shapes.root, exported)
    assert written.images == len(shapes.images)
    summary = import_dataset(format_name, _source(format_name, exported), tmp_path / "back")
    assert (summary.clipped, summary.dropped, summary.crowd, summary.renamed) == (0, 0, 0, 0)
    imported = load_dataset(tmp_path / "back")
    assert imported.classes == shapes.classes if ordered else sorted(imported.classes) == sorted(shapes.classes)
    _assert_same(shapes, imported, tolerance, splits)
    for image in imported.images:
        assert imported.path(image).read_bytes() == (shapes.root / "images" / Path(image.file).name).read_bytes()


def test_coco_loads_in_pycocotools(shapes: Dataset, tmp_path: Path) -> None:
    coco_module = pytest.importorskip("pycocotools.coco")
    export_dataset("coco", shapes.root, tmp_path / "out")
    coco = coco_module.COCO(str(tmp_path / "out" / "annotations.json"))
    assert [c["name"] for c in coco.loadCats(coco.getCatIds())] == shapes.classes
    assert coco.getCatIds() == list(range(1, len(shapes.classes) + 1))
    assert len(coco.getImgIds()) == len(shapes.images)
    for number, image in enumerate(shapes.images, start=1):
        annotations = coco.loadAnns(coco.getAnnIds(imgIds=[number]))
        assert [a["area"] for a in annotations] == [(b.x2 - b.x1) * (b.y2 - b.y1) for b in image.boxes]
        assert (tmp_path / "out" / coco.loadImgs([number])[0]["file_name"]).is_file()


def test_voc_xml_is_one_based(shapes: Dataset, tmp_path: Path) -> None:
    export_dataset("voc", shapes.root, tmp_path / "out")
    image = shapes.images[0]
    root = ET.parse(tmp_path / "out" / "Annotations" / f"{Path(image.file).stem}.xml").getroot()
    assert (int(root.findtext("size/width")), int(root.findtext("size/height"))) == (image.width, image.height)
    found = [
        (o.findtext("name"), *(int(o.findtext(f"bndbox/{k}")) for k in ("xmin", "ymin", "xmax", "ymax")))
        for o in root.iter("object")
    ]
    assert found == [(b.label, int(b.x1) + 1, int(b.y1) + 1, int(b.x2), int(b.y2)) for b in image.boxes]
    listed = (tmp_path / "out" / "ImageSets" / "Main" / f"{image.split}.txt").read_text().split()
    assert Path(image.file).stem in listed


def test_voc_one_pixel_box_round_trips_exactly(tmp_path: Path) -> None:
    """xmin = xmax = 1 in VOC is the first pixel: forklift's [0, 1)."""
    voc = tmp_path / "voc"
    (voc / "Annotations").mkdir(parents=True)
    (voc / "JPEGImages").mkdir()
    synth = synth_shapes(tmp_path / "s", n=1, size=64, seed=0)
    (voc / "JPEGImages" / "a.png").write_bytes(synth.path(synth.images[0]).read_bytes())
    (voc / "Annotations" / "a.xml").write_text(
        "<annotation><filename>a.png</filename><size><width>64</width><height>64</height></size>"
        "<object><name>dot</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>1</xmax><ymax>1</ymax></bndbox></object>"
        "<object><name>dot</name><bndbox><xmin>5</xmin><ymin>6</ymin><xmax>64</xmax><ymax>64</ymax></bndbox></object>"
        "</annotation>"
    )
    import_dataset("voc", voc, tmp_path / "back")
    boxes = [(b.x1, b.y1, b.x2, b.y2) for b in load_dataset(tmp_path / "back").images[0].boxes]
    assert boxes == [(0.0, 0.0, 1.0, 1.0), (4.0, 5.0, 64.0, 64.0)]
    export_dataset("voc", tmp_path / "back", tmp_path / "again")
    assert (tmp_path / "again" / "Annotations" / "a.xml").read_text().count("<xmin>1</xmin>") == 1
    root = ET.parse(tmp_path / "again" / "Annotations" / "a.xml").getroot()
    assert [o.findtext("bndbox/xmax") for o in root.iter("object")] == ["1", "64"]


def test_yolo_labels_are_normalised(shapes: Dataset, tmp_path: Path) -> None:
    export_dataset("yolo", shapes.root, tmp_path / "out")
    config = yaml.safe_load((tmp_path / "out" / "data.yaml").read_text())
    assert config["names"] == shapes.classes and config["train"] == "images/train"
    lines = [line for path in (tmp_path / "out" / "labels").rglob("*.txt") for line in path.read_text().splitlines()]
    assert len(lines) == sum(len(i.boxes) for i in shapes.images)
    for line in lines:
        index, *values = line.split()
        assert 0 <= int(index) < len(shapes.classes)
        assert len(values) == 4 and all(0.0 <= float(v) <= 1.0 for v in values)


def test_coco_boxes_outside_and_empty_are_clipped_and_dropped(shapes: Dataset, tmp_path: Path) -> None:
    image = shapes.images[0]
    document = {
        "images": [{"id": 7, "file_name": Path(image.file).name, "width": 96, "height": 96}],
        "categories": [{"id": 40, "name": "cat"}, {"id": 3, "name": "dog"}],
        "annotations": [
            {"id": 1, "image_id": 7, "category_id": 40, "bbox": [80, -10, 30, 20]},
            {"id": 2, "image_id": 7, "category_id": 3, "bbox": [10, 10, 0, 5]},
            {"id": 3, "image_id": 7, "category_id": 3, "bbox": [200, 10, 5, 5]},
            {"id": 4, "image_id": 7, "category_id": 3, "bbox": [1, 2, 3, 4], "iscrowd": 1},
            {"id": 5, "image_id": 7, "category_id": 3, "bbox": [1.5, 2, 3, 4]},
        ],
    }
    (tmp_path / "coco.json").write_text(json.dumps(document))
    summary = import_dataset("coco", tmp_path / "coco.json", tmp_path / "back", images=shapes.root / "images")
    assert (summary.clipped, summary.dropped, summary.crowd, summary.boxes) == (1, 2, 1, 2)
    assert "2 empty boxes dropped (id 2, id 3)" in summary.line()  # where: a count alone left them unfound
    alike = {**document, "categories": [*document["categories"], {"id": 41, "name": "cat"}]}  # two ids, one name
    (tmp_path / "alike.json").write_text(json.dumps(alike))
    merged = import_dataset("coco", tmp_path / "alike.json", tmp_path / "alike", images=shapes.root / "images")
    said = "1 category names shared by several ids, each imported as one class: cat (ids 40, 41)"
    assert said in merged.changes()
    imported = load_dataset(tmp_path / "back")
    assert imported.classes == ["dog", "cat"]  # ordered by category id
    assert _boxes(imported)[Path(image.file).name] == [("cat", 80.0, 0.0, 96.0, 10.0), ("dog", 1.5, 2.0, 4.5, 6.0)]


def test_zip_member_outside_is_refused(shapes: Dataset, tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as archive:
        archive.writestr("../evil.xml", "<annotation/>")
    with pytest.raises(ForkliftError, match=r"'\.\./evil\.xml'") as caught:
        import_dataset("powerai", tmp_path / "evil.zip", tmp_path / "back")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "back").exists()


def test_xml_entities_are_refused(tmp_path: Path) -> None:
    (tmp_path / "voc" / "Annotations").mkdir(parents=True)
    (tmp_path / "voc" / "Annotations" / "a.xml").write_text(
        '<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x SYSTEM "file:///etc/passwd">]><annotation>&x;</annotation>'
    )
    with pytest.raises(ForkliftError, match="DOCTYPE"):
        import_dataset("voc", tmp_path / "voc", tmp_path / "back")


forklift_data = partial(forklift, "data", check=False)


@pytest.mark.slow  # over 1 s: left out of make test-fast
def test_cli_round_trip_and_bad_input(shapes: Dataset, tmp_path: Path) -> None:
    exported = forklift_data("export", "--to", "powerai", shapes.root, tmp_path / "shapes.zip")
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.startswith("exported 12 images") and exported.stdout.count("\n") == 1
    imported = forklift_data("import", "--from", "powerai", tmp_path / "shapes.zip", tmp_path / "back")
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith("imported 12 images") and "0 boxes clipped" in imported.stdout
    _assert_same(shapes, load_dataset(tmp_path / "back"), 0.0, splits=False)
    bad = forklift_data("import", "--from", "coco", tmp_path / "missing.json", tmp_path / "none")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "missing.json" in bad.stderr


def test_an_export_refuses_a_missing_image_or_one_of_another_size_in_one_line_and_leaves_no_out(
    shapes: Dataset, tmp_path: Path
) -> None:
    """A missing image file was a traceback (exit 1) and a half-written OUT; an image whose entry in dataset.json
    gives another size was exported with its boxes normalised by the entry's size (YOLO), where they were not
    drawn. Both are one line naming the file, in every format; OUT is not left, and an empty OUT stays empty."""
    data = tmp_path / "data"
    shutil.copytree(shapes.root, data)
    missing = load_dataset(data).images[3]
    (data / missing.file).unlink()
    (tmp_path / "empty").mkdir()
    for kind, out in [("coco", "c"), ("voc", "v"), ("yolo", "y"), ("powerai", "p.zip"), ("voc", "empty")]:
        result = forklift_data("export", "--to", kind, data, tmp_path / out)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"forklift: error: {data / missing.file}: no such image"), result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data", "empty"]
    assert not any((tmp_path / "empty").iterdir())
    resized = tmp_path / "resized"
    shutil.copytree(shapes.root, resized)
    dataset = load_dataset(resized)
    dataset.images[5] = replace(dataset.images[5], width=dataset.images[5].width + 3)
    save_dataset(dataset, resized)
    result = forklift_data("export", "--to", "yolo", resized, tmp_path / "y")
    assert result.returncode == 2 and not (tmp_path / "y").exists()
    width = dataset.images[5].width
    assert f"{resized / dataset.images[5].file}: dataset.json gives it as {width}x96, the file is 96x96" in (
        result.stderr
    )
    turned = tmp_path / "turned"  # a PNG turned by an EXIF tag after its pixels (as the app reads it): exported
    (turned / "images").mkdir(parents=True)
    upright = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 6  # 90° clockwise: 40 x 20 pixels, 20 x 40 upright
    Image.new("RGB", (40, 20)).save(upright, "PNG", exif=exif.tobytes())
    late = upright.getvalue()
    at, size = late.index(b"eXIf") - 4, int.from_bytes(late[late.index(b"eXIf") - 4 : late.index(b"eXIf")]) + 12
    chunk, late = late[at : at + size], late[:at] + late[at + size :]
    (turned / "images" / "late.png").write_bytes(late[:-12] + chunk + late[-12:])  # before IEND
    save_dataset(Dataset(Task.DETECT, ["dot"], [ImageRecord("images/late.png", 20, 40, "train",
                                                            [Box("dot", 2, 2, 8, 8)])], turned), turned)  # fmt: skip
    assert forklift_data("export", "--to", "yolo", turned, tmp_path / "late").returncode == 0


def test_an_export_of_boxes_alone_says_the_outlines_and_splits_it_leaves_out(shapes: Dataset, tmp_path: Path) -> None:
    """VOC, YOLO and PowerAI Vision hold boxes: an analyst's polygons were left out of them unsaid, and PowerAI
    Vision's zip (no splits) took val and test images in as train, unsaid."""
    data = tmp_path / "data"
    shutil.copytree(shapes.root, data)
    dataset = load_dataset(data)
    first = dataset.images[0].boxes[0]
    corners = ((first.x1, first.y1), (first.x2, first.y1), (first.x1, first.y2))
    dataset.images[0].boxes[0] = replace(first, polygon=corners)
    save_dataset(dataset, data)
    other = sum(image.split != "train" for image in dataset.images)
    assert other
    outlines = "1 outlined objects written as their boxes only (the format holds boxes; COCO keeps outlines)"
    for kind, out in [("voc", "v"), ("yolo", "y"), ("powerai", "p.zip"), ("coco", "c")]:
        notes = export_dataset(kind, data, tmp_path / out).notes
        assert (outlines in notes) == (kind != "coco"), notes
        splits = f"{other} val and test images go in as the others (PowerAI Vision's zip has no splits)"
        assert (splits in notes) == (kind == "powerai"), notes


@pytest.mark.parametrize("kind", ["coco", "yolo", "voc"])
@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_cli_imports_an_export_as_its_folder_or_its_zip(shapes: Dataset, tmp_path: Path, kind: str) -> None:
    """An export comes as a folder (what `data export` writes) or a zip of it (what the app's export gives): both
    import, the format's own file found inside; a folder without it is one line, exit 2, nothing left behind."""
    assert forklift_data("export", "--to", kind, shapes.root, tmp_path / "export").returncode == 0
    shutil.make_archive(str(tmp_path / "export"), "zip", tmp_path, "export")
    for given in (tmp_path / "export", tmp_path / "export.zip"):
        out = tmp_path / f"from-{given.name}"
        imported = forklift_data("import", "--from", kind, given, out)
        assert imported.returncode == 0, imported.stderr
        assert imported.stdout.startswith(f"imported {len(shapes.images)} images"), imported.stdout
        _assert_boxes(_boxes(shapes), _boxes(load_dataset(out)), 1.0)
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # the unpacked zip is gone
    (tmp_path / "empty").mkdir()
    refused = forklift_data("import", "--from", kind, tmp_path / "empty", tmp_path / "nothing")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "empty" in refused.stderr, refused.stderr
    assert not (tmp_path / "nothing").exists()


def test_yolo_names_only_the_splits_it_writes_and_makes_val_when_there_is_none(shapes: Dataset, tmp_path: Path) -> None:
    """data.yaml names a folder for each split it holds images of; a data set without val gets a seeded tenth of
    its train images as val (YOLO trainers need one), and the export says so."""
    all_train = Dataset(shapes.task, shapes.classes, [replace(i, split="train") for i in shapes.images], shapes.root)
    save_dataset(all_train, tmp_path / "train-only")
    for image in shapes.images:
        (tmp_path / "train-only" / image.file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(shapes.path(image), tmp_path / "train-only" / image.file)
    exported = forklift_data("export", "--to", "yolo", tmp_path / "train-only", tmp_path / "yolo")
    assert exported.returncode == 0 and "no val split: 1 of its 12 train images (seeded) are val" in exported.stdout
    config = yaml.safe_load((tmp_path / "yolo" / "data.yaml").read_text())
    assert {"train", "val"} <= set(config) and "test" not in config
    for split in ("train", "val"):
        assert (tmp_path / "yolo" / config[split]).is_dir() and any((tmp_path / "yolo" / config[split]).iterdir())
    assert len(list((tmp_path / "yolo" / "labels" / "val").iterdir())) == 1
    back = load_dataset(import_dataset("yolo", tmp_path / "yolo" / "data.yaml", tmp_path / "back").out)
    assert sorted(i.split for i in back.images).count("val") == 1


# ---- defective sources: import what can be imported, report the rest -----------------------------------------------


def _assert_kept(original: Dataset, out: Path, tolerance: float, *, gone: set[str]) -> Dataset:
    """The data set at out holds every image of original except those named in gone, each with all its boxes."""
    imported = load_dataset(out)
    expected = {name: boxes for name, boxes in _boxes(original).items() if name not in gone}
    _assert_boxes(expected, _boxes(imported), tolerance)
    return imported


def test_an_image_id_used_twice_and_a_source_of_no_images_are_refused_and_a_box_alone_paints_nothing(
    shapes: Dataset, tmp_path: Path
) -> None:
    """Two images of one id each got the other's boxes, exit 0; a COCO file or data.yaml that lists no image made an
    empty data set, exit 0; a segment import painted nothing for a box with `segmentation: []` (a detect export's),
    unsaid, and counted such a crowd box as a region marked ignore."""
    export_dataset("coco", shapes.root, tmp_path / "coco")
    path = tmp_path / "coco" / "annotations.json"
    document = json.loads(path.read_text())
    twice = {**document, "images": [*document["images"], {**document["images"][4], "id": document["images"][1]["id"]}]}
    (tmp_path / "coco" / "twice.json").write_text(json.dumps(twice))
    result = forklift_data("import", "--from", "coco", tmp_path / "coco" / "twice.json", tmp_path / "twice")
    assert result.returncode == 2 and not (tmp_path / "twice").exists()
    assert f"twice.json: images[12]: image id {document['images'][1]['id']} is used twice (images[1] too)" in (
        result.stderr
    )
    (tmp_path / "coco" / "none.json").write_text(json.dumps({**document, "images": [], "annotations": []}))
    (tmp_path / "misspelt.yaml").write_text("names: [circle]\ntraining: images\n")
    for source, message in [(tmp_path / "coco" / "none.json", "none.json: lists no images: nothing to import"),
                            (tmp_path / "misspelt.yaml", "misspelt.yaml: names no folder of images (none of the keys "
                                                         "train, val, test)")]:  # fmt: skip
        kind = "yolo" if source.suffix == ".yaml" else "coco"
        result = forklift_data("import", "--from", kind, source, tmp_path / "empty")
        assert result.returncode == 2 and message in result.stderr and not (tmp_path / "empty").exists()
    boxes_alone = [a for a in document["annotations"] if not a["segmentation"]]
    boxes_alone[0]["iscrowd"] = 1
    path.write_text(json.dumps(document))
    result = forklift_data("import", "--from", "coco", "--task", "segment", path, tmp_path / "masks")
    assert result.returncode == 1 and "(masks; 0 crowd regions marked ignore" in result.stdout
    assert f"skipped {len(boxes_alone)} annotations with no region to paint (their segmentation empty" in (
        result.stdout
    )


def test_coco_skips_unknown_ids_and_missing_images(shapes: Dataset, tmp_path: Path) -> None:
    export_dataset("coco", shapes.root, tmp_path / "coco")
    path = tmp_path / "coco" / "annotations.json"
    document = json.loads(path.read_text())
    first = document["annotations"][0]
    strays = [(901, 999, first["category_id"]), (902, 999, 1), (903, 1000, 1), (904, 1001, 1), (905, 1, 77)]
    document["annotations"] += [
        {**first, "id": ident, "image_id": image, "category_id": category} for ident, image, category in strays
    ]
    path.write_text(json.dumps(document))
    for name in ("000003.png", "000005.png"):
        (tmp_path / "coco" / "images" / name).unlink()
    summary = import_dataset("coco", path, tmp_path / "back")
    assert summary.lines() == [
        summary.line(),
        "skipped 4 annotations naming unknown image ids "
        "(first: id 901 -> image 999, id 902 -> image 999, id 903 -> image 1000, ...)",
        "skipped 1 annotation naming an unknown category id (id 905 -> category 77)",
        "skipped 2 images not found in the import (first: images/000003.png, images/000005.png)",
    ]
    assert summary.skipped == 7 and summary.images == 10
    imported = _assert_kept(shapes, tmp_path / "back", 1e-6, gone={"000003.png", "000005.png"})
    assert summary.boxes == sum(len(image.boxes) for image in imported.images) == 28
    assert _boxes(imported)["000001.png"][0] == _boxes(shapes)["000001.png"][0]


def test_coco_with_no_image_importable_is_one_line(shapes: Dataset, tmp_path: Path) -> None:
    export_dataset("coco", shapes.root, tmp_path / "coco")
    for image in (tmp_path / "coco" / "images").iterdir():
        image.unlink()
    with pytest.raises(
        ForkliftError, match=r"^nothing could be imported: skipped 12 images not found in the import"
    ) as caught:
        import_dataset("coco", tmp_path / "coco" / "annotations.json", tmp_path / "back")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "back").exists()


def test_voc_skips_unreadable_xml_and_missing_images(shapes: Dataset, tmp_path: Path) -> None:
    voc = tmp_path / "voc"
    export_dataset("voc", shapes.root, voc)
    (voc / "JPEGImages" / "000004.png").unlink()
    (voc / "Annotations" / "000006.xml").write_text("<annotation><object>")  # cut off
    bad = voc / "Annotations" / "000008.xml"
    bad.write_text(bad.read_text().replace("<xmin>", "<xmin>x", 1))
    tagged = voc / "Annotations" / "000001.xml"  # CVAT's extra fields are ignored, not a defect
    extra = "<occluded>0</occluded><attributes><attribute><name>colour</name></attribute></attributes>"
    tagged.write_text(tagged.read_text().replace("<pose>", f"{extra}<pose>"))
    hard = voc / "Annotations" / "000002.xml"  # a difficult object was kept as any other, unsaid
    hard.write_text(hard.read_text().replace("<difficult>0</difficult>", "<difficult>1</difficult>", 1))
    summary = import_dataset("voc", voc, tmp_path / "back")
    assert summary.skipped == 3 and summary.images == 9 and len(summary.lines()) == 3
    assert summary.line().endswith("0 files renamed, 1 objects marked difficult kept as boxes)"), summary.line()
    assert summary.changes() == ["1 objects marked difficult (VOC) kept as boxes like the others: VOC's mAP leaves "
                                 "them out"]  # fmt: skip
    assert (
        summary.lines()[1]
        == "skipped 1 annotation file whose image is not found in the import (000004.xml -> 000004.png)"
    )
    assert summary.lines()[2].startswith("skipped 2 malformed annotation files (first: 000006.xml (not valid XML: ")
    assert "000008.xml (object 1 <xmin>: 'x" in summary.lines()[2]
    gone = {"000004.png", "000006.png", "000008.png"}
    imported = _assert_kept(shapes, tmp_path / "back", 0.0, gone=gone)
    assert len(_boxes(imported)["000001.png"]) == 2


def test_yolo_skips_bad_lines_orphan_labels_and_unreadable_images(shapes: Dataset, tmp_path: Path) -> None:
    yolo = tmp_path / "yolo"
    export_dataset("yolo", shapes.root, yolo)
    (yolo / "images" / "train" / "000003.png").unlink()
    (yolo / "images" / "train" / "000005.png").write_bytes(b"not an image")
    with (yolo / "labels" / "train" / "000001.txt").open("a") as labels:
        labels.write("7 0.5 0.5 0.1 0.1\n0 0.5 0.5\n")
    config = yaml.safe_load((yolo / "data.yaml").read_text())
    config["val"] = ["images/val", "images/extra", "images/train"]  # train's folder again, as coco128 names it
    (yolo / "data.yaml").write_text(yaml.safe_dump(config))
    summary = import_dataset("yolo", yolo / "data.yaml", tmp_path / "back")
    assert summary.lines()[1:] == [
        "skipped 1 label line with a class index out of range (labels/train/000001.txt:3 class 7)",
        "skipped 1 label line that is not 'class cx cy w h' or 'class x1 y1 x2 y2 x3 y3 ...' "
        "(labels/train/000001.txt:4 '0 0.5 0.5')",
        "skipped 1 unreadable image (images/train/000005.png)",
        "skipped 1 annotation file whose image is not found in the import (labels/train/000003.txt)",
        "skipped 1 split folder missing (val: images/extra)",
        "skipped 1 split folder read already for another split (val: images/train (read as train))",
    ]
    assert summary.skipped == 6 and summary.images == 10  # each image once
    imported = _assert_kept(shapes, tmp_path / "back", 1e-3, gone={"000003.png", "000005.png"})
    assert len(_boxes(imported)["000001.png"]) == 2  # its good lines, without the two bad ones


def test_yolo_segment_lines_are_polygons_and_coco_masks_kept_as_boxes_are_counted(
    shapes: Dataset, tmp_path: Path
) -> None:
    """Ultralytics' segment labels (`class x1 y1 x2 y2 ...`) were skipped as malformed, their images imported with
    the objects of the other lines only; COCO's RLE masks and objects in several parts became boxes, unsaid."""
    yolo = tmp_path / "yolo"
    export_dataset("yolo", shapes.root, yolo)
    (yolo / "labels" / "train" / "000001.txt").write_text(
        "0 0.25 0.25 0.75 0.25 0.5 0.75\n1 0.5 0.5 0.2 0.2\n2 0.75 0.5 1.25 0.5 1.25 0.75\n1 nan 0.5 0.1 0.1\n"
    )  # the third an object cut by the frame: its outline was dropped, its box kept alone
    summary = import_dataset("yolo", yolo / "data.yaml", tmp_path / "back")
    assert summary.skipped == 0 and summary.clipped == 1 and summary.boxed == 0
    assert summary.changes()[-1] == "1 empty boxes dropped (labels/train/000001.txt:4)"
    polygon, box, cut = next(
        image.boxes for image in load_dataset(tmp_path / "back").images if image.file.endswith("1.png")
    )
    assert polygon.polygon == ((24.0, 24.0), (72.0, 24.0), (48.0, 72.0)) and (polygon.x1, polygon.y2) == (24.0, 72.0)
    assert box.polygon is None and (box.x1, box.x2) == pytest.approx((38.4, 57.6))
    assert cut.polygon == ((72.0, 48.0), (96.0, 48.0), (96.0, 72.0)) and (cut.x1, cut.x2) == (72.0, 96.0)
    config = yaml.safe_load((yolo / "data.yaml").read_text())
    (yolo / "data.yaml").write_text(yaml.safe_dump({**config, "kpt_shape": [2, 3]}))  # a pose set: box, then points
    (yolo / "labels" / "train" / "000001.txt").write_text("1 0.5 0.5 0.2 0.2 0.45 0.45 2 0.55 0.55 2\n"
                                                          "0 0.3 0.3 0.1 0.1\n")  # fmt: skip  # a box alone too
    posed = import_dataset("yolo", yolo / "data.yaml", tmp_path / "pose")
    assert posed.changes() == ["1 boxes of a pose set kept without their keypoints"]  # said, not dropped unsaid
    assert posed.skipped == 0  # the box alone was "malformed"
    pose, alone = next(image.boxes for image in load_dataset(tmp_path / "pose").images if image.file.endswith("1.png"))
    assert pose.polygon is None and (pose.x1, pose.x2) == pytest.approx((38.4, 57.6))  # its 10 values no polygon
    assert (alone.label, alone.x1, alone.x2) == ("circle", pytest.approx(24.0), pytest.approx(33.6))
    image = shapes.images[0]
    two_parts, one = [[1, 1, 9, 1, 5, 8], [20, 20, 30, 20, 25, 28]], [[60, 60, 69, 60, 64, 69]]
    document = {
        "images": [{"id": 7, "file_name": Path(image.file).name, "width": 96, "height": 96}],
        "categories": [{"id": 3, "name": "dog"}],
        "annotations": [
            {"id": 1, "image_id": 7, "category_id": 3, "bbox": [1, 1, 29, 27], "segmentation": two_parts},
            {"id": 2, "image_id": 7, "category_id": 3, "bbox": [40, 40, 9, 9], "segmentation": {"size": [96, 96],
                                                                                              "counts": "PPYo1"}},
            {"id": 3, "image_id": 7, "category_id": 3, "bbox": [60, 60, 9, 9], "segmentation": one},
            {"id": 4, "image_id": 7, "category_id": 3, "bbox": [70, 70, 9, 9], "iscrowd": 1},
        ],
    }  # fmt: skip
    (tmp_path / "coco.json").write_text(json.dumps(document))
    summary = import_dataset("coco", tmp_path / "coco.json", tmp_path / "coco", images=shapes.root / "images")
    assert (summary.boxed, summary.crowd, summary.boxes) == (2, 1, 3)
    assert summary.changes() == [
        "1 crowd regions (iscrowd: 1) skipped: their objects are not labelled",
        "2 outlines kept as their boxes only (an RLE mask, or an object in several parts)",
    ]


@pytest.mark.parametrize("json_at", ["annotations/instances_default.json", "instances.json"], ids=["cvat", "top"])
def test_a_coco_zip_with_its_images_in_a_folder_beside_the_json_imports(json_at: str, tmp_path: Path) -> None:
    """As CVAT lays a COCO export out (annotations/ and images/), or a JSON at the top with images/: the file names
    are found in images/."""
    picture = tmp_path / "a.png"
    Image.new("RGB", (40, 30), "white").save(picture)
    coco = {"images": [{"id": 1, "file_name": "a.png", "width": 40, "height": 30}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 3, 10, 12], "area": 120,
                             "iscrowd": 0}],
            "categories": [{"id": 1, "name": "thing"}]}  # fmt: skip
    with zipfile.ZipFile(tmp_path / "export.zip", "w") as archive:
        archive.writestr(json_at, json.dumps(coco))
        archive.write(picture, "images/a.png")
    summary = import_dataset("coco", tmp_path / "export.zip", tmp_path / "back")
    assert summary.images == 1 and summary.skipped == 0, summary.lines()
    (image,) = load_dataset(tmp_path / "back").images
    assert [(b.label, b.x1, b.y1, b.x2, b.y2) for b in image.boxes] == [("thing", 2, 3, 12, 15)]


def _damage(archive: Path, member: str) -> None:
    """Flip one byte of a stored member's data, so reading it fails its CRC check."""
    with zipfile.ZipFile(archive) as opened:
        offset = opened.getinfo(member).header_offset
    data = bytearray(archive.read_bytes())
    name_length, extra_length = (int.from_bytes(data[offset + i : offset + i + 2], "little") for i in (26, 28))
    data[offset + 30 + name_length + extra_length + 100] ^= 0xFF
    archive.write_bytes(bytes(data))


def test_powerai_skips_missing_damaged_and_malformed_members(shapes: Dataset, tmp_path: Path) -> None:
    export_dataset("powerai", shapes.root, tmp_path / "clean.zip")
    with zipfile.ZipFile(tmp_path / "clean.zip") as clean, zipfile.ZipFile(tmp_path / "bad.zip", "w") as bad:
        for name in clean.namelist():
            if name != "000002.png":
                bad.writestr(name, clean.read(name))
        bad.writestr("broken.xml", "<annotation><object><name>x</name>")
    _damage(tmp_path / "bad.zip", "000009.png")
    summary = import_dataset("powerai", tmp_path / "bad.zip", tmp_path / "back")
    assert summary.skipped == 3 and summary.images == 10 and len(summary.lines()) == 4
    assert (
        summary.lines()[1]
        == "skipped 1 annotation file whose image is not found in the import (000002.xml -> 000002.png)"
    )
    assert summary.lines()[2].startswith("skipped 1 malformed annotation file (broken.xml (not valid XML: ")
    assert summary.lines()[3].startswith("skipped 1 unreadable image (000009.png (damaged in the zip: Bad CRC-32")
    _assert_kept(shapes, tmp_path / "back", 0.0, gone={"000002.png", "000009.png"})


def test_masks_skip_missing_orphan_and_misfit_masks(tmp_path: Path) -> None:
    segment = synth_shapes(tmp_path / "segment", n=5, size=64, seed=2, task="segment")
    source = tmp_path / "png"
    export_dataset("masks", segment.root, source)
    (source / "masks" / "000002.png").unlink()
    (source / "masks" / "extra.png").write_bytes((source / "masks" / "000001.png").read_bytes())
    with Image.open(source / "masks" / "000004.png") as mask:
        mask.resize((32, 32), Image.NEAREST).save(source / "masks" / "000004.png")
    summary = import_dataset("masks", source, tmp_path / "back")
    assert summary.lines()[1:] == [
        "skipped 1 image without a mask (000002.png)",
        "skipped 1 mask of another size than its image (000004.png (the mask is 32x32, its image 64x64))",
        "skipped 1 mask without an image (extra.png)",
    ]
    assert summary.skipped == 3 and summary.images == 3
    imported = load_dataset(tmp_path / "back")
    kept = {Path(image.file).name: load_mask(imported, image) for image in imported.images}
    assert sorted(kept) == ["000001.png", "000003.png", "000005.png"]
    for image in segment.images:
        if Path(image.file).name in kept:
            assert (kept[Path(image.file).name] == load_mask(segment, image)).all()


def test_cli_exits_1_when_anything_was_skipped(shapes: Dataset, tmp_path: Path) -> None:
    export_dataset("coco", shapes.root, tmp_path / "coco")
    source = tmp_path / "coco" / "annotations.json"
    clean = forklift_data("import", "--from", "coco", source, tmp_path / "clean")
    assert clean.returncode == 0 and clean.stdout.count("\n") == 1, clean.stderr
    (tmp_path / "coco" / "images" / "000007.png").unlink()
    skipped = forklift_data("import", "--from", "coco", source, tmp_path / "skipped")
    assert skipped.returncode == 1, skipped.stderr
    assert skipped.stdout.splitlines()[0].startswith("imported 11 images")
    assert skipped.stdout.splitlines()[1:] == ["skipped 1 image not found in the import (images/000007.png)"]
