"""bench/matmul_vs_library.py: a really tuned matmul, checked against float64 and timed beside
torch.matmul on the same device (here the CPU)."""

import json
import subprocess

import pytest

from conftest import GPU_HERE, assert_clean_error, run_bench

PROG = "matmul_vs_library"


def run(*args: str, cwd, isolated: bool = False) -> subprocess.CompletedProcess:
    return run_bench("matmul_vs_library.py", *args, cwd=cwd, isolated=isolated)


@pytest.mark.slow
def test_a_tuned_matmul_is_checked_and_timed_beside_the_library(tmp_path):
    out = tmp_path / "matmul"
    proc = run("--size", "64", "--tuner", "random", "--trials", "8", "--rounds", "3",
               "--threads", "1", "--out", str(out), cwd=tmp_path, isolated=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["size"] == 64 and result["trials"] == 8 and result["threads"] == 1
    assert result["device"]["kind"] == "cpu" and "torch.matmul" in result["library"]["what"]
    for side in ("tuned", "library"):
        r = result[side]
        assert len(r["runs"]) == 3 and r["p25"] <= r["median"] <= r["p75"]
        assert 0 < r["median"] < 0.1
        assert r["gflops"] == pytest.approx(2 * 64 ** 3 / r["median"] / 1e9)
    assert result["tuned"]["relative_error"] < 1e-5  # fp32 sums of 64 terms
    assert result["tuned_over_library"] == pytest.approx(
        result["tuned"]["median"] / result["library"]["median"])
    assert "tuned / library" in proc.stdout and "GFLOP/s" in proc.stdout

    # run again: the finished tuning is read back, not made again; the library is timed anew
    again = run("--size", "64", "--tuner", "random", "--trials", "8", "--rounds", "3",
                "--threads", "1", "--out", str(out), cwd=tmp_path, isolated=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "read back from" in again.stdout
    second = json.loads((out / "result.json").read_text())
    assert second["tuned"]["runs"] == result["tuned"]["runs"]
    assert second["tuned"]["trace"] == result["tuned"]["trace"]
    assert_clean_error(run("--size", "64", "--tuner", "random", "--trials", "9", "--rounds", "3",
                           "--threads", "1", "--out", str(out), cwd=tmp_path),
                       "was made with other settings (trials)", prog=PROG)


def test_bad_input_is_one_line_before_any_tuning(tmp_path):
    assert_clean_error(run("--size", "8", "--out", str(tmp_path / "a"), cwd=tmp_path),
                       "--size must be at least 16", prog=PROG)
    assert_clean_error(run("--tuner", "nope", "--out", str(tmp_path / "b"), cwd=tmp_path),
                       "unknown tuner", prog=PROG)
    if not GPU_HERE:  # where a GPU is, this is the benchmark itself
        assert_clean_error(run("--target", "nvidia/nvidia-h100", "--out",
                                     str(tmp_path / "c"), cwd=tmp_path),
                           "this torch sees no GPU", prog=PROG)
    (tmp_path / "d").write_text("x")  # result.json would come after tuning and measuring
    assert_clean_error(run("--out", str(tmp_path / "d" / "sub"), cwd=tmp_path),
                       "is a file, not a folder", prog=PROG)
    assert not any((tmp_path / d).exists() for d in "abc")
