"""The HTTP ingest service, ``evalfleet ingest``: samples in over HTTP, jobs out.

    app.py      the Starlette app: POST /v1/samples, /healthz, /readyz, /metrics, /openapi.json
    auth.py     bearer tokens: 401 without or malformed, 403 wrong
    body.py     request bodies into named records, results into the JSON report
    openapi.py  the OpenAPI 3.1 document
"""

from __future__ import annotations

from producers.ingest.app import create_app
from producers.ingest.auth import check_bearer, load_tokens
from producers.ingest.openapi import openapi_spec

__all__ = ["check_bearer", "create_app", "load_tokens", "openapi_spec"]
