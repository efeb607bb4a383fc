"""(c) The original design's instance: Flask on waitress, PyTorch eager, one process with one thread.

`run.py` starts two of these behind NGINX (`least_conn`), each with OMP_NUM_THREADS=1:

    OMP_NUM_THREADS=1 .venv/bin/python bench/serve/flask_app.py MODEL_DIR --port 8101

It answers `POST /predict/<model>` (multipart `files`) with forklift's result JSON, and `GET /healthz`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from flask import Flask, jsonify, request
from waitress import serve

from forklift.model_files.model_dir import open_model_dir
from forklift.runtime.base import PredictOptions
from forklift.runtime.load import load_predictor


def build_app(model_dir: Path) -> Flask:
    torch.set_num_threads(1)
    predictor = load_predictor(open_model_dir(model_dir), "torch", PredictOptions(threads=1))
    app = Flask(__name__)

    @app.post("/predict/<model>")
    def predict(model: str):  # one model per instance: any name answers
        images = [(f.filename or "image", f.read()) for f in request.files.getlist("files")]
        return jsonify(predictor.predict(images).to_json())

    @app.get("/healthz")
    def healthz():
        return {"status": "OK"}

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    serve(build_app(args.model_dir), host="127.0.0.1", port=args.port, threads=1, _quiet=True)


if __name__ == "__main__":
    main()
