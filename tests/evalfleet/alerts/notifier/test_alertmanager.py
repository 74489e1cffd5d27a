"""Alertmanager's v2 API: a list of postable alerts at /api/v2/alerts."""

from __future__ import annotations

import httpx
import pytest

from evalfleet.alerts.notifier import AlertmanagerNotifier
from evalfleet.core.errors import ReceiverRejected, ReceiverUnavailable
from tests.evalfleet.alerts.notifier.test_webhook import notification
from tests.evalfleet.alerts.receiver import Receiver


def test_posts_only_the_postable_keys(receiver: Receiver) -> None:
    notifier = AlertmanagerNotifier(name="am", url=receiver.url + "/",
                                    client=httpx.Client(timeout=5))
    notifier.send(notification())
    (request,) = receiver.requests
    assert request.path == "/api/v2/alerts"
    (alert,) = request.json
    assert set(alert) == {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}


@pytest.mark.parametrize("status,error", [(429, ReceiverUnavailable), (502, ReceiverUnavailable),
                                          (400, ReceiverRejected), (404, ReceiverRejected)])
def test_statuses_map_to_retry_or_give_up(receiver: Receiver, status: int,
                                          error: type[Exception]) -> None:
    receiver.fail_first, receiver.fail_status = 1, status
    notifier = AlertmanagerNotifier(name="am", url=receiver.url, client=httpx.Client(timeout=5))
    with pytest.raises(error, match=f"receiver 'am': HTTP {status}"):
        notifier.send(notification())


def test_an_unreachable_receiver_is_unavailable() -> None:
    notifier = AlertmanagerNotifier(name="am", url="http://127.0.0.1:9",
                                    client=httpx.Client(timeout=1))
    with pytest.raises(ReceiverUnavailable, match="cannot connect"):
        notifier.send(notification())
