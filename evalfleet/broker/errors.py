"""The one mapping of broker failures: what kombu, py-amqp and redis-py raise when the
broker is away, refuses or drops a connection."""

from __future__ import annotations

from kombu.exceptions import KombuError

#: A broker operation that failed with one of these may work later: callers retry,
#: shed or report the broker unavailable; they never treat it as a bad message.
BROKER_ERRORS: tuple[type[BaseException], ...] = (KombuError, OSError)
