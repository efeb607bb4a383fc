"""An import reads only its own files: a COCO `file_name`, a YOLO `path:` or a VOC `<filename>` that points
elsewhere on the machine (absolute, or climbing out with `..`) is read as not there, and said in the same words as
a file that is not there at all, so an import cannot probe the machine's files either. Through the CLI and through
the app's zip upload."""

from __future__ import annotations

import json
from pathlib import Path

from app_helpers import app_client, fresh_database, png, zip_of

from forklift.cli import main
from forklift.data.interchange import import_dataset

SECRET = png(seed=42)


def _private(tmp_path: Path) -> Path:
    """An image outside the import, as another user's or the server's own would be."""
    folder = tmp_path / "private"
    folder.mkdir()
    (folder / "secret.png").write_bytes(SECRET)
    return folder / "secret.png"


def _coco(folder: Path, names: list[str]) -> Path:
    (folder / "images").mkdir(parents=True)
    (folder / "images" / "ok.png").write_bytes(png(seed=1))
    images = [{"id": k + 1, "file_name": name, "width": 64, "height": 48} for k, name in enumerate(names)]
    document = {"images": images, "categories": [{"id": 1, "name": "thing"}],
                "annotations": [{"id": k + 1, "image_id": k + 1, "category_id": 1, "bbox": [1, 1, 10, 10]}
                                for k in range(len(names))]}  # fmt: skip
    (folder / "annotations.json").write_text(json.dumps(document))
    return folder / "annotations.json"


def _copied(out: Path) -> list[bytes]:
    return [path.read_bytes() for path in (out / "images").iterdir()]


def test_coco_file_names_outside_the_import_are_not_read(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    secret = _private(tmp_path)
    source = _coco(tmp_path / "coco", ["images/ok.png", str(secret), "../private/secret.png", "../private/none.png",
                                       "images/none.png"])  # fmt: skip
    assert main(["data", "import", "--from", "coco", str(source), str(tmp_path / "out")]) == 1  # 1: items skipped
    said = capsys.readouterr()
    assert f"skipped 4 images not found in the import (first: {secret}, ../private/secret.png" in said.out + said.err
    assert _copied(tmp_path / "out") == [png(seed=1)]


def test_a_yolo_path_outside_the_import_is_not_listed(tmp_path: Path) -> None:
    secret = _private(tmp_path)
    folder = tmp_path / "yolo"
    (folder / "images" / "train").mkdir(parents=True)
    (folder / "labels" / "train").mkdir(parents=True)
    (folder / "images" / "train" / "ok.png").write_bytes(png(seed=1))
    (folder / "labels" / "train" / "ok.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    for path in (str(secret.parent), "../private"):
        (folder / "data.yaml").write_text(f"path: {path}\ntrain: .\nval: ../yolo/images/train\nnames: [thing]\n")
        out = tmp_path / f"out-{len(path)}"
        summary = import_dataset("yolo", folder / "data.yaml", out)
        assert summary.lines()[1:] == ["skipped 1 split folder missing (train: .)"], summary.lines()
        assert SECRET not in _copied(out)


def test_a_voc_filename_outside_the_import_is_not_read(tmp_path: Path) -> None:
    secret = _private(tmp_path)
    voc = tmp_path / "voc"
    (voc / "Annotations").mkdir(parents=True)
    (voc / "JPEGImages").mkdir()
    (voc / "JPEGImages" / "ok.png").write_bytes(png(seed=1))
    box = "<object><name>thing</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>9</xmax><ymax>9</ymax></bndbox></object>"
    for stem, name in (("ok", "ok.png"), ("abs", str(secret)), ("up", "../../private/secret.png")):
        (voc / "Annotations" / f"{stem}.xml").write_text(f"<annotation><filename>{name}</filename>{box}</annotation>")
    summary = import_dataset("voc", voc, tmp_path / "out")
    assert summary.images == 1 and summary.lines()[1].startswith(
        "skipped 2 annotation files whose image is not found in the import"
    )
    assert _copied(tmp_path / "out") == [png(seed=1)]


def test_the_apps_zip_import_reads_only_the_zip(tmp_path: Path) -> None:
    secret = _private(tmp_path)
    names = [str(secret), "../../private/secret.png", "images/ok.png"]
    images = [{"id": k + 1, "file_name": name, "width": 64, "height": 48} for k, name in enumerate(names)]
    document = {"images": images, "categories": [{"id": 1, "name": "thing"}], "annotations": []}
    archive = zip_of({"annotations.json": json.dumps(document).encode(), "images/ok.png": png(seed=1)})
    with app_client(tmp_path / "app", fresh_database(None, tmp_path)) as client:
        dataset = client.post("/api/datasets", json={"name": "imported"}).json()["id"]
        answer = client.post(f"/api/datasets/{dataset}/import", data={"format": "coco"},
                             files={"file": ("export.zip", archive)})  # fmt: skip
        assert answer.status_code == 201, answer.text
        assert [i["original_name"] for i in answer.json()["added"]] == ["ok.png"]
        refused = " | ".join(answer.json()["refused"])
        assert "2 images not found in the import" in refused, refused
        served = [client.get(f"/api/images/{i['id']}/file").content for i in answer.json()["added"]]
        assert SECRET not in served
