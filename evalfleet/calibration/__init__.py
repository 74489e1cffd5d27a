"""Calibration: how far the judge agrees with people and with other judges.

The statistics (:mod:`evalfleet.calibration.agreement`) load scipy; workers import
only the gold sets and canary series (:mod:`evalfleet.calibration.gold`), so this
package imports nothing by itself."""
