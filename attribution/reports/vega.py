"""The chart library's JavaScript, inlined: Vega, Vega-Lite and vega-embed as bundled by the vl-convert package.

Bundling takes a few seconds, so a caller that writes many pages builds the bundle once with `script_bundle()` and
passes it to each page.
"""

from __future__ import annotations

import json
from typing import Any


def vega_lite_version() -> str:
    """The Vega-Lite major.minor version Altair writes specifications for (e.g. '6.4'), as vl-convert names it."""
    import altair

    major, minor = altair.SCHEMA_VERSION.lstrip("v").split(".")[:2]
    return f"{major}.{minor}"


def script_bundle() -> str:
    """Vega + Vega-Lite + vega-embed in one script that defines `window.vegaEmbed`, with no external reference."""
    import vl_convert

    return vl_convert.javascript_bundle(vl_version=vega_lite_version())


def script_tag(bundle: str) -> str:
    """The bundle as an inline <script> element (a closing tag inside it would end the element early)."""
    return "<script>\n" + bundle.replace("</script", "<\\/script") + "\n</script>"


def json_for_script(value: Any) -> str:
    """JSON that is safe inside an inline <script> element."""
    return (json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))
