"""People in the loop: labels checked on the judge's scale, imported and exported.

The queue itself (items, leases, labels, reviewers) is kept by the store
(:mod:`evalfleet.store.queries.review_queue`); which verdicts enter it at random is decided by
:mod:`evalfleet.core.review_slice`. This package imports nothing by itself.
"""
