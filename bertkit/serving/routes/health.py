"""GET /health: the liveness probe (no model call; the one route open without the API key)."""

from typing import Any


def handler(svc: Any) -> Any:
    def health() -> dict[str, Any]:
        return {"status": "ok"}

    return health
