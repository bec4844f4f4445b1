"""Measurement through a real RPC tracker and server on loopback."""

import psutil
import pytest

from conftest import assert_clean_error, loopback_rpc, run_cli
from datagen.records import read_records

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
    assert all(len(lat) == 5 for lat in frame[frame.status == "ok"].latencies)


def test_tracker_without_the_key(rpc_tracker, tmp_path):
    proc = run_cli("collect", "tiny", "--out", str(tmp_path / "ds"), "--tracker",
                   rpc_tracker["address"], "--key", "no-such-device")
    assert_clean_error(proc, "has no server with key 'no-such-device'")


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
