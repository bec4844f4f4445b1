"""A MetaSchedule builder whose worker processes live across batches.

`LocalBuilder` starts a fresh process pool on every `build()` call, and each new worker
imports every backend's tensor intrinsics (tens of seconds) before its first build. This
builder keeps one pool for its whole life, started as the builder is made (where they
compile CUDA kernels, the workers precompile NVRTC's headers while the caller goes on), its
workers are forked from a server that imported TVM once per process (`datagen.fork_pool`)
and import only the intrinsics of the target being built, and a worker is recycled after
`MAX_USES_PER_WORKER` builds to bound the memory that long-lived TVM processes accumulate.
The build itself is MetaSchedule's own `default_build` and `default_export`, so artifacts
are the same as LocalBuilder's. Every artifact lands in a temporary folder of the builder's
own (`scratch`), which `shutdown` deletes: what was built but never measured (a stop while the
next wave builds, a build killed at its timeout) leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import weakref

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder

from datagen.defaults import DEFAULT_BUILD_TIMEOUT_SEC
from datagen.fork_pool import OK, TIMEOUT, ForkPool

MAX_USES_PER_WORKER = 256
TIMEOUT_PREFIX = "Build timeout"


_compiles_kernels = False  # in a worker: its CUDA compiles go to the kernel cache


def _init_worker(target_kind: str, kernel_cache: str | None = None,
                 scratch: str | None = None) -> None:
    global _compiles_kernels
    from datagen.tvm_env import load_tensor_intrinsics

    if scratch:  # this worker's artifacts and temporary files go there, TVM's and those of
        tempfile.tempdir = scratch  # the compilers a build runs (a linker killed mid-link
        os.environ["TMPDIR"] = scratch  # leaves its own behind)
    load_tensor_intrinsics(target_kind)
    if kernel_cache:
        from datagen.devices import use_kernel_cache

        try:  # with NVRTC's headers precompiled now, before this worker's first build
            use_kernel_cache(kernel_cache, warm_up=True)
            _compiles_kernels = True
        except Exception:  # noqa: BLE001  (no NVRTC here: the measuring process compiles)
            _compiles_kernels = False


def _build_one(mod, target, shared_library: bool,
               kernel_cache: str | None = None) -> tuple[str, float]:
    """Runs in a worker: build and export one module; return (artifact path, seconds).
    With `kernel_cache`, the exported module is loaded once, which compiles its CUDA kernels
    (NVRTC) into that folder, so the process that measures it finds them compiled."""
    from tvm.s_tir.meta_schedule.builder.local_builder import default_build, default_export

    start = time.perf_counter()
    built = default_build(mod, target, None)
    if shared_library:  # loadable by the TVM runtime alone, with no compiler or linker
        artifact = os.path.join(tempfile.mkdtemp(prefix="tvm_tmp_mod_"), "candidate.so")
        built.export_library(artifact)
    else:
        artifact = default_export(built)
    secs = time.perf_counter() - start
    if kernel_cache and _compiles_kernels:
        import tvm

        try:
            tvm.runtime.load_module(artifact)
        except Exception:  # noqa: BLE001  (measuring it reports the error, with its program)
            pass
    return artifact, secs


def remove_artifact(path: str | None) -> None:
    """Delete a build artifact and the temporary folder TVM made for it."""
    if path:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


@derived_object
class PersistentBuilder(PyBuilder):
    """Builds candidates in worker processes that survive across batches.

    Args:
        target_kind: the kind of target that will be built ("llvm", "cuda", ...).
        max_workers: worker processes (default: every usable core).
        timeout_sec: a build taking longer is killed and reported as a timeout.
        shared_library: export each artifact as a shared library (`.so`) rather than
            MetaSchedule's tar of objects, which is linked where it is loaded (tens of ms a
            program, in the measuring process).
        kernel_cache: a folder where the workers compile each artifact's CUDA kernels (see
            `datagen.devices.use_kernel_cache`); only where a CUDA runtime and NVRTC are.
        start: start every worker now (they initialise while the caller works), else at the
            first build.

    Attributes:
        scratch: the temporary folder every artifact is built in; `shutdown` deletes it (or,
            for a builder never shut down, its collection or Python's exit), so use (or copy)
            an artifact before then.
    """

    def __init__(self, target_kind: str = "llvm", max_workers: int | None = None,
                 timeout_sec: float = DEFAULT_BUILD_TIMEOUT_SEC, shared_library: bool = False,
                 kernel_cache: str | None = None, start: bool = True):
        super().__init__()
        self.timeout_sec = timeout_sec
        self.shared_library = shared_library
        self.kernel_cache = kernel_cache
        self.max_workers = max_workers or len(os.sched_getaffinity(0))
        self.last_build_secs: list[float | None] = []
        self.scratch = tempfile.mkdtemp(prefix="datagen-build-")
        # deleted by `shutdown`, or else when this builder is collected or Python exits
        self._delete_scratch = weakref.finalize(self, shutil.rmtree, self.scratch, True)
        # start every worker now, in the background: each imports the target's intrinsics
        # and, with `kernel_cache`, precompiles NVRTC's headers (5-10 s) while the caller draws
        # or searches its first candidates, rather than in its first build (where they count
        # against its timeout). `start` False: at the first build (a builder that may never
        # build)
        self._pool = ForkPool(self.max_workers, timeout_sec, _init_worker,
                              (target_kind, kernel_cache, self.scratch),
                              MAX_USES_PER_WORKER, start)

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        """Build every input; `last_build_secs` then holds each one's build time (None if failed)."""
        results: list[BuilderResult] = []
        self.last_build_secs = []
        jobs = [(inp.mod, inp.target, self.shared_library, self.kernel_cache)
                for inp in build_inputs]
        for status, value in self._pool.map(_build_one, jobs):
            if status == OK:
                artifact, secs = value
                results.append(BuilderResult(artifact, None))
                self.last_build_secs.append(secs)
                continue
            if status == TIMEOUT:
                message = f"{TIMEOUT_PREFIX}: killed after {self.timeout_sec:g} seconds"
            else:
                message = f"Build error: {value}"
            results.append(BuilderResult(None, message))
            self.last_build_secs.append(None)
        return results

    def worker_pids(self) -> list[int]:
        """The process ids of the build workers running now."""
        return self._pool.pids()

    def shutdown(self) -> None:
        """Stop the workers (a build in progress is killed with the compilers it runs, queued
        ones never start) and delete `scratch`: every artifact and temporary file still there."""
        self._pool.shutdown()  # the workers and what they run: none still writes into scratch
        self._delete_scratch()
