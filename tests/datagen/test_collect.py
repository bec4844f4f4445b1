"""End-to-end collection with real builds and measurements on tiny workloads."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import CLI_TIMEOUT_SEC, assert_clean_error, needs_no_gpu, run_cli
from datagen.records import read_records, shard_paths

pytestmark = pytest.mark.slow

DENSE = "dense/m32_n32_k32"
SOFTMAX = "softmax/rows16_cols32"


def test_collect_measures_and_records_everything(tmp_path):
    out = str(tmp_path / "ds")
    proc = run_cli("collect", DENSE, "--out", out, "--per-workload", "8", "--batch-size", "4",
                   "--repeat", "3", "--min-repeat-ms", "5", "--no-progress", check=True)
    assert "committed 8 candidates" in proc.stdout
    frame = read_records(out)
    assert len(frame) == 8 and frame.trace_hash.is_unique
    assert set(frame.origin) == {"random", "evolved"}
    ok = frame[frame.status == "ok"]
    assert len(ok) >= 6
    assert all(len(lat) == 3 for lat in ok.latencies)
    assert (ok.latency_median > 0).all() and (ok.build_secs > 0).all() and (ok.run_secs > 0).all()
    row = frame.iloc[0]
    assert '"mcpu"' in row.target and row.num_threads >= 1 and row.cpu_model
    assert json.loads(row.device) == {"kind": "cpu", "model": row.cpu_model}
    assert '"repeat": 3' in row.protocol and row.tvm_ffi_version.startswith("0.1.14")
    # running the same command again finds nothing left to do
    again = run_cli("collect", DENSE, "--out", out, "--per-workload", "8", "--batch-size", "4",
                    "--no-progress", check=True)
    assert "committed 0 candidates" in again.stdout
    assert len(read_records(out)) == 8


def test_sigkill_then_resume_loses_nothing_and_duplicates_nothing(tmp_path):
    out = str(tmp_path / "ds")
    args = ["collect", DENSE, SOFTMAX, "--out", out, "--per-workload", "8", "--batch-size",
            "2", "--repeat", "2", "--min-repeat-ms", "2", "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "datagen.cli", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 300
    while len(shard_paths(out)) < 3 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the collector and its build/run workers, mid-batch
    proc.wait()
    before = read_records(out)
    assert 0 < len(before) < 16, "the kill should land mid-collection"
    run_cli(*args, check=True)
    after = read_records(out)
    assert len(after) == 16
    assert after.groupby("workload_key").size().to_dict() == {DENSE: 8, SOFTMAX: 8}
    assert after.trace_hash.is_unique
    assert set(before.trace_hash) <= set(after.trace_hash)


def test_build_timeout_is_recorded_not_fatal(tmp_path):
    out = str(tmp_path / "ds")
    run_cli("collect", "conv2d/h8_w8_ci8_co8_k3_stride1_pad1", "--out", out, "--per-workload",
            "2", "--batch-size", "2", "--build-timeout", "0.05", "--no-progress", check=True)
    frame = read_records(out)
    assert list(frame.status) == ["build_timeout", "build_timeout"]
    assert frame.error.str.contains("killed after 0.05 seconds").all()
    assert frame.latencies.map(len).eq(0).all() and frame.latency_median.isna().all()


def test_stats_summarises_families_and_workloads(tmp_path):
    out = str(tmp_path / "ds")
    run_cli("collect", "tiny", "--out", out, "--per-workload", "2", "--batch-size", "2",
            "--no-progress", check=True)
    proc = run_cli("stats", out, check=True)
    assert "6 records" in proc.stdout
    for family in ("dense", "softmax", "conv2d"):
        assert family in proc.stdout
    assert "best_us" in proc.stdout and DENSE in proc.stdout
    # compact: the same records in one shard, and saying so when there was nothing to do
    before = read_records(out).sort_values("trace_hash").reset_index(drop=True)
    shards = len(shard_paths(out))
    assert f"{out}: {shards} shards" in run_cli("compact", out, check=True).stdout
    assert "already one compacted shard" in run_cli("compact", out, check=True).stdout
    after = read_records(out).sort_values("trace_hash").reset_index(drop=True)
    assert len(shard_paths(out)) == 1 and after.equals(before)
    (tmp_path / "empty").mkdir()
    assert_clean_error(run_cli("compact", str(tmp_path / "empty")), "holds no records")
    assert not list((tmp_path / "empty").iterdir())


@contextlib.contextmanager
def temporary_folder(folder):
    """This process's temporary folder (TMPDIR, and `tempfile`'s cached one) is `folder`."""
    environ = os.environ.get("TMPDIR")
    os.environ["TMPDIR"], tempfile.tempdir = str(folder), None
    try:
        yield
    finally:
        if environ is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = environ
        tempfile.tempdir = None


@pytest.mark.parametrize("args, message", [
    (["collect", "resnet5", "--out", "{out}"], "unknown workload or suite 'resnet5'"),
    (["collect", "dense/m0_n128_k128", "--out", "{out}"], "m must be an integer of at least 1"),
    (["collect", "generated[5000:]", "--out", "{out}"], "an empty slice"),
    (["collect", "tiny", "--out", "{out}", "--target", '{"kind": "llvm"'],
     "target is not valid JSON"),
    (["collect", "tiny", "--out", "{out}", "--target", '{"kind": "nosuch"}'],
     "malformed target"),
    (["collect", "tiny", "--out", "{out}", "--tracker", "127.0.0.1:9", "--key", "k"],
     "is unreachable"),
    (["collect", "tiny", "--out", "{out}", "--tracker", "nohostport"], "is not host:port"),
    pytest.param(["collect", "tiny", "--out", "{out}", "--target", "nvidia/nvidia-a100"],
                 "this host has none: run datagen on the GPU host itself", marks=needs_no_gpu),
    (["collect", "tiny", "--out", "{blocked}/sub"], "cannot write"),
    (["collect", "tiny", "--out", "{out}", "--evolve-fraction", "1.5"],
     "--evolve-fraction is a share of each round, from 0 to 1, not 1.5"),
    (["collect", "tiny", "--out", "{out}", "--repeat", "0"], "--repeat must be at least 1"),
    (["collect", "tiny", "--out", "{out}", "--threads", "0"], "--threads must be at least 1"),
    (["collect", "tiny", "--out", "{out}", "--run-timeout", "nan"],
     "--run-timeout must be a positive number of seconds"),
    (["stats", "{out}/missing"], "does not exist"),
    (["compact", "{out}/missing"], "does not exist"),
    (["compact", "{blocked}"], "is a file, not a folder"),
    (["stats", "{blocked}"], "is a file, not a folder"),
    (["runtime-bundle", "{blocked}/tvm.tar.xz"], "cannot write"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    blocked = tmp_path / "a-file"
    blocked.write_text("x")
    args = [a.replace("{out}", str(tmp_path / "ds")).replace("{blocked}", str(blocked))
            for a in args]
    scratch = tmp_path / "tmp"  # the command's temporary folder: left as it was
    scratch.mkdir()
    with temporary_folder(scratch):
        assert_clean_error(run_cli(*args), message)
    assert not list(scratch.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "tmp"]  # nothing written


def test_a_dataset_of_another_target_is_refused_and_kept(tmp_path):
    """A host with another CPU (or another --target) must not start every workload again
    beside the records already there: a dataset holds one target."""
    out = str(tmp_path / "ds")
    run_cli("collect", DENSE, "--out", out, "--per-workload", "2", "--batch-size", "2",
            "--repeat", "2", "--min-repeat-ms", "2", "--no-progress", check=True)
    before = read_records(out)
    host = json.loads(before.target.iloc[0])["mcpu"]
    other = "skylake" if host != "skylake" else "znver3"
    proc = run_cli("collect", DENSE, "--out", out, "--per-workload", "4", "--no-progress",
                   "--target", json.dumps({"kind": "llvm", "mcpu": other}))
    assert_clean_error(proc, f"holds records measured for llvm -mcpu={host}, not llvm "
                             f"-mcpu={other}")
    assert "--out" in proc.stderr
    assert read_records(out).equals(before) and len(shard_paths(out)) == 1


def test_bad_shards_stop_collection_and_are_kept(tmp_path):
    out = tmp_path / "ds"
    out.mkdir()
    bad = out / "shard-old-00001.parquet"
    bad.write_bytes(b"garbage")
    proc = run_cli("collect", "tiny", "--out", str(out), "--no-progress")
    assert_clean_error(proc, "not a readable record shard")
    assert bad.read_bytes() == b"garbage" and len(list(out.iterdir())) == 2  # shard and lock


def test_noisy_candidates_are_measured_twice_and_labelled_by_the_steadier(tmp_path):
    import statistics

    out = str(tmp_path / "ds")
    # a tiny --retry-cv: every candidate counts as noisy, so each ok one is measured twice
    run_cli("collect", DENSE, "--out", out, "--per-workload", "4", "--batch-size", "4",
            "--repeat", "3", "--min-repeat-ms", "2", "--retry-cv", "1e-9", "--no-progress",
            check=True)
    ok = read_records(out).query("status == 'ok'")
    assert len(ok) >= 3
    for row in ok.itertuples():
        first, second = list(row.latencies), list(row.retry_latencies)
        assert len(first) == 3 and len(second) == 3

        def cv(m):
            return statistics.pstdev(m) / statistics.fmean(m)

        steadier = min((first, second), key=cv)
        assert row.latency_median == statistics.median(steadier)
        assert abs(row.latency_cv - cv(steadier)) < 1e-12
    # the default threshold leaves steady candidates measured once
    out2 = str(tmp_path / "ds2")
    run_cli("collect", DENSE, "--out", out2, "--per-workload", "4", "--batch-size", "4",
            "--repeat", "3", "--min-repeat-ms", "2", "--retry-cv", "100", "--no-progress",
            check=True)
    assert read_records(out2).retry_latencies.map(len).eq(0).all()


def test_overlapped_collection_records_what_one_round_at_a_time_records(tmp_path):
    """`--overlap on` draws and builds the next wave of rounds while this one is measured;
    every round is still drawn from its own workload's committed rounds, so with random rounds
    (deterministic given the seed) the records are those of one round at a time, whether the
    waves are drawn in worker processes or in the collector's own thread. With evolved rounds,
    every parent is a measured schedule of an earlier round of the same workload."""
    conv = "conv2d/h8_w8_ci8_co8_k3_stride1_pad1"
    common = [DENSE, SOFTMAX, conv, "--per-workload", "4", "--batch-size", "2", "--repeat", "2",
              "--min-repeat-ms", "2", "--no-progress"]

    def collected(name: str, *extra: str):
        out = str(tmp_path / name)
        proc = run_cli("collect", *common, "--out", out, *extra, check=True)
        frame = read_records(out)
        assert len(frame) == 12 and frame.trace_hash.is_unique
        assert frame.groupby("workload_key").size().to_dict() == {DENSE: 4, SOFTMAX: 4, conv: 4}
        return proc, frame

    def rounds(frame) -> set:
        return set(zip(frame.workload_key, frame["round"], frame.trace_hash, frame.origin))

    random_only = ["--evolve-fraction", "0"]
    proc, serial = collected("serial", *random_only, "--overlap", "off")
    assert "beside running" not in proc.stdout
    proc, in_processes = collected("processes", *random_only, "--overlap", "on",
                                   "--draw-workers", "2")
    assert "(drawing and building beside running)" in proc.stdout
    assert re.search(r"drawing \d+% .*; measuring waited \d+% of it", proc.stdout)
    _, in_thread = collected("thread", *random_only, "--overlap", "on", "--draw-workers", "1")
    assert rounds(in_processes) == rounds(serial) == rounds(in_thread)
    assert set(serial["round"]) == {0, 1}

    _, evolved = collected("evolved", "--overlap", "on", "--draw-workers", "2")
    children = evolved[evolved.origin == "evolved"]
    assert len(children) > 0
    for child in children.itertuples():
        parent = evolved[(evolved.workload_key == child.workload_key)
                         & (evolved.trace_hash == child.parent_hash)]
        assert len(parent) == 1 and parent["round"].iloc[0] < child.round
        assert parent.status.iloc[0] == "ok"


@pytest.mark.parametrize("overlap", ["off", "on"])
def test_sigint_stops_after_the_program_being_measured_and_resume_finishes(tmp_path, overlap):
    """SIGINT (or SIGTERM) to the collector alone, not its process group: it stops after the
    program being measured, exit status 130, every committed round kept and no worker process
    left behind, and no built program either (with overlap, the next wave is building when
    the stop comes); the same command then finishes without duplicates. (TVM's runner would
    turn a KeyboardInterrupt raised while it waits into another error, or swallow it.)"""
    import psutil

    out = str(tmp_path / "ds")
    scratch = tmp_path / "tmp"  # the collector's temporary folder
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    args = ["collect", DENSE, SOFTMAX, "--out", out, "--per-workload", "8", "--batch-size",
            "2", "--repeat", "2", "--min-repeat-ms", "2", "--no-progress", "--overlap", overlap,
            "--draw-workers", "2"]
    proc = subprocess.Popen([sys.executable, "-m", "datagen.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while len(shard_paths(out)) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1][-3000:]  # still collecting
    workers = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "every committed round is kept" in stderr and "Traceback" not in stderr
    _, alive = psutil.wait_procs(workers, timeout=15)  # the last ones are ending
    assert not [w for w in alive if w.status() != psutil.STATUS_ZOMBIE], \
        [w.cmdline() for w in alive]
    assert not list(scratch.rglob("*")), list(scratch.rglob("*"))
    before = read_records(out)
    assert 0 < len(before) < 16 and len(before) % 2 == 0  # whole rounds only
    run_cli(*args, check=True)
    after = read_records(out)
    assert after.groupby("workload_key").size().to_dict() == {DENSE: 8, SOFTMAX: 8}
    assert after.trace_hash.is_unique and set(before.trace_hash) <= set(after.trace_hash)


# The device is lost once the first round is committed: from then on the runner is sent to
# this host's GPU, which is not there (no GPU in CI), as a measurer whose GPU went away would
# be; the real runner fails, and the measurer's own check finds the device gone.
LOSE_THE_GPU = """
import sys
from datagen import cli, measure, records
real_run, out = measure.Measurer._run, sys.argv[sys.argv.index("--out") + 1]

def _run(self, *args):
    if records.shard_paths(out):
        self.device_type = "cuda"
    return real_run(self, *args)

measure.Measurer._run = _run
sys.exit(cli.main(sys.argv[1:]))
"""


@needs_no_gpu
def test_a_gpu_lost_mid_run_is_one_line_and_keeps_the_rounds_before(tmp_path):
    out = str(tmp_path / "ds")
    args = [DENSE, "--out", out, "--per-workload", "12", "--batch-size", "4", "--repeat", "2",
            "--min-repeat-ms", "2", "--no-progress"]
    proc = subprocess.run([sys.executable, "-c", LOSE_THE_GPU, "collect", *args],
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_SEC)
    assert_clean_error(proc, "the cuda device disappeared while measuring; every round "
                             "committed before is kept")
    frame = read_records(out)
    assert len(frame) == 4 and set(frame["round"]) == {0}  # of the round in flight, nothing
    run_cli("collect", *args, check=True)  # the device is back: the same command goes on
    after = read_records(out)
    assert len(after) == 12 and after.trace_hash.is_unique
    assert set(frame.trace_hash) < set(after.trace_hash)
