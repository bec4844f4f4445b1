"""A MetaSchedule builder whose worker processes live across batches.

`LocalBuilder` starts a fresh process pool on every `build()` call, and each new worker
imports every backend's tensor intrinsics (tens of seconds) before its first build. This
builder keeps one pool for its whole life, started as the builder is made (the workers
import TVM, and where they compile CUDA kernels precompile NVRTC's headers, while the caller
goes on), its workers import only the intrinsics of the target being built, and a worker is
recycled after `MAX_USES_PER_WORKER` builds to bound the memory that long-lived TVM processes
accumulate. The build itself is MetaSchedule's own
`default_build` and `default_export`, so artifacts are the same as LocalBuilder's. Every
artifact lands in a temporary folder of the builder's own (`scratch`), which `shutdown`
deletes: what was built but never measured (a stop while the next wave builds, a build killed
at its timeout) leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import weakref

import psutil
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

from datagen.defaults import DEFAULT_BUILD_TIMEOUT_SEC

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


def _ready() -> None:
    """Nothing: each worker's first job, sent as the builder starts (see `PersistentBuilder`)."""


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


def _kill_process_tree(pid: int) -> list[psutil.Process]:
    """Kill a process and every process below it (a build's compiler and linker); return them."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    for process in tree:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    return tree


def _wait_ended(processes: list[psutil.Process], timeout: float) -> None:
    """Wait until every one of `processes` has ended (gone, or a zombie not yet reaped)."""
    def running(process: psutil.Process) -> bool:
        try:
            return process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + timeout
    while any(running(p) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.01)


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
        start: start every worker now (they import TVM while the caller works), else at the
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
        self._pool = PopenPoolExecutor(
            max_workers=self.max_workers,
            timeout=timeout_sec,
            initializer=_init_worker,
            initargs=(target_kind, kernel_cache, self.scratch),
            maximum_process_uses=MAX_USES_PER_WORKER,
        )
        # start every worker now, in the background: each imports TVM and the target's
        # intrinsics (seconds; for CUDA, 17 s on a slow core) and, with `kernel_cache`,
        # precompiles NVRTC's headers (5-10 s) while the caller draws or searches its first
        # candidates, rather than in its first build (where they count against its timeout).
        # `start` False: at the first build (a builder that may never build)
        for _ in range(self.max_workers if start else 0):
            self._pool.submit(_ready)

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        """Build every input; `last_build_secs` then holds each one's build time (None if failed)."""
        results: list[BuilderResult] = []
        self.last_build_secs = []
        jobs = [(inp.mod, inp.target, self.shared_library, self.kernel_cache)
                for inp in build_inputs]
        for res in self._pool.map_with_error_catching(lambda job: _build_one(*job), jobs):
            if res.status == StatusKind.COMPLETE:
                artifact, secs = res.value
                results.append(BuilderResult(artifact, None))
                self.last_build_secs.append(secs)
                continue
            if res.status == StatusKind.TIMEOUT:
                message = f"{TIMEOUT_PREFIX}: killed after {self.timeout_sec:g} seconds"
            else:
                message = f"Build error: {res.value}"
            results.append(BuilderResult(None, message))
            self.last_build_secs.append(None)
        return results

    def shutdown(self) -> None:
        """Stop the workers (a build in progress is killed with the compilers it runs, queued
        ones never start) and delete `scratch`: every artifact and temporary file still there."""
        pool = self._pool
        queue = getattr(pool, "_threadpool", None)  # PopenPoolExecutor's job queue and threads
        if queue is not None:
            queue.shutdown(wait=False, cancel_futures=True)
        # kill the worker processes first: `PopenPoolExecutor.shutdown` closes each worker's
        # pipe before it kills it, which waits until the job in progress ends (a build, or a
        # worker's start-up: seconds). Again while a thread is still busy (one starting its
        # worker just then); each ends once its worker is gone.
        deadline = time.monotonic() + 30
        killed = []
        while True:
            for worker in list(getattr(pool, "_worker_map", {}).values()):
                proc = getattr(worker, "_proc", None)
                if proc is not None and proc.poll() is None:
                    killed += _kill_process_tree(proc.pid)
            busy = [t for t in getattr(queue, "_threads", ()) if t.is_alive()]
            if not busy or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        pool.shutdown(wait=False)
        _wait_ended(killed, timeout=5)  # none still writing into the folder deleted here
        self._delete_scratch()
