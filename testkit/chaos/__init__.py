"""The chaos harness: services that can be killed, a fleet, scenarios, the books."""
