"""The bundled demo: sample set and runner."""
