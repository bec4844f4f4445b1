"""Benchmark: do tuned programs run at two speeds on this machine, and which ones?

Builds the finalists (the fastest of the first --budget trials) of the named tuners of a
`tune compare` run folder, then times them interleaved, over and over, for --seconds with the
runtime's threads set to each of --threads: each sample is the median of 3 repeats of at least
20 ms, built as MetaSchedule's builder builds a candidate. Prints the timeline and per program the
10th and 90th percentiles of its samples and their ratio, and how its log-times move with the
other programs' (Pearson correlation): programs that switch together point at the machine, not
at the programs. Writes --out/summary.json (and each thread count's samples beside it) and
timeline.png.

    python bench/two_speeds.py --run bench/results/ood/tuning-v3-ens2-default \\
        --kernels conv2d_transpose/h14_w14_ci144_co72_k2_stride2_pad0 \\
        depthwise_conv2d/h14_w14_c384_k3_stride1_pad1 --tuners bo ms-xgb-pretrained \\
        --threads 2 1 --seconds 60 --out bench/results/ood/two-speeds
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

PERCENTILES = (10, 90)


def timeline(run: str, kernels: list[str], tuners: list[str], budget: int,
             seconds: float) -> dict:
    """{"programs": names, "samples": [[seconds, us per program], ...]} in this process (whose
    TVM_NUM_THREADS is set by the caller)."""
    import numpy as np
    import tvm
    from tvm.s_tir.meta_schedule.builder.local_builder import default_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from datagen.errors import UserError
    from datagen.sampler import replay
    from datagen.tvm_env import make_target
    from datagen.workloads import from_key
    from tuning.runs import finalist

    target, dev = make_target(None), tvm.cpu()
    names, timers = [], []
    for key in kernels:
        workload = from_key(key)
        for tuner in tuners:
            work_dir = os.path.join(run, "runs", key.replace("/", "__"), tuner, "seed0")
            trace = finalist(work_dir, budget)
            if trace is None:
                raise UserError(f"{work_dir}: no measured trial to time; name a `tune compare` "
                                "--out folder whose runs are here")
            mod = replay(workload.mod, trace).mod
            lib = default_build(mod, target, None)  # as measured: weights' layout given
            lib = lib.jit() if hasattr(lib, "jit") else lib
            params = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)["main"].params
            args = [tvm.runtime.tensor(np.random.default_rng(0).uniform(
                size=tuple(int(s) for s in p.shape)).astype(str(p.dtype)), dev) for p in params]
            timers.append((lib.time_evaluator("main", dev, number=1, repeat=3,
                                              min_repeat_ms=20), args))
            names.append(f"{key}:{tuner}")  # a key of summary.json
    samples, start = [], time.time()
    while time.time() - start < seconds:
        row = [float(np.median(f(*a).results)) * 1e6 for f, a in timers]
        samples.append([round(time.time() - start, 2), *[round(x, 2) for x in row]])
        print(f"{samples[-1][0]:7.1f}s " + " ".join(f"{x:9.1f}" for x in row), flush=True)
    return {"programs": names, "samples": samples}


def describe(result: dict) -> dict:
    """Per program its percentiles, their ratio, and its correlation with every program."""
    import numpy as np

    times = np.array([s[1:] for s in result["samples"]])
    logs = np.log(times)
    corr = np.atleast_2d(np.corrcoef(logs.T)) if len(times) > 2 else np.eye(times.shape[1])
    out = {}
    for i, name in enumerate(result["programs"]):
        low, high = (float(np.percentile(times[:, i], p)) for p in PERCENTILES)
        out[name] = {"p10_us": round(low, 1), "p90_us": round(high, 1),
                     "p90_over_p10": round(high / low, 3),
                     "correlation": [round(float(c), 2) for c in np.nan_to_num(corr[i])]}
    return out


def plot(results: dict, path: str) -> None:
    """Each program's samples over time, over its own 10th percentile, a panel per thread
    count: the programs that switch together show as one step."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from costmodel.figures import save_figure

    fig, axes = plt.subplots(len(results), 1, figsize=(8, 2.6 * len(results)), sharex=True,
                             squeeze=False)
    for ax, (threads, result) in zip(axes[:, 0], results.items()):
        samples = np.array(result["samples"])
        for i, name in enumerate(result["programs"]):
            times = samples[:, i + 1]
            ax.plot(samples[:, 0], times / np.percentile(times, PERCENTILES[0]), lw=1,
                    label=name.split("/")[0] + " " + name.split(":")[-1])
        ax.set_ylabel(f"{threads} thread{'s' * (threads != '1')}: time / p10")
    axes[-1, 0].set_xlabel("seconds")
    axes[0, 0].legend(fontsize=6, ncol=3, loc="upper right")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="a `tune compare` --out folder with runs/")
    parser.add_argument("--kernels", nargs="+", required=True)
    parser.add_argument("--tuners", nargs="+", default=["bo", "ms-xgb-pretrained"])
    parser.add_argument("--budget", type=int, default=64)
    parser.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--out", required=True)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    from datagen.errors import output_folder, run_command
    from datagen.grid import read_json, write_json

    def run(args) -> int:
        if args.child is not None:  # one thread count, in a process started with it
            write_json(os.path.join(args.out, f"threads-{args.child}.json"),
                       timeline(args.run, args.kernels, args.tuners, args.budget, args.seconds))
            return 0
        output_folder(args.out)  # before minutes of timing
        summary = {"run": args.run, "budget": args.budget, "seconds": args.seconds,
                   "threads": {}}
        results = {}
        for threads in args.threads:  # the runtime reads its thread count once, at its start
            print(f"TVM_NUM_THREADS={threads}", flush=True)
            child = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--child",
                                    str(threads)],
                                   env={**os.environ, "TVM_NUM_THREADS": str(threads)})
            if child.returncode:
                return child.returncode
            result = results[str(threads)] = read_json(
                os.path.join(args.out, f"threads-{threads}.json"))
            per = describe(result)
            summary["threads"][str(threads)] = {"programs": result["programs"],
                                                "per_program": per,
                                                "samples": len(result["samples"])}
            for name, row in per.items():
                print(f"  {name}: p10 {row['p10_us']} us, p90 {row['p90_us']} us, "
                      f"ratio {row['p90_over_p10']}")
        write_json(os.path.join(args.out, "summary.json"), summary, indent=1)
        plot(results, os.path.join(args.out, "timeline.png"))
        print(f"summary.json and timeline.png in {args.out}")
        return 0

    return run_command("two_speeds", run, args)


if __name__ == "__main__":
    sys.exit(main())
