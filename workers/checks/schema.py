"""JSON Schema validation for the ``json_schema`` check, with nothing fetched.

``jsonschema`` still retrieves remote ``$ref`` URLs when given no registry (with a
deprecation warning). The validator here gets a registry whose retrieval refuses, so
a schema never makes a worker open a connection; the metric's loader already refuses
any ``$ref`` that is not local (evalfleet.core.checkspec). Validation recurses, so a
``$ref`` cycle that never moves into the document (``{"$ref": "#"}``) ends at Python's
recursion limit: that is a named failure, in the time a thousand frames take.
"""

from __future__ import annotations

from typing import Any

from jsonschema.validators import validator_for
from referencing import Registry
from referencing.exceptions import NoSuchResource, Unresolvable

from workers.checks.result import SCHEMA_RECURSION, SCHEMA_REF, CheckResult


def _refuse(uri: str) -> Any:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


class SchemaValidator:
    """A compiled schema that checks documents against it."""

    def __init__(self, schema: Any) -> None:
        self._validator = validator_for(schema)(schema, registry=Registry(retrieve=_refuse))  # type: ignore[call-arg]

    def check(self, document: Any) -> CheckResult:
        """Pass ``document``, or fail it naming the first error and where it is."""
        try:
            error = next(iter(self._validator.iter_errors(document)), None)
        except RecursionError:
            return CheckResult.failure(SCHEMA_RECURSION, "validation recursed past Python's "
                                       "limit: a $ref cycle that never moves into the "
                                       "document, or a document nested that deep")
        except Unresolvable as exc:
            return CheckResult.failure(SCHEMA_REF,
                                       f"unresolvable $ref: {exc}")
        if error is None:
            return CheckResult.scored(True, "valid against the schema")
        where = error.json_path
        return CheckResult.scored(False, f"at {where}: {error.message}")
