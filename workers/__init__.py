"""Celery workers: render, judge, parse, persist, alert."""
