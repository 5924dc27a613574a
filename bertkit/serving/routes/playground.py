"""GET /: the playground page (``serving/playground.html``)."""

from importlib import resources
from typing import Any


def handler(svc: Any) -> Any:
    from fastapi.responses import HTMLResponse

    def playground() -> HTMLResponse:
        """A self-contained page to try the model's routes (no CDN: the server runs offline)."""
        page = resources.files("bertkit.serving").joinpath("playground.html").read_text(encoding="utf-8")
        return HTMLResponse(page)

    playground.response_class = HTMLResponse  # what /openapi.json says "/" answers
    return playground
