"""Prometheus metrics of one server: requests, errors, latency per stage, queue depth, batch sizes, workers."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """One registry per server, so tests and several servers in a process do not share counters."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "forklift_requests", "HTTP requests answered", ["model", "protocol", "code"], registry=self.registry
        )
        self.latency = Histogram(
            "forklift_request_seconds", "Request latency", ["model", "protocol"],
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.stage = Histogram(
            "forklift_stage_seconds", "Time per stage of a batch", ["model", "stage"],
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.queue_depth = Gauge(
            "forklift_queue_depth", "Requests waiting for a worker", ["model"], registry=self.registry
        )
        self.batch_size = Histogram(
            "forklift_batch_images", "Images (or a tabular model's rows) per batch sent to a worker", ["model"],
            buckets=(1, 2, 4, 8, 16, 32, 64), registry=self.registry,
        )  # fmt: skip
        self.worker_batches = Counter(
            "forklift_worker_batches", "Batches answered per worker", ["model", "worker"], registry=self.registry
        )
        self.worker_restarts = Counter(
            "forklift_worker_restarts", "Workers restarted after a crash", ["model"], registry=self.registry
        )
        self.rejected = Counter(
            "forklift_rejected", "Requests refused because the queue was full", ["model"], registry=self.registry
        )
        self.stream_frames = Counter(
            "forklift_stream_frames", "Frames of /stream: received, answered, dropped (replaced) or stale",
            ["model", "outcome"], registry=self.registry,
        )  # fmt: skip

    def render(self) -> bytes:
        return generate_latest(self.registry)
