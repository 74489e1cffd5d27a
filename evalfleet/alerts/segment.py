"""Segments: the slice of traffic an alert is about, as ordered attribute labels."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True, order=True)
class Segment:
    """Samples whose attributes carry these values; no labels means all of a rule's traffic."""

    labels: tuple[tuple[str, str], ...] = ()
    """``(attribute, value)`` pairs in the rule's ``segment_by`` order."""

    @classmethod
    def of(cls, mapping: dict[str, str]) -> Segment:
        """A segment from a mapping, in its order."""
        return cls(tuple((str(k), str(v)) for k, v in mapping.items()))

    @cached_property
    def key(self) -> str:
        """A fixed-length digest that names the segment in the database (computed once:
        a cycle asks each segment's key several times)."""
        text = json.dumps(self.labels, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    @property
    def depth(self) -> int:
        """How many attributes it is split by (0 for the whole)."""
        return len(self.labels)

    @property
    def parent(self) -> Segment | None:
        """The segment one level up, None for the whole."""
        return Segment(self.labels[:-1]) if self.labels else None

    def as_dict(self) -> dict[str, str]:
        """The labels as a mapping."""
        return dict(self.labels)

    def replace(self, key: str, value: str) -> Segment:
        """The same segment with ``key`` set to ``value``."""
        return Segment(tuple((k, value if k == key else v) for k, v in self.labels))

    def __str__(self) -> str:
        if not self.labels:
            return "(all)"
        return ",".join(f"{k}={v}" for k, v in self.labels)
