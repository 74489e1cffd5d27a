"""Retention cut-offs and the range the raw-output purge still has to cover."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from evalfleet.core.settings import Settings
from evalfleet.ops.retention import Cutoffs, RetentionPolicy, raw_output_range

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def test_cutoffs_count_back_from_now() -> None:
    policy = RetentionPolicy(verdict_days=90, raw_output_days=7.5)
    assert policy.cutoffs(now=NOW) == Cutoffs(NOW - 90 * DAY, NOW - 7.5 * DAY)
    assert RetentionPolicy().cutoffs(now=NOW) == Cutoffs(None, None)
    assert RetentionPolicy().keeps_everything and not policy.keeps_everything


def test_policy_from_settings() -> None:
    settings = Settings(verdict_retention_days=30, raw_output_retention_days=3)
    assert RetentionPolicy.from_settings(settings) == RetentionPolicy(30, 3)
    assert RetentionPolicy.from_settings(Settings()).keeps_everything


@pytest.mark.parametrize(("cutoffs", "done_until", "expected"), [
    (Cutoffs(None, NOW - 7 * DAY), None, (None, NOW - 7 * DAY)),
    # Deleted verdicts need no emptying.
    (Cutoffs(NOW - 90 * DAY, NOW - 7 * DAY), None, (NOW - 90 * DAY, NOW - 7 * DAY)),
    # An earlier run got this far.
    (Cutoffs(NOW - 90 * DAY, NOW - 7 * DAY), NOW - 8 * DAY, (NOW - 8 * DAY, NOW - 7 * DAY)),
    # Already done (or the retention was raised): nothing.
    (Cutoffs(None, NOW - 7 * DAY), NOW - 7 * DAY, None),
    (Cutoffs(None, NOW - 30 * DAY), NOW - 7 * DAY, None),
    (Cutoffs(NOW - 5 * DAY, NOW - 7 * DAY), None, None),
    (Cutoffs(NOW - 90 * DAY, None), NOW - 8 * DAY, None),
])
def test_raw_output_range(cutoffs: Cutoffs, done_until: datetime | None,
                          expected: tuple[datetime | None, datetime] | None) -> None:
    assert raw_output_range(cutoffs, done_until=done_until) == expected
