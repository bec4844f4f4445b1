"""Benchmark: scoring speed of our featuriser + model against PerStoreFeature + XGBModel.

Both score the same 512 sampled candidates of a ResNet-50 conv2d, starting from scheduled
programs (featurisation included, no caches), in one run, each with all the machine's cores;
medians of --runs repeats.
The XGBModel is first trained on measured records of the dataset (its scoring cost does not
depend on how well it was trained).

    python bench/inference_vs_xgb.py [--checkpoint checkpoints/graphsage-v3.ckpt] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

WORKLOAD = "conv2d/h56_w56_ci64_co64_k3_stride1_pad1"
NUM_CANDIDATES = 512
XGB_TRAIN_RECORDS = 256


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", default=None,
                        help="default: the shipped CPU model (tune's default for llvm)")
    parser.add_argument("--dataset", default="data/llvm-full")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from costmodel import checkpoints

    ckpt = args.checkpoint or checkpoints.for_target("llvm")

    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from costmodel.predictor import CostModelPredictor
    from datagen.records import read_records
    from datagen.sampler import ScheduleSampler
    from datagen.suites import resolve
    from datagen.tvm_env import make_target
    from costmodel.store_models import fit_xgb

    target = make_target(None)
    (workload,) = resolve([WORKLOAD])
    cands = ScheduleSampler(workload.mod, target).random(NUM_CANDIDATES, seed=0, seen=set())
    mods = [c.mod for c in cands]
    frame = read_records(args.dataset)
    frame = frame[(frame.status == "ok") & (frame.workload_key != WORKLOAD)]
    xgb = fit_xgb(frame.sample(min(XGB_TRAIN_RECORDS, len(frame)), random_state=0), target)
    # both use every core: our lowering runs in threads, PerStoreFeature in its thread pool
    cores = len(os.sched_getaffinity(0))
    context = ms.TuneContext(mod=workload.mod, target=target, num_threads=cores)

    ours, theirs = [], []
    for _ in range(args.runs):
        predictor = CostModelPredictor.load(ckpt)  # fresh featuriser: nothing cached
        start = time.perf_counter()
        predictor.predict(mods)
        ours.append(len(mods) / (time.perf_counter() - start))
        start = time.perf_counter()
        measure = [ms.MeasureCandidate(Schedule(m), ArgInfo.from_entry_func(m, True))
                   for m in mods]
        xgb.predict(context, measure)
        theirs.append(len(mods) / (time.perf_counter() - start))
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"{len(mods)} candidates of {WORKLOAD}, median of {args.runs} runs, {cores} cores")
    print(f"ours (lower + graph + GraphSAGE)  : {a:8.1f} candidates/s "
          f"(runs {min(ours):.1f}-{max(ours):.1f})")
    print(f"PerStoreFeature + XGBModel        : {b:8.1f} candidates/s "
          f"(runs {min(theirs):.1f}-{max(theirs):.1f})")
    print(f"ratio                             : {a / b:8.2f}x (target >= 2)")


if __name__ == "__main__":
    main()
