"""Writes tests/cases/19..22, the counter-snapshot cases (`python -m tests.harness.telemetry_cases`).

Their job output and kernel logs follow the conventions of the other cases (tests/cases/README.md); their
snapshots are real-format documents built from tests/data/telemetry (nvidia-smi -q -x of R535 on H100) and the
kernel's sysfs layout (tests/harness/fakenode.py). Run once; the written files are the cases.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.harness.fakenode import AER_NAMES, GPU_BUSES, HCA_BUSES, _aer_text, smi_document

CASES = Path(__file__).resolve().parents[1] / "cases"
WATCHED = ("link_downed", "symbol_error", "port_rcv_errors", "link_error_recovery", "port_xmit_data",
           "port_rcv_data")


def kernel_log(node: str, boot: str) -> str:
    lines = [
        "Linux version 6.8.0-60-generic (buildd@lcy02-amd64-063) (x86_64-linux-gnu-gcc-12 (Ubuntu 12.3.0-1ubuntu1~22.04) 12.3.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #69~22.04.1-Ubuntu SMP PREEMPT_DYNAMIC Fri Jan 10 15:21:56 UTC 2025",
        "DMI: NVIDIA DGXH100/DGXH100, BIOS 1.6.7 02/21/2025",
        "smpboot: Allowing 224 CPUs, 0 hotplug CPUs",
    ]
    lines += [f"pci 0000:{b}:00.0: [10de:2330] type 00 class 0x030200" for b in GPU_BUSES]
    lines += [f"mlx5_core 0000:{b}:00.0: firmware version: 28.41.1000" for b in HCA_BUSES]
    lines += ["nvidia: module license 'NVIDIA' taints kernel.",
              "nvidia-nvlink: Nvlink Core is being initialized, major device number 508",
              "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024"]
    lines += [f"mlx5_core 0000:{b}:00.0 mlx5_{i}: Port: 1 Link ACTIVE" for i, b in enumerate(HCA_BUSES)]
    stamps = [0.0, 0.0, 0.39] + [2.01 + 0.0004 * i for i in range(8)] + [8.3 + 0.21 * i for i in range(8)] \
        + [11.2, 11.9, 12.4] + [31.0 + 0.2 * i for i in range(8)]
    return "".join(f"[{t:12.6f}] {ln}\n" for t, ln in zip(stamps, lines))


def ib_tree(folder: Path, ports: int, values: dict[int, dict[str, int]] | None = None) -> None:
    for i in range(ports):
        d = folder / "infiniband" / f"mlx5_{i}" / "1" / "counters"
        d.mkdir(parents=True, exist_ok=True)
        base = {"port_xmit_data": 1_000_000 + i, "port_rcv_data": 2_000_000 + i}
        for name in WATCHED:
            (d / name).write_text(f"{(values or {}).get(i, {}).get(name, base.get(name, 0))}\n")


def pci_tree(folder: Path, counts: dict[str, dict[str, dict[str, int]]] | None = None) -> None:
    """AER files of the GPUs, their switch ports and the HCAs, and pci/topology."""
    topo = []
    for i, (g, h) in enumerate(zip(GPU_BUSES[:2], HCA_BUSES[:2])):  # two GPU/HCA pairs keep the case small
        hb = int(h, 16)
        rc, up, dn_h, dn_g = f"{hb - 3:02x}", f"{hb - 2:02x}", f"{hb - 1:02x}", f"{hb - 1:02x}"
        chain = [f"0000:{rc}:01.0", f"0000:{up}:00.0"]
        base = f"/sys/devices/pci0000:{rc}/" + "/".join(chain)
        for leaf in ((f"0000:{dn_h}:00.0", f"0000:{h}:00.0"), (f"0000:{dn_g}:01.0", f"0000:{g}:00.0")):
            topo.append(f"{base}/{leaf[0]}/{leaf[1]}")
            for bdf in (*chain, *leaf):
                d = folder / "pci" / bdf
                d.mkdir(parents=True, exist_ok=True)
                for f in AER_NAMES:
                    (d / f).write_text(_aer_text(f, (counts or {}).get(bdf, {}).get(f)))
    (folder / "pci" / "topology").write_text("\n".join(sorted(set(topo))) + "\n")


def sysfs_listing(folder: Path, ports: int, values: dict[int, dict[str, int]] | None = None,
                  aer: dict[str, dict[str, int]] | None = None) -> None:
    """The hooks' compact form (sysfs.txt, pci-topology.txt) of the same trees: what hooks/lib.sh writes."""
    lines = []
    for i in range(ports):
        base = {"port_xmit_data": 1_000_000 + i, "port_rcv_data": 2_000_000 + i}
        for name in WATCHED:
            v = (values or {}).get(i, {}).get(name, base.get(name, 0))
            if name in ("port_xmit_data", "port_rcv_data"):
                continue  # not watched: the hooks do not read them
            lines.append(f"/sys/class/infiniband/mlx5_{i}/ports/1/counters/{name}:{v}")
    topo = []
    for g, h in zip(GPU_BUSES, HCA_BUSES):
        hb = int(h, 16)
        rc, up, dn = f"{hb - 3:02x}", f"{hb - 2:02x}", f"{hb - 1:02x}"
        root = f"/sys/devices/pci0000:{rc}/0000:{rc}:01.0/0000:{up}:00.0"
        topo += [f"/sys/devices/pci0000:{rc}/0000:{rc}:01.0", root, f"{root}/0000:{dn}:00.0",
                 f"{root}/0000:{dn}:00.0/0000:{h}:00.0", f"{root}/0000:{dn}:01.0", f"{root}/0000:{dn}:01.0/0000:{g}:00.0"]
    for path in topo:
        bdf = path.rsplit("/", 1)[1]
        for f, total in (("aer_dev_fatal", "TOTAL_ERR_FATAL"), ("aer_dev_nonfatal", "TOTAL_ERR_NONFATAL")):
            lines.append(f"/sys/bus/pci/devices/{bdf}/{f}:{total} {(aer or {}).get(bdf, {}).get(f, 0)}")
    (folder / "sysfs.txt").write_text("\n".join(lines) + "\n")
    (folder / "pci-topology.txt").write_text("\n".join(topo) + "\n")


CONTEXT = """scheduler: slurm
cluster: {cluster}
job_id: "{job}"
user: {user}
partition: h100
state: {state}
exit_code: "{exit}"
failed_node: null
nodes: "{nodes}"
tasks_per_node: 8
start: {start}
end: {end}
timezone: UTC
boot_time:
{boots}"""


def nccl_init(nodes: list[str], ip: str) -> list[str]:
    out = []
    for n, node in enumerate(nodes):
        r = n * 8
        pid = 2301744 + 1000 * n
        out += [f"{r:2d}: {node}:{pid}:{pid} [0] NCCL INFO Bootstrap : Using ibp26s0:{ip}.{n + 1}<0>",
                f"{r:2d}: {node}:{pid}:{pid + 356} [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB "
                f"[2]mlx5_2:1/IB [3]mlx5_3:1/IB [4]mlx5_4:1/IB [5]mlx5_5:1/IB [6]mlx5_6:1/IB [7]mlx5_7:1/IB ; "
                f"OOB ibp26s0:{ip}.{n + 1}<0>",
                f"{r:2d}: {node}:{pid}:{pid + 356} [0] NCCL INFO comm 0x55d01f53320960 rank {r} nranks "
                f"{8 * len(nodes)} cudaDev 0 nvmlDev 0 busId 1b000 commId 0x2f41885d03440735 - Init COMPLETE"]
    return out


def write_case(name: str, ctx: dict, job: list[str], snapshots, expected: str, kernel: dict[str, bool]) -> Path:
    d = CASES / name
    if d.exists():
        shutil.rmtree(d)
    (d / "job").mkdir(parents=True)
    nodes = ctx["node_list"]
    boots = "".join(f"  {n}: {ctx['boot']}\n" for n in nodes)
    (d / "context.yaml").write_text(CONTEXT.format(boots=boots, **ctx))
    (d / "job" / f"slurm-{ctx['job']}.out").write_text("\n".join(job) + "\n")
    for n in nodes:
        (d / "nodes" / n).mkdir(parents=True, exist_ok=True)
        if kernel.get(n, True):
            (d / "nodes" / n / "kernel.log").write_text(kernel_log(n, ctx["boot"]))
    for (node, phase), fill in snapshots.items():
        folder = d / "nodes" / node / "telemetry" / phase
        folder.mkdir(parents=True, exist_ok=True)
        fill(folder)
    (d / "expected.yaml").write_text(expected)
    return d


def smi(folder: Path, values=None, ts="Tue Oct  6 08:00:03 2026", busy=False) -> None:
    extra = {i: {"gpu_temp": f"{64 + i} C", "used": "71234 MiB", "gpu_util": "98 %"} for i in range(8)} if busy \
        else {i: {"gpu_temp": f"{33 + i} C", "used": "0 MiB", "gpu_util": "0 %"} for i in range(8)}
    (folder / "nvidia-smi.xml").write_text(smi_document(8, values, timestamp=ts, extra=extra))


def main() -> None:
    # 19: uncorrectable ECC errors and a remapped row counted on one GPU; no Xid anywhere, only NCCL errors
    nodes = ["ash-h100-01", "ash-h100-02"]
    ecc = {3: {"dram_uncorrectable": "2", "remapped_row_unc": "1"}}
    job = ["ash job 5530917 tkaur: 2 nodes x 8 H100, srun --label",
           "+ srun --label --ntasks-per-node=8 python -u pretrain.py --cfg cfg/llama_8b.yaml",
           " 0: NCCL version 2.21.5+cuda12.4"] + nccl_init(nodes, "10.61.0")
    job += [f" 0: [08:{m:02d}:11] step {s} loss {3.1 - s / 10000:.4f} tokens/s 1.21e6" for m, s in
            ((20, 100), (41, 200), (58, 300))]
    job += [
        "11: ash-h100-02:2302744:2303210 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
        "10.61.0.1<51532> with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.61.3.2 "
        "remoteGids::ffff:10.61.3.1",
        " 3: ash-h100-01:2301744:2302207 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
        "10.61.0.2<40818> with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.61.3.1 "
        "remoteGids::ffff:10.61.3.2",
        "11: ash-h100-02:2302744:2303210 [3] NCCL INFO transport/net.cc:1302 -> 6",
        " 3: [rank3]:[E1006 09:14:52.102341655 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
        "Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was "
        "a network error, NCCL version 2.21.5",
        " 3: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
        "prematurely.",
    ]
    job += [f"{r:2d}: [rank{r}]:[E1006 09:24:52.{r:03d}100000 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum=18822, OpType=ALLREDUCE, NumelIn=262144, "
            f"NumelOut=262144, Timeout(ms)=600000) ran for 600084 milliseconds before timing out." for r in
            (0, 5, 8, 14)]
    job += ["srun: error: ash-h100-01: tasks 0-7: Aborted (core dumped)",
            "srun: error: ash-h100-02: tasks 8-15: Aborted (core dumped)"]
    ctx = dict(cluster="ash", job="5530917", user="tkaur", state="FAILED", exit="134:0",
               nodes="ash-h100-[01-02]", node_list=nodes, start="2026-10-06T08:00:05Z",
               end="2026-10-06T09:25:40Z", boot="2026-10-02T17:40:11.000Z")
    snaps = {}
    for n in nodes:
        snaps[(n, "prolog")] = lambda f: smi(f)
        snaps[(n, "epilog")] = (lambda f: smi(f, ecc, "Tue Oct  6 09:25:44 2026", True)) if n == "ash-h100-02" \
            else (lambda f: smi(f, None, "Tue Oct  6 09:25:43 2026", True))
    write_case("19-ecc-counters-grew-nccl-errors-only", ctx, job, snaps, EXPECTED_19, {})

    # 20: link_downed grew on one port of one node, whose kernel log was not collected
    nodes = ["oak-h100-01", "oak-h100-02", "oak-h100-03"]
    job = ["oak job 771204 mberg: 3 nodes x 8 H100, srun --label",
           "+ srun --label --ntasks-per-node=8 python -u train_vit.py --cfg cfg/vit_g14.yaml",
           " 0: NCCL version 2.21.5+cuda12.4"] + nccl_init(nodes, "10.72.0")
    job += [f" 0: [14:{m:02d}:40] epoch 3 iter {s} loss {1.9 - s / 40000:.4f}" for m, s in ((12, 500), (31, 1000))]
    job += [
        f"{r:2d}: {node}:{pid}:{pid + 466} [2] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
        f"10.72.0.{peer}<{port}> with error 12, opcode 0, len 0, vendor err 129 (Recv)"
        for r, node, pid, peer, port in ((2, "oak-h100-01", 2301744, 2, 41022), (18, "oak-h100-03", 2303744, 2, 39010))
    ]
    job += [f"{r:2d}: [rank{r}]:[E1007 14:58:03.{r:03d}200000 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum=40117, OpType=ALLREDUCE, NumelIn=1048576, "
            f"NumelOut=1048576, Timeout(ms)=600000) ran for 600031 milliseconds before timing out." for r in
            (0, 9, 10, 17)]
    job += [f"srun: error: {n}: tasks {8 * i}-{8 * i + 7}: Aborted (core dumped)" for i, n in enumerate(nodes)]
    ctx = dict(cluster="oak", job="771204", user="mberg", state="FAILED", exit="134:0", nodes="oak-h100-[01-03]",
               node_list=nodes, start="2026-10-07T13:40:02Z", end="2026-10-07T14:58:30Z",
               boot="2026-10-01T06:12:40.000Z")
    snaps = {}
    for n in nodes:
        base = {i: {"link_downed": 1, "symbol_error": 7} for i in range(4)}
        after = {i: dict(v) for i, v in base.items()}
        if n == "oak-h100-02":
            after[2] = {"link_downed": 2, "symbol_error": 112, "link_error_recovery": 1}
        snaps[(n, "prolog")] = (lambda b: lambda f: (smi(f), ib_tree(f, 4, b)))(base)
        snaps[(n, "epilog")] = (lambda a: lambda f: (smi(f, None, "Wed Oct  7 14:58:33 2026", True),
                                                     ib_tree(f, 4, a)))(after)
    write_case("20-ib-link-downed-counter-kernel-log-missing", ctx, job, snaps, EXPECTED_20,
               {"oak-h100-02": False})

    # 21: a clean job; counters differ from zero but did not change; timestamps, clocks and memory did
    nodes = ["elm-h100-11", "elm-h100-12"]
    job = ["elm job 90311 rsato: 2 nodes x 8 H100", "+ srun --label --ntasks-per-node=8 python -u finetune.py",
           " 0: NCCL version 2.21.5+cuda12.4"] + nccl_init(nodes, "10.80.0")
    job += [" 0: [11:48:02] epoch 2 done, eval loss 0.8812", " 0: saved checkpoint ckpt/final.pt", " 0: done"]
    ctx = dict(cluster="elm", job="90311", user="rsato", state="COMPLETED", exit="0:0", nodes="elm-h100-[11-12]",
               node_list=nodes, start="2026-10-08T10:02:00Z", end="2026-10-08T11:48:30Z",
               boot="2026-09-30T09:00:00.000Z")
    old = {5: {"dram_correctable": "4", "replay_counter": "3", "remapped_row_corr": "1"}}
    aer = {"0000:3e:00.0": {"aer_dev_nonfatal": 1}}
    snaps = {}
    # elm-h100-11 in the bundle's tree layout, elm-h100-12 in the hooks' compact listing (sysfs.txt)
    snaps[("elm-h100-11", "prolog")] = lambda f: (smi(f, old), ib_tree(f, 4, {1: {"link_downed": 3, "symbol_error": 40}}),
                                                  pci_tree(f, {"0000:3e:00.0": {"aer_dev_correctable": {"RxErr": 2}}}))
    snaps[("elm-h100-11", "epilog")] = lambda f: (smi(f, old, "Thu Oct  8 11:48:33 2026", True),
                                                  ib_tree(f, 4, {1: {"link_downed": 3, "symbol_error": 40,
                                                                     "port_xmit_data": 918_273_645}}),
                                                  pci_tree(f, {"0000:3e:00.0": {"aer_dev_correctable": {"RxErr": 2}}}))
    snaps[("elm-h100-12", "prolog")] = lambda f: (smi(f, old), sysfs_listing(f, 8, {1: {"link_downed": 3}}, aer))
    snaps[("elm-h100-12", "epilog")] = lambda f: (smi(f, old, "Thu Oct  8 11:48:34 2026", True),
                                                  sysfs_listing(f, 8, {1: {"link_downed": 3}}, aer))
    write_case("21-clean-job-counters-unchanged", ctx, job, snaps, EXPECTED_21, {})

    # 22: only the epilog snapshot (the prolog predates the hooks' rollout): absolute values are context only
    nodes = ["fir-h100-07", "fir-h100-08"]
    job = ["fir job 402117 okim: 2 nodes x 8 H100", "+ srun --label --ntasks-per-node=8 python -u train.py",
           " 0: NCCL version 2.21.5+cuda12.4"] + nccl_init(nodes, "10.90.0")
    job += [f"{r:2d}: [rank{r}]:[E1009 03:10:41.{r:03d}300000 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum=9021, OpType=ALLREDUCE, NumelIn=524288, "
            f"NumelOut=524288, Timeout(ms)=600000) ran for 600012 milliseconds before timing out." for r in
            (0, 6, 9, 15)]
    job += [f"srun: error: {n}: tasks {8 * i}-{8 * i + 7}: Aborted (core dumped)" for i, n in enumerate(nodes)]
    ctx = dict(cluster="fir", job="402117", user="okim", state="FAILED", exit="134:0", nodes="fir-h100-[07-08]",
               node_list=nodes, start="2026-10-09T01:55:10Z", end="2026-10-09T03:11:05Z",
               boot="2026-10-05T12:00:00.000Z")
    snaps = {("fir-h100-08", "epilog"): lambda f: (smi(f, {6: {"dram_uncorrectable": "2", "remapped_row_unc": "1"}},
                                                       "Fri Oct  9 03:11:09 2026", True),
                                                   ib_tree(f, 4, {0: {"link_downed": 2}})),
             ("fir-h100-07", "epilog"): lambda f: (smi(f, None, "Fri Oct  9 03:11:08 2026", True), ib_tree(f, 4))}
    write_case("22-epilog-snapshot-only-absolute-context", ctx, job, snaps, EXPECTED_22, {})


EXPECTED_19 = """outcome: gpu_hardware
culprits: [ash-h100-02]
root_cause: {kind: gpu_ecc_counter, node: ash-h100-02, gpu: '0000:61:00'}
action: reset_gpu
not_root: [nccl_ib_completion_error, nccl_error, nccl_watchdog_timeout, task_exit]
notes: >
  GPU 3 of ash-h100-02 (00000000:61:00.0) hit two uncorrectable DRAM errors during the job and remapped a row for
  them: its epilog nvidia-smi snapshot shows volatile and aggregate dram_uncorrectable 2 and remapped_row_unc 1,
  the prolog's 0 and 0. The Xid 48/94/95 the driver logged went to a kernel ring buffer the bundle's kernel logs
  do not hold (they are the boot messages only): there is no Xid anywhere. Rank 11 (local rank 3 on
  ash-h100-02) lost its peer with a NET/IB completion error 12, rank 3 saw the same from the other side, and the
  rest timed out in the watchdog. Without the counters the verdict would follow the nccl_ib_completion_error hint
  (network, no culprit). With them, the counter increase is a gpu_hardware cause on that GPU (rules/counters.yaml
  counters.gpu_uncorrectable_ecc and counters.gpu_remapped_rows_uncorrectable), placed at the job start (the
  earliest it can have happened), which explains every NCCL symptom: root gpu_ecc_counter on ash-h100-02, GPU
  0000:61:00, action reset_gpu (the remap takes effect at the next reset). The other node's snapshots differ
  only in timestamps, temperatures, memory use and utilisation: nothing there.
"""

EXPECTED_20 = """outcome: network
culprits: [oak-h100-02]
root_cause: {kind: ib_link_downed, node: oak-h100-02}
action: inspect_network
not_root: [nccl_ib_completion_error, nccl_watchdog_timeout, task_exit, ib_port_errors]
notes: >
  Port 1 of mlx5_2 on oak-h100-02 went down during the job: its counters/link_downed is 2 at the epilog, 1 at the
  prolog (the 1 is from an earlier recabling and is the baseline), with symbol_error 7 -> 112 and
  link_error_recovery 0 -> 1 on the same port. oak-h100-02's kernel log was not collected (no kernel.log in its
  node folder), so no "Link DOWN" line exists; the rail-2 peers on the other nodes logged NET/IB completion
  error 12 against 10.72.0.2 and the rest timed out. The link_downed increase is a network cause with this node as
  culprit (counters.ib_link_downed); the symbol errors and the recovery are context (counters.ib_port_errors),
  the other ports and nodes did not change (port_xmit_data moves with traffic and is not watched).
"""

EXPECTED_21 = """outcome: none
culprits: []
root_cause: null
not_root: [gpu_ecc_counter, ib_link_downed, pcie_aer_fatal]
notes: >
  A job that completed (0:0). Both nodes' snapshots carry counts from before the job (GPU 5 aggregate
  dram_correctable 4, PCIe replays 3, one row remapped for correctable errors; mlx5_1 link_downed 3, and on
  elm-h100-11 symbol_error 40 and a correctable AER RxErr 2 on a switch port, on elm-h100-12 a non-fatal AER
  count of 1 on the switch above GPU 1), identical at the prolog and at the epilog, while timestamps,
  temperatures, memory use, utilisation and port_xmit_data differ. elm-h100-11's snapshots are in the bundle's
  tree layout, elm-h100-12's in the hooks' compact listing (sysfs.txt, pci-topology.txt). Unchanged counters
  give no event at all: nothing new.
"""

EXPECTED_22 = """outcome: unknown
culprits: []
root_cause: null
action: investigate
not_root: [gpu_ecc_counter, ib_link_downed, nccl_watchdog_timeout, task_exit]
notes: >
  The nodes' prologs did not take snapshots (the prolog predates the hooks' rollout): only the epilog's exist.
  fir-h100-08's GPU 6 shows aggregate dram_uncorrectable 2 and remapped_row_unc 1, and mlx5_0 link_downed 2; nothing
  says whether this job saw them grow, so they are context only (absolute values), never a cause. The job output
  holds only watchdog timeouts and srun's aborted tasks: no cause, no hinting symptom; the FAILED state gives
  unknown, action investigate, no culprit.
"""

if __name__ == "__main__":
    main()
