"""`forklift predict`: files in, result JSON out; a bad file is reported and the others still run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from forklift.data.file_names import unique_name
from forklift.errors import ForkliftError
from forklift.model_files.model_dir import open_model_dir
from forklift.runtime.base import PredictOptions
from forklift.runtime.load import load_predictor
from forklift.vision.images import IMAGE_FORMATS, encode_image
from forklift.vision.results import ImageResult, Prediction
from forklift.vision.style_adjust import StyleAdjust
from forklift.vocabulary import Precision, ResizeMode, Runtime

SAVED_QUALITY = 95  # JPEG quality of the images `predict --out` writes


def _read(path: Path) -> bytes | str:
    """The file's bytes, or why it cannot be read."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return f"{path}: no such file"
    except IsADirectoryError:
        return f"{path}: is a directory, not an image"
    except OSError as exc:
        return f"{path}: cannot read: {exc.strerror}"


def predict_files(
    model_dir: Path,
    images: Sequence[Path],
    *,
    runtime: Runtime | None = None,
    precision: Precision | None = None,
    threads: int | None = None,
    conf: float | None = None,
    iou: float | None = None,
    resize: ResizeMode | None = None,
    max_pixels: int = 100_000_000,
    style: StyleAdjust | None = None,
) -> Prediction:
    model = open_model_dir(model_dir)
    options = PredictOptions(
        conf=conf,
        iou=iou,
        resize=resize,
        threads=threads,
        max_pixels=max_pixels,
        precision=precision,
        style=style or StyleAdjust(),
    )
    predictor = load_predictor(model, runtime, options)
    prediction = Prediction()
    for path in tqdm(images, desc="predict", unit="image", disable=None, leave=False):
        data = _read(path)
        if isinstance(data, str):
            prediction.results.append(ImageResult(file=str(path), error=data))
            continue
        one = predictor.predict([(str(path), data)])
        prediction.results.extend(one.results)
        prediction.timing.add(one.timing)
    return prediction


def save_images(prediction: Prediction, out: Path) -> None:
    """Write each answered image to `out` under its input's name (PNG inputs stay PNG, others become JPEG), made
    unique (`x_2.jpg`) where two inputs share one (a/x.jpg and b/x.jpg, or one image given twice): the second
    overwrote the first."""
    out.mkdir(parents=True, exist_ok=True)
    taken: set[str] = set()
    for result in prediction.results:
        if result.image is None:
            continue
        source = Path(result.file)
        image_format = "png" if source.suffix.lower() == ".png" else "jpeg"
        path = out / unique_name(source.stem + IMAGE_FORMATS[image_format][0], taken)
        try:
            path.write_bytes(encode_image(result.image, image_format=image_format, quality=SAVED_QUALITY))
        except OSError as exc:
            raise ForkliftError(f"{path}: cannot write the image: {exc.strerror}") from exc
        result.saved = str(path)


def print_table(prediction: Prediction) -> None:
    """A readable table: one line per detection (or class, or segment with its pixels, or styled image and where
    it went), errors in place."""
    if any(result.image is None and result.error is None for result in prediction.results):
        print(f"{'file':<28} {'label':<16} {'score':>6}  box (x1, y1, x2, y2)")
    for result in prediction.results:
        name = Path(result.file).name
        if result.error is not None:
            print(f"{name:<28} error: {result.error}")
            continue
        if result.image is not None:
            height, width = result.image.shape[:2]
            print(f"{name:<28} styled {width}x{height} -> {result.saved}")
            continue
        if result.classes is not None:
            for c in result.classes:
                print(f"{name:<28} {c.label:<16} {c.score:>6.3f}")
            continue
        for segment in result.segments or []:
            height, width = segment.mask["size"]
            share = segment.pixels / (height * width)
            print(f"{name:<28} {segment.label:<16} {segment.pixels:>8} pixels ({share:.1%})")
        if result.segments is not None:
            continue
        if not result.detections:
            print(f"{name:<28} (nothing found)")
        for d in result.detections or []:
            box = f"{round(d.x1)}, {round(d.y1)}, {round(d.x2)}, {round(d.y2)}"
            print(f"{name:<28} {d.label:<16} {d.score:>6.3f}  {box}")
    t = prediction.timing
    print(
        f"timing: preprocessing {t.preprocessing:.3f} s, inference {t.inference:.3f} s, "
        f"postprocessing {t.postprocessing:.3f} s"
    )
