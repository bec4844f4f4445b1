"""bench/collect_vs_tune_tir.py: tune_tir stopped at its cap yields a bound, not a crash."""

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import CLI_TIMEOUT_SEC, bench_module

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "collect_vs_tune_tir.py")


def load_bench():
    return bench_module("collect_vs_tune_tir.py")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie awaits its (killed) parent's reaper
        return f.read().split(")")[-1].split()[0] != "Z"


def test_the_cap_stops_the_command_and_its_children(tmp_path):
    bench = load_bench()
    pid_file = tmp_path / "child.pid"
    script = ("import subprocess, sys, time; "
              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              f"open({str(pid_file)!r}, 'w').write(str(p.pid)); print('started', flush=True); "
              "time.sleep(60)")
    start = time.perf_counter()
    wall, out, capped = bench.timed([sys.executable, "-c", script], cap=3)
    assert capped and 3 <= wall < 30 and time.perf_counter() - start < 30
    assert "started" in out
    child = int(pid_file.read_text())
    for _ in range(50):
        if not alive(child):
            break
        time.sleep(0.1)
    assert not alive(child), "the command's child outlived the cap"
    wall, out, capped = bench.timed([sys.executable, "-c", "print('done')"], cap=30)
    assert not capped and out.strip() == "done"


def test_tuning_records_counts_what_was_written(tmp_path):
    bench = load_bench()
    assert bench.tuning_records(str(tmp_path)) == 0
    for i, n in enumerate((3, 2)):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "database_tuning_record.json").write_text("[1]\n" * n + "\n")
    assert bench.tuning_records(str(tmp_path)) == 5


@pytest.mark.slow
def test_a_capped_tune_tir_gives_a_lower_bound_on_the_ratio(tmp_path):
    proc = subprocess.run([sys.executable, BENCH, "dense/m128_n768_k768", "--trials", "2",
                           "--tune-tir-cap", "2", "--out", "r"], capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_SEC, cwd=tmp_path,
                          env={**os.environ, "TVM_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tune_tir stopped at the cap with 0 measured" in proc.stdout
    assert "at most (stopped at the 2 s cap)" in proc.stdout
    ratio = [line for line in proc.stdout.splitlines() if line.startswith("ratio")]
    assert ratio and ">=" in ratio[0]
    result = json.loads((tmp_path / "r" / "result.json").read_text())
    assert result["ratio_is_lower_bound"] and result["runs"][0]["capped"]
    assert result["device"]["kind"] == "cpu" and result["target_ratio"] == 3.0
    assert result["ratio"] == pytest.approx(
        result["median"]["datagen_per_min"] / result["median"]["tune_tir_per_min"])
    run = result["runs"][0]
    # each share of the collection's wall time is printed to a percent, the wall to a tenth
    # of a second: how far the recorded figures may be off
    share_error, wall_error = 0.005, 0.05
    # on the CPU one round at a time: drawing, building and running take turns, so their
    # shares add up to at most the whole, and no waiting is recorded
    shares = run["build_share"] + run["run_share"] + run["draw_share"]
    assert 0 < shares <= 1 + 3 * share_error and run["idle_share"] is None
    # running is the time the candidates' own records say they were measured
    assert run["run_share"] == pytest.approx(run["run_secs_sum"] / run["datagen_wall"],
                                             abs=share_error + wall_error / run["datagen_wall"])
    assert run["build_secs_median"] > 0 and 0 < run["run_secs_median"] <= run["run_secs_sum"]
    assert "drawing" in proc.stdout and "measuring waited" not in proc.stdout

    # run again: the finished run is read back, not made again
    again = subprocess.run([sys.executable, BENCH, "dense/m128_n768_k768", "--trials", "2",
                            "--tune-tir-cap", "2", "--out", "r"], capture_output=True,
                           text=True, timeout=CLI_TIMEOUT_SEC, cwd=tmp_path,
                           env={**os.environ, "TVM_NUM_THREADS": "1"})
    assert again.returncode == 0, again.stderr[-3000:]
    assert "run 1 read back from" in again.stdout
    assert json.loads((tmp_path / "r" / "result.json").read_text())["runs"] == result["runs"]
    other = subprocess.run([sys.executable, BENCH, "dense/m128_n768_k768", "--trials", "3",
                            "--tune-tir-cap", "2", "--out", "r"], capture_output=True,
                           text=True, timeout=CLI_TIMEOUT_SEC, cwd=tmp_path,
                           env={**os.environ, "TVM_NUM_THREADS": "1"})
    assert other.returncode == 2 and "made with other settings (trials)" in other.stderr
    assert "Traceback" not in other.stderr
