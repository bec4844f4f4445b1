"""Measurement through a real RPC tracker and server on loopback."""

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from conftest import (CLI_TIMEOUT_SEC, assert_clean_error, kill_tree, loopback_rpc, needs_no_gpu,
                      run_cli)
from datagen.records import read_records, shard_paths

pytestmark = pytest.mark.slow


def test_collect_through_rpc_tracker(rpc_tracker, tmp_path):
    out = str(tmp_path / "ds")
    proc = run_cli("collect", "dense/m32_n32_k32", "--out", out, "--per-workload", "4",
                   "--batch-size", "4", "--tracker", rpc_tracker["address"], "--key",
                   rpc_tracker["key"], "--no-progress", check=True)
    assert "committed 4 candidates" in proc.stdout
    frame = read_records(out)
    assert (frame.status == "ok").sum() >= 3
    assert (frame.cpu_model == "rpc:loopback-cpu").all()
    # the device as the server's runtime describes it (its CPU's model is that host's to say)
    assert [json.loads(d) for d in frame.device.unique()] == [{"kind": "cpu",
                                                             "rpc_key": "loopback-cpu"}]
    assert all(len(lat) == 5 for lat in frame[frame.status == "ok"].latencies)


def test_tracker_without_the_key(rpc_tracker, tmp_path):
    proc = run_cli("collect", "tiny", "--out", str(tmp_path / "ds"), "--tracker",
                   rpc_tracker["address"], "--key", "no-such-device")
    assert_clean_error(proc, "has no server with key 'no-such-device'")


@needs_no_gpu
def test_a_gpu_target_through_servers_without_that_gpu_is_one_line(rpc_tracker, tmp_path):
    """The servers' device is asked for before anything is built: a CUDA target through a
    key whose server has no CUDA device is refused, and nothing is written (before, every
    candidate was committed as a failed run)."""
    out = str(tmp_path / "ds")
    proc = run_cli("collect", "dense/m32_n32_k32", "--out", out, "--target",
                   "nvidia/nvidia-h100", "--per-workload", "4", "--batch-size", "4",
                   "--tracker", rpc_tracker["address"], "--key", rpc_tracker["key"])
    assert_clean_error(proc, "the server of key 'loopback-cpu' has no cuda device")
    assert not os.path.exists(out) or not shard_paths(out)


def test_a_server_lost_mid_run_is_one_line_and_keeps_the_rounds_before(rpc_tracker, tmp_path):
    """The server is killed once the first round is committed. The run in flight (or the next
    one, whose request for a session would wait for ever) fails, the tracker is asked again
    for the device, none answers within the run timeout: one line, exit status 2, the
    committed round kept and no failure recorded for the lost device; with a server back,
    the same command (another tracker's address) finishes the collection."""
    out = str(tmp_path / "ds")
    args = ["collect", "dense/m32_n32_k32", "--out", out, "--per-workload", "12",
            "--batch-size", "4", "--repeat", "2", "--min-repeat-ms", "2", "--run-timeout", "4",
            "--no-progress"]
    with loopback_rpc() as rpc:
        proc = subprocess.Popen([sys.executable, "-m", "datagen.cli", *args, "--tracker",
                                 rpc["address"], "--key", rpc["key"]],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + CLI_TIMEOUT_SEC
        while not shard_paths(out) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        kill_tree(rpc["procs"][1])  # the server, not the tracker
        stdout, stderr = proc.communicate(timeout=120)
    assert_clean_error(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr),
                       "the cpu device disappeared while measuring (RPC tracker at")
    frame = read_records(out)
    assert len(frame) == 4 and set(frame["round"]) == {0} and (frame.status == "ok").all()
    run_cli(*args, "--tracker", rpc_tracker["address"], "--key", rpc_tracker["key"], check=True)
    after = read_records(out)
    assert len(after) == 12 and after.trace_hash.is_unique
    assert set(frame.trace_hash) < set(after.trace_hash)


def test_loopback_rpc_stops_tracker_server_and_their_workers(tmp_path):
    with loopback_rpc() as rpc:
        run_cli("collect", "dense/m32_n32_k32", "--out", str(tmp_path / "ds"), "--per-workload",
                "2", "--batch-size", "2", "--tracker", rpc["address"], "--key", rpc["key"],
                "--no-progress", check=True)  # a session makes the server start workers
        roots = [psutil.Process(p.pid) for p in rpc["procs"]]
        family = roots + [c for p in roots for c in p.children(recursive=True)]
        assert len(family) > len(roots) and all(p.is_running() for p in family)
    alive = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, alive
