"""Producers: read traffic, sample, redact, enqueue."""
