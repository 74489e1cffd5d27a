"""Size limits per sample field, checked before anything is enqueued. Pure.

A limit is in characters. Each text field has one (``input``, ``output``,
``reference``), as does each item of ``context``, each attribute value and each
value under ``fields``. The limit of a field is resolved in one place, most
specific first: ``fields.<key>``, then the field's own name (``fields``,
``context``, ...), then the global limit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from evalfleet.core.errors import InvalidSample
from evalfleet.core.sample import DEFAULT_LIMITS, Sample, SampleLimits
from evalfleet.core.session import Session
from evalfleet.core.settings import Settings
from evalfleet.core.trajectory import Trajectory, text_sizes

#: Fields whose limit can be set on its own.
LIMITED_FIELDS = ("input", "output", "reference", "context", "attributes", "fields",
                  "trajectory")


@dataclass(frozen=True, slots=True)
class FieldLimits:
    """How large each field of a sample may be."""

    max_chars: int = 65_536
    """Limit of any field without its own, in characters."""

    per_field: Mapping[str, int] = field(default_factory=dict)
    """Overrides by field name (``context``) or ``fields.<key>``, in characters."""

    max_context_items: int = 256
    """Most items in ``context``."""

    max_trajectory_steps: int = 1000
    """Most steps in a trajectory (also the most messages of one model step, documents
    of one retrieval and tools offered)."""

    max_trajectory_chars: int = 4_194_304
    """Most characters in a trajectory's texts together (each text is also held to
    the ``trajectory`` field limit)."""

    max_session_turns: int = 1000
    """Most turns in a session."""

    max_session_chars: int = 16_777_216
    """Most characters in a session's texts together (each turn's trajectory is also
    held to the trajectory limits)."""

    structure: SampleLimits = DEFAULT_LIMITS
    """Nesting depth and keys, checked while the record is parsed."""

    @classmethod
    def from_settings(cls, settings: Settings) -> FieldLimits:
        """The limits configured in ``settings``."""
        return cls(max_chars=settings.limits.max_field_chars,
                   per_field=dict(settings.limits.field_char_limits),
                   max_context_items=settings.limits.max_context_items,
                   structure=SampleLimits(max_depth=settings.limits.sample_max_depth,
                                          max_keys=settings.limits.sample_max_keys,
                                          max_key_chars=settings.limits.sample_max_key_chars))

    def limit_for(self, path: str) -> int:
        """The limit of the field at ``path`` (``input``, ``context[3]``, ``fields.title``)."""
        if path in self.per_field:
            return self.per_field[path]
        head = path.split("[", 1)[0].split(".", 1)[0]
        return self.per_field.get(head, self.max_chars)


def check_limits(sample: Sample, *, limits: FieldLimits, record: str = "") -> None:
    """Check every field of ``sample`` against ``limits``.

    Args:
        sample: A valid sample.
        limits: The limits.
        record: Where the sample came from, for the error (``"line 9"``).

    Raises:
        InvalidSample: For the first field over its limit, naming the record, id and
            field, the size and the limit.
    """
    if len(sample.context) > limits.max_context_items:
        raise InvalidSample(
            f"{len(sample.context):,} items, over the limit of {limits.max_context_items:,}",
            record=record, sample_id=sample.id, field="context",
        )
    if sample.trajectory is not None:
        _check_trajectory(sample.trajectory, limits=limits, record=record, sample_id=sample.id)
    if sample.session is not None:
        _check_session(sample.session, limits=limits, record=record, sample_id=sample.id)
    # A field within the lowest limit of all needs no path built nor limit looked up.
    lowest = min([limits.max_chars, *limits.per_field.values()])
    for name, key, size in _field_sizes(sample):
        if size <= lowest:
            continue
        path = name if key is None else (f"{name}[{key}]" if isinstance(key, int)
                                         else f"{name}.{key}")
        limit = limits.limit_for(path)
        if size > limit:
            raise InvalidSample(f"{size:,} characters, over the limit of {limit:,}",
                                record=record, sample_id=sample.id, field=path)


def _check_trajectory(trajectory: Trajectory, *, limits: FieldLimits, record: str,
                      sample_id: str) -> int:
    """Counts first (so 100,000 steps cost no size walk), then each text and the total.

    Returns:
        The characters of the trajectory's texts together.
    """
    most = limits.max_trajectory_steps
    counts = [("trajectory.steps", len(trajectory.steps)),
              ("trajectory.tools", len(trajectory.tools))]
    for n, step in enumerate(trajectory.steps[:most]):
        for part in ("input", "output", "documents"):
            counts.append((f"trajectory.steps[{n}].{part}", len(getattr(step, part, ()))))
    for path, count in counts:
        if count > most:
            raise InvalidSample(f"{count:,} items, over the limit of {most:,}", record=record,
                                sample_id=sample_id, field=path)
    limit = limits.limit_for("trajectory")
    total = 0
    for path, size in text_sizes(trajectory):
        total += size
        if size > limit or total > limits.max_trajectory_chars:
            over = (f"{size:,} characters, over the limit of {limit:,}" if size > limit else
                    f"the trajectory's texts pass {limits.max_trajectory_chars:,} characters")
            raise InvalidSample(over, record=record, sample_id=sample_id, field=path)
    return total


def _check_session(session: Session, *, limits: FieldLimits, record: str,
                   sample_id: str) -> None:
    """The turn count, then each turn's trajectory and the texts together."""
    if len(session.turns) > limits.max_session_turns:
        raise InvalidSample(f"{len(session.turns):,} turns, over the limit of "
                            f"{limits.max_session_turns:,}", record=record,
                            sample_id=sample_id, field="session.turns")
    total = 0
    for n, turn in enumerate(session.turns):
        if turn.trajectory is not None:
            try:
                total += _check_trajectory(turn.trajectory, limits=limits, record=record,
                                           sample_id=sample_id)
            except InvalidSample as exc:
                raise InvalidSample(exc.reason, record=record, sample_id=sample_id,
                                    field=f"session.turns[{n}].{exc.field}") from None
        total += len(turn.input) + len(turn.output) + sum(map(len, turn.context))
        if total > limits.max_session_chars:
            raise InvalidSample(f"the session's texts pass {limits.max_session_chars:,} "
                                "characters", record=record, sample_id=sample_id,
                                field=f"session.turns[{n}]")


def _field_sizes(sample: Sample) -> Iterator[tuple[str, int | str | None, int]]:
    """``(field, index or key or None, size)`` for every limited field."""
    yield "input", None, len(sample.input)
    yield "output", None, len(sample.output)
    if sample.reference is not None:
        yield "reference", None, len(sample.reference)
    for n, item in enumerate(sample.context):
        yield "context", n, len(item)
    for key, value in sample.attributes.items():
        yield "attributes", key, len(value)
    for key, value in sample.fields.items():
        yield "fields", key, _size(value)


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    return len(json.dumps(value, ensure_ascii=False))
