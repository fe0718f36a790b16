"""The job owner's line: a verdict in one line for the job's AdminComment (`sacct -o AdminComment`, `scontrol
show job`), e.g. `attribution: gpu_hardware, GPU 0000:3b:00 on gpu17 fell off the PCIe bus (Xid 79); not the
application; resubmit`. Pure.

It is made of names only: the outcome, the root cause's kind as the pack's kinds file says it (`summary`), the
GPU's bus id, the node, the job state, and what to do; never a line of the job's output nor anything else its
owner wrote. Bounded (`MAX_CHARS`), printable ASCII without quotes (sacctmgr reads a value only up to a quote).
A verdict of outcome `none` has no line: a job that did not fail gets no comment.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from attribution.model import INFRASTRUCTURE_OUTCOMES

PREFIX = "attribution:"
#: Slurm keeps the comment whole (a text column in slurmdbd); the owner reads it in a terminal
MAX_CHARS = 300
#: what may appear in the line: anything else (a quote, a control character, non-ASCII) becomes '?'
_UNSAFE = re.compile(r"[^A-Za-z0-9 .,:;()/+_@#%\[\]<>-]")


def owner_line(doc: Mapping[str, Any], kinds: Mapping[str, Any], requeued_without: Sequence[str] = ()) -> str | None:
    """The line of a verdict document (docs/verdict.md), or None for a job that did not fail. `kinds`: the rule
    pack's kinds (their `summary`); `requeued_without`: the nodes the job was requeued without, when it was."""
    outcome = str(doc.get("outcome") or "")
    if outcome in ("", "none"):
        return None
    confidence = doc.get("confidence")
    head = f"{PREFIX} {outcome}" + ("" if confidence in (None, "high") else f" ({confidence} confidence)")
    advice = _advice(doc, outcome, requeued_without)
    what = _what(doc, kinds, outcome)
    room = MAX_CHARS - len(head) - len(advice) - 4
    if len(what) > room:
        what = what[:max(0, room - 3)].rstrip() + "..."
    return _safe(f"{head}, {what}; {advice}")[:MAX_CHARS]


def _what(doc: Mapping[str, Any], kinds: Mapping[str, Any], outcome: str) -> str:
    root = doc.get("root_cause") or None
    culprits = [c for c in doc.get("culprits") or [] if c.get("node")]
    if root:
        kind = str(root.get("kind") or "")
        spec = kinds.get(kind)
        what = spec.summary if spec is not None else f"reported {kind}"
        code, source, rule = root.get("code"), root.get("source"), str(root.get("rule") or "")
        if isinstance(code, int) and source in ("kernel", "fabricmanager"):
            what += f" ({'SXid' if 'sxid' in rule.lower() else 'Xid'} {code})"
        node, gpu = root.get("node"), root.get("gpu")
        dev = f"GPU {gpu} on {node}" if gpu and node else (node or "the job")
        text = f"{dev} {what}"
        if root.get("evidence") == "job_output" and outcome in INFRASTRUCTURE_OUTCOMES:
            text += " (named only by the output of the job)"
        return text
    if culprits:
        return f"no cause event found, the evidence points at {', '.join(c['node'] for c in culprits)}"
    state = (doc.get("job") or {}).get("state") or "unknown"
    if outcome == "scheduler":
        return f"ended by the scheduler ({state})"
    groups = [g for g in doc.get("symptom_groups") or [] if g.get("kind")]
    if groups:
        return f"only symptoms were found ({groups[0]['kind']}), job state {state}"
    return f"no fault event found, job state {state}"


def _advice(doc: Mapping[str, Any], outcome: str, requeued_without: Sequence[str]) -> str:
    if outcome in INFRASTRUCTURE_OUTCOMES:
        if requeued_without:
            return f"not the application; requeued without {','.join(requeued_without)}"
        return "not the application; resubmit"
    if outcome == "application":
        return "the code or configuration of the job; see its output"
    if outcome == "scheduler":
        return "no fault found; resubmit" if doc.get("action") == "resubmit" else "no fault found"
    return "cause not found; the operators investigate"


def _safe(text: str) -> str:
    return _UNSAFE.sub("?", " ".join(text.replace("'", "").split()))


__all__ = ["owner_line", "PREFIX", "MAX_CHARS"]
