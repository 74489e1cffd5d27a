"""The shared kernel: settings, errors, the sample and message formats, metrics,
durations and logging. It imports nothing else of evalfleet."""
