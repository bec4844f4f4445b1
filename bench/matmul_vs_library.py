"""Context for tuned kernels: the best tuned fp32 matmul against the vendor library's.

Tunes C = A B (A: n x n, B: n x n, fp32; 1024 by default) with one tuner for --trials on
--target, in MetaSchedule's loop with the project's builder and runner, and re-measures the
finalist --rounds times with the project's protocol (1 warm-up, 5 repeats of at least
min_repeat_ms; the median of each round's repeats). Then it times the same product in PyTorch,
`torch.matmul`, on the same device and with the same protocol: cuBLAS on a CUDA target (timed
with CUDA events), oneDNN/MKL on the CPU (with TVM's runtime thread count). The tuned kernel is
checked against a float64 product first (relative error under 1e-3 on random inputs).
Prints both latencies with their spread and GFLOP/s, and writes result.json in --out. The
tuned finalist and its re-measurements are kept in --out as soon as they are finished
(`datagen.grid`): a run stopped after that reads them back and only times the library again;
one with other settings is refused (use another --out).

    python bench/matmul_vs_library.py [--target nvidia/nvidia-h100] [--tuner ms-default]
        [--trials 256] [--size 1024] [--rounds 10] [--checkpoint CKPT] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

MAX_RELATIVE_ERROR = 1e-3  # fp32 products of this size land far below it
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
TUNED = "tuned.json"  # the finished tuning and re-measurement: read back, not made again


def matmul_module(n: int):
    from tvm import te
    from tvm.s_tir.meta_schedule.testing import te_workload

    return te.create_prim_func(te_workload.matmul(n, n, n))


def check_kernel(mod, trace: str, target, device, n: int) -> float:
    """The finalist built and run once on random inputs: its relative error against a
    float64 product."""
    import numpy as np
    import tvm

    from datagen.sampler import replay

    sch = replay(mod, trace)
    with target:
        lib = tvm.compile(sch.mod, target=target)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype("float32") for _ in range(2))
    c = tvm.runtime.tensor(np.full((n, n), np.nan, "float32"), device)  # unwritten stays NaN
    lib(tvm.runtime.tensor(a, device), tvm.runtime.tensor(b, device), c)
    ref = a.astype("float64") @ b.astype("float64")
    return float(np.linalg.norm(c.numpy() - ref) / np.linalg.norm(ref))


def time_library(n: int, kind: str, threads: int, protocol: dict, rounds: int) -> list[float]:
    """Per round, the median over `repeat` timings of `torch.matmul` (seconds per call), each
    the mean of `number` calls with `number` raised until a repeat lasts min_repeat_ms."""
    import torch

    cuda = kind == "cuda"
    device = torch.device("cuda" if cuda else "cpu")
    if not cuda:
        torch.set_num_threads(threads)
    gen = torch.Generator(device=device).manual_seed(0)
    a, b = (torch.randn(n, n, device=device, generator=gen) for _ in range(2))

    def run(number: int) -> float:
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(number):
                torch.matmul(a, b)
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1e3
        begin = time.perf_counter()
        for _ in range(number):
            torch.matmul(a, b)
        return time.perf_counter() - begin

    with torch.no_grad():
        number = 1
        run(number)  # warm-up: handles, workspaces, kernel selection
        while run(number) * 1e3 < protocol["min_repeat_ms"]:
            number *= 2
        return [statistics.median(run(number) / number for _ in range(protocol["repeat"]))
                for _ in range(rounds)]


def spread(values: list[float]) -> dict:
    import numpy as np

    return {"median": float(np.median(values)), "p25": float(np.percentile(values, 25)),
            "p75": float(np.percentile(values, 75)), "runs": [float(v) for v in values]}


def tune_and_remeasure(args, mod, target, predictor, runs: str) -> dict:
    """Tune the matmul in a fresh folder under `runs` and re-measure its finalist: the cell
    that a run stopped later reads back (its trace, the rounds' medians, the protocol)."""
    import shutil

    from datagen.errors import UserError
    from datagen.measure import Measurer
    from datagen.sampler import replay
    from tuning.runs import finalist
    from tuning.tuner import SearchInputs, tune_workload

    work = os.path.join(runs, f"{args.tuner}-n{args.size}-t{args.trials}")
    shutil.rmtree(work, ignore_errors=True)  # a tuning stopped midway starts again
    measurer = Measurer(target, num_threads=args.threads)
    try:
        tune_workload(mod, target, args.tuner, args.trials, work, measurer,
                      SearchInputs(predictor=predictor, seed=args.seed), progress=True,
                      desc=f"{args.tuner} matmul {args.size}")
        trace = finalist(work, args.trials)
        if trace is None:
            raise UserError(f"no trial of {args.tuner} built and ran; see {work}")
        (remeasured,) = measurer.remeasure([replay(mod, trace).mod], args.rounds)
        protocol = measurer.protocol
    finally:
        measurer.close()
    tuned = [r.median for r in remeasured if r.median is not None]
    if not tuned:
        raise UserError(f"the finalist of {args.tuner} failed when measured again: "
                        f"{remeasured[0].error}")
    return {"trace": json.loads(trace), "runs": tuned, "protocol": protocol}


def bench(args) -> int:
    import tvm

    from datagen.errors import UserError, output_folder
    from datagen.grid import Grid, portable
    from datagen.measure import local_device
    from datagen.tvm_env import default_num_threads, make_target
    from tuning.tuner import TUNERS, load_predictor

    if args.size < 16 or args.trials < 1 or args.rounds < 1:
        raise UserError("--size must be at least 16, --trials and --rounds at least 1")
    output_folder(args.out, create=False)  # result.json comes after tuning and measuring
    target = make_target(args.target, args.threads)
    kind = target.kind.name
    if kind not in ("cuda", "llvm"):  # before any tuning: the reference must exist
        raise UserError(f"no library reference for {kind} targets here (cuda or llvm)")
    if kind == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError("the target is CUDA but this torch sees no GPU")
    threads = args.threads or default_num_threads()
    entry = TUNERS.get(args.tuner)
    predictor = load_predictor(args.checkpoint or None, kind) if entry.needs_checkpoint \
        else None
    mod = matmul_module(args.size)
    grid = Grid(args.out, {"size": args.size, "target": str(target), "threads": threads,
                           "tuner": args.tuner, "trials": args.trials, "seed": args.seed,
                           "rounds": args.rounds, "checkpoint": args.checkpoint and portable(
                               args.checkpoint, ROOT)})
    if (cell := grid.read(TUNED)) is None:
        cell = tune_and_remeasure(args, mod, target, predictor, grid.path("runs"))
        grid.write(TUNED, cell)
    else:
        print(f"the tuned finalist and its re-measurements read back from {grid.path(TUNED)}")
    trace, tuned, protocol = json.dumps(cell["trace"]), cell["runs"], cell["protocol"]
    device = tvm.device("cpu" if kind == "llvm" else kind, 0)
    error = check_kernel(mod, trace, target, device, args.size)
    library = time_library(args.size, kind, threads, protocol, args.rounds)
    flops = 2.0 * args.size ** 3
    result = {
        "size": args.size, "target": str(target), "device": local_device(kind),
        "threads": threads if kind == "llvm" else None, "tuner": args.tuner,
        "trials": args.trials, "seed": args.seed, "protocol": protocol, "rounds": args.rounds,
        "tuned": {**spread(tuned), "relative_error": error, "trace": cell["trace"]},
        "library": {**spread(library), "what": "torch.matmul " + torch_version() +
                    (" (cuBLAS)" if kind == "cuda" else " (CPU: oneDNN/MKL)")},
    }
    result["tuned"]["gflops"] = flops / result["tuned"]["median"] / 1e9
    result["library"]["gflops"] = flops / result["library"]["median"] / 1e9
    result["tuned_over_library"] = result["tuned"]["median"] / result["library"]["median"]
    grid.write("result.json", result)
    print(f"{args.size}^3 fp32 matmul on {result['device'].get('model', kind)}:")
    for name, label in (("tuned", f"tuned ({args.tuner}, {args.trials} trials)"),
                        ("library", result["library"]["what"])):
        r = result[name]
        print(f"  {label:<40} {r['median'] * 1e6:10.1f} us (IQR {r['p25'] * 1e6:.1f}-"
              f"{r['p75'] * 1e6:.1f}), {r['gflops']:8.1f} GFLOP/s")
    print(f"  tuned / library: {result['tuned_over_library']:.2f}x the time; tuned kernel's "
          f"relative error {error:.1e}")
    if not error < MAX_RELATIVE_ERROR:
        raise UserError(f"the tuned kernel is wrong: relative error {error:.2e} (limit "
                        f"{MAX_RELATIVE_ERROR:g}); result.json keeps its trace")
    print(f"result.json in {args.out}")
    return 0


def torch_version() -> str:
    import torch

    return torch.__version__


def main(argv: list[str] | None = None) -> int:
    from datagen.errors import run_command

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", help="TVM target (default: this CPU)")
    parser.add_argument("--tuner", default="ms-default", help="a tuner of `tune --help`")
    parser.add_argument("--trials", type=int, default=256)
    parser.add_argument("--size", type=int, default=1024, help="n of the n x n x n product")
    parser.add_argument("--rounds", type=int, default=10, help="re-measurements of each side")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="CPU threads of both sides (default: "
                        "all usable cores)")
    parser.add_argument("--checkpoint", help="cost model for tuners that need one")
    parser.add_argument("--out", default="bench/results/matmul")
    return run_command("matmul_vs_library", bench, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
