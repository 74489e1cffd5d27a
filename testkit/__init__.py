"""What tests and benchmarks share to drive a real fleet: worker processes, a served app,
the chaos harness. Benchmarks import it, never the test package."""
