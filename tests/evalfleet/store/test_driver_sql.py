"""The store's statements as psycopg runs them: SQLAlchemy's ``:name`` parameters become
``%(name)s``, casts stay casts."""

from __future__ import annotations

import pytest

from evalfleet.store.postgres import _CLAIM_DRIVER, _INSERT_VERDICTS, _driver_sql


@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT :a, :b_c", "SELECT %(a)s, %(b_c)s"),
    ("SELECT NULL::verdicts, x::text", "SELECT NULL::verdicts, x::text"),
    ("CAST(:rows AS jsonb)", "CAST(%(rows)s AS jsonb)"),
    ("SELECT 'a:b'", "SELECT 'a:b'"),  # a colon inside a word is no parameter
])
def test_parameters_become_psycopgs(sql: str, expected: str) -> None:
    assert _driver_sql(sql) == expected


def test_the_claim_and_the_verdicts_statements_name_their_parameters() -> None:
    assert all(name in _CLAIM_DRIVER for name in ("%(keys)s", "%(now)s", "%(expires_at)s"))
    insert = _driver_sql(_INSERT_VERDICTS.format(columns="status"))
    assert "%(rows)s" in insert and "%(release)s" in insert and "NULL::verdicts" in insert
    assert ":rows" not in insert and ":keys" not in _CLAIM_DRIVER


def test_a_literal_percent_is_refused() -> None:
    with pytest.raises(ValueError, match='literal %'):
        _driver_sql("SELECT '100%' WHERE x = :x")
