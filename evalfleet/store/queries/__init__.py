"""What features ask of the verdict store, beside its contract.

The contract is ``evalfleet.store.base`` with its SQL implementation (``sql``,
``postgres``, ``sqlite``, ``schema``): saving verdicts and reading them back. The
modules here answer one feature's questions each (an operator's activity figures,
dead-letter triage, retention, datasets, the alert engine's ledger, outbox, page and
windows), so no module outside the store needs SQL.
"""
