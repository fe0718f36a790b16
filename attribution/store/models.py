"""The schema of the store, as SQLAlchemy 2.0 models. Alembic migrations (migrations/) create it; these
models describe it for queries and for `alembic check`.

Everything lives in the schema `attribution`. Event kinds and rule ids are text, so a new rule never needs DDL.
`events` is range-partitioned by month on `occurred_at`: the partitions of the coming year are made ahead by a
maintenance step (`attribution.ensure_event_partitions`, run at migration, by `db upgrade` and by
`db attribute-pending`), and a DEFAULT partition takes the rest; ingest never creates one (docs/store.md).

Every table is keyed for Citus (docs/store.md, "Past one server"): the per-job tables by `job_id` (in every
primary and foreign key), the per-node ones by the node (`events.node_key`, `node` in the rollups),
`DISTRIBUTION` says which; tests/store/test_distribution.py checks the catalog and the SQL against it.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    Computed,
    Date,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    REAL,
    SmallInteger,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

SCHEMA = "attribution"

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


#: table -> (distribution column, co-located with) for Citus; None: a reference table (`attribution db distribute`).
DISTRIBUTION: dict[str, tuple[str, str | None] | None] = {
    "jobs": ("job_id", None),
    "verdicts": ("job_id", "jobs"),
    "job_events": ("job_id", "jobs"),
    "coverage": ("job_id", "jobs"),
    "events": ("node_key", None),
    "event_jobs": ("node_key", "events"),
    "fault_weeks": ("node", "events"),
    "fault_series": ("node", "events"),
    "failed_roots": ("node", "events"),
    "failed_root_series": ("node", "events"),
    "drain_actions": ("node", "events"),
    "job_actions": ("job_id", "jobs"),
    "device_counters": ("job_id", "jobs"),
    "job_evidence": ("job_id", "jobs"),
    "job_evidence_pieces": ("job_id", "jobs"),
    "rule_packs": None,
    "drain_policies": None,
    "drain_conditions": None,
    "node_resumes": None,
    "node_life": ("node", "events"),
    "node_states": ("node", "events"),
    "alert_cursors": None,
    "alert_keys": None,
    "alert_deliveries": None,
    "kueue_watch_bookmarks": None,
    "kueue_watch_attempts": None,
}


class Base(DeclarativeBase):
    metadata = MetaData(schema=SCHEMA, naming_convention=NAMING)


TS = DateTime(timezone=True)


class Job(Base):
    """One job, identified by (cluster, job id, start time): Slurm job ids wrap around."""

    __tablename__ = "jobs"
    __table_args__ = (
        PrimaryKeyConstraint("job_id", "id"),
        UniqueConstraint("cluster", "job_id", "start_time"),
        Index(None, "cluster", "job_id"),
        Index(None, "end_time"),
        Index("ix_jobs_attribution_pending", "id", postgresql_where=text("evidence_seq > attributed_seq")),
        # browsing (store.browse): newest first by the job's time, overall, per cluster, per user; jobs on a node
        Index("ix_jobs_job_time", text("coalesce(end_time, start_time)"), "id"),
        Index("ix_jobs_cluster_job_time", "cluster", text("coalesce(end_time, start_time)"), "id"),
        Index("ix_jobs_user_job_time", "user_name", text("coalesce(end_time, start_time)"), "id"),
        Index("ix_jobs_nodes", "nodes", postgresql_using="gin"),
        Index("ix_jobs_outcome_job_time", "current_outcome", text("coalesce(end_time, start_time)"), "id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(always=False))
    cluster: Mapped[str] = mapped_column(Text)
    job_id: Mapped[str] = mapped_column(Text)
    start_time: Mapped[datetime] = mapped_column(TS)
    end_time: Mapped[datetime | None] = mapped_column(TS)
    user_name: Mapped[str | None] = mapped_column(Text)
    job_name: Mapped[str | None] = mapped_column(Text)  # user-written: groups that user's jobs only (recurrence)
    partition: Mapped[str | None] = mapped_column(Text)
    state: Mapped[str] = mapped_column(Text, server_default=text("'UNKNOWN'"))
    exit_code: Mapped[str | None] = mapped_column(Text)
    failed_node: Mapped[str | None] = mapped_column(Text)
    nodes: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    gpus_per_node: Mapped[int | None] = mapped_column(Integer)
    context: Mapped[dict] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    context_source: Mapped[str] = mapped_column(Text)
    context_precedence: Mapped[int] = mapped_column(SmallInteger, server_default=text("0"))
    current_verdict_id: Mapped[int | None] = mapped_column(BigInteger)
    #: the current verdict's outcome (set with current_verdict_id): the job list's outcome filter (migration 0013)
    current_outcome: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=text("now()"))
    updated_at: Mapped[datetime] = mapped_column(TS, server_default=text("now()"))
    #: evidence was stored after the current verdict was computed; whoever attributes next clears it
    # evidence stored (pieces counted) and the count the current verdict was computed from (coalesced attribution)
    evidence_seq: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    attributed_seq: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))


class Event(Base):
    """A normalized fault event, stored once per fingerprint whatever the number of jobs that saw it."""

    __tablename__ = "events"
    __table_args__ = (
        PrimaryKeyConstraint("node_key", "id", "occurred_at"),
        UniqueConstraint("node_key", "fingerprint", "occurred_at"),
        Index(None, "cluster", "node", "occurred_at"),
        Index(None, "kind", "occurred_at"),
        Index("ix_events_kind_occurred_at_node", "kind", "occurred_at", "node",
              postgresql_where=text("role = 'cause' AND handled_at IS NULL"),
              postgresql_include=["gpu", "code", "id", "outcome"]),
        {"postgresql_partition_by": "RANGE (occurred_at)"},
    )

    id: Mapped[int] = mapped_column(BigInteger, server_default=text("nextval('attribution.events_id_seq')"))
    occurred_at: Mapped[datetime] = mapped_column(TS)
    fingerprint: Mapped[bytes] = mapped_column(LargeBinary)
    cluster: Mapped[str] = mapped_column(Text)
    node: Mapped[str | None] = mapped_column(Text)
    #: the distribution key: the node; for a line of a job's own output without a node `<cluster>/<job id>`;
    #: else the cluster (attribution.store.writer.node_key)
    node_key: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(Text)
    #: who could have written the line: 'system' or 'job_output' (docs/bundle.md "Trust")
    evidence: Mapped[str] = mapped_column(Text, server_default=text("'system'"))
    kind: Mapped[str] = mapped_column(Text)
    role: Mapped[str] = mapped_column(Text)
    code: Mapped[int | None] = mapped_column(Integer)
    gpu: Mapped[str | None] = mapped_column(Text)
    rank: Mapped[int | None] = mapped_column(Integer)
    time_exact: Mapped[bool] = mapped_column(Boolean)
    outcome: Mapped[str | None] = mapped_column(Text)
    action: Mapped[str | None] = mapped_column(Text)
    severity: Mapped[str] = mapped_column(Text)
    rule: Mapped[str] = mapped_column(Text)
    location: Mapped[str] = mapped_column(Text)
    message: Mapped[str] = mapped_column(Text)
    line: Mapped[str] = mapped_column(Text)
    fields: Mapped[dict] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    handled_at: Mapped[datetime | None] = mapped_column(TS)
    stored_at: Mapped[datetime] = mapped_column(TS, server_default=text("now()"))


class JobEvent(Base):
    """Which job saw which event; stored with the job (by job_id). The event's role in the job is its current
    verdict's (Verdict.cause_event_ids, symptom_event_ids: docs/store.md). `node_key` says where the event is.
    No foreign key to events: a month of events is dropped with its links (attribution.store.retention); none
    to jobs (0019: it was checked on every link of every ingest): retention deletes a job's links with it."""

    __tablename__ = "job_events"
    __table_args__ = (
        PrimaryKeyConstraint("job_id", "job_ref", "event_id"),
        Index(None, "event_time"),
    )

    job_id: Mapped[str] = mapped_column(Text)
    job_ref: Mapped[int] = mapped_column(BigInteger)
    node_key: Mapped[str] = mapped_column(Text)
    event_id: Mapped[int] = mapped_column(BigInteger)
    event_time: Mapped[datetime] = mapped_column(TS)


class EventJob(Base):
    """The same links as job_events, stored with the event (by node_key): what the fleet views and the drain policy
    count per event without leaving the event's shard."""

    __tablename__ = "event_jobs"
    __table_args__ = (
        PrimaryKeyConstraint("node_key", "event_id", "job_ref"),
        Index(None, "event_time"),
    )

    node_key: Mapped[str] = mapped_column(Text)
    event_id: Mapped[int] = mapped_column(BigInteger)
    event_time: Mapped[datetime] = mapped_column(TS)
    job_id: Mapped[str] = mapped_column(Text)
    job_ref: Mapped[int] = mapped_column(BigInteger)


class Verdict(Base):
    """Every attribution run that changed the verdict; the job's current one is jobs.current_verdict_id."""

    __tablename__ = "verdicts"
    __table_args__ = (
        PrimaryKeyConstraint("job_id", "id"),
        ForeignKeyConstraint(["job_id", "job_ref"], ["attribution.jobs.job_id", "attribution.jobs.id"],
                             ondelete="CASCADE"),
        Index(None, "job_id", "job_ref", "id"),
        Index(None, "outcome", "created_at"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(always=False))
    job_id: Mapped[str] = mapped_column(Text)
    job_ref: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=text("now()"))
    outcome: Mapped[str] = mapped_column(Text)
    confidence: Mapped[str] = mapped_column(Text)
    action: Mapped[str] = mapped_column(Text)
    root_event_id: Mapped[int | None] = mapped_column(BigInteger)
    root_kind: Mapped[str | None] = mapped_column(Text)
    root_code: Mapped[int | None] = mapped_column(Integer)
    root_node: Mapped[str | None] = mapped_column(Text)
    root_gpu: Mapped[str | None] = mapped_column(Text)
    root_time: Mapped[datetime | None] = mapped_column(TS)
    culprit_nodes: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    #: per culprit node, in the same order: 'system' or 'job_output' (what names it)
    culprit_evidence: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    explanation: Mapped[str] = mapped_column(Text)
    rules_version: Mapped[str] = mapped_column(Text)
    input_digest: Mapped[str] = mapped_column(Text)
    document: Mapped[dict] = mapped_column(JSONB)
    #: the document's `cost` (what the failure lost), kept beside it (0007) so that lost_gpu_hours and its reader
    #: need no right on the whole document
    cost: Mapped[dict | None] = mapped_column(JSONB, Computed("document -> 'cost'", persisted=True))
    #: the roles of the job's events in this verdict (0019): its causes' event ids (root first, as the verdict
    #: lists them; NULL for a verdict that was no longer current before 0019), its symptoms' and, in the same
    #: order, what explains each ("root_cause", an explaining event's reference, or NULL)
    cause_event_ids: Mapped[list[int] | None] = mapped_column(ARRAY(BigInteger))
    symptom_event_ids: Mapped[list[int]] = mapped_column(ARRAY(BigInteger), server_default=text("'{}'"))
    symptom_explained_by: Mapped[list[str | None]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))


class CoverageRecord(Base):
    """What each collector saw for a job: the latest report per (source, node, file)."""

    __tablename__ = "coverage"
    __table_args__ = (
        PrimaryKeyConstraint("job_id", "job_ref", "source", "node_key", "file_key"),
        ForeignKeyConstraint(["job_id", "job_ref"], ["attribution.jobs.job_id", "attribution.jobs.id"],
                             ondelete="CASCADE"),
    )

    job_id: Mapped[str] = mapped_column(Text)
    job_ref: Mapped[int] = mapped_column(BigInteger)
    source: Mapped[str] = mapped_column(Text)
    node_key: Mapped[str] = mapped_column(Text)
    file_key: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text)
    lines: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    reason: Mapped[str | None] = mapped_column(Text)
    notes: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    reported_at: Mapped[datetime] = mapped_column(TS, server_default=text("now()"))


class DeviceCounters(Base):
    """The counters one device showed in one snapshot of a job (telemetry, docs/bundle.md): a GPU's ECC totals and
    remapped rows, an InfiniBand port's error counters, a PCI device's AER totals, for the fleet views."""

    __tablename__ = "device_counters"
    __table_args__ = (
        PrimaryKeyConstraint("job_id", "job_ref", "node", "device_kind", "device", "phase"),
        ForeignKeyConstraint(["job_id", "job_ref"], ["attribution.jobs.job_id", "attribution.jobs.id"],
                             ondelete="CASCADE"),
        Index(None, "cluster", "node", "device_kind", "device", "taken_at"),
    )

    job_id: Mapped[str] = mapped_column(Text)
    job_ref: Mapped[int] = mapped_column(BigInteger)
    cluster: Mapped[str] = mapped_column(Text)
    node: Mapped[str] = mapped_column(Text)
    device_kind: Mapped[str] = mapped_column(Text)  # gpu | ib_port | pci
    device: Mapped[str] = mapped_column(Text)  # 0000:3b:00 | mlx5_0/1 | 0000:3a:00.0
    phase: Mapped[str] = mapped_column(Text)  # prolog | epilog
    taken_at: Mapped[datetime | None] = mapped_column(TS)
    counters: Mapped[dict] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    info: Mapped[dict] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    stored_at: Mapped[datetime] = mapped_column(TS, server_default=text("now()"))


class FaultKey:
    """The key the fault rollups share: one fault series per cluster, node, GPU ('' for none), kind and code (-1
    for none)."""

    cluster: Mapped[str] = mapped_column(Text)
    node: Mapped[str] = mapped_column(Text)
    gpu_key: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(Text)
    code_key: Mapped[int] = mapped_column(Integer)


class FaultWeek(FaultKey, Base):
    """Rollup kept at ingest: events per (cluster, node, gpu, kind, code, role, ISO week). The fleet-trend views
    read this instead of scanning every event."""

    __tablename__ = "fault_weeks"
    __table_args__ = (
        PrimaryKeyConstraint("cluster", "node", "gpu_key", "kind", "code_key", "week"),
        Index(None, "week"),
    )

    week: Mapped[datetime] = mapped_column(Date)
    role: Mapped[str] = mapped_column(Text)
    outcome: Mapped[str | None] = mapped_column(Text)
    scope: Mapped[str] = mapped_column(Text)  # node: from the node's own logs; job: from a job's output or state
    events: Mapped[int] = mapped_column(BigInteger)
    first_seen: Mapped[datetime] = mapped_column(TS)
    last_seen: Mapped[datetime] = mapped_column(TS)


class FaultSeries(FaultKey, Base):
    """Rollup kept at ingest: one row per (cluster, node, gpu, kind, code) with its events and distinct ISO weeks.
    Its size follows the fleet (nodes x GPUs x kinds), not the length of the history."""

    __tablename__ = "fault_series"
    __table_args__ = (
        PrimaryKeyConstraint("cluster", "node", "gpu_key", "kind", "code_key"),
        Index(None, "weeks"),
    )

    role: Mapped[str] = mapped_column(Text)
    outcome: Mapped[str | None] = mapped_column(Text)
    scope: Mapped[str] = mapped_column(Text)
    events: Mapped[int] = mapped_column(BigInteger)
    weeks: Mapped[int] = mapped_column(Integer)
    first_seen: Mapped[datetime] = mapped_column(TS)
    last_seen: Mapped[datetime] = mapped_column(TS)


class FailedRoot(FaultKey, Base):
    """Rollup kept with the verdicts: failed jobs whose current root cause is a fault, per fault and ISO week."""

    __tablename__ = "failed_roots"
    __table_args__ = (PrimaryKeyConstraint("cluster", "node", "gpu_key", "kind", "code_key", "week"),)

    week: Mapped[datetime] = mapped_column(Date)
    jobs: Mapped[int] = mapped_column(Integer)


class FailedRootSeries(FaultKey, Base):
    """Rollup kept with the verdicts: failed jobs whose current root cause is a fault, per fault over all weeks (what
    recurring_faults reads: its size follows the fleet, not the length of the history, as fault_series' does)."""

    __tablename__ = "failed_root_series"
    __table_args__ = (PrimaryKeyConstraint("cluster", "node", "gpu_key", "kind", "code_key"),)

    jobs: Mapped[int] = mapped_column(Integer)


class RulePack(Base):
    __tablename__ = "rule_packs"

    version: Mapped[str] = mapped_column(Text, primary_key=True)
    first_used: Mapped[datetime] = mapped_column(TS, server_default=text("now()"))
    rules: Mapped[int] = mapped_column(Integer)
    files: Mapped[dict] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))


class DrainPolicy(Base):
    """A drain policy as loaded from rules/drain-policy.yaml; the newest is the one in force."""

    __tablename__ = "drain_policies"

    version: Mapped[str] = mapped_column(Text, primary_key=True)
    loaded_at: Mapped[datetime] = mapped_column(TS, server_default=text("now()"))
    reason_prefix: Mapped[str] = mapped_column(Text)
    caps: Mapped[dict] = mapped_column(JSONB)
    document: Mapped[dict] = mapped_column(JSONB)


class DrainCondition(Base):
    __tablename__ = "drain_conditions"
    __table_args__ = (PrimaryKeyConstraint("policy_version", "condition_id"),)

    policy_version: Mapped[str] = mapped_column(
        Text, ForeignKey("attribution.drain_policies.version", ondelete="CASCADE"))
    condition_id: Mapped[str] = mapped_column(Text)
    kinds: Mapped[list[str] | None] = mapped_column(ARRAY(Text))
    per: Mapped[str | None] = mapped_column(Text)
    distinct_by: Mapped[str | None] = mapped_column(Text)
    culprit_distinct: Mapped[str | None] = mapped_column(Text)
    min_count: Mapped[int] = mapped_column(Integer)
    window_days: Mapped[int] = mapped_column(Integer)
    label: Mapped[str] = mapped_column(Text)
    score: Mapped[float] = mapped_column(REAL)
    #: counts all of its evidence in the window, also what came before the node's last reboot or resume (0021)
    recurrence: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))


class NodeResume(Base):
    """When an operator gave a node back: its earlier evidence no longer counts."""

    __tablename__ = "node_resumes"
    __table_args__ = (PrimaryKeyConstraint("cluster", "node"),)

    cluster: Mapped[str] = mapped_column(Text)
    node: Mapped[str] = mapped_column(Text)
    resumed_at: Mapped[datetime] = mapped_column(TS)


class NodeLife(Base):
    """What the store learned of a node's state changes (0021): boots (the kernel's banner, a job context's
    boot_time, Slurm's BootTime), Slurm's drains and resumes with who made them, `attribution drain resume`. A
    one-shot drain condition counts only the evidence from after the node's last boot or resume."""

    __tablename__ = "node_life"
    __table_args__ = (PrimaryKeyConstraint("node", "cluster", "what", "at", "source"), Index(None, "at"))

    node: Mapped[str] = mapped_column(Text)
    cluster: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(TS)
    what: Mapped[str] = mapped_column(Text)  # boot | resume | drain | down
    source: Mapped[str] = mapped_column(Text)  # kernel | context | slurm | attribution
    actor: Mapped[str | None] = mapped_column(Text)
    detail: Mapped[str | None] = mapped_column(Text)
    recorded_at: Mapped[datetime] = mapped_column(TS, server_default=text("now()"))


class NodeSlurmState(Base):
    """Slurm's last view of a node, as `attribution drain sync-nodes` saw it (the next view is compared with it)."""

    __tablename__ = "node_states"
    __table_args__ = (PrimaryKeyConstraint("node", "cluster"),)

    node: Mapped[str] = mapped_column(Text)
    cluster: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(Text)
    reason: Mapped[str | None] = mapped_column(Text)
    reason_user: Mapped[str | None] = mapped_column(Text)
    reason_at: Mapped[datetime | None] = mapped_column(TS)
    boot_time: Mapped[datetime | None] = mapped_column(TS)
    slurmd_start: Mapped[datetime | None] = mapped_column(TS)
    seen_at: Mapped[datetime] = mapped_column(TS)


class DrainAction(Base):
    """The audit of every drain decision: applied, skipped, capped, failed, resumed."""

    __tablename__ = "drain_actions"
    __table_args__ = (PrimaryKeyConstraint("node", "id"), Index(None, "cluster", "at"))

    id: Mapped[int] = mapped_column(BigInteger, Identity(always=False))
    at: Mapped[datetime] = mapped_column(TS, server_default=text("now()"))
    cluster: Mapped[str] = mapped_column(Text)
    node: Mapped[str] = mapped_column(Text)
    decision: Mapped[str] = mapped_column(Text)
    reason: Mapped[str | None] = mapped_column(Text)
    detail: Mapped[str | None] = mapped_column(Text)
    evidence: Mapped[dict | None] = mapped_column(JSONB)
    policy_version: Mapped[str | None] = mapped_column(Text)
    actor: Mapped[str | None] = mapped_column(Text)


class JobAction(Base):
    """The audit of what attribution did to a failed job in Slurm (0026): the AdminComment written for its owner,
    each requeue decision (applied, skipped, capped, failed). A cause of a job is requeued once."""

    __tablename__ = "job_actions"
    __table_args__ = (PrimaryKeyConstraint("job_id", "id"), Index(None, "cluster", "at"),
                      Index("uq_job_actions_requeued_cause", "job_id", "cluster", "cause", unique=True,
                            postgresql_where=text("action = 'requeue' AND decision = 'applied'")))

    job_id: Mapped[str] = mapped_column(Text)
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=False))
    at: Mapped[datetime] = mapped_column(TS, server_default=text("now()"))
    cluster: Mapped[str] = mapped_column(Text)
    job_start: Mapped[datetime | None] = mapped_column(TS)
    action: Mapped[str] = mapped_column(Text)  # admin_comment | requeue
    decision: Mapped[str] = mapped_column(Text)  # applied | skipped | capped | failed
    user_name: Mapped[str | None] = mapped_column(Text)
    cause: Mapped[str | None] = mapped_column(Text)
    nodes: Mapped[list[str] | None] = mapped_column(ARRAY(Text))
    detail: Mapped[str | None] = mapped_column(Text)
    policy_version: Mapped[str | None] = mapped_column(Text)
    actor: Mapped[str | None] = mapped_column(Text)


class AlertCursor(Base):
    """How far `attribution alerts send` has read a stream (verdicts, drain_actions), by id."""

    __tablename__ = "alert_cursors"

    stream: Mapped[str] = mapped_column(Text, primary_key=True)
    last_id: Mapped[int] = mapped_column(BigInteger)


class AlertKey(Base):
    """When an alert with this key was last sent: one per key and cooldown."""

    __tablename__ = "alert_keys"

    key: Mapped[str] = mapped_column(Text, primary_key=True)
    sent_at: Mapped[datetime] = mapped_column(TS)


class AlertDelivery(Base):
    """What an alert owes one sink: pending until the sink took it (delivered_at) or the attempts ran out
    (gave_up_at). The alert as it was decided; never a URL or a token."""

    __tablename__ = "alert_deliveries"
    __table_args__ = (
        Index("ix_alert_deliveries_pending", "id",
              postgresql_where=text("delivered_at IS NULL AND gave_up_at IS NULL")),
        Index(None, "created_at"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(always=False), primary_key=True)
    key: Mapped[str] = mapped_column(Text)
    sink: Mapped[str] = mapped_column(Text)
    alert: Mapped[dict] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(TS)
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    next_attempt_at: Mapped[datetime] = mapped_column(TS)
    delivered_at: Mapped[datetime | None] = mapped_column(TS)
    gave_up_at: Mapped[datetime | None] = mapped_column(TS)
    last_error: Mapped[str | None] = mapped_column(Text)


__all__ = ["Base", "AlertCursor", "AlertKey", "AlertDelivery", "SCHEMA", "DISTRIBUTION", "Job", "Event", "JobEvent",
           "EventJob",
           "Verdict", "CoverageRecord", "FaultWeek",
           "RulePack", "FaultSeries", "FailedRoot", "DrainPolicy", "DrainCondition", "NodeResume", "DrainAction",
           "NodeLife", "NodeSlurmState"]


class JobEvidence(Base):
    """The evidence kept for replay (docs/replay.md): one compressed JSON document per job, written with its
    evidence, deleted with the job. Keyed by the job id first, like every per-job table (on Citus it is
    distributed by job_id and co-located with jobs)."""

    __tablename__ = "job_evidence"
    __table_args__ = (
        PrimaryKeyConstraint("job_id", "job_ref"),
        ForeignKeyConstraint(["job_id", "job_ref"], ["attribution.jobs.job_id", "attribution.jobs.id"],
                             ondelete="CASCADE"),
    )

    job_id: Mapped[str] = mapped_column(Text)
    job_ref: Mapped[int] = mapped_column(BigInteger)
    stored_at: Mapped[datetime] = mapped_column(TS, server_default=text("now()"))
    format: Mapped[int] = mapped_column(SmallInteger)
    lines: Mapped[int] = mapped_column(Integer)
    raw_bytes: Mapped[int] = mapped_column(Integer)
    truncated: Mapped[bool] = mapped_column(Boolean)
    document: Mapped[bytes] = mapped_column(LargeBinary)


class JobEvidencePiece(Base):
    """One reporter's piece of a job's kept evidence (a node's, the controller's): stored apart so that a report
    writes its own piece only, joined with the job's other pieces when read (store/evidence.py)."""

    __tablename__ = "job_evidence_pieces"
    __table_args__ = (
        PrimaryKeyConstraint("job_id", "job_ref", "piece"),
        ForeignKeyConstraint(["job_id", "job_ref"], ["attribution.jobs.job_id", "attribution.jobs.id"],
                             ondelete="CASCADE"),
    )

    job_id: Mapped[str] = mapped_column(Text)
    job_ref: Mapped[int] = mapped_column(BigInteger)
    piece: Mapped[str] = mapped_column(Text)
    stored_at: Mapped[datetime] = mapped_column(TS, server_default=text("now()"))
    lines: Mapped[int] = mapped_column(Integer)
    line_bytes: Mapped[int] = mapped_column(Integer)
    telemetry_bytes: Mapped[int] = mapped_column(Integer)
    raw_bytes: Mapped[int] = mapped_column(Integer)
    truncated: Mapped[bool] = mapped_column(Boolean)
    document: Mapped[bytes] = mapped_column(LargeBinary)


__all__ += ["JobEvidence", "JobEvidencePiece"]


class KueueWatchBookmark(Base):
    """How far `attribution watch kueue` has seen a watched collection: the resourceVersion up to which every
    change was handled (a failed run stored), per cluster and collection (`workloads.kueue.x-k8s.io/v1beta2`)."""

    __tablename__ = "kueue_watch_bookmarks"

    cluster: Mapped[str] = mapped_column(Text, primary_key=True)
    resource: Mapped[str] = mapped_column(Text, primary_key=True)
    resource_version: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(TS, server_default=text("now()"))


class KueueWatchAttempt(Base):
    """One run of a Kueue workload whose verdict is stored: its UID and how the run ended (`attempt_key`: the
    ending condition, its reason and time), the attempt's number among the workload's and the job it is."""

    __tablename__ = "kueue_watch_attempts"
    __table_args__ = (PrimaryKeyConstraint("cluster", "workload_uid", "attempt_key"),)

    cluster: Mapped[str] = mapped_column(Text)
    workload_uid: Mapped[str] = mapped_column(Text)
    attempt_key: Mapped[str] = mapped_column(Text)
    attempt: Mapped[int] = mapped_column(Integer)
    namespace: Mapped[str] = mapped_column(Text)
    name: Mapped[str] = mapped_column(Text)
    job_id: Mapped[str] = mapped_column(Text)
    outcome: Mapped[str | None] = mapped_column(Text)
    ended_at: Mapped[datetime | None] = mapped_column(TS)
    stored_at: Mapped[datetime] = mapped_column(TS, server_default=text("now()"))


__all__ += ["KueueWatchBookmark", "KueueWatchAttempt"]
