"""Tables of the verdict store (SQLAlchemy Core), shared by Postgres and SQLite.

The Alembic migrations in ``migrations/`` create exactly these; a test checks
that the two agree (:func:`schema_filter` says what only one database has).

On Postgres ``verdicts``, ``verdict_scores`` and ``verdict_samples`` are partitioned
by day on ``created_at`` (``evalfleet.store.partitions``): their primary keys then
hold ``created_at`` too, the exactly-once key is kept unique by ``verdict_keys`` (one
row per key digest, unpartitioned) instead of a unique constraint on ``verdicts``,
and scores and samples carry no foreign key (they are dropped with their verdicts'
partition, or deleted with them by ``evalfleet purge``). SQLite keeps the plain tables.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.schema import SchemaItem

from evalfleet.store.partitions import is_partition_name

#: A JSON document: JSONB on Postgres (indexable), JSON text elsewhere.
JsonDocument = JSON().with_variant(JSONB(), "postgresql")

#: A surrogate key: BIGINT on Postgres; INTEGER on SQLite so it autoincrements.
SurrogateKey = BigInteger().with_variant(Integer(), "sqlite")

#: ``info`` of a schema item that only the embedded SQLite store has.
SQLITE_ONLY = {"dialects": ("sqlite",)}

#: ``info`` of a schema item that only the Postgres store has.
POSTGRES_ONLY = {"dialects": ("postgresql",)}

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    },
)

verdicts = Table(
    "verdicts", metadata,
    Column("id", SurrogateKey, primary_key=True, autoincrement=True),
    Column("sample_id", String(256), nullable=False),
    Column("metric", String(64), nullable=False),
    Column("prompt_version", String(32), nullable=False),
    Column("judge_model", String(128), nullable=False),
    Column("status", String(16), nullable=False),
    Column("error_class", String(32)),
    Column("error", Text),
    Column("reason", Text),
    Column("scores", JsonDocument, nullable=False),
    Column("raw_scores", JsonDocument, nullable=False),
    Column("raw_output", Text),
    Column("attempts", Integer, nullable=False),
    Column("latency_ms", Integer, nullable=False),
    Column("prompt_tokens", Integer),
    Column("completion_tokens", Integer),
    Column("cost_usd", Float),
    Column("attributes", JsonDocument, nullable=False),
    Column("sample_ts", DateTime(timezone=True), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("notes", JsonDocument),
    Column("judge_reported_model", String(128)),
    Column("judge_fingerprint", String(128)),
    Column("purpose", String(16), nullable=False, server_default="production"),
    # call, or batch: judged through the provider's Batch API at its batch price.
    Column("judge_mode", String(8), nullable=False, server_default="call"),
    # Of prompt_tokens, those served from the provider's prompt cache (null: not reported).
    Column("cached_tokens", Integer),
    Column("compaction", JsonDocument),
    Column("failed_step", Integer),
    # How a judge cascade reached the verdict (tier, confidence, tiers tried); null
    # for a metric judged by one model.
    Column("cascade", JsonDocument),
    # A session version closed when idle, not yet final: its scores stay out of
    # ``verdict_scores`` (alerts, estimates) until it is marked final.
    Column("provisional", Boolean, nullable=False, server_default=false()),
    # The exactly-once effect: one verdict per sample, metric, prompt and judge (on
    # Postgres: ``verdict_keys``, as a partitioned table cannot hold this constraint).
    UniqueConstraint("sample_id", "metric", "prompt_version", "judge_model", info=SQLITE_ONLY),
    Index(None, "metric", "created_at"),
    Index(None, "metric", "sample_ts"),
    # A segment's verdicts (``attributes @> '{"app": ..., "route": ...}'``) without
    # reading every segment's: the alert page's distributions, trend and worst samples.
    # (On SQLite a plain index on the JSON text, unused: the schema is one for both.)
    Index("ix_verdicts_attributes", "attributes", postgresql_using="gin",
          postgresql_ops={"attributes": "jsonb_path_ops"}),
    postgresql_partition_by="RANGE (created_at)",
)

# A segment's verdicts of a stretch of sample time, one index range per attribute set:
# the key is the rollups' ``segment_key`` (md5 of the attributes' JSONB text), so the
# alert page and a firing alert's evidence read the window's rows of the segment's
# attribute sets named by ``score_rollups`` (``evalfleet.store.queries.evidence.segment_keys``)
# and no other segment's or other time's. (SQLite reads its plain table.)
Index("ix_verdicts_metric_segment_sample_ts", verdicts.c.metric,
      text("md5(CAST(attributes AS text))"), verdicts.c.sample_ts, info=POSTGRES_ONLY)

# Postgres: one row per verdict key digest (``VerdictKey.digest``), unpartitioned, so
# the key stays unique across the partitions of ``verdicts``; a save inserts the key
# first and the verdict only when the key was new. Purged with its verdict.
verdict_keys = Table(
    "verdict_keys", metadata,
    Column("digest", String(64), primary_key=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index(None, "created_at"),
    info=POSTGRES_ONLY,
)

verdict_scores = Table(
    "verdict_scores", metadata,
    Column("verdict_id", SurrogateKey, primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("metric", String(64), nullable=False),
    Column("value", Float),
    Column("sample_ts", DateTime(timezone=True), nullable=False),
    # The verdict's creation time, the partition key (scores stored before revision
    # 0008: a constant just under the legacy partition's bound on Postgres).
    Column("created_at", DateTime(timezone=True), nullable=False),
    ForeignKeyConstraint(["verdict_id"], ["verdicts.id"], ondelete="CASCADE", info=SQLITE_ONLY),
    # "Mean of score X per segment over the last N minutes" scans this index
    # range and joins verdicts by primary key for the segment attributes.
    Index(None, "metric", "name", "sample_ts", postgresql_include=["value", "verdict_id"]),
    postgresql_partition_by="RANGE (created_at)",
)

# The alert engine's sums of ``verdict_scores`` per metric, score, bucket of sample time
# (a minute and an hour), segment attributes and level (``evalfleet.store.rollup``):
# kept by triggers on ``verdict_scores`` in the transaction that writes or deletes the
# scores, so windows and baselines cost the same at any traffic.
score_rollups = Table(
    "score_rollups", metadata,
    Column("metric", String(64), primary_key=True),
    Column("name", String(64), primary_key=True),
    # The bucket's length: 60 (a minute) or 3600 (an hour), aligned to the epoch.
    Column("span_s", Integer, primary_key=True),
    Column("bucket", DateTime(timezone=True), primary_key=True),
    # The attributes' key: md5 of the canonical JSONB text (Postgres), the JSON text (SQLite).
    Column("segment_key", Text, primary_key=True),
    # The verdict's own columns (an incident's ``explain_by`` splits by them).
    Column("judge_model", String(128), primary_key=True, server_default=""),
    Column("prompt_version", String(32), primary_key=True, server_default=""),
    # The value on the level grid (value * 2520, an integer); off it, -999999 in an hour
    # bucket and -1000000 - the tenth of 0..1 in a minute bucket (revision 0026).
    Column("level", Integer, primary_key=True),
    # Which of a bucket's rows (Postgres: a save's connection's; 0 also holds removals and
    # what beat folds in): the sums are the shards' sums.
    Column("shard", SmallInteger, primary_key=True, server_default="0"),
    Column("attributes", JsonDocument, nullable=False),
    Column("n", BigInteger, nullable=False),
    Column("total", Float, nullable=False),
    Column("total_sq", Float, nullable=False),
    Column("first_ts", DateTime(timezone=True), nullable=False),
    Index("ix_score_rollups_sharded", "bucket", postgresql_where=text("shard <> 0"),
          sqlite_where=text("shard <> 0")),
)

# The evidence: what each verdict judged, as the producer accepted it (after redaction).
# A table of its own so verdict rows stay small and its retention purges it alone.
verdict_samples = Table(
    "verdict_samples", metadata,
    Column("verdict_id", SurrogateKey, primary_key=True),
    # The verdict's creation time, the partition key: ``evalfleet purge`` walks this index.
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("sample", JsonDocument, nullable=False),
    ForeignKeyConstraint(["verdict_id"], ["verdicts.id"], ondelete="CASCADE", info=SQLITE_ONLY),
    Index(None, "created_at"),
    postgresql_partition_by="RANGE (created_at)",
)

dead_letters = Table(
    "dead_letters", metadata,
    Column("id", SurrogateKey, primary_key=True, autoincrement=True),
    Column("sample_id", String(256)),
    Column("metric", String(64)),
    Column("error_class", String(32), nullable=False),
    Column("error", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("payload", JsonDocument, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # One entry per failed delivery (time, attempt, error class, error), oldest first.
    Column("history", JsonDocument, nullable=False, server_default=text("'[]'")),
    # Digest of the verdict key the job would have made: a dead letter settles its key
    # like a verdict does, once (null when the job could not be read).
    Column("verdict_key", String(64), unique=True),
    Index(None, "metric", "created_at"),
)

claims = Table(
    "claims", metadata,
    Column("key", String(64), primary_key=True),
    Column("owner", String(128), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)

# Session versions whose final job came before their verdict was stored (a batch held the
# key, or the job was published only to mark, its judging shed): the verdict is marked
# final as soon as it is saved (evalfleet.store.finality).
pending_finals = Table(
    "pending_finals", metadata,
    Column("sample_id", String(256), primary_key=True),
    Column("metric", String(64), primary_key=True),
    Column("prompt_version", String(32), primary_key=True),
    Column("judge_model", String(128), primary_key=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

# How far each retention task got (``evalfleet purge``, evalfleet/ops/purger.py): the next
# run starts there instead of re-reading every verdict it already handled.
retention_marks = Table(
    "retention_marks", metadata,
    Column("task", String(32), primary_key=True),
    Column("metric", String(64), primary_key=True),
    Column("done_until", DateTime(timezone=True), nullable=False),
)

# --- Alerts (evalfleet/alerts/): Postgres only, created on SQLite too so migrations agree.

alert_states = Table(
    "alert_states", metadata,
    Column("rule", String(128), primary_key=True),
    Column("segment_key", String(64), primary_key=True),
    Column("segment", JsonDocument, nullable=False),
    Column("state", String(24), nullable=False),
    Column("since", DateTime(timezone=True), nullable=False),
    Column("breaches", Integer, nullable=False),
    Column("clears", Integer, nullable=False),
    Column("breach_started_at", DateTime(timezone=True)),
    Column("fired_at", DateTime(timezone=True)),
    Column("notified_at", DateTime(timezone=True)),
    Column("evaluated_at", DateTime(timezone=True), nullable=False),
    Column("transitions", Integer, nullable=False),
    Column("announced", Boolean, nullable=False),
    Column("finding", JsonDocument, nullable=False),
    # The sequential detector's state per test (``edetector.DetectorState``), null for
    # fixed-test rules.
    Column("detector", JsonDocument),
)

calibration_runs = Table(
    "calibration_runs", metadata,
    Column("id", SurrogateKey, primary_key=True, autoincrement=True),
    Column("metric", String(64), nullable=False),
    Column("prompt_version", String(32), nullable=False),
    Column("judge_model", String(128), nullable=False),
    Column("gold", String(256), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # The report as ``evalfleet calibrate --json`` prints it: statistics per score.
    Column("report", JsonDocument, nullable=False),
    Index(None, "metric", "created_at"),
)

# A judge cascade's thresholds, fitted on people's labels; each fit a new version, the
# worker reading the latest of its metric and cascade identity (``cascade:<digest>``).
cascade_thresholds = Table(
    "cascade_thresholds", metadata,
    Column("metric", String(64), primary_key=True),
    Column("identity", String(128), primary_key=True),
    Column("version", Integer, primary_key=True),
    # Each tier's threshold, cheapest first (null: the tier settles nothing).
    Column("thresholds", JsonDocument, nullable=False),
    # The fit as ``evalfleet judge cascade fit --json`` prints it: guarantee, per tier.
    Column("report", JsonDocument, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

alert_exclusions = Table(
    "alert_exclusions", metadata,
    Column("id", SurrogateKey, primary_key=True, autoincrement=True),
    Column("rule", String(128), nullable=False),
    Column("segment_key", String(64), nullable=False),
    # The segment's labels: a sample belongs to it when its attributes contain them.
    Column("segment", JsonDocument, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("ended_at", DateTime(timezone=True)),
    Index(None, "rule", "segment_key"),
)

alert_notifications = Table(
    "alert_notifications", metadata,
    Column("id", SurrogateKey, primary_key=True, autoincrement=True),
    Column("idempotency_key", String(64), nullable=False, unique=True),
    Column("rule", String(128), nullable=False),
    Column("segment_key", String(64), nullable=False),
    Column("receiver", String(128), nullable=False),
    Column("kind", String(24), nullable=False),
    Column("alert", JsonDocument, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", DateTime(timezone=True), nullable=False),
    Column("delivered_at", DateTime(timezone=True)),
    Column("failed_at", DateTime(timezone=True)),
    Column("last_error", Text),
    Index(None, "delivered_at", "next_attempt_at"),
)

# Every change of state of a rule and segment, with the numbers that caused it: the
# history ``alerts show`` and the page draw (markers on the trend, "last transition").
alert_transitions = Table(
    "alert_transitions", metadata,
    Column("id", SurrogateKey, primary_key=True, autoincrement=True),
    Column("rule", String(128), nullable=False),
    Column("segment_key", String(64), nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("previous", String(24), nullable=False),
    Column("state", String(24), nullable=False),
    Column("events", String(128), nullable=False),
    Column("finding", JsonDocument, nullable=False),
    Index(None, "rule", "segment_key", "at"),
)

# One row per evaluation of a rule and segment: the window's and the baseline's means
# and counts. The rollup the overview's sparklines and the trend's baseline band read
# (a few rows per segment instead of its verdicts); the engine keeps two days of it.
alert_points = Table(
    "alert_points", metadata,
    Column("rule", String(128), primary_key=True),
    Column("segment_key", String(64), primary_key=True),
    Column("at", DateTime(timezone=True), primary_key=True),
    Column("n", Integer, nullable=False),
    Column("mean", Float),
    Column("baseline_n", Integer),
    Column("baseline_mean", Float),
    Column("state", String(24), nullable=False),
    Index(None, "rule", "at"),
)

alert_rule_runs = Table(
    "alert_rule_runs", metadata,
    Column("rule", String(128), primary_key=True),
    Column("slot", BigInteger, nullable=False),
    Column("evaluated_at", DateTime(timezone=True), nullable=False),
)

# --- The review queue (store/queries/review_queue.py): people's labels of what the judge judged.
# Items name their verdict by key digest, never by ``verdicts.id`` (the verdicts table may
# be partitioned), and keep a copy of the sample and of the judge's scores, so an item
# outlives the verdict's sample retention until it is labelled or expires.

review_items = Table(
    "review_items", metadata,
    Column("id", SurrogateKey, primary_key=True, autoincrement=True),
    Column("sample_id", String(256), nullable=False),
    Column("metric", String(64), nullable=False),
    # The verdict the item reviews: ``VerdictKey.digest()`` and the two key parts it adds.
    Column("verdict_key", String(64), nullable=False),
    Column("prompt_version", String(32), nullable=False),
    Column("judge_model", String(128), nullable=False),
    # ``random`` (the slice's hash chose it) or what chose it: ``alert``, ``filter``, ``ids``,
    # ``import``; only random items feed agreement figures.
    Column("reason", String(16), nullable=False),
    Column("detail", String(256)),
    # Inclusion probability of a random item (its stratum's rate); null when chosen.
    Column("probability", Float),
    Column("stratum", String(32)),
    Column("labels_wanted", Integer, nullable=False),
    Column("labels_given", Integer, nullable=False, server_default=text("0")),
    Column("skips", Integer, nullable=False, server_default=text("0")),
    Column("lease_owner", String(128)),
    Column("lease_expires_at", DateTime(timezone=True)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # When the item's sample was taken (its verdict's): the label pool of a window is
    # chosen on this time, as the window's verdicts are, not on when the item was queued.
    Column("sample_ts", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    # Set when the item has all the labels it wants.
    Column("done_at", DateTime(timezone=True)),
    Column("judge_scores", JsonDocument, nullable=False),
    Column("judge_raw_scores", JsonDocument, nullable=False),
    Column("judge_reason", Text),
    Column("attributes", JsonDocument, nullable=False),
    Column("sample", JsonDocument),
    # One item per sample and metric, whichever worker stored which verdict first.
    UniqueConstraint("sample_id", "metric"),
    # Open items in queue order: where the next one to take is found.
    Index(None, "done_at", "id"),
    Index(None, "metric", "created_at"),
    Index(None, "metric", "sample_ts"),
    # The item a reviewer holds, found at each take without reading the queue.
    Index(None, "lease_owner"),
)

review_labels = Table(
    "review_labels", metadata,
    Column("item_id", SurrogateKey, ForeignKey("review_items.id", ondelete="CASCADE"),
           primary_key=True),
    Column("reviewer", String(128), primary_key=True),
    Column("score", String(64), primary_key=True),
    # On the judge's own scale (booleans true/false); null: the reviewer cannot say.
    Column("raw_value", JsonDocument),
    # The same value normalised to 0..1 by the metric's scale, null likewise.
    Column("value", Float),
    Column("comment", Text),
    # ``page`` or ``import``.
    Column("source", String(16), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

review_skips = Table(
    "review_skips", metadata,
    Column("item_id", SurrogateKey, ForeignKey("review_items.id", ondelete="CASCADE"),
           primary_key=True),
    Column("reviewer", String(128), primary_key=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

reviewers = Table(
    "reviewers", metadata,
    Column("name", String(128), primary_key=True),
    # SHA-256 of the reviewer's token: the token itself is shown once and never stored.
    Column("token_digest", String(64), nullable=False, unique=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

# --- Datasets (evalfleet/store/queries/datasets.py): samples saved from production, versioned.
# An item is a copy of one verdict as judged (the sample, the judge's scores and reasoning,
# people's labels) made once per dataset, so purging verdicts or their samples leaves it
# whole; it names its verdict by key digest, never by ``verdicts.id``. A version lists
# its items in order (``dataset_members``), so every version reads back as it was.

datasets = Table(
    "datasets", metadata,
    Column("id", SurrogateKey, primary_key=True, autoincrement=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("description", String(1024)),
    # Days the dataset is kept after its last version; null: EVALFLEET_DATASET_RETENTION_DAYS.
    Column("retention_days", Float),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

dataset_items = Table(
    "dataset_items", metadata,
    Column("id", SurrogateKey, primary_key=True, autoincrement=True),
    Column("dataset_id", SurrogateKey, ForeignKey("datasets.id", ondelete="CASCADE"),
           nullable=False),
    # ``VerdictKey.digest()`` of the verdict copied, and the key's parts.
    Column("verdict_key", String(64), nullable=False),
    Column("sample_id", String(256), nullable=False),
    Column("metric", String(64), nullable=False),
    Column("prompt_version", String(32), nullable=False),
    Column("judge_model", String(128), nullable=False),
    Column("status", String(16), nullable=False),
    Column("error_class", String(32)),
    Column("scores", JsonDocument, nullable=False),
    Column("raw_scores", JsonDocument, nullable=False),
    Column("reason", Text),
    Column("attributes", JsonDocument, nullable=False),
    Column("sample", JsonDocument),
    Column("sample_ts", DateTime(timezone=True), nullable=False),
    Column("judged_at", DateTime(timezone=True), nullable=False),
    # People's labels from the review queue: [{reviewer, score, value, comment}].
    Column("reviews", JsonDocument, nullable=False),
    Column("added_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("dataset_id", "verdict_key"),
    # Erasure requests find a sample's copies in every dataset.
    Index(None, "sample_id"),
)

dataset_versions = Table(
    "dataset_versions", metadata,
    Column("dataset_id", SurrogateKey, ForeignKey("datasets.id", ondelete="CASCADE"),
           primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # What made the version: the filter, the alert, the ids added or removed.
    Column("note", String(512), nullable=False),
)

dataset_members = Table(
    "dataset_members", metadata,
    Column("dataset_id", SurrogateKey, ForeignKey("datasets.id", ondelete="CASCADE"),
           primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("item_id", SurrogateKey, ForeignKey("dataset_items.id", ondelete="CASCADE"),
           nullable=False),
    Index(None, "item_id"),
)


# Batch judging (workers/batchjudge): jobs waiting for a batch, and the batches sent. Both
# name a verdict by its key's digest (the batch line's custom_id), never verdicts.id.
judge_batch_spool = Table(
    "judge_batch_spool", metadata,
    Column("key", String(64), primary_key=True),
    Column("judge_model", String(128), nullable=False),
    Column("metric", String(64), nullable=False),
    # JSON text, not JSONB: sample text may hold NUL or lone surrogates, which JSON text
    # keeps as escapes and JSONB refuses.
    Column("job", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("body_bytes", Integer, nullable=False),
    Column("spooled_at", DateTime(timezone=True), nullable=False),
    # A job whose batch failed without running waits until then before the next batch.
    Column("not_before", DateTime(timezone=True), nullable=False),
    # The local id of the batch carrying the job; null while it waits for one.
    Column("batch", String(64)),
    Index(None, "judge_model", "batch", "spooled_at"),
    Index(None, "batch"),
)

judge_batches = Table(
    "judge_batches", metadata,
    Column("id", String(64), primary_key=True),
    Column("judge_model", String(128), nullable=False),
    # preparing: lines chosen, creation not known to have happened; open: created at the
    # provider; done: collected (or given back).
    Column("state", String(16), nullable=False),
    Column("provider_id", String(128)),
    Column("input_file_id", String(128)),
    Column("status", String(16)),
    Column("requests", Integer, nullable=False),
    Column("completed", Integer, nullable=False, server_default=text("0")),
    Column("failed", Integer, nullable=False, server_default=text("0")),
    Column("estimated_cost_usd", Float),
    # What its verdicts cost at the batch price, and what they would have cost more
    # at the synchronous price.
    Column("cost_usd", Float, nullable=False, server_default=text("0")),
    Column("saved_usd", Float, nullable=False, server_default=text("0")),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Index(None, "state"),
)


def schema_filter(dialect: str) -> dict[str, Any]:
    """Alembic comparison options for ``dialect``'s database: leave out the partitions of
    the verdict tables and the items the other database alone has (``info["dialects"]``).

    Returns:
        ``include_name`` and ``include_object`` for ``EnvironmentContext.configure``.
    """
    def include_name(name: str | None, type_: str, _parents: dict[str, str | None]) -> bool:
        return not (type_ == "table" and name is not None and is_partition_name(name))

    def include_object(item: SchemaItem, _name: str | None, _type: str, _reflected: bool,
                       _compare_to: SchemaItem | None) -> bool:
        dialects = getattr(item, "info", {}).get("dialects")
        table = getattr(item, "table", None)
        if dialects is None and table is not None:
            dialects = table.info.get("dialects")
        return dialects is None or dialect in dialects

    return {"include_name": include_name, "include_object": include_object}
