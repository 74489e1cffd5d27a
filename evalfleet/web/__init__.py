"""``evalfleet ui``: a read-only web page from an alert to the failing samples and why.

Server-rendered HTML (Starlette and Jinja with autoescape), charts drawn as inline SVG
on the server, one stylesheet shipped in the package: no JavaScript and nothing from
the network, so it works offline and under a Content-Security-Policy that allows no
script at all.
"""

from __future__ import annotations

from evalfleet.web.app import UiOptions, create_app

__all__ = ["UiOptions", "create_app"]
