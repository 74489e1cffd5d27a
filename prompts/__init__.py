"""Metric files: one YAML file per metric (data, shipped in the wheel)."""
