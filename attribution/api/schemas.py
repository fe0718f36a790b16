"""The request and response bodies of the service, as pydantic models: they are the OpenAPI description and the
first check of every body (but the observation document's, whose one check is its codec: ObservationDocument here
only describes it).

Text is refused when PostgreSQL could not store it (NUL characters, lone surrogates); times are ISO 8601 between
1970 and 2200; whole numbers that go into integer columns are bounded. Anything else is left to the domain
conversion (`attribution.api.intake`), whose InputError the API turns into a 422.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from attribution import names
from attribution.api.intake import REPORT_SOURCES
from attribution.api.segments import from_segment
from attribution.timeparse import WHEN_FORMS, TimeError, parse_iso, parse_when

UTC = timezone.utc
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)
MAX_NODES = 100000


def _storable(value: str) -> str:
    if "\x00" in value:
        raise ValueError("text may not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text is not valid Unicode (lone surrogate)") from None
    return value


def _iso_time(value: str) -> str:
    try:
        t = parse_iso(value)
    except (TimeError, ValueError, OverflowError):
        raise ValueError(f"not an ISO 8601 time: {value[:64]!r}") from None
    if not EARLIEST <= t < LATEST:
        raise ValueError(f"time {value[:64]!r} is outside 1970..2200")
    return value


def _when(value: Any) -> datetime:
    """A query parameter's time, read as the command line reads one (timeparse.parse_when: `now-7d`, `7d`,
    `yesterday`, ISO 8601), relative to the time of the request."""
    if not isinstance(value, str):
        raise ValueError("a time is text")
    if len(value) > 64:
        raise ValueError("a time is at most 64 characters")
    try:
        t = parse_when(value, datetime.now(UTC))
    except TimeError as exc:
        raise ValueError(str(exc)) from None
    if not EARLIEST <= t < LATEST:
        raise ValueError(f"time {value[:64]!r} is outside 1970..2200")
    return t


Text = Annotated[str, Field(max_length=1 << 20), AfterValidator(_storable)]
Name = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_storable)]
#: A cluster's or a node's name, a job's id: the rule of attribution/names.py, the same at every intake.
_SYSTEM = ("1 to 255 printable characters, no whitespace, no `/`, none of `[`, `]`, `,` (Slurm's hostlist "
           "syntax), not `.` or `..`")
ClusterName = Annotated[str, Field(min_length=1, max_length=names.MAX_NAME, description=_SYSTEM),
                        AfterValidator(names.system_name)]
NodeName = ClusterName
JobId = Annotated[str, Field(min_length=1, max_length=names.MAX_NAME), AfterValidator(names.text_name)]
#: The same as path parameters: one percent-encoded segment each (`/` as `%2F`: api/segments.py).
ClusterPath = Annotated[ClusterName, BeforeValidator(from_segment)]
NodePath = Annotated[NodeName, BeforeValidator(from_segment)]
JobIdPath = Annotated[JobId, BeforeValidator(from_segment)]
Time = Annotated[str, Field(max_length=64), AfterValidator(_iso_time),
                 WithJsonSchema({"type": "string", "format": "date-time"})]
#: A time in a query (`?since=now-7d`): what a person types, as the command line takes it; bodies take Time.
When = Annotated[datetime, BeforeValidator(_when),
                 WithJsonSchema({"type": "string", "maxLength": 64, "description": f"{WHEN_FORMS} (docs/cli.md)"})]
Count = Annotated[int, Field(ge=1, le=1_000_000)]


#: Who reported: decides whose job context wins (intake.REPORT_SOURCES, from the store's context precedence).
ReportSource = Literal[REPORT_SOURCES]  # type: ignore[valid-type]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ContextDoc(_Strict):
    """A job's execution context (serialize.context_to_json; docs/bundle.md context.yaml fields)."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    cluster: ClusterName
    job_id: JobId
    nodes: list[NodeName] = Field(min_length=1, max_length=MAX_NODES)
    scheduler: Name | None = None
    user: Name | None = None
    partition: Name | None = None
    state: Name | None = None
    exit_code: Name | None = None
    failed_node: NodeName | None = None
    tasks_per_node: Count | None = None
    srun_tasks_per_node: Count | None = None
    gpus_per_node: Count | None = None
    start: Time | None = None
    end: Time | None = None
    timezone: Name | None = None
    boot_time: dict[NodeName, Time] = Field(default_factory=dict, max_length=MAX_NODES)
    job_name: Annotated[str, Field(max_length=255), AfterValidator(_storable)] | None = Field(
        default=None, description="what the user named the job (Slurm JobName): groups only that user's jobs")


class JobContextDoc(ContextDoc):
    """The body of POST /v1/jobs/{cluster}/{job_id}/context: cluster and job id may be left to the path."""

    cluster: ClusterName | None = None
    job_id: JobId | None = None


class CoverageDoc(_Strict):
    """What one collector saw of one source on one node (model.Coverage.as_dict)."""

    source: Name
    status: Literal["ok", "empty", "missing", "error"]
    node: NodeName | None = None
    lines: int = Field(default=0, ge=0, le=2**62)
    reason: Text | None = None
    file: Text | None = None
    notes: list[Text] = Field(default_factory=list, max_length=1000)


class EvidenceFileDoc(_Strict):
    """One file's kept lines (replay/keep.py): at its bundle place (`file`), read at `origin`."""

    source: Literal["kernel", "fabricmanager", "node", "job"]
    node: NodeName | None = None
    file: Text
    origin: Text | None = None
    lines: list[tuple[int, str, Literal["p", "e", "pe"]]] = Field(default_factory=list, max_length=2000)


class EvidenceDoc(_Strict):
    """The reporter's piece of the lines kept for replay (docs/replay.md), bounded per reporter
    (serialize.EVIDENCE_MAX_LINES lines, EVIDENCE_MAX_BYTES bytes)."""

    format: int = 1
    rules_version: Text | None = None
    truncated: bool = False
    candidates: int = Field(default=0, ge=0, le=2**62)
    reporter: NodeName | None = None
    files: list[EvidenceFileDoc] = Field(default_factory=list, max_length=2000)


class LogDoc(BaseModel):
    """What a node read of one log and the lines it kept (node/document.py): blocks of consecutive lines, each
    [the number of its first line in the log, [its lines]]."""

    source: Literal["kernel", "fabricmanager", "node"]
    origin: str = Field(description="journald, /dev/kmsg or the log file's path")
    status: Literal["ok", "empty", "missing", "error"]
    reason: str | None = None
    notes: list[str] = Field(default_factory=list, max_length=50)
    lines: int = Field(default=0, ge=0, description="lines read")
    bytes: int = Field(default=0, ge=0, description="bytes read")
    cut: bool = Field(default=False, description="the kept lines stopped at the node's bound")
    blocks: list[tuple[int, list[str]]] = Field(default_factory=list)


class ReporterDoc(BaseModel):
    role: Literal["node", "controller"]
    name: str = Field(description="the node's name, or the controller's")
    agent: str | None = Field(default=None, description="what wrote the document, and its version")
    filter: str | None = Field(default=None, description="sha256 of the fixed-string filter a node kept lines by")


class ObservationDocument(BaseModel):
    """What one reporter observed of one job (`format` attribution.observations/1): a node's logs as blocks of
    raw lines and its counter snapshots as the tools wrote them, or the controller's view of the job (Slurm's
    environment, `scontrol show job`, the job output's observation records, their coverage, the lines kept for
    replay). The service decodes it with one codec (attribution/intake/codec.py), whose bounds and rules this
    description only sketches: the answer to a document that breaks one names the part."""

    format: Literal["attribution.observations/1"]
    reporter: ReporterDoc
    cluster: str | None = None
    slurm: dict[str, str] = Field(description="the epilog environment's SLURM_* values (node/document.py SLURM_KEYS)")
    times: dict[str, float | int | None] = Field(description="now, prolog_start, boot, lookback: epoch seconds")
    logs: list[LogDoc] | None = Field(default=None, description="a node's logs")
    counters: dict[str, Any] | None = Field(
        default=None, description="a node's counter snapshots: {prolog|epilog: {file: text}, folder: where}")
    scontrol: dict[str, str] | None = Field(default=None, description="the controller's `scontrol show job` fields")
    observations: list[dict[str, Any]] | None = Field(default=None, description="the controller's job output records")
    coverage: list[CoverageDoc] | None = None
    evidence: EvidenceDoc | None = Field(default=None, description="the controller's lines kept for replay")


class JobRefOut(BaseModel):
    cluster: str
    job_id: str
    start: str | None


class IngestOut(BaseModel):
    """What one accepted report did."""

    job: JobRefOut
    new_events: int
    linked_events: int
    verdict_id: int | None
    verdict_changed: bool
    #: the verdict this report led to; null when another report of the job was being attributed at that moment
    #: (that process includes this report's evidence: GET the verdict for it)
    outcome: str | None


class ErrorOut(BaseModel):
    """Every error response: a machine-readable code, one line for a human, and details when there are several."""

    error: str
    message: str
    details: list[str] = Field(default_factory=list)


class HealthOut(BaseModel):
    status: str


class RowsOut(BaseModel):
    """Rows of a fleet view; `truncated` says there were more than `limit`."""

    rows: list[dict[str, Any]]
    truncated: bool


class NodeEventsOut(BaseModel):
    cluster: str
    node: str
    since: str
    until: str | None
    events: list[dict[str, Any]]
    truncated: bool


#: The error statuses every /v1 route may answer, for the OpenAPI description.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": description} for status, description in (
        (401, "no bearer token, or one the service does not know"),
        (403, "the token lacks the route's scope"),
        (413, "the request body is larger than the service accepts"),
        (422, "the request is malformed; the message says what and where"),
        (503, "the database is unavailable or busy; try again later"),
    )
}


class JobRowsOut(BaseModel):
    """One page of jobs, newest first; `next` is the cursor of the next page (pass it as `after`), null on the
    last page."""

    jobs: list[dict[str, Any]]
    next: str | None


class NodeHistoryOut(BaseModel):
    """What one node did wrong: cause events per ISO week and kind, recurring faults, failed jobs it ran, drain
    decisions, the time it was last resumed and whether the drain policy names it now, and its telemetry: the
    latest counters per GPU and port and the counter events over time."""

    cluster: str
    node: str
    since: str
    until: str
    faults_weekly: list[dict[str, Any]]
    recurring_faults: list[dict[str, Any]]
    failed_jobs: list[dict[str, Any]]
    failed_jobs_truncated: bool
    drain_actions: list[dict[str, Any]]
    drain_candidate: dict[str, Any] | None
    resumed_at: str | None
    #: why the node is or is not a drain candidate: each condition of the policy in force, how far the node's
    #: evidence goes towards it, what its last reboot or resume cleared (docs/drain.md), nearest first
    drain_conditions: list[dict[str, Any]] = []
    drain_summary: str | None = None
    #: the node's life, newest first: boots, drains and resumes (node_life), and Slurm's last view of it
    life: list[dict[str, Any]] = []
    slurm_state: dict[str, Any] | None = None
    #: each GPU's counters from its newest epilog snapshot (the gpu_counters_latest view)
    gpu_counters: list[dict[str, Any]]
    #: each InfiniBand port's newest epilog counters
    port_counters: list[dict[str, Any]]
    #: events the counter rules found on the node (a counter that grew, a GPU that vanished), newest first
    counter_events: list[dict[str, Any]]
    counter_events_truncated: bool
