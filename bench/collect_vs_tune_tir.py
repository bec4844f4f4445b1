"""Benchmark: measured candidates per minute, `datagen collect` against MetaSchedule `tune_tir`.

Both collect the same number of candidates of the same workloads on this machine, one after
the other in one run, each in a fresh process (so both pay TVM's start-up), with the same
runtime thread count and the same --target (this CPU by default; a GPU target measures on
this host's GPU, where datagen overlaps drawing and building with measuring).
`tune_tir` uses its default builder, runner, search and cost model. Prints candidates per
minute for each, their ratio, and the share of datagen's collection wall time spent building
and running (over 100% where they overlap). Repeat with --runs N for a median.

`tune_tir` can take far longer than datagen (its default builder starts a new worker pool per
batch). With --tune-tir-cap SECONDS it is stopped at that wall time: its whole run would then have
taken longer than the cap, so its rate is below (workloads x trials) / cap, and the ratio printed
is a lower bound (the candidates it had measured by then are shown too). With --out, each run
is kept in DIR as soon as it is finished (`datagen.grid`: a stopped benchmark, run again with
the same settings, reads those back and makes only the rest), and the runs, their medians, the
ratio and the device are written to DIR/result.json.

    python bench/collect_vs_tune_tir.py [--trials 64] [--runs 1] [--target TAG]
        [--tune-tir-cap SECONDS] [--out DIR] [WORKLOAD ...]
    python bench/collect_vs_tune_tir.py --target nvidia/nvidia-h100   # on the GPU host
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT_WORKLOADS = ["dense/m128_n768_k768", "conv2d/h28_w28_ci128_co128_k3_stride1_pad1"]
TARGET_SPEEDUP = {"cpu": 3.0, "gpu": 10.0}  # the CPU issue's target, the GPU issue's
TARGET_BUSY_SHARE = 0.80


def tune_tir_worker(workloads: list[str], trials: int, work_dir: str,
                    target_arg: str | None) -> None:
    """Runs in its own process: tune each workload with MetaSchedule's defaults."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from datagen.suites import resolve
    from datagen.tvm_env import make_target

    target = make_target(target_arg)
    measured = 0
    for i, w in enumerate(resolve(workloads)):
        wd = os.path.join(work_dir, str(i))
        ms.tune_tir(w.mod, target, wd, max_trials_global=trials, seed=0)
        measured += len(JSONDatabase(work_dir=wd).get_all_tuning_records())
    print(f"measured {measured}")


def timed(cmd: list[str], cap: float | None = None) -> tuple[float, str, bool]:
    """Run cmd in its own process group: (wall seconds, stdout, stopped at the cap)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=cap)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its builder and runner workers too
        out, err = proc.communicate()
        return time.perf_counter() - start, out, True
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd[:4])} failed:\n{err[-3000:]}")
    return wall, out, False


def tuning_records(work_dir: str) -> int:
    """Records in the JSON databases under work_dir (one line each), as far as written."""
    n = 0
    for path in glob.glob(os.path.join(work_dir, "*", "database_tuning_record.json")):
        with open(path, encoding="utf-8") as f:
            n += sum(1 for line in f if line.strip())
    return n


def per_candidate(dataset: str) -> dict:
    """From datagen's records: the median seconds one candidate took to build and to measure
    (load, warm-up, repeats, a retry), and the sum of the latter."""
    from datagen.records import read_records

    frame = read_records(dataset, ["build_secs", "run_secs"])
    return {"build_secs_median": float(frame.build_secs.median()),
            "run_secs_median": float(frame.run_secs.median()),
            "run_secs_sum": float(frame.run_secs.sum())}


def one_run(workloads: list[str], trials: int, target: str | None,
            cap: float | None = None) -> dict:
    """One run of each collector, one after the other: their rates and where datagen's time
    went. Both use the runtime threads `compare` set (TVM_NUM_THREADS)."""
    env_threads = os.environ["TVM_NUM_THREADS"]
    targeted = ["--target", target] if target else []
    with tempfile.TemporaryDirectory() as tmp:
        wall_d, out, _ = timed([sys.executable, "-m", "datagen.cli", "collect", *workloads,
                                "--out", os.path.join(tmp, "ds"), "--per-workload", str(trials),
                                "--no-progress", "--threads", env_threads, *targeted])
        n_d = int(re.search(r"committed (\d+) candidates", out).group(1))
        shares = re.search(r"building (\d+)%, running (\d+)%, drawing (\d+)%", out)
        idle = re.search(r"measuring waited (\d+)%", out)
        inner_wall = float(re.search(r"wall ([\d.]+) s", out).group(1))
        busy = (int(shares.group(1)) + int(shares.group(2))) / 100
        each = per_candidate(os.path.join(tmp, "ds"))
        print(f"datagen: {n_d} candidates in {wall_d:.1f} s ({60 * n_d / wall_d:.1f}/min)",
              flush=True)
        tune_dir = os.path.join(tmp, "tune")
        wall_t, out, capped = timed([sys.executable, __file__, "--tune-tir-worker", "--trials",
                                     str(trials), "--work-dir", tune_dir, *targeted,
                                     *workloads], cap)
        n_t = tuning_records(tune_dir) if capped else int(re.search(r"measured (\d+)",
                                                                     out).group(1))
    # stopped at the cap, its whole run (every workload's trials) takes longer than wall_t
    n_rate = len(workloads) * trials if capped else n_t
    return {"datagen_per_min": 60 * n_d / wall_d, "tune_tir_per_min": 60 * n_rate / wall_t,
            "n_datagen": n_d, "n_tune_tir": n_t, "wall_datagen": wall_d, "wall_tune_tir": wall_t,
            "capped": capped, "busy_share": busy, "busy_share_process": busy * inner_wall / wall_d,
            # where datagen's collection wall time went (shares overlap where it overlaps)
            "datagen_wall": inner_wall, "build_share": int(shares.group(1)) / 100,
            "run_share": int(shares.group(2)) / 100, "draw_share": int(shares.group(3)) / 100,
            "idle_share": int(idle.group(1)) / 100 if idle else None, **each}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", default=DEFAULT_WORKLOADS)
    parser.add_argument("--trials", type=int, default=64, help="candidates per workload")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--target", help="TVM target as JSON or a tag (default: this CPU)")
    parser.add_argument("--tune-tir-cap", type=float, metavar="SECONDS",
                        help="stop tune_tir after this wall time; the ratio is then a lower "
                        "bound (default: no cap)")
    parser.add_argument("--out", metavar="DIR", help="also write result.json there")
    parser.add_argument("--tune-tir-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--work-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tune_tir_worker:
        tune_tir_worker(args.workloads, args.trials, args.work_dir, args.target)
        return
    from datagen.errors import run_command

    sys.exit(run_command("collect_vs_tune_tir", compare, args))


def compare(args) -> int:
    """Both collectors' runs, each kept in --out as it finishes (read back by a later run with
    the same settings), their medians and ratio printed and written to result.json."""
    from datagen.errors import output_folder
    from datagen.grid import Grid
    from datagen.measure import local_device
    from datagen.tvm_env import make_target

    if args.out:
        output_folder(args.out, create=False)  # before anything runs
    target_kind = make_target(args.target).kind.name
    kind = "cpu" if target_kind == "llvm" else "gpu"
    threads = os.environ.setdefault("TVM_NUM_THREADS", str(len(os.sched_getaffinity(0))))
    grid = args.out and Grid(args.out, {"workloads": args.workloads, "trials": args.trials,
                                        "target": args.target, "threads": threads,
                                        "tune_tir_cap": args.tune_tir_cap})
    runs = []
    for i in range(args.runs):
        cell = f"run-{i + 1}.json"
        run = grid and grid.read(cell)
        if run is None:
            run = one_run(args.workloads, args.trials, args.target, args.tune_tir_cap)
            if grid:
                grid.write(cell, run)
        else:
            print(f"run {i + 1} read back from {grid.path(cell)}")
        runs.append(run)
        stopped = (f"stopped at the cap with {run['n_tune_tir']} measured: below "
                   if run["capped"] else f"{run['n_tune_tir']} in {run['wall_tune_tir']:.1f} s (")
        print(f"run {i + 1}: datagen {run['n_datagen']} candidates in {run['wall_datagen']:.1f} s"
              f" ({run['datagen_per_min']:.1f}/min); tune_tir {stopped}"
              f"{run['tune_tir_per_min']:.1f}/min{'' if run['capped'] else ')'}", flush=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]
           if k != "capped" and runs[0][k] is not None}
    ratio = med["datagen_per_min"] / med["tune_tir_per_min"]
    bound = any(r["capped"] for r in runs)
    print(f"\nworkloads: {', '.join(args.workloads)}; {args.trials} candidates each; "
          f"target {args.target or 'this CPU'}; median of {args.runs} run(s)")
    print(f"datagen collect : {med['datagen_per_min']:7.1f} measured candidates/min")
    print(f"tune_tir        : {med['tune_tir_per_min']:7.1f} measured candidates/min"
          + (f" at most (stopped at the {args.tune_tir_cap:g} s cap)" if bound else ""))
    print(f"ratio           : {'>=' if bound else '  '}{ratio:6.2f}x "
          f"(target >= {TARGET_SPEEDUP[kind]:g}x)")
    print(f"datagen building+running: {100 * med['busy_share']:.0f}% of collection wall time, "
          f"{100 * med['busy_share_process']:.0f}% of the whole process including start-up "
          f"(target >= {100 * TARGET_BUSY_SHARE:.0f}%)")
    print(f"datagen's {med['datagen_wall']:.1f} s of collection: building "
          f"{100 * med['build_share']:.0f}%, running {100 * med['run_share']:.0f}%, drawing "
          f"{100 * med['draw_share']:.0f}%" + (
              f"; measuring waited {100 * med['idle_share']:.0f}% of it for drawing and "
              "building" if "idle_share" in med else ""))
    print(f"per candidate (median): building {med['build_secs_median']:.2f} s, measuring "
          f"{med['run_secs_median']:.3f} s ({med['run_secs_sum']:.1f} s measuring in all)")
    if grid:
        grid.write("result.json", {
            "workloads": args.workloads, "trials": args.trials,
            "target": args.target or "this CPU", "device": local_device(target_kind),
            "tune_tir_cap": args.tune_tir_cap, "runs": runs, "median": med, "ratio": ratio,
            "ratio_is_lower_bound": bound, "target_ratio": TARGET_SPEEDUP[kind]})
    return 0


if __name__ == "__main__":
    main()
