"""Calibration: how far the judge agrees with people and with other judges.

The gold sets (:mod:`evalfleet.core.gold`) and the agreement statistics
(:mod:`evalfleet.core.agreement`, which load scipy) are in the kernel, shared with the
judge check and the review queue; this package runs calibrations and reports them, and
imports nothing by itself."""
