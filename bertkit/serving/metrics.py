"""Prometheus metrics for ``GET /metrics`` (prometheus-client), one registry per app."""

from __future__ import annotations

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TOKEN_BUCKETS = (64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


class Metrics:
    """Requests, errors, latency, batch sizes and tokens, queue depth."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("bertkit_requests", "HTTP requests by route", ["route"], registry=r)
        self.errors = Counter(
            "bertkit_errors",
            "refused or failed requests by status and error_type",
            ["status", "error_type"],
            registry=r,
        )
        self.latency = Histogram(
            "bertkit_request_seconds",
            "request latency by route",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "bertkit_batch_size", "sequences per model batch", ["task"], buckets=SIZE_BUCKETS, registry=r
        )
        self.batch_tokens = Histogram(
            "bertkit_batch_tokens",
            "padded tokens per model batch",
            ["task"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.tokens = Counter("bertkit_tokens", "tokens run through the model", ["task"], registry=r)
        self.queue = Gauge("bertkit_queue_depth", "sequences waiting for a batch", registry=r)

    def on_error(self, status: int, error_type: str) -> None:
        self.errors.labels(str(status), error_type).inc()

    def on_batch(self, task: str, size: int, padded_tokens: int) -> None:
        self.batch_size.labels(task).observe(size)
        self.batch_tokens.labels(task).observe(padded_tokens)
        self.tokens.labels(task).inc(padded_tokens)

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


__all__ = ["Metrics"]
