"""The error tree: every concrete error says whether retrying can help."""

from __future__ import annotations

import pytest

from evalfleet.core import errors
from evalfleet.core.errors import EvalfleetError, Permanent, RetryLater

#: Bases that only group errors.
GROUPS = {EvalfleetError, RetryLater, Permanent, errors.JudgeError, errors.DeliveryFailed,
          errors.InvalidInput}


def _concrete() -> list[type[EvalfleetError]]:
    found = [value for value in vars(errors).values()
             if isinstance(value, type) and issubclass(value, EvalfleetError)]
    return [cls for cls in found if cls not in GROUPS]


@pytest.mark.parametrize("cls", _concrete(), ids=lambda cls: cls.__name__)
def test_every_error_is_on_exactly_one_branch(cls: type[EvalfleetError]) -> None:
    assert issubclass(cls, RetryLater) != issubclass(cls, Permanent)


@pytest.mark.parametrize(("error", "branch"), [
    (errors.JudgeUnavailable("503", status_code=503), RetryLater),
    (errors.JudgeDeferred("budget", retry_after_s=1.0), RetryLater),
    (errors.JudgeRejected("401", status_code=401), Permanent),
    (errors.StoreUnavailable("down"), RetryLater),
    (errors.StoreRejected("NUL", field="sample_id"), Permanent),
    (errors.BrokerUnavailable("down"), RetryLater),
    (errors.UnknownMetric("nope", known=["rag_qa"]), Permanent),
])
def test_callers_catch_the_branch(error: EvalfleetError, branch: type[Exception]) -> None:
    with pytest.raises(branch):
        raise error
    assert isinstance(error, EvalfleetError)
