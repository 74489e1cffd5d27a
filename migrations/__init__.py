"""Alembic migrations of the verdict store (run with ``evalfleet migrate``)."""
