"""The dashboard's static files, vendored in the package: served with long cache lives, or inlined in a report.

Every asset's URL carries a digest of its bytes, so a browser may keep it for a year and still never
shows a stale one. Plotly's cartesian bundle (scatter, bar, heatmap) is vendored from the npm package
``plotly.js-cartesian-dist-min`` with its MIT licence next to it; nothing is fetched from a CDN.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

__all__ = ["ASSETS", "PLOTLY_VERSION", "STATIC_DIR", "Asset"]

STATIC_DIR = Path(__file__).resolve().parent / "static"
PLOTLY_VERSION = "4.1.1"


@dataclass(frozen=True)
class Asset:
    """One static file: its name in URLs, where it lies, and its media type."""

    name: str
    path: Path
    media_type: str

    @cached_property
    def content(self) -> bytes:
        return self.path.read_bytes()

    @cached_property
    def digest(self) -> str:
        return hashlib.sha256(self.content).hexdigest()[:16]

    @property
    def url(self) -> str:
        return f"/dashboard/static/{self.name}?v={self.digest}"

    def inline_text(self) -> str:
        """The file as text safe inside an HTML ``<script>`` or ``<style>`` element."""
        return re.sub(r"</(script|style)", r"<\\/\1", self.content.decode("utf-8"), flags=re.IGNORECASE)

    def data_uri(self) -> str:
        return f"data:{self.media_type};base64,{base64.b64encode(self.content).decode()}"


ASSETS: dict[str, Asset] = {
    a.name: a
    for a in (
        Asset("plotly.js", STATIC_DIR / "vendor" / f"plotly-cartesian-{PLOTLY_VERSION}.min.js",
              "text/javascript; charset=utf-8"),
        Asset("plotly-LICENSE.txt", STATIC_DIR / "vendor" / f"plotly-cartesian-{PLOTLY_VERSION}.LICENSE.txt",
              "text/plain; charset=utf-8"),
        Asset("dashboard.js", STATIC_DIR / "dashboard.js", "text/javascript; charset=utf-8"),
        Asset("dashboard.css", STATIC_DIR / "dashboard.css", "text/css; charset=utf-8"),
        Asset("favicon.svg", STATIC_DIR / "favicon.svg", "image/svg+xml"),
    )
}
"""Every file the dashboard serves, by name."""
