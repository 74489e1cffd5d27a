"""The package's public names: listed, sorted, and nothing else public at the top."""

from __future__ import annotations

import workers.verdicts


def test_all_is_sorted_and_complete() -> None:
    exported = workers.verdicts.__all__
    assert exported == sorted(exported)
    assert {"parse_verdict", "response_format_for", "reask_prompt", "Verdict",
            "ParseFailure"} <= set(exported)
    public = {
        name for name, value in vars(workers.verdicts).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith("workers.")
    }
    assert public <= set(exported)
    for name in exported:
        assert getattr(workers.verdicts, name) is not None
