"""Benchmark: where a candidate's build time goes, alone and with every core building.

Draws --candidates random schedules of each workload for --target (timed on one thread and on
--workers threads, which must draw the same candidates), then builds them as
`datagen` does (MetaSchedule's `default_build`, exported as a shared library) twice: in this
process one at a time, timing the phases (lowering and code generation; export, which links
with the host compiler), and with `PersistentBuilder` on --workers processes, timing the wall
clock. Prints medians per phase, candidates per second both ways, and how much slower a build
gets when all workers build at once (1.0: no contention).

    python bench/build_throughput.py [--target nvidia/nvidia-h100] [--candidates 8]
                                     [--workers N] [WORKLOAD ...]

On the H100 host, builds took a median 1.84 s per candidate with 15 workers (`data/cuda-h100`'s
build_secs), against about 0.1 s here on one core: this tells whether the phases or the
contention are what is slow there.

With a CUDA --target and --nvrtc (where NVRTC and a CUDA toolkit's headers are installed; no
GPU needed), it also compiles every built candidate's kernels with NVRTC on one core, as TVM's
own callback does and as datagen's compilers do (`datagen.devices.NvrtcCompiler`: the
standard headers precompiled once per process), one after the other for each kernel, and
prints both medians and whether every cubin came out byte for byte the same; then the first
few kernels again, each as the first kernel of a fresh process, with and without the warm-up
that builder workers do as they start (`NvrtcCompiler.warm_up`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

DEFAULT_WORKLOADS = ["dense/m197_n2304_k768", "conv2d/h28_w28_ci128_co128_k3_stride1_pad1",
                     "softmax/rows1536_cols128", "depthwise_conv2d/h56_w56_c144_k3_stride1_pad1"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", default=DEFAULT_WORKLOADS)
    parser.add_argument("--target", help="TVM target as JSON or a tag (default: this CPU)")
    parser.add_argument("--candidates", type=int, default=8, help="per workload")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--nvrtc", action="store_true",
                        help="also time NVRTC on the kernels (a CUDA target)")
    args = parser.parse_args()

    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.builder.local_builder import default_build

    from datagen.builder import PersistentBuilder, remove_artifact
    from datagen.sampler import ScheduleSampler
    from datagen.suites import resolve
    from datagen.tvm_env import make_target

    target = make_target(args.target)
    workloads = resolve(args.workloads)
    samplers = {threads: [ScheduleSampler(w.mod, target, threads=threads) for w in workloads]
                for threads in sorted({1, args.workers})}
    drawn = {}
    for threads, per_workload in samplers.items():
        start = time.perf_counter()
        drawn[threads] = [c for s in per_workload for c in s.random(args.candidates, 0, set())]
        print(f"drew {len(drawn[threads])} candidates of {len(workloads)} workloads for "
              f"{target.kind.name} in {time.perf_counter() - start:.1f} s on {threads} "
              f"thread(s)")
    hashes = {threads: [c.trace_hash for c in cands] for threads, cands in drawn.items()}
    if hashes[1] != hashes[args.workers]:
        raise SystemExit("error: drawing on several threads gave other candidates than on one")
    mods = [c.mod for c in drawn[1]]

    lower, export, sources = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i, mod in enumerate(mods):
            t0 = time.perf_counter()
            try:
                built = default_build(mod, target, None)
            except Exception:  # noqa: BLE001  (a candidate that does not build is skipped)
                continue
            t1 = time.perf_counter()
            built.export_library(os.path.join(tmp, f"{i}.so"))
            lower.append(t1 - t0)
            export.append(time.perf_counter() - t1)
            if args.nvrtc:
                sources.append(built.imports[0].inspect_source())
        if args.nvrtc:
            nvrtc_times(sources, target, os.path.join(tmp, "include"))
    alone = [a + b for a, b in zip(lower, export)]

    builder = PersistentBuilder(target.kind.name, args.workers, 60.0, shared_library=True)
    try:
        # every worker starts (a thread and a process each, made on demand) and imports the
        # target's intrinsics before the clock starts
        builder.build([BuilderInput(mods[i % len(mods)], target) for i in range(args.workers)])
        start = time.perf_counter()
        results = builder.build([BuilderInput(m, target) for m in mods])
        wall = time.perf_counter() - start
        together = [s for s in builder.last_build_secs if s is not None]
    finally:
        builder.shutdown()
    for res in results:
        if res.error_msg is None:
            remove_artifact(res.artifact_path)

    med = statistics.median
    print(f"one at a time ({len(alone)} built): lowering + codegen {med(lower) * 1e3:.0f} ms, "
          f"export {med(export) * 1e3:.0f} ms, whole {med(alone) * 1e3:.0f} ms median; "
          f"{len(alone) / sum(alone):.1f} candidates/s")
    print(f"{args.workers} workers ({len(together)} built): {med(together) * 1e3:.0f} ms median "
          f"per build, {len(together) / wall:.1f} candidates/s")
    print(f"contention: a build takes {med(together) / med(alone):.2f}x as long with "
          f"{args.workers} workers")


def nvrtc_times(sources: list[str], target, include_dir: str) -> None:
    """Compile each CUDA source as TVM does and as datagen does, alternately, and print both."""
    from tvm.support import nvcc

    from datagen.devices import NvrtcCompiler

    if target.kind.name != "cuda":
        raise SystemExit("error: --nvrtc needs a CUDA --target")
    arch = str(target.attrs["arch"])
    ours = NvrtcCompiler(arch, include_dir)
    tvms, pchs, same = [], [], 0
    for code in sources:
        t0 = time.perf_counter()
        theirs = bytes(nvcc.compile_cuda(code, target_format="cubin", arch=arch,
                                         compiler="nvrtc"))
        t1 = time.perf_counter()
        mine = bytes(ours(code))
        t2 = time.perf_counter()
        tvms.append(t1 - t0)
        pchs.append(t2 - t1)
        same += mine == theirs
    med = statistics.median
    print(f"NVRTC, {len(sources)} kernels on one core: as TVM compiles {med(tvms):.2f} s median "
          f"({sum(tvms):.1f} s in all), headers precompiled {med(pchs):.2f} s median "
          f"({sum(pchs):.1f} s in all, the first {pchs[0]:.2f} s making the header); "
          f"{sum(tvms) / sum(pchs):.2f}x; identical cubins {same}/{len(sources)}"
          + ("" if ours.pch else "; NVRTC refused --pch here"))
    first_kernel_times(sources[:FIRST_KERNELS], arch, include_dir)


FIRST_KERNELS = 3  # kernels whose first compilation in a fresh process is timed, each both ways


def _first_kernel(code: str, arch: str, include_dir: str, warm: bool) -> tuple[float, float]:
    """In a fresh process: (seconds warming up, seconds compiling `code`), as a builder's
    worker compiles its first kernel with and without `NvrtcCompiler.warm_up` at its start."""
    from datagen.devices import NvrtcCompiler

    compile_fn = NvrtcCompiler(arch, include_dir)
    t0 = time.perf_counter()
    if warm:
        compile_fn.warm_up()
    t1 = time.perf_counter()
    compile_fn(code)
    return t1 - t0, time.perf_counter() - t1


def first_kernel_times(sources: list[str], arch: str, include_dir: str) -> None:
    """Time each source as a process's first kernel, without and with the warm-up, each in a
    process of its own (NVRTC keeps the precompiled header for the process's life)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    cold, warm, warm_ups = [], [], []
    for code in sources:
        for warmed in (False, True):
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                up, first = pool.submit(_first_kernel, code, arch, include_dir, warmed).result()
            (warm if warmed else cold).append(first)
            if warmed:
                warm_ups.append(up)
    med = statistics.median
    print(f"a process's first kernel ({len(sources)} kernels, a fresh process each): "
          f"{med(cold):.2f} s median cold, {med(warm):.2f} s after the warm-up "
          f"(which took {med(warm_ups):.2f} s, before any kernel was there to compile)")


if __name__ == "__main__":
    main()
