"""The job that prints its secrets (tests/cases/24-secrets-in-job-output) and the rule pack without its redactions,
for the tests that check that no secret is stored, shown or suggested (docs/security.md "Secrets in job output")."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import CASES, ROOT

CASE = CASES / "24-secrets-in-job-output"

#: Every secret the case's job output holds (issue 29's four first), as the text that must never come out again.
SECRETS = (
    "hunter2", "s3cret", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "ghp_JewM2MsfG7wzAbcg2CPoZwfFv6MIA1UmCkoB",
    "AKIAIOSFODNN7EXAMPLE", "glpat-7NgnMDOCoyvznGOUbtVy", "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",
    "tW56B7Q+15wXH6X8HhqhpNUROn1NZJ7pQezFlwYhylW3smG8TwwBa5geHHOPpfnHvCeBChHY3KerELTTisJ4Eg==",
    "tODHk3FrJf%2BNGKOfuorx8LkxBmRvNiQgVsqtzorDTad%3D", "xoxb-3634485567431-2991411332045-XQuVesOgOZ1TvZVVAxhPRxs5",
    "TEWP5PMJYKB/BSRX25RRUWF/vRHjb2TToNoFZ2Vbk7Px6pba",
    "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50In0.dGVzdHNpZ25hdHVyZQ",
    "QWxhZGRpbjpvcGVuIHNlc2FtZQ==", "5Fij9pZyGMdVWNRqbQbXmf6Rasmaa4DJMh7qmDQpcLlSnVyr",
    "AIzajhJK6IdPgUx5Fc7RHM-QsFcSfNifvA7Ftfq", "b3ad50a1aab31ae7c4de5d2c17e547de87982eae",
    "gKaQ9QSswTnYodz8o2eopmEXW7ODxAvcLlSnVyr",
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW", "correct horse battery",
)


def leaked(text: str) -> list[str]:
    """The secrets of the case that `text` holds."""
    return [s for s in SECRETS if s in text]


def pack_without_redactions(tmp: Path) -> Path:
    """A copy of the shipped rule pack without rules/redactions.yaml: a pack from before redaction."""
    dest = Path(tmp) / "rules-without-redactions"
    shutil.copytree(ROOT / "rules", dest)
    (dest / "redactions.yaml").unlink()
    return dest


def stored_text(engine) -> str:
    """Everything the store holds as text: every row of every table and view of the schema, and the kept
    evidence documents decompressed (pg_dump would show them as compressed bytes)."""
    from sqlalchemy import text

    from attribution.store.evidence import decode

    parts = []
    with engine.connect() as c:
        tables = c.execute(text(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'attribution' AND c.relkind IN ('r', 'p', 'v') ORDER BY 1")).scalars().all()
        for t in tables:
            parts += c.execute(text(f'SELECT CAST(t AS text) FROM attribution."{t}" t')).scalars().all()
        for table in ("job_evidence", "job_evidence_pieces"):  # compressed: read them decoded too
            for blob in c.execute(text(f"SELECT document FROM attribution.{table}")).scalars():
                parts.append(repr(decode(blob)))
    return "\n".join(parts)
