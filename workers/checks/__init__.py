"""Checks: metrics scored by code in the worker, beside the judged ones (docs/metrics.md).

``builtin`` holds the built-in checks, ``pool`` the process pool team checks run in,
``team`` how a team check is found and versioned, ``runner`` what turns a sample into
one result per check; the evaluator (:mod:`workers.evaluation`) stores them as verdicts.
"""

from workers.checks.result import CheckResult
from workers.checks.runner import CheckOutcome, CheckRunner, PreparedCheck

__all__ = ["CheckOutcome", "CheckResult", "CheckRunner", "PreparedCheck"]
