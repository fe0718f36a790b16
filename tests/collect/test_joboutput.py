"""Job output: prefixes taken apart, the node of each line resolved as docs/bundle.md says, tracebacks followed."""

from __future__ import annotations

from datetime import datetime, timezone

from attribution.collect.joblog import JobLineParser, looks_labelled
from attribution.collect.joboutput import node_of_file, parse_job_text
from attribution.extract.events import extract
from attribution.model import ExecutionContext
from attribution.timeparse import YearGuesser

from tests.harness.prefilters import AllLines

UTC = timezone.utc
CTX = ExecutionContext(cluster="c", job_id="1", nodes=("g001", "g002", "g003", "g004"), tasks_per_node=8,
                       start=datetime(2026, 3, 10, 8, tzinfo=UTC), end=datetime(2026, 3, 10, 10, tzinfo=UTC))


def _parser(labelled=True):
    return JobLineParser(years=YearGuesser(CTX.start, CTX.end), labelled=labelled)


def test_label_rank_and_glog_stamp_without_zero_padding():
    jl = _parser().parse(" 7: [rank7]:[E310 09:24:36.943220249 ProcessGroupNCCL.cpp:563] [Rank 7] Watchdog caught")
    assert (jl.label, jl.rank) == (7, 7)
    assert jl.time == datetime(2026, 3, 10, 9, 24, 36, 943220, tzinfo=UTC)
    assert jl.text.startswith("[E310")


def test_nccl_prefix_host_and_timestamp():
    jl = _parser().parse("20: [2026-03-10 09:14:38] g003:2171129:2171440 [4] enqueue.cc:1460 NCCL WARN Cuda failure")
    assert jl.host == "g003" and jl.label == 20
    assert jl.time == datetime(2026, 3, 10, 9, 14, 38, tzinfo=UTC)


def test_plain_glog_and_python_logging_stamps():
    p = _parser(labelled=False)
    assert p.parse("E0324 14:05:14.452000 2163589 torch/distributed/elastic/multiprocessing/api.py:869] failed"
                   ).time == datetime(2026, 3, 24, 14, 5, 14, 452000, tzinfo=UTC)
    assert p.parse("[2026-03-10 08:02:55,310][train][INFO] step").time == datetime(2026, 3, 10, 8, 2, 55, 310000,
                                                                                     tzinfo=UTC)
    assert p.parse("[titan] 2026-04-14 01:14:33,970 - root - INFO - step").time.minute == 14


def test_kubectl_prefix_and_timestamps():
    jl = _parser(labelled=False).parse(
        "[pod/train-worker-3/pytorch] 2026-03-10T09:00:01.123456789Z [rank3]: KeyError: 'x'")
    assert jl.pod == "train-worker-3" and jl.rank == 3
    assert jl.time == datetime(2026, 3, 10, 9, 0, 1, 123456, tzinfo=UTC)
    assert jl.text == "KeyError: 'x'"


def test_labelled_detection():
    assert looks_labelled([" 0: a", " 1: b", "srun: error: x"])
    assert not looks_labelled(["Traceback (most recent call last):", "  File x", "KeyError: 1"])


def test_file_names_name_nodes():
    nodes = ("g1", "g10", "g101")
    assert node_of_file("g101.out", nodes) == "g101"
    assert node_of_file("g10-stderr.log", nodes) == "g10"
    assert node_of_file("g1_rank0.txt", nodes) == "g1"
    assert node_of_file("g1", nodes) == "g1"
    assert node_of_file("slurm-42.out", nodes) is None


def _events(ruleset, text, name="slurm-1.out"):
    obs = parse_job_text(text, f"job/{name}", CTX, ruleset.prefilter("job"), node_of_file(name, CTX.nodes))
    return extract(ruleset, CTX, obs)


def test_node_precedence_host_beats_rank_beats_label_beats_file(ruleset):
    text = (
        " 3: g004:11:12 [3] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer\n"  # host g004
        " 3: [rank20]: RuntimeError: CUDA error: unspecified launch failure\n"                        # rank 20 -> g003
        "12: NCCL WARN something odd\n"                                                               # label 12 -> g002
        "NCCL WARN unlabelled line\n")
    evs = _events(ruleset, text, name="g001.out")
    by_line = {e.location.rsplit(":", 1)[1]: e.node for e in evs}
    assert by_line == {"1": "g004", "2": "g003", "3": "g002", "4": "g001"}


def test_a_host_in_the_line_wins_over_numbers(ruleset):
    evs = _events(ruleset, "20: srun: error: g001.cluster.local: task 20: Exited with exit code 1\n")
    assert [e.node for e in evs] == ["g001"]


def test_traceback_exception_lines_are_found_per_stream(ruleset):
    text = (
        " 5: [rank5]: Traceback (most recent call last):\n"
        " 9: [rank9]: Traceback (most recent call last):\n"
        " 5: [rank5]:   File \"train.py\", line 3, in <module>\n"
        " 9: [rank9]:   File \"train.py\", line 8, in <module>\n"
        " 9: [rank9]: ValueError: bad shape\n"
        " 5: [rank5]: KeyError: 'pixel_values'\n"
        " 5: [rank5]: AssertionError: not after a traceback header\n")
    evs = _events(ruleset, text)
    flagged = [e for e in evs if e.rule == "job.python_exception"]
    assert [(e.rank, e.fields["exception"], e.node) for e in flagged] == [(5, "KeyError", "g001"),
                                                                          (9, "ValueError", "g002")]
    # the exception line with no traceback of its own is still evidence, found by the terminal-line rule
    orphan = [e for e in evs if e.rule == "job.python_exception_line"]
    assert [(e.rank, e.fields["exception"]) for e in orphan] == [(5, "AssertionError")]


def test_exception_names_a_consequence_when_it_carries_another_kind(ruleset):
    text = ("[rank18]: Traceback (most recent call last):\n[rank18]:   File \"x.py\", line 1\n"
            "[rank18]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    kinds = [e.kind for e in _events(ruleset, text)]
    assert kinds == ["cuda_ecc_error"]


def test_every_line_can_be_observed_without_prefilter():
    obs = parse_job_text("a\nb\nc", "job/x", CTX, AllLines())
    assert [o.location for o in obs] == ["job/x:1", "job/x:2", "job/x:3"]


def test_tee_and_torchx_role_prefixes_are_taken_off_in_either_order():
    p = _parser(labelled=False)
    jl = p.parse("[default0]:[rank12]: KeyError: 'pixel_values'")
    assert (jl.rank, jl.text) == (12, "KeyError: 'pixel_values'")
    jl = p.parse("[rank3]:[default3]: ValueError: bad")
    assert (jl.rank, jl.text) == (3, "ValueError: bad")
    jl = p.parse("[trainer0|0]:ncclInternalError: Internal check failed.")
    assert (jl.rank, jl.text) == (None, "ncclInternalError: Internal check failed.")
    jl = p.parse("[trainer3]:twshared1016:1958:1958 [3] NCCL INFO NCCL_SOCKET_IFNAME set to eth2")
    assert jl.host == "twshared1016"
    # a role index is a local index, never a rank; brackets that are not a role stay text
    assert p.parse("[default7]: x").rank is None
    assert p.parse("[Question]: Multi GPU").text == "[Question]: Multi GPU"
    assert p.parse("[E310 09:24:36.943 ProcessGroupNCCL.cpp:563] x").text.startswith("[E310")


def test_ray_worker_prefix_names_the_host_by_its_ip():
    ctx = ExecutionContext(cluster="c", job_id="1", nodes=("10.0.0.5", "10.0.0.6"), tasks_per_node=8)
    obs = parse_job_text("(RayTrainWorker pid=4009, ip=10.0.0.6) RuntimeError: CUDA error: out of memory\n"
                         "(RayWorkerWrapper pid=77) [rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] x\n",
                         "job/x", ctx, AllLines())
    assert [(o.host, o.rank, o.text[:12]) for o in obs] == [("10.0.0.6", None, "RuntimeError"),
                                                            (None, 1, "[E ProcessGr")]


def test_a_wrapped_frame_does_not_end_the_traceback(ruleset):
    text = ("Traceback (most recent call last):\n"
            "  File \"/mnt/env/lib/python3.8/site-packages/torch/distributed/\n"
            "distributed_c10d.py\", line 576, in init_process_group\n"
            "    store, rank, world_size = next(rendezvous_iterator)\n"
            "ValueError: Error initializing torch.distributed using file:// rendezvous: path missing\n")
    evs = [e for e in _events(ruleset, text) if e.kind == "python_exception"]
    assert [(e.rule, e.fields["exception"]) for e in evs] == [("job.python_exception", "ValueError")]


def test_terminal_exception_lines_need_the_name_colon_message_form(ruleset):
    text = ("Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618\n"
            "or 1800010 milliseconds before timing out.\n"
            "    raise ValueError(\"x\")\n"
            "[rank2]: PermissionError: [Errno 13] Permission denied: '/ckpt/step_100'\n")
    evs = [e for e in _events(ruleset, text) if e.kind == "python_exception"]
    assert [(e.rank, e.fields["exception"], e.node) for e in evs] == [(2, "PermissionError", "g001")]


def test_untagged_lines_of_a_single_node_job_belong_to_that_node(ruleset):
    one = ExecutionContext(cluster="c", job_id="1", nodes=("g007",), tasks_per_node=8)
    obs = parse_job_text("RuntimeError: CUDA error: out of memory\n", "job/slurm-1.out", one,
                         ruleset.prefilter("job"))
    assert [(e.kind, e.node) for e in extract(ruleset, one, obs)] == [("cuda_oom", "g007")]
    # with two nodes the same line belongs to the job but to no node
    obs = parse_job_text("RuntimeError: CUDA error: out of memory\n", "job/slurm-1.out", CTX,
                         ruleset.prefilter("job"))
    assert [(e.kind, e.node) for e in extract(ruleset, CTX, obs)] == [("cuda_oom", None)]


def test_pdsh_host_prefixes_are_detected_per_file(ruleset):
    text = ("10.140.82.188: [2021-01-26 18:08:44,573] [INFO] [launch.py:71:main] 0 NCCL_DEBUG info\n"
            "g002: Traceback (most recent call last):\n"
            "g001: [2021-01-26 18:09:01,100] [INFO] step 1\n"
            "g002:   File \"train.py\", line 3, in <module>\n"
            "g002: KeyError: 'labels'\n")
    evs = [e for e in _events(ruleset, text) if e.kind == "python_exception"]
    assert [(e.rule, e.node, e.fields["exception"]) for e in evs] == [("job.python_exception", "g002", "KeyError")]
    # without the per-file majority the same shape is text, not a host
    p = _parser(labelled=False)
    assert p.parse("g002: KeyError: 'labels'").host is None
    # a prefix that is not one of the job's nodes is never taken off (libmlx5 names the device first)
    obs = parse_job_text("mlx5: g002: got completion with error:\nmlx5: g002: got completion with error:\n",
                         "job/x", CTX, AllLines())
    assert [o.text for o in obs] == ["mlx5: g002: got completion with error:"] * 2


def test_open_mpi_tag_output_carries_the_rank():
    jl = _parser(labelled=False).parse("[1,11]<stderr>:RuntimeError: CUDA error: out of memory")
    assert (jl.rank, jl.text) == (11, "RuntimeError: CUDA error: out of memory")


def test_colour_codes_are_taken_off_with_or_without_their_escape():
    p = _parser(labelled=False)
    jl = p.parse("\x1b[2m\x1b[36m(RayTrainWorker pid=1942, ip=100.97.252.234)\x1b[0m RuntimeError: CUDA error: out of memory")
    assert (jl.host, jl.text) == ("100.97.252.234", "RuntimeError: CUDA error: out of memory")
    jl = p.parse("[2m[36m(RayTrainWorker pid=1942, ip=100.97.252.234)[0m 17-Jan-23 17:21:19 [Worker:0] [INFO] done")
    assert (jl.host, jl.text) == ("100.97.252.234", "17-Jan-23 17:21:19 [Worker:0] [INFO] done")
    assert p.parse("\x1b[31mKeyError: 'x'\x1b[0m").text == "KeyError: 'x'"
