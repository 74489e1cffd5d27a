"""evalfleet: watch the quality of LLM applications in production."""
