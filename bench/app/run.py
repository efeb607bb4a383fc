"""The app with 10,000 images, on SQLite and on PostgreSQL: grid pages, the first grid page in Chromium, saving an
annotation, exporting everything as COCO (and the server's memory meanwhile), importing images.

Method: 10,000 generated shapes images (96 px PNG, `forklift.data.synth`) written as a COCO export by forklift's
own writer, zipped, and imported into a data set through `POST /api/datasets/{id}/import` (format coco) of a real
`forklift app` process; 1,000 more as a zip of plain images (format images). Then, against the same server:
200 grid page requests (`GET .../images?offset=RANDOM&limit=100`); the data set page opened in Debian's Chromium
until its 100 tiles are there and every thumbnail in the window is drawn (the others load as they are scrolled
to; cold: thumbnails made on request, warm: a second visit); 300 annotation saves (`PUT
/api/images/{id}/annotations`, each from the version the last one returned); and an export of all 10,000 as a
COCO zip while the server's resident memory is sampled every 20 ms. Goals: grid p99 < 100 ms, first page < 1 s,
save p99 < 50 ms, memory growth during export < 200 MB.

    .venv/bin/python bench/app/run.py [--images 10000] [--backends sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from app_helpers import start_app  # noqa: E402 - the test helpers, found through the line above
from postgres import postgres_server  # noqa: E402

from forklift.data.interchange import export_dataset  # noqa: E402
from forklift.data.synth import synth_shapes  # noqa: E402
from forklift.serve.process import free_port  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "app"
FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]  # fmt: skip


def _zip_folder(folder: Path, archive: Path) -> Path:
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zipped:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zipped.write(path, path.relative_to(folder))
    return archive


def _percentiles(values: list[float]) -> dict:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": statistics.median(values), "p90": cuts[89], "p99": cuts[98], "n": len(values)}


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _first_page_ms(url: str, dataset: int) -> float:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        started = time.perf_counter()
        page.goto(f"{url}/#/datasets/{dataset}")
        visible = "[...document.querySelectorAll('.tile img')].filter(i => i.getBoundingClientRect().top < innerHeight)"
        drawn = f"{visible}.every(i => i.complete && i.naturalWidth > 0)"  # thumbnails load lazily, as scrolled to
        page.wait_for_function(f"document.querySelectorAll('.tile img').length === 100 && {drawn}", timeout=60000)
        seconds = time.perf_counter() - started
        browser.close()
    return seconds * 1000


def measure(backend: str, db: str | None, coco_zip: Path, images_zip: Path, images: int, work: Path) -> dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_app(work / f"data-{backend}", port, db=db)
    client = httpx.Client(base_url=url, timeout=600)
    try:
        result: dict = {}
        dataset = client.post("/api/datasets", json={"name": "ten thousand"}).json()["id"]
        started = time.perf_counter()
        imported = client.post(f"/api/datasets/{dataset}/import", data={"format": "coco"},
                               files={"file": ("coco.zip", coco_zip.read_bytes())})  # fmt: skip
        seconds = time.perf_counter() - started
        added = len(imported.json()["added"])
        result["import_coco"] = {"images": added, "seconds": seconds, "images_per_s": added / seconds}
        other = client.post("/api/datasets", json={"name": "plain images"}).json()["id"]
        started = time.perf_counter()
        plain = client.post(f"/api/datasets/{other}/import", files={"file": ("images.zip", images_zip.read_bytes())})
        seconds = time.perf_counter() - started
        result["import_images"] = {"images": len(plain.json()["added"]), "seconds": seconds,
                                   "images_per_s": len(plain.json()["added"]) / seconds}  # fmt: skip
        print(
            f"{backend}: imported {added} ({result['import_coco']['images_per_s']:.0f}/s), "
            f"{result['import_images']['images']} plain ({result['import_images']['images_per_s']:.0f}/s)",
            flush=True,
        )

        grid = []
        for _ in range(200):
            offset = random.randrange(0, max(1, images - 100))
            started = time.perf_counter()
            assert client.get(f"/api/datasets/{dataset}/images?offset={offset}&limit=100").status_code == 200
            grid.append((time.perf_counter() - started) * 1000)
        result["grid_page_ms"] = _percentiles(grid)
        result["first_page_ms"] = {"cold": _first_page_ms(url, dataset), "warm": _first_page_ms(url, dataset)}

        image = client.get(f"/api/datasets/{dataset}/images?limit=1").json()["items"][0]
        version, saves = client.get(f"/api/images/{image['id']}/annotations").json()["version"], []
        for k in range(300):
            shapes = [{"kind": "box", "label": "circle", "points": [1, 1, 10 + k % 50, 20]}]
            started = time.perf_counter()
            answer = client.put(f"/api/images/{image['id']}/annotations", json={"version": version, "shapes": shapes})
            saves.append((time.perf_counter() - started) * 1000)
            version = answer.json()["version"]
        result["save_ms"] = _percentiles(saves)

        before, peak, sampling = _rss_mib(server.pid), [0.0], threading.Event()

        def sample() -> None:
            while not sampling.is_set():
                peak[0] = max(peak[0], _rss_mib(server.pid))
                time.sleep(0.02)

        watcher = threading.Thread(target=sample)
        watcher.start()
        started, size = time.perf_counter(), 0
        with client.stream("GET", f"/api/datasets/{dataset}/export?format=coco") as response:
            for chunk in response.iter_bytes(1 << 20):
                size += len(chunk)
        seconds = time.perf_counter() - started
        sampling.set()
        watcher.join()
        result["export"] = {"bytes": size, "seconds": seconds, "rss_before_mib": before, "rss_peak_mib": peak[0],
                            "rss_growth_mib": peak[0] - before}  # fmt: skip
        print(f"{backend}: {json.dumps(result)}", flush=True)
        return result
    finally:
        client.close()
        server.terminate()
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--plain", type=int, default=1_000, help="images in the plain-images import")
    parser.add_argument("--backends", default="sqlite,postgresql")
    args = parser.parse_args()
    random.seed(0)
    work = Path(tempfile.mkdtemp(prefix="forklift-app-bench-"))
    try:
        synth_shapes(work / "shapes", args.images, 96, seed=0)
        export_dataset("coco", work / "shapes", work / "coco")
        coco_zip = _zip_folder(work / "coco", work / "coco.zip")
        synth_shapes(work / "plain", args.plain, 96, seed=1)
        images_zip = _zip_folder(work / "plain" / "images", work / "images.zip")
        results: dict = {"machine": platform.machine(), "images": args.images}
        for backend in args.backends.split(","):
            if backend == "postgresql":
                with postgres_server() as url:
                    results[backend] = measure(backend, url, coco_zip, images_zip, args.images, work)
            else:
                results[backend] = measure(backend, None, coco_zip, images_zip, args.images, work)
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "app.json").write_text(json.dumps(results, indent=2) + "\n")
        print(json.dumps(results, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
