"""(d) LitServe serving the same ONNX model with ONNX Runtime through forklift's predictor.

    .venv/bin/python bench/serve/litserve_app.py MODEL_DIR --port 8201 [--workers 2] [--threads 1]
                     [--max-batch 1] [--batch-timeout-ms 0]

`POST /predict` (multipart `files`) answers forklift's result JSON; `GET /health` is 200 once the workers
are up. Each inference worker is a process with one ONNX Runtime session of `--threads` threads.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import litserve as ls

from forklift.model_files.model_dir import open_model_dir
from forklift.runtime.base import PredictOptions
from forklift.runtime.load import load_predictor
from forklift.vision.results import Prediction

Image = tuple[str, bytes]


class ForkliftAPI(ls.LitAPI):
    def __init__(self, model_dir: Path, threads: int, max_batch_size: int, batch_timeout: float) -> None:
        super().__init__(max_batch_size=max_batch_size, batch_timeout=batch_timeout, api_path="/predict")
        self.model_dir = model_dir
        self.threads = threads

    def setup(self, device: str) -> None:
        self.predictor = load_predictor(open_model_dir(self.model_dir), "onnx", PredictOptions(threads=self.threads))

    def decode_request(self, request) -> Image:  # no annotation: LitServe then hands over the parsed form
        upload = request["files"]
        return upload.filename or "image", upload.file.read()

    def predict(self, x: Image | list[Image]) -> dict | list[dict]:
        images = x if isinstance(x, list) else [x]
        prediction = self.predictor.predict(images)
        answers = [Prediction([result], prediction.timing).to_json() for result in prediction.results]
        return answers if isinstance(x, list) else answers[0]

    def encode_response(self, output: dict) -> dict:
        return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2, help="inference processes (workers_per_device on CPU)")
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads per worker")
    parser.add_argument("--max-batch", type=int, default=1)
    parser.add_argument("--batch-timeout-ms", type=float, default=0.0)
    parser.add_argument("--api-servers", type=int, default=1, help="uvicorn processes in front of the workers")
    args = parser.parse_args()
    api = ForkliftAPI(args.model_dir, args.threads, args.max_batch, args.batch_timeout_ms / 1000.0)
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=args.workers, timeout=120)
    server.run(
        host="127.0.0.1", port=args.port, num_api_servers=args.api_servers, log_level="warning",
        generate_client_file=False,
    )  # fmt: skip


if __name__ == "__main__":
    main()
