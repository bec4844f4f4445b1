"""Benchmark: how long one round of each tuner's search takes, on this CPU, with 1 and N threads.

A tuner's round in MetaSchedule's loop is a search (pick the next candidates), a build and a
measurement. This times the search alone, for any target (a GPU target needs no GPU here:
nothing is built or measured): each tuner's strategy and cost model as the tuning benchmark
makes them (`tuning.tuner.make_search`; bo with `--checkpoint`, the pretrained XGBModel beside
it), `generate_measure_candidates` of a fresh `TuneContext` with --threads threads, --rounds
rounds. Between rounds the strategy is told made-up latencies (random, seeded), so the later
rounds search as after real measurements (bo evolves its best and fits its GP; MetaSchedule's
cost model is not updated: its callbacks are the task scheduler's). Prints each round's wall
and CPU seconds and, from the first two thread counts, the part of a round that did not shrink
with threads (serial = 2 t(2n) - t(n) for thread counts n and 2n; Amdahl's law).

    python bench/search_time.py [--target nvidia/nvidia-h100] [--threads 1 2] [--rounds 2]
                                [--tuners bo ms-default ms-xgb-pretrained] [WORKLOAD]

Why it matters: the serial part of one tuner's round leaves cores idle while the others wait
their turn, which is what `bench/tuning_vs_metaschedule.py --jobs` fills on a GPU host.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT_WORKLOAD = "dense/m197_n2304_k768"


def one(args) -> None:
    """In a process of its own (the runtime's thread count is read at start-up): time the
    rounds of each tuner and print one line per round."""
    from costmodel import checkpoints
    from datagen.suites import resolve
    from datagen.tvm_env import load_tensor_intrinsics, make_target
    from costmodel.pretrained_xgb import pretrained_xgb_file
    from tuning.tuner import SearchInputs, load_predictor

    target = make_target(args.target)
    load_tensor_intrinsics(target.kind.name)
    (w,) = resolve([args.workload])
    ckpt = args.checkpoint or checkpoints.for_target(target.kind.name)
    predictor = load_predictor(ckpt, target.kind.name)
    with tempfile.TemporaryDirectory() as cache:  # where one is fitted if none is shipped
        xgb = pretrained_xgb_file(ckpt, predictor.meta, cache) \
            if "ms-xgb-pretrained" in args.tuners else None
        search(args, target, w, SearchInputs(predictor, pretrained_xgb=xgb))


def search(args, target, w, inputs) -> None:
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from tuning.tuner import make_search

    rng = random.Random(0)
    for tuner in args.tuners:
        strategy, cost_model = make_search(tuner, inputs)
        if isinstance(cost_model, str):
            cost_model = ms.CostModel.create(cost_model)
        ctx = ms.TuneContext(mod=w.mod, target=target, space_generator="post-order-apply",
                             search_strategy=strategy, task_name=w.key,
                             num_threads=args.one, rand_state=0)
        ctx.pre_tuning(max_trials=8 * (args.rounds + 1), num_trials_per_iter=8,
                       design_spaces=ctx.generate_design_space(),
                       database=ms.database.MemoryDatabase(), cost_model=cost_model)
        for r in range(args.rounds):
            before = resource.getrusage(resource.RUSAGE_SELF)
            start = time.perf_counter()
            cands = ctx.generate_measure_candidates() or []
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_SELF)
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            print(f"ROUND {tuner} {args.one} {r} {len(cands)} {wall:.2f} {cpu:.2f}", flush=True)
            ctx.notify_runner_results(cands, [RunnerResult([rng.uniform(1e-5, 1e-4)], None)
                                              for _ in cands])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", nargs="?", default=DEFAULT_WORKLOAD)
    parser.add_argument("--target", default="nvidia/nvidia-h100",
                        help="TVM target as JSON or a tag (default: %(default)s)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tuners", nargs="+", default=["bo", "ms-default", "ms-xgb-pretrained"])
    parser.add_argument("--checkpoint", help="bo's model (default: the shipped one for the "
                        "target's kind, with its pretrained XGBModel beside it)")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    from datagen.errors import UserError
    from tuning.tuner import TUNERS

    try:
        for tuner in args.tuners:
            TUNERS.get(tuner)
    except UserError as err:
        raise SystemExit(f"error: {err}") from None
    if args.one:
        one(args)
        return
    rows: dict[tuple[str, int], list[float]] = {}
    for threads in args.threads:
        cmd = [sys.executable, __file__, args.workload, "--target", args.target, "--rounds",
               str(args.rounds), "--tuners", *args.tuners, "--one", str(threads)]
        if args.checkpoint:
            cmd += ["--checkpoint", args.checkpoint]
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              env={**os.environ, "TVM_NUM_THREADS": str(threads)})
        if proc.returncode != 0:
            sys.exit(f"search_time: {threads} thread(s) failed:\n{proc.stderr[-3000:]}")
        for line in proc.stdout.splitlines():
            if line.startswith("ROUND "):
                _, tuner, n, r, cands, wall, cpu = line.split()
                print(f"{tuner:20s} {n:>2s} thread(s), round {r}: {cands} candidates, "
                      f"wall {float(wall):6.1f} s, CPU {float(cpu):6.1f} s", flush=True)
                rows.setdefault((tuner, int(n)), []).append(float(wall))
    if len(args.threads) >= 2 and args.threads[1] == 2 * args.threads[0]:
        n = args.threads[0]
        print(f"\nmedian round, {n} and {2 * n} thread(s), and the part that did not shrink:")
        for tuner in args.tuners:
            t1 = statistics.median(rows[(tuner, n)])
            t2 = statistics.median(rows[(tuner, 2 * n)])
            print(f"{tuner:20s} {t1:6.1f} s, {t2:6.1f} s; serial about {max(0.0, 2 * t2 - t1):5.1f} s")


if __name__ == "__main__":
    main()
