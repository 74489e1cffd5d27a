"""The exceptions evalfleet raises, in one tree.

    EvalfleetError
    ├── RetryLater                   the same work may succeed later: retry, requeue, pause
    │   ├── JudgeUnavailable         transport, timeout, 429, 5xx          (also JudgeError)
    │   ├── JudgeDeferred            not sent: rate budget spent or circuit open (JudgeError)
    │   ├── StoreUnavailable         the database cannot be reached
    │   ├── BrokerUnavailable        the broker cannot be reached
    │   ├── TraceBufferFull          as many traces buffered as allowed (producers.traces)
    │   ├── WorkerShuttingDown       the shutdown grace period ended mid-job
    │   └── ReceiverUnavailable      an alert receiver: transport, timeout, 429, 5xx
    │                                                                  (also DeliveryFailed)
    ├── Permanent                    will fail again however often it is retried
    │   ├── InvalidInput             fix the input
    │   │   ├── InvalidSample        a sample record (line, id, field)
    │   │   ├── InvalidSettings      a setting from the environment or .env (core.settings)
    │   │   ├── InvalidMessage       a job message off the broker
    │   │   ├── InvalidMetricSpec    a metric file in prompts/
    │   │   ├── UnknownMetric        a metric name nobody defined
    │   │   ├── InvalidSimConfig     judge simulator settings (judgesim.config)
    │   │   ├── InvalidScript        a judge simulator reply script (judgesim.faults)
    │   │   ├── InvalidChatRequest   a request the judge simulator cannot read
    │   │   ├── InvalidAlertRule     an alert rules file (evalfleet.alerts.rule)
    │   │   ├── InvalidSamplingConfig a producer sampling config file (producers.policy)
    │   │   ├── InvalidTraces        an OTLP trace export request (producers.traces.otlp)
    │   │   ├── InvalidDataset       a dataset's name, filter or file (store.queries.datasets)
    │   │   └── NotRandomSample      a labelled item chosen, not drawn at random (core.estimator)
    │   ├── JudgeRejected            400, 401, 403, 404, no quota          (also JudgeError)
    │   ├── StoreRejected            the database refuses a value
    │   └── ReceiverRejected         an alert receiver's other 4xx    (also DeliveryFailed)
    ├── JudgeError                   the judge call failed: one of the three above
    ├── DeliveryFailed               an alert receiver did not take a notification
    └── SimNotStarted                the judge simulator did not come up (judgesim.server)

Callers decide on the branch (``except RetryLater``), not on a list of types; each
library's exceptions are mapped into the tree at one boundary (SQLAlchemy in
``evalfleet.store.sql``, kombu in ``evalfleet.broker.errors``, HTTP statuses in
``workers.judge.http_status``).

A judge that answered with an unusable verdict is not an exception: the parser
returns that failure as a value (see ``workers.verdicts``).
"""

from __future__ import annotations


class EvalfleetError(Exception):
    """Root of every exception raised by evalfleet."""


class RetryLater(EvalfleetError):
    """A failure that can pass: the same work may succeed later (a transport error, a
    timeout, 429 or 5xx from the judge, the broker or the database unavailable). Workers
    retry, requeue or pause on it; producers wait or report "try again"; nothing is
    dead-lettered for it."""


class Permanent(EvalfleetError):
    """A failure that will happen again however often the same work is retried (a bad
    record, a refused request, a value the database cannot hold). It is reported, and a
    job that meets it becomes a dead letter."""


class InvalidInput(Permanent):
    """Input that will never be processed as it is."""


class InvalidSettings(InvalidInput):
    """Settings that cannot be used: a value that is not what its variable needs (not
    JSON where JSON is needed, out of range), or, with ``EVALFLEET_STRICT_SETTINGS``, an
    ``EVALFLEET_*`` variable that is no setting. The message names the variables."""


class InvalidSample(InvalidInput):
    """A sample record that does not match the sample format.

    Attributes:
        record: Where the record came from, e.g. ``"line 17"``.
        sample_id: The record's id when it could be read, else None.
        field: Dotted path of the offending field (``"context[1]"``), or None for
            problems with the record as a whole (bad JSON, bad encoding).
        reason: What is wrong, in words.
    """

    def __init__(
        self, reason: str, *, record: str = "", sample_id: str | None = None,
        field: str | None = None,
    ) -> None:
        self.record = record
        self.sample_id = sample_id
        self.field = field
        self.reason = reason
        super().__init__(self._describe())

    def _describe(self) -> str:
        where = [part for part in (self.record,) if part]
        if self.sample_id is not None:
            where.append(f"id {self.sample_id!r}")
        if self.field:
            where.append(f"field {self.field!r}")
        prefix = ", ".join(where)
        return f"{prefix}: {self.reason}" if prefix else self.reason


class InvalidMessage(InvalidInput):
    """A job message that cannot be decoded.

    Attributes:
        data: The raw message as received.
    """

    def __init__(self, reason: str, *, data: object = None) -> None:
        self.data = data
        super().__init__(reason)


class InvalidMetricSpec(InvalidInput):
    """A metric file that cannot be loaded.

    Attributes:
        path: The file.
    """

    def __init__(self, reason: str, *, path: str) -> None:
        self.path = path
        super().__init__(f"{path}: {reason}")


class UnknownMetric(InvalidInput):
    """A metric name that no file in prompts/ defines."""

    def __init__(self, name: str, *, known: list[str]) -> None:
        self.name = name
        super().__init__(f"unknown metric {name!r} (known: {', '.join(sorted(known))})")


class JudgeError(EvalfleetError):
    """The judge call failed before a reply could be read.

    Attributes:
        status_code: The HTTP status, when the judge answered with one.
    """

    def __init__(self, reason: str, *, status_code: int | None = None) -> None:
        self.status_code = status_code
        super().__init__(reason)


class JudgeUnavailable(JudgeError, RetryLater):
    """A transient failure: transport error, timeout, 429 or 5xx. Retry later.

    Attributes:
        retry_after_s: The delay the judge asked for (Retry-After), if any.
    """

    def __init__(
        self, reason: str, *, status_code: int | None = None, retry_after_s: float | None = None,
    ) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(reason, status_code=status_code)


class JudgeDeferred(JudgeError, RetryLater):
    """The call was not sent: the fleet's rate budget is spent or the judge's circuit is
    open. Not the job's fault, so it does not count as an attempt.

    Attributes:
        retry_after_s: When sending is expected to be possible again.
    """

    def __init__(self, reason: str, *, retry_after_s: float) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(reason)


#: Judge error codes that mean "no more money": retrying burns the queue for nothing.
QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})


class JudgeRejected(JudgeError, Permanent):
    """The judge refused the request (bad request, auth, unknown model, no quota).

    Attributes:
        code: The error code the judge gave (``insufficient_quota``...), if any.
    """

    def __init__(
        self, reason: str, *, status_code: int | None = None, code: str | None = None,
    ) -> None:
        self.code = code
        super().__init__(reason, status_code=status_code)

    @property
    def is_access_problem(self) -> bool:
        """Auth or quota: every call to this judge will fail until someone acts."""
        return self.status_code in (401, 403) or self.code in QUOTA_CODES


class StoreUnavailable(RetryLater):
    """The verdict store cannot be reached (connection refused, lost, server down)."""


class StoreRejected(Permanent):
    """The database refuses a value (bad data, a constraint, an encoding): storing the
    same row again will fail the same way, so it must not go back to the queue.

    Attributes:
        field: The column or path of the refused value, when known (``sample_id``,
            ``attributes.app``).
    """

    def __init__(self, reason: str, *, field: str | None = None) -> None:
        self.field = field
        super().__init__(reason)


class BrokerUnavailable(RetryLater):
    """A producer cannot reach the broker (connection refused, lost, timed out).

    Nothing of the batch that raised it counts as accepted; publish it again later.
    """


class TraceBufferFull(RetryLater):
    """Spans would open more traces than ``EVALFLEET_OTLP_MAX_OPEN_TRACES`` allows;
    nothing of the request was kept, send it again later."""


class WorkerShuttingDown(RetryLater):
    """The worker's shutdown grace period ran out while a job waited for the judge.

    The job is not finished and must go back to the queue; another worker (or this
    one, restarted) runs it again.
    """


class InvalidSamplingConfig(InvalidInput):
    """A producer sampling config file that cannot be used.

    Attributes:
        path: The file.
        location: Dotted path of the offending key (``metrics.rag_qa.rate``), or None.
    """

    def __init__(self, reason: str, *, path: str, location: str | None = None) -> None:
        self.path = path
        self.location = location
        where = f"{path}, {location}" if location else path
        super().__init__(f"{where}: {reason}")


class InvalidTraces(InvalidInput):
    """An OTLP trace export request that cannot be read as a whole (a bad span is not
    an exception: it is rejected by name and the rest go on).

    Attributes:
        too_large: True when the request holds more spans than allowed (413, not 400).
    """

    def __init__(self, reason: str, *, too_large: bool = False) -> None:
        self.too_large = too_large
        super().__init__(reason)


class InvalidAlertRule(InvalidInput):
    """An alert rules file that cannot be loaded.

    Attributes:
        path: The file.
        rule: The rule's name (or its position, ``rules[3]``), None for the file as a whole.
        field: Dotted path of the offending field, or None.
    """

    def __init__(
        self, reason: str, *, path: str, rule: str | None = None, field: str | None = None,
    ) -> None:
        self.path = path
        self.rule = rule
        self.field = field
        where = [path]
        if rule:
            where.append(f"rule {rule!r}")
        if field:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {reason}")


class DeliveryFailed(EvalfleetError):
    """An alert receiver did not accept a notification.

    Attributes:
        receiver: The receiver's name.
        status_code: The HTTP status, when the receiver answered with one.
    """

    def __init__(self, reason: str, *, receiver: str, status_code: int | None = None) -> None:
        self.receiver = receiver
        self.status_code = status_code
        super().__init__(f"receiver {receiver!r}: {reason}")


class ReceiverUnavailable(DeliveryFailed, RetryLater):
    """A transient failure (transport, timeout, 429, 5xx): deliver again later."""


class ReceiverRejected(DeliveryFailed, Permanent):
    """The receiver refused the notification (4xx other than 429): retrying will not help."""


class InvalidDataset(InvalidInput):
    """A dataset request that cannot be carried out: a bad or unknown name, a filter
    that matches nothing, a bad value.

    Attributes:
        field: The offending field (``name``, ``segment``, ``score``...), or None.
    """

    def __init__(self, reason: str, *, field: str | None = None) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}" if field else reason)


class NotRandomSample(InvalidInput):
    """A labelled item offered to an estimate that was not drawn at random with a known
    inclusion probability (an alert's evidence, a filter, ids, an import): weighing it
    in would bias the estimate toward what someone chose to look at.

    Attributes:
        item: What names the item (its sample id), or "".
    """

    def __init__(self, reason: str, *, item: str = "") -> None:
        self.item = item
        super().__init__(reason)
