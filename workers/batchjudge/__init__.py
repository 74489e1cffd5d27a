"""Batch judging: metrics that can wait are judged through a provider's Batch API at its
batch price (``/v1/files`` + ``/v1/batches``).

A worker taking a batch-mode job claims its verdict key, writes the job to the spool
(:mod:`evalfleet.store.queries.batchspool`) and acknowledges it; the submitter
(:mod:`workers.batchjudge.submitter`) gathers spooled jobs into batch files and creates
the batches; the collector (:mod:`workers.batchjudge.collector`) downloads what finished
batches answered and turns it into verdicts through the worker's own evaluator, with a
judge provider that answers from those lines (:mod:`workers.batchjudge.provider`).
"""
