"""Measure a packed batch with the TVM runtime alone: the device-host side of `datagen pack`.

    TVM_USE_RUNTIME_LIB=1 python -m datagen.batch_measure BATCH [--results FILE]

For a host that has the device but not TVM's compiler (a batch queue, an isolated lab): only
the TVM runtime (`TVM_USE_RUNTIME_LIB=1` makes `import tvm` load libtvm_runtime alone), numpy
and, for CUDA, NVRTC (cuda-python and nvidia-cuda-nvrtc: `tvm.support.nvcc` compiles a
kernel's CUDA source when its module is loaded). It imports nothing else of this project but
`datagen.devices` (the device code it shares with the builders and the runner, which needs no
more than it does).

With the runtime alone `import tvm` loads no device backend, so this loads TVM's CUDA runtime
library itself. A CUDA kernel built without a CUDA toolkit keeps its CUDA source, which NVRTC
compiles when the module is loaded, for the architecture of the batch's target (TVM's own
callback would ask the absent compiler library for it), with the standard headers parsed once
per process (`datagen.devices.NvrtcCompiler`). That compilation runs in parallel worker processes
(`--compile-workers`, all cores but one by default), in measuring order and ahead of the
measuring, into a cache keyed by the source's hash; the measuring process, pinned to a core
of its own while they run, loads each module from the cache as soon as it is there, so the GPU
does not wait for the whole batch's compilation.
Lines timed while the workers were still compiling say so ("compiling": true), and an even
sample of them (`AUDIT_COMPILING`) is timed again at the end, quietly, which tells whether the
compiling moved the timings; `--compile-first` compiles everything before the first timing.

Candidates are measured in turns over the batch's workloads (a run stopped early leaves no
workload behind); each is loaded and timed with MetaSchedule's protocol (the
runtime's `time_evaluator`: one discarded warm-up call, then `repeat` repeats of `number` runs,
`number` raised until a repeat lasts `min_repeat_ms`), and one JSON line per candidate is
appended to the results file and flushed, so a run stopped at any moment loses nothing and the
same command continues where it stopped (the file is synced to disk once a second: a crash of
the whole host can lose the last second). Once every candidate has run, those whose repeats
spread more than the batch's `retry_cv` are measured once more (lines with "retry": true), as
is the sample of those timed while compiling.
A device that disappears stops the run with one line and exit status 2; what was measured is
kept.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

from datagen.errors import UserError, run_command
from datagen.devices import (cuda_arch, device_description, host_cpu_model, load_device_runtime,
                             use_kernel_cache)

MANIFEST, RESULTS, ARTIFACTS = "manifest.json", "results.jsonl", "artifacts"
KERNEL_CACHE = "kernel-cache"  # compiled CUDA kernels, by the hash of their source
COMPILE_WAIT_SEC = 60  # the longest the measuring waits for one module's compilation
AUDIT_COMPILING = 64  # candidates timed while compiling that are timed again, quietly
SYNC_EVERY_SEC = 1.0  # results are flushed at every line, synced to disk this often
FAILED_SECS = 1e9  # MetaSchedule reports a failed run as 1e10 s
MAX_ERROR_CHARS = 2000


def read_manifest(batch_dir: str) -> dict:
    path = os.path.join(batch_dir, MANIFEST)
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as err:
        raise UserError(f"{batch_dir} is not a packed batch ({MANIFEST}: {err}); "
                         "make one with datagen pack") from None


def read_results(path: str, batch_id: str) -> list[dict]:
    """The result lines of `path` (a torn last line of a killed run is ignored).

    Raises:
        UserError: a line belongs to another batch.
    """
    if not os.path.isfile(path):
        return []
    lines = []
    with open(path, encoding="utf-8") as handle:
        for text in handle:
            try:
                line = json.loads(text)
            except ValueError:
                continue  # only the last line can be torn, by a kill mid-write
            if line.get("batch") != batch_id:
                raise UserError(f"{path} holds results of batch {line.get('batch')}, not of "
                                 f"this batch {batch_id}: give each batch its own results file")
            lines.append(line)
    return lines


def _spread(latencies: list[float]) -> float:
    return statistics.pstdev(latencies) / statistics.fmean(latencies)


def _inputs(args_info: list, dev, rng) -> list:
    """Fresh random inputs on `dev`: floats uniform in [-1, 1), integers in [0, 8)."""
    import numpy as np
    import tvm

    out = []
    for _, dtype, shape in args_info:
        if dtype.startswith(("int", "uint")):
            data = rng.integers(0, 8, size=shape).astype(dtype)
        elif dtype == "bool":
            data = rng.integers(0, 2, size=shape).astype(bool)
        elif dtype in ("float32", "float64"):  # drawn in their own precision: 2-3x faster
            data = rng.random(size=shape, dtype=dtype)
            np.multiply(data, 2, out=data)
            np.subtract(data, 1, out=data)
        else:
            data = rng.uniform(-1, 1, size=shape).astype(dtype)
        out.append(tvm.runtime.tensor(data, dev))
    return out


def _pin(cpus: list[int]) -> None:
    """Run this process on `cpus` only (nothing where the platform cannot)."""
    if cpus and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, cpus)
        except OSError:
            pass


_WORKER_BROKEN = False  # a compiling worker whose set-up failed compiles nothing


def _init_precompile(cache_dir: str | None, arch: str | None, cpus: list[int]) -> None:
    global _WORKER_BROKEN
    _pin(cpus)
    try:
        if cache_dir is not None:
            load_device_runtime("cuda")  # the worker loads CUDA modules
            use_kernel_cache(cache_dir, arch)
    except Exception:  # noqa: BLE001  (raised here, the pool would start it again and again;
        _WORKER_BROKEN = True  # the measuring process reports the error itself)


def _precompile(path: str) -> bool:
    """In a worker: load a module once so that its kernels land in the cache."""
    import tvm

    if _WORKER_BROKEN:
        return False
    try:
        tvm.runtime.load_module(path)
        return True
    except Exception:  # noqa: BLE001  (measuring it later reports the error)
        return False


class CompileAhead:
    """Compile the kernels of candidates in worker processes, in measuring order, while the
    measuring process times those already compiled.

    NVRTC takes about a second of a core a kernel or more (0.8-7 s for drawn dense and conv2d
    kernels on a 2-core development CPU, the standard headers precompiled) and one GPU times
    a candidate in 50-80 ms, so the measuring keeps up with `workers` processes compiling at
    once and never waits for the whole batch's compilation. The workers keep off the
    measuring process's core: where more than one CPU is available, the measuring process is
    pinned to the last and the workers to the others until `close`. With `cache_dir` None the workers only load each
    module (no CUDA: what the tests use).
    """

    def __init__(self, paths: list[str], workers: int, cache_dir: str | None = None,
                 arch: str | None = None):
        import multiprocessing

        self.cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        split = len(self.cpus) > 1
        self.start = time.perf_counter()
        self.workers = workers
        self._pool = multiprocessing.get_context("spawn").Pool(
            workers, _init_precompile, (cache_dir, arch, self.cpus[:-1] if split else []))
        self._jobs = [self._pool.apply_async(_precompile, (path,)) for path in paths]
        self._finished = 0  # self._jobs[:self._finished] are done
        self.secs: float | None = None  # until every job is done
        _pin(self.cpus[-1:] if split else [])

    def wait(self, i: int) -> bool:
        """Block until the `i`-th module is compiled; whether it loaded (False as well where
        its worker died or took over `COMPILE_WAIT_SEC`: measuring it then compiles it in
        the measuring process, or reports the error)."""
        import multiprocessing

        try:
            return self._jobs[i].get(COMPILE_WAIT_SEC)
        except multiprocessing.TimeoutError:
            return False

    def busy(self) -> bool:
        """Whether the workers are still compiling."""
        while self._finished < len(self._jobs) and self._jobs[self._finished].ready():
            self._finished += 1
        if self._finished == len(self._jobs) and self.secs is None:
            self.secs = time.perf_counter() - self.start
        return self.secs is None

    def loaded(self) -> int:
        """How many of the modules compiled so far loaded."""
        return sum(job.get() for job in self._jobs[:self._finished])

    def close(self) -> None:
        """Stop the workers (at once, where some are still compiling) and unpin."""
        self._pool.terminate()
        self._pool.join()
        _pin(self.cpus)


def interleaved(candidates: list[dict]) -> list[dict]:
    """`candidates` in turns over their workloads (each workload's own order kept), so that a
    run stopped early has measured every workload of the batch alike."""
    turn: dict[str, int] = {}
    ranks = []
    for cand in candidates:
        ranks.append(turn.get(cand["workload_key"], 0))
        turn[cand["workload_key"]] = ranks[-1] + 1
    order = sorted(range(len(candidates)), key=lambda i: ranks[i])  # stable: workloads in order
    return [candidates[i] for i in order]


def measure_one(batch_dir: str, cand: dict, protocol: dict, dev, rng) -> dict:
    """Load and time one candidate: {"status", "latencies", "error", "run_secs"} and the
    seconds spent loading the module and making its inputs ("load_secs", "inputs_secs")."""
    import tvm

    start = time.perf_counter()
    phases = {"load_secs": None, "inputs_secs": None}
    try:
        mod = tvm.runtime.load_module(os.path.join(batch_dir, ARTIFACTS, cand["artifact"]))
        loaded = time.perf_counter()
        phases["load_secs"] = loaded - start
        args = _inputs(cand["args"], dev, rng)
        dev.sync()
        phases["inputs_secs"] = time.perf_counter() - loaded
        evaluator = mod.time_evaluator(mod.entry_name, dev, number=protocol["number"],
                                       repeat=protocol["repeat"],
                                       min_repeat_ms=protocol["min_repeat_ms"])
        latencies = [float(x) for x in evaluator(*args).results]
    except Exception as err:  # noqa: BLE001  (a kernel fails in any way the runtime reports)
        return {"status": "run_error", "latencies": [], "error": str(err)[-MAX_ERROR_CHARS:],
                "run_secs": time.perf_counter() - start, **phases}
    ok = latencies and all(math.isfinite(x) and 0 < x < FAILED_SECS for x in latencies)
    return {"status": "ok" if ok else "run_error", "latencies": latencies,
            "error": "" if ok else "non-finite latency", "run_secs": time.perf_counter() - start,
            **phases}


def measure_batch(batch_dir: str, results_path: str | None = None, progress: bool = True,
                  compile_workers: int | None = None, compile_first: bool = False) -> dict:
    """Measure every candidate of a batch not yet in its results file; see the module doc.

    Returns {"measured": n, "retried": n, "total": n}.

    Raises:
        UserError: not a batch, results of another batch, no device, the device is lost.
    """
    import numpy as np

    manifest = read_manifest(batch_dir)
    results_path = results_path or os.path.join(batch_dir, RESULTS)
    batch_id = manifest["batch"]
    kind = manifest["device_type"]
    import tvm

    where = f"run this where the batch's target ({manifest['target_kind']}) can be measured"
    try:
        load_device_runtime(kind)
    except OSError as err:
        raise UserError(f"this host has no {kind} device: TVM's {kind} runtime library does "
                         f"not load here ({err}); {where}") from None
    dev = tvm.device(kind, 0)
    if not dev.exist:
        raise UserError(f"this host has no {kind} device; {where}")
    device = device_description(dev, kind)
    host_cpu = host_cpu_model()
    # the runtime's CPU threads (what a CPU measurement depends on; none for a GPU kernel)
    threads = int(os.environ.get("TVM_NUM_THREADS") or os.cpu_count()) if kind == "cpu" else 0
    done = read_results(results_path, batch_id)
    firsts = {line["index"]: line for line in done if not line.get("retry")}
    retried = {line["index"] for line in done if line.get("retry")}
    rng = np.random.default_rng(0)
    counts = {"measured": 0, "retried": 0, "total": len(manifest["candidates"])}
    todo = interleaved([c for c in manifest["candidates"] if c["index"] not in firsts])
    ahead = None
    if kind == "cuda":
        arch = cuda_arch(json.loads(manifest["target"]), dev)
        cache = os.path.join(batch_dir, KERNEL_CACHE)
        workers = compile_workers if compile_workers is not None else \
            max(1, (os.cpu_count() or 2) - 1)
        if workers > 1 and todo:
            ahead = CompileAhead([os.path.join(batch_dir, ARTIFACTS, c["artifact"])
                                  for c in todo], workers, cache, arch)
        use_kernel_cache(cache, arch)
    retry_cv = manifest.get("retry_cv")
    reported = False
    try:
        if ahead is not None and compile_first:
            for i in range(len(todo)):
                ahead.wait(i)
        with open(results_path, "a", encoding="utf-8") as out:
            synced = [time.monotonic()]

            def write(cand: dict, retry: bool, compiling: bool = False) -> dict:
                result = measure_one(batch_dir, cand, manifest["protocol"], dev, rng)
                if result["status"] != "ok" and not tvm.device(kind, 0).exist:
                    raise UserError(f"the {kind} device disappeared after {len(firsts)} "
                                     f"candidates; they are kept in {results_path}: run the "
                                     "same command again to measure the rest")
                line = {"batch": batch_id, "index": cand["index"],
                        "trace_hash": cand["trace_hash"], "retry": retry, "device": device,
                        "host_cpu": host_cpu, "threads": threads, "compiling": compiling,
                        **result}
                out.write(json.dumps(line) + "\n")
                out.flush()  # a killed run loses nothing from here on
                if time.monotonic() - synced[0] >= SYNC_EVERY_SEC:  # not at every line: a
                    os.fsync(out.fileno())  # sync can take milliseconds, as long as a timing
                    synced[0] = time.monotonic()
                return line

            for i, cand in enumerate(todo):
                compiling = False
                if ahead is not None:
                    ahead.wait(i)
                    compiling = ahead.busy()
                    if not compiling and progress and not reported:
                        reported = True
                        print(f"compiled the kernels of {ahead.loaded()}/{len(todo)} "
                              f"candidates with {ahead.workers} processes in {ahead.secs:.1f} s",
                              file=sys.stderr)
                firsts[cand["index"]] = write(cand, retry=False, compiling=compiling)
                counts["measured"] += 1
                if progress and (i + 1) % 50 == 0:
                    print(f"measured {i + 1}/{len(todo)}", file=sys.stderr, flush=True)
            # again, quietly: the noisy ones, and a sample of those timed while compiling
            timed_compiling = [c["index"] for c in interleaved(manifest["candidates"])
                               if firsts[c["index"]].get("compiling")]
            audit = set(timed_compiling[::-(-len(timed_compiling) // AUDIT_COMPILING) or 1])
            for cand in manifest["candidates"]:
                first = firsts[cand["index"]]
                if first["status"] == "ok" and cand["index"] not in retried and (
                        cand["index"] in audit or
                        retry_cv is not None and _spread(first["latencies"]) > retry_cv):
                    write(cand, retry=True)
                    counts["retried"] += 1
            os.fsync(out.fileno())
    finally:
        if ahead is not None:
            ahead.close()
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="datagen.batch_measure", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("batch", help="a folder written by datagen pack")
    parser.add_argument("--results", help=f"results file (default BATCH/{RESULTS})")
    parser.add_argument("--compile-workers", type=int, help="processes that compile CUDA "
                        "kernels ahead of the measuring (default: all cores but one)")
    parser.add_argument("--compile-first", action="store_true", help="compile every CUDA "
                        "kernel before measuring starts, so that no candidate is timed while "
                        "the other cores compile (slower: the GPU waits)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    return run_command("datagen.batch_measure", _measure, args)


def _measure(args) -> None:
    start = time.perf_counter()
    counts = measure_batch(args.batch, args.results, progress=not args.no_progress,
                           compile_workers=args.compile_workers,
                           compile_first=args.compile_first)
    wall = time.perf_counter() - start
    print(f"measured {counts['measured']} of {counts['total']} candidates "
          f"({counts['retried']} again at the end: noisy, or timed while compiling) "
          f"in {wall:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
