"""The OpenAPI document is valid OpenAPI 3 and matches what the service answers."""

from __future__ import annotations

from openapi_spec_validator import validate

from producers.ingest.openapi import openapi_spec


def test_valid_openapi_3() -> None:
    spec = openapi_spec()
    validate(spec)  # raises on an invalid document
    assert spec["openapi"].startswith("3.")


def test_describes_every_route_and_status() -> None:
    spec = openapi_spec()
    assert set(spec["paths"]) == {"/v1/samples", "/v1/traces", "/healthz", "/readyz",
                                  "/metrics"}
    assert set(spec["paths"]["/v1/traces"]["post"]["responses"]) == {
        "200", "400", "401", "403", "413", "415", "503"}
    statuses = set(spec["paths"]["/v1/samples"]["post"]["responses"])
    assert statuses == {"202", "400", "401", "403", "413", "415", "422", "503"}
    assert spec["components"]["schemas"]["Sample"]["required"] == ["id"]
