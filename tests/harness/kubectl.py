"""A fake `kubectl` that serves recorded outputs (tests/data/kueue/<workload>/, see its README) (stdlib only).

`install(bin_dir, data_dir)` writes an executable `kubectl` into bin_dir. It understands the calls the Kueue adapter
and the pod-log collector make, checks that `kubectl logs` is asked for `--timestamps --prefix` (the recorded form),
and appends each call to `calls.log` in bin_dir. Set FAKE_KUBECTL_SLEEP (seconds) to make every call hang first.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

__all__ = ["install", "main"]


def install(bin_dir: Path, data_dir: Path) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "kubectl"
    exe.write_text(f"#!{sys.executable}\n"
                   "import sys\n"
                   f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
                   "from kubectl import main\n"
                   f"sys.exit(main(sys.argv[1:], {str(data_dir)!r}, {str(bin_dir / 'calls.log')!r}))\n")
    exe.chmod(0o755)
    return exe


def _opt(args: list[str], *names: str) -> str | None:
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


def _positionals(args: list[str]) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-n", "--namespace", "-l", "--selector", "-c", "--container", "-o", "--output"):
            skip = True
            continue
        if a.startswith("-"):
            continue
        out.append(a)
    return out


def main(argv: list[str], data_dir: str, calls_log: str) -> int:
    with open(calls_log, "a") as f:
        f.write(json.dumps(argv) + "\n")
    if os.environ.get("FAKE_KUBECTL_SLEEP"):
        time.sleep(float(os.environ["FAKE_KUBECTL_SLEEP"]))
    data = Path(data_dir)
    args = [a for a in argv if not a.startswith("--kubeconfig") and not a.startswith("--context")]
    pos = _positionals(args)
    ns = _opt(args, "-n", "--namespace")
    workload = json.loads((data / "workload.json").read_text())
    wl_ns = workload["metadata"]["namespace"]
    if not pos:
        print("error: You must specify the type of resource to get.", file=sys.stderr)
        return 1
    if pos[0] == "get" and len(pos) >= 2 and pos[1] in ("workloads.kueue.x-k8s.io", "workload", "workloads"):
        name = pos[2] if len(pos) > 2 else None
        if ns != wl_ns or name != workload["metadata"]["name"]:
            print(f'Error from server (NotFound): workloads.kueue.x-k8s.io "{name}" not found', file=sys.stderr)
            return 1
        print(json.dumps(workload, indent=4))
        return 0
    if pos[0] == "get" and len(pos) >= 2 and pos[1] in ("pods", "pod", "po"):
        selector = _opt(args, "-l", "--selector")
        want = (data / "pods.selector").read_text().strip()
        if ns == wl_ns and selector == want:
            print((data / "pods.json").read_text())
        else:
            print(json.dumps({"apiVersion": "v1", "items": [], "kind": "List", "metadata": {"resourceVersion": ""}}))
        return 0
    if pos[0] == "logs" and len(pos) >= 2:
        pod, container = pos[1], _opt(args, "-c", "--container")
        if "--timestamps" not in args or "--prefix" not in args:
            print("fake kubectl: only recorded with --timestamps --prefix", file=sys.stderr)
            return 2
        previous = "--previous" in args or "-p" in args
        f = data / "logs" / f"{pod}_{container}{'.previous' if previous else ''}.log"
        if ns != wl_ns or not f.is_file():
            if previous:
                print(f'Error from server (BadRequest): previous terminated container "{container}" in pod "{pod}" '
                      f"not found", file=sys.stderr)
            else:
                print(f'Error from server (NotFound): pods "{pod}" not found', file=sys.stderr)
            return 1
        sys.stdout.write(f.read_text())
        return 0
    print(f"fake kubectl: unsupported call {argv}", file=sys.stderr)
    return 1
