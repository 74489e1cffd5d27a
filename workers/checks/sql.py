"""The ``sql_valid`` check: the value parses as SQL (sqlglot). Pure.

sqlglot's parser is pure Python, about 35 µs a character on the shared test machine,
and recurses into nested expressions: it reads at most :data:`MAX_SQL_CHARS`, and a
statement nested past Python's recursion limit is a named failure, not a crash.
"""

from __future__ import annotations

import sqlglot
from sqlglot.errors import ParseError, TokenError

from evalfleet.core.checkspec import SqlValid
from workers.checks.result import TOO_LARGE, CheckResult

#: Longest SQL a ``sql_valid`` check parses, in characters.
MAX_SQL_CHARS = 20_000


def sql_valid(text: str, spec: SqlValid) -> CheckResult:
    """Whether ``text`` is one or more SQL statements of ``spec``'s dialect and kinds."""
    if len(text) > MAX_SQL_CHARS:
        return CheckResult.failure(TOO_LARGE, f"{len(text):,} characters, over the "
                                   f"{MAX_SQL_CHARS:,} a SQL check parses")
    try:
        parsed = sqlglot.parse(text, read=spec.dialect or None)
    except (ParseError, TokenError) as exc:
        return CheckResult.scored(False, f"not valid SQL: {str(exc).splitlines()[0]}")
    except RecursionError:
        return CheckResult.failure(TOO_LARGE, "nested too deep for the SQL parser")
    kinds = [type(statement).__name__.lower() for statement in parsed if statement is not None]
    if not kinds:
        return CheckResult.scored(False, "no SQL statement")
    refused = [kind for kind in kinds if spec.statements and kind not in spec.statements]
    if refused:
        return CheckResult.scored(False, f"a {refused[0]} statement, not one of "
                                  f"{', '.join(spec.statements)}")
    return CheckResult.scored(True, f"valid SQL: {len(kinds)} statement(s), {', '.join(kinds[:5])}")
