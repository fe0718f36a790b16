"""One uploaded bundle diagnosed in a child process with CPU, memory and wall-time budgets (issue 18, M5).

The service unpacks the upload, then runs `python -m attribution.api.diagnose_worker CPU MEM RULES BUNDLE [MAX]`
(`budgeted`): the child sets its own RLIMIT_CPU and RLIMIT_AS before it imports anything else (no preexec_fn in a
threaded server), and the parent bounds the wall time.
A bundle that needs more than its budget gets a clear 4xx instead of holding a worker's CPU and memory for hours.
The child prints the verdict JSON, or {"input_error": ...} for a bundle the engine refuses (exit 2).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from attribution.errors import InputError

#: What the child may print at most (a verdict lists its symptoms; a larger answer is not a useful one).
MAX_OUTPUT_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Budget:
    cpu_seconds: int
    memory_bytes: int
    wall_seconds: float


def budgeted(rules_dir: Path, bundle: Path, max_symptoms: int | None, budget: Budget) -> dict:
    """The verdict document of `bundle`, computed in a child process within `budget`. Raises InputError."""
    argv = [sys.executable, "-m", "attribution.api.diagnose_worker", str(budget.cpu_seconds),
            str(budget.memory_bytes), str(rules_dir), str(bundle)]
    if max_symptoms is not None:
        argv.append(str(max_symptoms))
    try:
        r = subprocess.run(argv, capture_output=True, timeout=budget.wall_seconds,
                           stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        raise InputError("bundle.tar.gz", f"diagnosing it took longer than the service's budget of "
                                          f"{budget.wall_seconds:g} s") from None
    if r.returncode in (-9, -24) or r.returncode == 128 + 24:  # SIGKILL / SIGXCPU: out of CPU time
        raise InputError("bundle.tar.gz", f"diagnosing it needs more than the service's budget of "
                                          f"{budget.cpu_seconds} s of CPU time")
    out = r.stdout[:MAX_OUTPUT_BYTES]
    try:
        doc = json.loads(out) if out else None
    except ValueError:
        doc = None
    if isinstance(doc, dict) and "input_error" in doc:
        e = doc["input_error"]
        raise InputError(str(e.get("path") or "bundle"), str(e.get("message") or "refused"), e.get("line"))
    if r.returncode != 0 or not isinstance(doc, dict):
        err = r.stderr.decode("utf-8", "replace")
        if "MemoryError" in err or "Cannot allocate memory" in err:
            raise InputError("bundle.tar.gz", f"diagnosing it needs more than the service's budget of "
                                              f"{budget.memory_bytes} bytes of memory")
        raise RuntimeError(f"diagnose worker ended with status {r.returncode}: "
                           f"{(err.strip().splitlines() or [''])[-1][:300]}")
    return doc


def main(argv: list[str]) -> int:
    import resource

    cpu, memory = int(argv[0]), int(argv[1])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    argv = argv[2:]
    from attribution.pipeline.diagnose import diagnose_bundle
    from attribution.reports.render import verdict_to_dict
    from attribution.rulepack.load import load_rules

    rules_dir, bundle = Path(argv[0]), Path(argv[1])
    max_symptoms = int(argv[2]) if len(argv) > 2 else None
    try:
        d = diagnose_bundle(load_rules(rules_dir), bundle)
    except InputError as exc:
        json.dump({"input_error": {"path": exc.path, "message": exc.message, "line": exc.line}}, sys.stdout)
        return 2
    json.dump(verdict_to_dict(d.verdict, symptom_limit=max_symptoms), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
