"""Calibration: how far the judge agrees with people and with other judges."""

from __future__ import annotations

from evalfleet.calibration.agreement import Agreement, Estimate, ScoreKind, agreement, cohen_kappa

__all__ = ["Agreement", "Estimate", "ScoreKind", "agreement", "cohen_kappa"]
