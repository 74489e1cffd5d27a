"""Queue depth on the embedded broker: message files per queue, published for real."""

from __future__ import annotations

from pathlib import Path

from evalfleet.broker.depth import FilesystemQueueDepth
from evalfleet.broker.queues import embedded_broker_folder
from evalfleet.core.message import new_job
from producers.enqueuer import Enqueuer
from tests.producers.builders import producer_settings, sample


def test_counts_the_files_of_one_queue(tmp_path: Path) -> None:
    settings = producer_settings(None, tmp_path).model_copy(update={"batch_size": 3})
    enqueuer = Enqueuer(settings)
    enqueuer.send_many([new_job("rag_qa", sample(n)) for n in range(7)]
                       + [new_job("bbh_match", sample(9))])
    enqueuer.close()
    probe = FilesystemQueueDepth(embedded_broker_folder(settings) / "queue")
    assert probe.depth("eval.rag_qa") == 3  # messages of 3, 3 and 1 jobs
    assert probe.depth("eval.bbh_match") == 1
    assert FilesystemQueueDepth(tmp_path / "missing").depth("eval.rag_qa") is None
