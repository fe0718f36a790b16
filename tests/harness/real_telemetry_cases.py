"""Writes tests/cases/30..35, the counter cases built from real captures (`python -m tests.harness.real_telemetry_cases`).

Each snapshot is a document of tests/data/telemetry/real (README there: source, commit, license), copied with the
one change the case's story needs (named in the case's expected.yaml notes), in the compact listing form the hooks
write (nvidia-smi.xml, nvidia-smi.status and nvidia-smi.err when nvidia-smi failed, sysfs.txt). Job output and
kernel logs follow tests/cases/README.md. The expected verdicts below were written before the engine ran on them.
Run once; the written files are the cases.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

CASES = Path(__file__).resolve().parents[1] / "cases"
REAL = Path(__file__).resolve().parents[1] / "data" / "telemetry" / "real"
#: hooks/lib.sh ATTRIBUTION_IB_COUNTERS today: the port counters the hooks' sysfs.txt holds
HOOK_IB_COUNTERS = ("counters/link_downed", "counters/symbol_error", "counters/port_rcv_errors",
                    "counters/link_error_recovery", "counters/local_link_integrity_errors",
                    "counters/excessive_buffer_overrun_errors", "counters/port_rcv_remote_physical_errors")
KEEP = re.compile(r"^([0-9]+|TOTAL_ERR_[A-Z]+ [0-9]+)$")


def hooks_listing(root: Path, counters: tuple[str, ...] | None = None) -> str:
    """What hooks/lib.sh's `grep -H -E '^([0-9]+|TOTAL_ERR_[A-Z]+ [0-9]+)$'` prints for a sysfs tree: the
    InfiniBand port counter files (`counters` of them, every group when None) and every device's aer_dev_fatal
    and aer_dev_nonfatal, in the paths the hooks glob."""
    lines = []
    for f in sorted((root / "sys" / "class" / "infiniband").glob("*/ports/*/*/*")):
        if counters is None or f"{f.parent.name}/{f.name}" in counters:
            lines += [f"/{f.relative_to(root)}:{ln}" for ln in f.read_text().splitlines() if KEEP.match(ln)]
    for f in sorted((root / "sys" / "devices").rglob("aer_dev_*")):
        if f.name in ("aer_dev_fatal", "aer_dev_nonfatal"):
            lines += [f"/sys/bus/pci/devices/{f.parent.name}/{f.name}:{ln}" for ln in f.read_text().splitlines()
                      if KEEP.match(ln)]
    return "\n".join(lines) + "\n"


def smi(name: str) -> str:
    return (REAL / name / "nvidia-smi.xml").read_text()


def change(text: str, old: str, new: str, count: int = 1) -> str:
    """`text` with the `count`-th occurrence of `old` replaced (the one edit a case makes to a real document)."""
    at = -1
    for _ in range(count):
        at = text.index(old, at + 1)
    return text[:at] + new + text[at + len(old):]


CONTEXT = """scheduler: slurm
cluster: {cluster}
job_id: "{job}"
user: {user}
partition: {partition}
state: {state}
exit_code: "{exit}"
failed_node: null
nodes: "{nodes}"
tasks_per_node: {tpn}
start: {start}
end: {end}
timezone: UTC
boot_time:
{boots}"""


def kernel_log(lines: list[str]) -> str:
    return "".join(f"[{0.0 + 0.37 * i:12.6f}] {ln}\n" for i, ln in enumerate(lines))


def write_case(name: str, ctx: dict, job: list[str], kernels: dict[str, list[str]],
               snapshots: dict[tuple[str, str], dict[str, str]], expected: str) -> Path:
    d = CASES / name
    if d.exists():
        shutil.rmtree(d)
    (d / "job").mkdir(parents=True)
    boots = "".join(f"  {n}: {ctx['boot']}\n" for n in ctx["node_list"])
    (d / "context.yaml").write_text(CONTEXT.format(boots=boots, **ctx))
    (d / "job" / f"slurm-{ctx['job']}.out").write_text("\n".join(job) + "\n")
    for node, lines in kernels.items():
        (d / "nodes" / node).mkdir(parents=True, exist_ok=True)
        (d / "nodes" / node / "kernel.log").write_text(kernel_log(lines))
    for (node, phase), files in snapshots.items():
        folder = d / "nodes" / node / "telemetry" / phase
        folder.mkdir(parents=True, exist_ok=True)
        for fname, text in files.items():
            (folder / fname).write_text(text)
    (d / "expected.yaml").write_text(expected)
    return d


def boot(kernel: str, dmi: str, gpu: str, gpu_id: str, driver: str) -> list[str]:
    return [f"Linux version {kernel} (buildd@lcy02-amd64-063) (x86_64-linux-gnu-gcc-12 (Ubuntu 12.3.0-1ubuntu1~22.04) "
            f"12.3.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #69~22.04.1-Ubuntu SMP PREEMPT_DYNAMIC Fri Jan 10 "
            f"15:21:56 UTC 2025", f"DMI: {dmi}", f"pci {gpu}: [10de:{gpu_id}] type 00 class 0x030000",
            "nvidia: module license 'NVIDIA' taints kernel.",
            f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {driver}  Tue Jun 13 21:29:51 UTC 2023"]


def traceback(prefix: str, frames: list[tuple[str, int, str, str]], last: str) -> list[str]:
    out = [f"{prefix}Traceback (most recent call last):"]
    for path, line, fn, code in frames:
        out += [f'{prefix}  File "{path}", line {line}, in {fn}', f"{prefix}    {code}"]
    return out + [f"{prefix}{last}"]


def main() -> None:
    # 30: nvidia-smi warned about a corrupted infoROM at the epilog; the job's own bug failed it
    node = "pin-ws-07"
    doc = smi("telegraf-rtx-3080-v12")
    warning = "WARNING: infoROM is corrupted at gpu 0000:04:00.0\n"
    job = ["pin job 88120 lvogt: 1 node x 1 RTX 3080", "+ python -u train_unet.py --cfg cfg/seg_small.yaml",
           "epoch 1 step 200 loss 0.6121", "epoch 1 step 400 loss 0.5480", "epoch 2 step 600 loss 0.4977"]
    job += traceback("", [("/home/lvogt/seg/train_unet.py", 188, "<module>", "main(cfg)"),
                          ("/home/lvogt/seg/train_unet.py", 171, "main", "val = evaluate(model, val_loader)"),
                          ("/home/lvogt/seg/metrics.py", 42, "evaluate", "scores[name] = dice(pred, target)")],
                     "KeyError: 'background'")
    ctx = dict(cluster="pine", job="88120", user="lvogt", partition="ws", state="FAILED", exit="1:0",
               nodes=node, node_list=[node], tpn=1, start="2026-11-03T09:12:00Z", end="2026-11-03T10:40:31Z",
               boot="2026-11-01T07:00:00.000Z")
    kern = {node: boot("6.8.0-60-generic", "ASUS System Product Name/PRIME Z790-P, BIOS 1663 09/01/2023",
                       "0000:04:00.0", "2206", "536.40")}
    snaps = {(node, "prolog"): {"nvidia-smi.xml": doc},
             (node, "epilog"): {"nvidia-smi.xml": doc + warning, "nvidia-smi.err": "", "nvidia-smi.status": "14\n"}}
    write_case("30-inforom-warning-document-still-read", ctx, job, kern, snaps, EXPECTED_30)

    # 31: MIG on; the job's instance (GPU instance 4) counted an uncorrectable SRAM error
    node = "tul-a100-03"
    doc = smi("telegraf-a100-sxm4-v12")
    grown = change(doc, "<sram_uncorrectable>0</sram_uncorrectable>", "<sram_uncorrectable>1</sram_uncorrectable>", 2)
    assert "<gpu_instance_id>4</gpu_instance_id>" in grown[:grown.index("<sram_uncorrectable>1<")].rsplit(
        "<mig_device>", 1)[1]
    job = ["tul job 30411 aokafor: 1 MIG slice (1g.20gb) of an A100", "+ python -u finetune_bert.py --bs 32",
           "step 1000 loss 1.9120", "step 2000 loss 1.7310"]
    job += traceback("", [("/home/aokafor/ft/finetune_bert.py", 97, "<module>", "train()"),
                          ("/home/aokafor/ft/finetune_bert.py", 81, "train", "loss.backward()"),
                          ("/usr/local/lib/python3.10/dist-packages/torch/_tensor.py", 522, "backward",
                           "torch.autograd.backward(")],
                     "RuntimeError: CUDA error: uncorrectable ECC error encountered")
    job += ["CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
            "might be incorrect."]
    ctx = dict(cluster="tulip", job="30411", user="aokafor", partition="a100-mig", state="FAILED", exit="1:0",
               nodes=node, node_list=[node], tpn=1, start="2026-11-04T13:00:02Z", end="2026-11-04T14:22:17Z",
               boot="2026-10-30T18:00:00.000Z")
    kern = {node: boot("6.8.0-60-generic", "Supermicro AS -4124GO-NART/H12DSG-O-CPU, BIOS 2.4 04/12/2023",
                       "0000:01:00.0", "20b2", "535.54.03")}
    snaps = {(node, "prolog"): {"nvidia-smi.xml": doc}, (node, "epilog"): {"nvidia-smi.xml": grown}}
    write_case("31-mig-instance-sram-uncorrectable", ctx, job, kern, snaps, EXPECTED_31)

    # 32: DTD v13: a TPC repair became pending during the job
    node = "ada-ws-02"
    doc = smi("telegraf-rtx-4000-sff-ada-v13")
    repair = change(doc, "<tpc_repair_pending>No</tpc_repair_pending>", "<tpc_repair_pending>Yes</tpc_repair_pending>")
    job = ["ada job 5120 mroux: 1 node x 1 RTX 4000 SFF Ada", "+ python -u render_nerf.py --scene lego",
           "iter 5000 psnr 27.41", "iter 10000 psnr 29.08"]
    job += traceback("", [("/home/mroux/nerf/render_nerf.py", 233, "<module>", "run(args)"),
                          ("/home/mroux/nerf/render_nerf.py", 201, "run", "rgb = model(rays)")],
                     "RuntimeError: CUDA error: unspecified launch failure")
    ctx = dict(cluster="adagio", job="5120", user="mroux", partition="ws", state="FAILED", exit="1:0", nodes=node,
               node_list=[node], tpn=1, start="2026-11-05T08:30:00Z", end="2026-11-05T09:02:44Z",
               boot="2026-11-04T22:10:00.000Z")
    kern = {node: boot("6.8.0-60-generic", "Dell Inc. Precision 3280 CFF/0X1HV4, BIOS 1.8.1 05/10/2024",
                       "0000:06:00.0", "27b0", "595.84")}
    snaps = {(node, "prolog"): {"nvidia-smi.xml": doc}, (node, "epilog"): {"nvidia-smi.xml": repair}}
    write_case("32-v13-tpc-repair-pending", ctx, job, kern, snaps, EXPECTED_32)

    # 33: nvidia-smi found no device at the epilog after the prolog listed the T4
    node = "g4dn-0a1b"
    doc = smi("telegraf-tesla-t4")
    job = ["cld job 7071 pnair: 1 node x 1 T4", "+ python -u infer_batch.py --shard 12",
           "processed 40000/120000", "processed 80000/120000"]
    job += traceback("", [("/opt/app/infer_batch.py", 64, "<module>", "out = model(batch.cuda())")],
                     "RuntimeError: CUDA error: unspecified launch failure")
    ctx = dict(cluster="cloud", job="7071", user="pnair", partition="t4", state="FAILED", exit="1:0", nodes=node,
               node_list=[node], tpn=1, start="2026-11-06T02:00:00Z", end="2026-11-06T02:47:09Z",
               boot="2026-11-06T01:50:00.000Z")
    kern = {node: boot("6.8.0-1021-aws", "Amazon EC2 g4dn.xlarge/, BIOS 1.0 10/16/2017", "0000:00:1e.0", "1eb8",
                       "515.105.01")}
    snaps = {(node, "prolog"): {"nvidia-smi.xml": doc},
             (node, "epilog"): {"nvidia-smi.xml": "No devices were found\n", "nvidia-smi.err": "",
                                "nvidia-smi.status": "6\n"}}
    write_case("33-no-devices-found-every-gpu-gone", ctx, job, kern, snaps, EXPECTED_33)

    # 34: link_downed at its 8-bit maximum on the rail the NCCL errors name: a change could not be seen
    nodes = ["kes-h100-01", "kes-h100-02"]
    listing = hooks_listing(REAL / "gpud-h100-infiniband", HOOK_IB_COUNTERS)
    job = ["kes job 61200 tbauer: 2 nodes x 8 H100, srun --label",
           "+ srun --label --ntasks-per-node=8 python -u pretrain.py --cfg cfg/gpt_7b.yaml",
           " 0: NCCL version 2.21.5+cuda12.4"]
    for n, name in enumerate(nodes):
        pid = 3301744 + 1000 * n
        job += [f"{8 * n:2d}: {name}:{pid}:{pid + 356} [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB "
                f"[2]mlx5_4:1/IB [3]mlx5_5:1/IB [4]mlx5_6:1/IB [5]mlx5_7:1/IB [6]mlx5_8:1/IB [7]mlx5_9:1/IB ; "
                f"OOB ibp26s0:10.66.0.{n + 1}<0>"]
    job += [f" 0: [04:{m:02d}:10] step {s} loss {3.0 - s / 20000:.4f}" for m, s in ((20, 100), (48, 200))]
    job += [
        " 1: kes-h100-01:3301744:3302201 [1] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
        "10.66.1.2<48112> with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.66.1.1 "
        "remoteGids::ffff:10.66.1.2",
        " 9: kes-h100-02:3302744:3303207 [1] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
        "10.66.1.1<39020> with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.66.1.2 "
        "remoteGids::ffff:10.66.1.1",
    ]
    job += [f"{r:2d}: [rank{r}]:[E1107 05:{21 + r // 8:02d}:44.{r:03d}100000 ProcessGroupNCCL.cpp:616] [Rank {r}] "
            f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum=22190, OpType=ALLREDUCE, "
            f"NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600091 milliseconds before timing out."
            for r in (0, 4, 8, 13)]
    job += [f"srun: error: {n}: tasks {8 * i}-{8 * i + 7}: Aborted (core dumped)" for i, n in enumerate(nodes)]
    ctx = dict(cluster="kestrel", job="61200", user="tbauer", partition="h100", state="FAILED", exit="134:0",
               nodes="kes-h100-[01-02]", node_list=nodes, tpn=8, start="2026-11-07T04:00:03Z",
               end="2026-11-07T05:23:10Z", boot="2026-11-01T12:00:00.000Z")
    kern = {n: boot("6.8.0-60-generic", "NVIDIA DGXH100/DGXH100, BIOS 1.6.7 02/21/2025", "0000:1b:00.0", "2330",
                    "535.183.01") for n in nodes}
    snaps = {(nodes[0], "prolog"): {"sysfs.txt": listing}, (nodes[0], "epilog"): {"sysfs.txt": listing}}
    write_case("34-ib-link-downed-saturated", ctx, job, kern, snaps, EXPECTED_34)

    # 35: a clean job on GPUs whose memory errors cannot be counted: ECC disabled (Ada), ECC not reported (3090 VM)
    nodes = ["vis-ws-01", "vis-vm-02"]
    job = ["vis job 990 hkim: 2 nodes x 1 GPU", "+ srun python -u bake_lightmaps.py --scene atrium",
           "baked 512/512 tiles", "done"]
    ctx = dict(cluster="vista", job="990", user="hkim", partition="vis", state="COMPLETED", exit="0:0",
               nodes="vis-ws-01,vis-vm-02", node_list=nodes, tpn=1, start="2026-11-08T20:00:00Z",
               end="2026-11-08T21:15:42Z", boot="2026-11-08T08:00:00.000Z")
    kern = {nodes[0]: boot("6.8.0-60-generic", "Dell Inc. Precision 3280 CFF/0X1HV4, BIOS 1.8.1 05/10/2024",
                           "0000:06:00.0", "27b0", "595.84"),
            nodes[1]: boot("6.8.0-60-generic", "QEMU Standard PC (Q35 + ICH9, 2009), BIOS 1.16.3 04/01/2014",
                           "0000:00:10.0", "2204", "525.147.05")}
    snaps = {(nodes[0], p): {"nvidia-smi.xml": smi("telegraf-rtx-4000-sff-ada-v13")} for p in ("prolog", "epilog")}
    snaps.update({(nodes[1], p): {"nvidia-smi.xml": smi("telegraf-rtx-3090-v12")} for p in ("prolog", "epilog")})
    write_case("35-clean-job-ecc-not-observable", ctx, job, kern, snaps, EXPECTED_35)


EXPECTED_30 = """outcome: application
culprits: []
root_cause: {kind: python_exception, node: pin-ws-07}
action: fix_application
not_root: [gpu_vanished, gpu_inforom_corrupted, gpu_lost_reported]
notes: >
  A one-GPU job on a workstation node with a GeForce RTX 3080 (00000000:04:00.0, driver 536.40). The prolog's
  nvidia-smi -q -x is the real telegraf rtx-3080-v12 document as is. At the epilog nvidia-smi printed the same
  document and, after it on the same stream, "WARNING: infoROM is corrupted at gpu 0000:04:00.0", and exited 14
  (nvidia-smi(1) RETURN VALUE 14, "infoROM is corrupted"): the hooks kept nvidia-smi.status 14. The document is
  complete: the GPU is listed, its counters read (reset_required No, replays 0), nothing moved. The job itself
  died of a KeyError in the user's metrics code (metrics.py, 'background'): a bug in the job's code, outcome
  application, action fix_application, no culprit. The warning is evidence about GPU 0000:04:00 (its infoROM,
  where ECC counts and retired pages are stored, needs a reflash or an RMA): a context event
  gpu_inforom_corrupted, never a cause. Trap: reading the warning as a failed nvidia-smi naming the GPU
  would report that GPU unreachable (gpu_vanished, gpu_hardware, drain_node) and lose every counter of the node.
"""

EXPECTED_31 = """outcome: gpu_hardware
culprits: [tul-a100-03]
root_cause: {kind: gpu_ecc_counter, node: tul-a100-03, gpu: '0000:01:00'}
action: reset_gpu
not_root: [cuda_ecc_error, python_exception]
notes: >
  An A100-SXM4-80GB (00000000:01:00.0, driver 535.54.03) in MIG mode with four GPU instances (3, 4, 5, 6: the
  real telegraf a100-sxm4-v12 document). The job ran on one slice and died with "RuntimeError: CUDA error:
  uncorrectable ECC error encountered" (cuda_ecc_error, a symptom). The epilog's document differs from the
  prolog's in one value: GPU instance 4's <ecc_error_count><volatile_count><sram_uncorrectable> 0 -> 1. With MIG on
  NVML reports volatile ECC counts per MIG device only (non-DRAM uncorrectable: SRAM), so the GPU-level volatile
  counts of the document are not the GPU's: the per-instance count is the one that moved, an uncorrectable SRAM
  error during the job, a gpu_hardware cause on GPU 0000:01:00 (counters.gpu_uncorrectable_ecc through the
  instances' sum) that explains the CUDA error: root gpu_ecc_counter, action reset_gpu. Without the per-instance
  counts nothing in the documents moved and only the cuda_ecc_error hint would be left (root_cause null).
"""

EXPECTED_32 = """outcome: gpu_hardware
culprits: [ada-ws-02]
root_cause: {kind: gpu_reset_required, node: ada-ws-02, gpu: '0000:06:00'}
action: reset_gpu
not_root: [cuda_error, python_exception]
notes: >
  An RTX 4000 SFF Ada (00000000:06:00.0, driver 595.84, DTD nvsmi_device_v13: the real telegraf
  rtx-4000-sff-ada-v13 document). DTD v13 adds <channel_repair_pending>, <tpc_repair_pending> and
  <unrepairable_memory> under <ecc_errors>. The prolog's document has TPC Repair Pending No, the epilog's Yes
  (the one change), everything else equal. The job died with "RuntimeError: CUDA error: unspecified launch
  failure" (cuda_error, a symptom with no hint of its own). A TPC marked for repair during the job means the GPU
  found a faulty processing cluster and repairs it at the next GPU reset (NVML nvmlDeviceGetRepairStatus): a
  gpu_hardware cause on that GPU, placed at the job start, explaining the CUDA error; the GPU needs a reset
  (counters.gpu_tpc_repair_pending, kind gpu_reset_required, action reset_gpu). ECC is Disabled on this board, so
  its memory errors are not counted at all: the coverage says so. Without the v13 field the job would be unknown.
"""

EXPECTED_33 = """outcome: gpu_hardware
culprits: [g4dn-0a1b]
root_cause: {kind: gpu_vanished, node: g4dn-0a1b, gpu: '0000:00:1e'}
action: drain_node
not_root: [cuda_error, python_exception]
notes: >
  A cloud VM with one Tesla T4 (00000000:00:1E.0, driver 515.105.01, passed through: the real telegraf tesla-t4
  document at the prolog). At the epilog nvidia-smi printed "No devices were found" and exited 6 (nvidia-smi(1)
  RETURN VALUE 6, "A query to find an object was unsuccessful"); the hooks kept the status. The job died with
  "RuntimeError: CUDA error: unspecified launch failure". The prolog listed one GPU and the epilog's tool found
  none: every GPU is gone (here the only one), a GPU that fell off the bus (or a driver that lost it) during the
  job: gpu_vanished on GPU 0000:00:1e (counters.gpu_none_found), gpu_hardware, explaining the CUDA error, action
  drain_node (it comes back only with a reboot or a new instance). Trap: a failed nvidia-smi that names no GPU is
  otherwise only a coverage note, and the job would be unknown.
"""

EXPECTED_34 = """outcome: network
culprits: []
root_cause: null
action: inspect_network
not_root: [ib_link_downed, ib_port_errors, nccl_ib_completion_error, nccl_watchdog_timeout, task_exit]
notes: >
  kes-h100-01's prolog and epilog sysfs.txt are the hooks' listing (the seven ATTRIBUTION_IB_COUNTERS files) of the
  real gpud H100 InfiniBand tree, identical at both: mlx5_1 port 1 counters/link_downed 255, the maximum of the
  8-bit LinkDownedCounter, and excessive_buffer_overrun_errors 15 (the 4-bit maximum) on every port. The rail-1
  ranks (1 on kes-h100-01, 9 on kes-h100-02: mlx5_1) got NET/IB completion error 12 against each other, the rest
  timed out in the watchdog. A counter at its maximum saturates: whether mlx5_1's link went down during the job
  cannot be seen, so no counter event exists (255 -> 255 is no increase, and no increase is claimed) and the
  telemetry coverage says the change could not be seen instead of ok. What is left is docs/verdict.md step 4 as in
  case 15: the completion errors hint network, no culprit, action inspect_network, root_cause null.
"""

EXPECTED_35 = """outcome: none
culprits: []
root_cause: null
not_root: [gpu_ecc_counter, gpu_vanished]
notes: >
  A job that completed (0:0) on two one-GPU nodes whose GPUs cannot count memory errors: vis-ws-01's RTX 4000 SFF
  Ada has ECC Disabled (the real telegraf rtx-4000-sff-ada-v13 document: every ECC count N/A), vis-vm-02's
  GeForce RTX 3090 in a VM (Pass-Through, the real rtx-3090-v12 document) has no ECC at all (ECC mode N/A). The
  snapshots are the same documents at prolog and epilog: nothing changed, no event. The verdict is none; each
  node's telemetry coverage says which GPU's memory errors could not be observed (not ok).
"""

if __name__ == "__main__":
    main()
