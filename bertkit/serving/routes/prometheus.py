"""GET /metrics: Prometheus text (``serving.metrics``, kept on ``app.state.metrics``)."""

from typing import Any


def handler(svc: Any) -> Any:
    from fastapi import Request
    from fastapi.responses import Response

    def prometheus(request: Request) -> Response:
        body, ctype = request.app.state.metrics.render()
        return Response(body, media_type=ctype)

    return prometheus
