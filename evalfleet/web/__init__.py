"""``evalfleet ui``: a web page from an alert to the failing samples and why, and the
review page where people label what the judge judged.

Server-rendered HTML (Starlette and Jinja with autoescape), charts drawn as inline SVG
on the server, one stylesheet shipped in the package and nothing from the network, so
it works offline. Every page but the review pages runs under a Content-Security-Policy
that allows no script at all; the review pages allow one script file of the package's
own (keyboard shortcuts), and no inline script.
"""

from __future__ import annotations

from evalfleet.web.app import UiOptions, create_app

__all__ = ["UiOptions", "create_app"]
