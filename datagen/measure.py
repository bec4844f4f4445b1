"""Build and measure candidates with a stated protocol, one candidate on the device at a time.

Protocol (MetaSchedule's evaluator): one warm-up run, then `repeat` timed repeats, each the
mean of `number` runs, with `number` raised until a repeat lasts at least `min_repeat_ms`;
with `cache_flush` (off unless asked) the CPU caches are flushed of every argument but the
first before each repeat (the program's weights met cold). Arguments are random floats, and
integer tensors zeros, indices in range of any table (`alloc_arguments`). Every repeat is
kept. `measure` builds a batch first and measures it after, never both at once, so no build
competes for the cores being timed; `build` and `run_built` are the two halves, which
`collect` overlaps where the device being timed is not this host's CPU.
Measurers of several processes that share a `device_lock` take turns on the device.
`time_networks` times whole compiled networks as the runner times a task: in a worker of their
own, with the runner's threads.

`run_latency` and `latency_stats` are the one definition of a measured latency everywhere in
the project: the median of the timed repeats, with MetaSchedule's failure sentinel (a failed
run reports 1e10 s) meaning no latency at all.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import shutil
import statistics
import tempfile
import time

from datagen.defaults import DEFAULT_PROTOCOL, DEFAULT_RUN_TIMEOUT_SEC
from datagen.errors import UserError

# status values of a measured candidate
OK = "ok"
BUILD_ERROR, BUILD_TIMEOUT = "build_error", "build_timeout"
RUN_ERROR, RUN_TIMEOUT = "run_error", "run_timeout"
STATUSES = (OK, BUILD_ERROR, BUILD_TIMEOUT, RUN_ERROR, RUN_TIMEOUT)
MAX_ERROR_CHARS = 2000
# MetaSchedule reports a failed run as 1e10 s: a repeat this long is a failure, not a time
FAILED_SECS = 1e9


def run_latency(run_secs, error_msg: str | None = None) -> float | None:
    """The latency of one measured candidate in seconds: the median of its timed repeats.

    None when it failed: an error message, no repeats, or a repeat that is not finite, not
    positive, or MetaSchedule's failure sentinel.
    """
    secs = [float(s) for s in (run_secs or [])]
    if error_msg is not None or not secs or \
            not all(math.isfinite(s) and 0 < s < FAILED_SECS for s in secs):
        return None
    return statistics.median(secs)


def latency_stats(latencies) -> dict[str, float]:
    """A record's latency columns: median, population std and its ratio to the mean (NaN for a
    failed measurement)."""
    median = run_latency(latencies)
    if median is None:
        return {"latency_median": math.nan, "latency_std": math.nan, "latency_cv": math.nan}
    std = statistics.pstdev(latencies)
    return {"latency_median": median, "latency_std": std,
            "latency_cv": std / statistics.fmean(latencies)}


def label_stats(status: str, latencies, retry=()) -> dict[str, float]:
    """A record's latency columns from its status and repeats: `latency_stats` of its label,
    the one of its measurement (when its status is ok) and its re-measurement (when it has
    one) whose repeats spread less."""
    first = list(latencies) if status == OK and latencies is not None else []
    measured = [m for m in (first, list(retry if retry is not None else ())) if m]
    if len(measured) == 2:  # the first on a tie
        return min((latency_stats(m) for m in measured), key=lambda s: s["latency_cv"])
    return latency_stats(measured[0] if measured else first)


@dataclasses.dataclass
class MeasureResult:
    """Outcome of one candidate: latencies in seconds (one per repeat) or an error."""

    status: str
    latencies: list[float]
    error: str = ""
    build_secs: float = math.nan
    run_secs: float = math.nan
    retry: "MeasureResult | None" = None  # the second measurement of a noisy candidate

    @property
    def median(self) -> float | None:
        """Its latency (`run_latency`), None unless it ran fine."""
        return run_latency(self.latencies) if self.status == OK else None


TRACKER_CONNECT_SEC = 5.0  # how long a tracker that refuses connections is tried again
SESSION_WAIT_SEC = 60.0  # how long a collection waits at its start for a server of its key


def _listening(host: str, port: int, within: float) -> bool:
    """Whether something accepts TCP connections at host:port, trying again for `within`
    seconds while it refuses (say, a tracker still starting)."""
    import socket

    deadline = time.monotonic() + within
    while True:
        try:
            with socket.create_connection((host, port), timeout=within):
                return True
        except ConnectionRefusedError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.25)
        except OSError:  # no such host, no route, timed out
            return False


@dataclasses.dataclass(frozen=True)
class Tracker:
    """Where an RPC tracker listens and which device key to request from it."""

    host: str
    port: int
    key: str

    @classmethod
    def parse(cls, address: str, key: str | None) -> "Tracker":
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise UserError(f"tracker address {address!r} is not host:port")
        if not key:
            raise UserError("--tracker needs --key (the device key the RPC servers registered)")
        return cls(host, int(port), key)

    def check(self) -> None:
        """Fail with a clear message unless the tracker answers and serves `key`: within
        TRACKER_CONNECT_SEC where nothing listens (TVM's own client retries a refused
        connection for a minute)."""
        from tvm import rpc

        unreachable = UserError(f"RPC tracker at {self.host}:{self.port} is unreachable; start "
                                "it with 'python -m tvm.exec.rpc_tracker' or fix --tracker")
        if not _listening(self.host, self.port, TRACKER_CONNECT_SEC):
            raise unreachable
        try:
            session = rpc.connect_tracker(self.host, self.port)
            summary = session.summary()
        except Exception:  # noqa: BLE001
            raise unreachable from None
        keys = {k.split(":")[0] for k in summary.get("queue_info", {})}
        if self.key not in keys:
            raise UserError(f"RPC tracker at {self.host}:{self.port} has no server with key "
                            f"{self.key!r} (keys: {', '.join(sorted(keys)) or 'none'})")

    def device(self, device_type: str, wait: float = SESSION_WAIT_SEC) -> dict:
        """Device 0 of `device_type` ("cpu", "cuda", ...) on a server of this key, as records
        name it (`devices.device_description` of a remote device), with the key. One
        session of the tracker's, asked for at most `wait` seconds: a key names one kind of
        device, so whichever server answers speaks for all of them.

        Raises:
            UserError: no server of the key answered within `wait`, or the one that did has
                no such device.
        """
        import threading

        from tvm import rpc

        from datagen.devices import device_description

        answer: dict = {}

        def ask() -> None:  # the tracker's request has no timeout of its own
            try:
                session = rpc.connect_tracker(self.host, self.port).request(
                    self.key, priority=1, session_timeout=max(1, int(wait)))
                dev = session.device(device_type, 0)
                answer["device"] = device_description(dev, device_type, remote=True) \
                    if dev.exist else None
            except Exception as err:  # noqa: BLE001  (tracker, session and device errors)
                last = (str(err).strip().splitlines() or [""])[-1]
                answer["error"] = f"{type(err).__name__}: {last}".rstrip(": ")

        thread = threading.Thread(target=ask, name="datagen-rpc-device", daemon=True)
        thread.start()
        thread.join(wait)
        where = f"RPC tracker at {self.host}:{self.port}"
        if not answer:
            raise UserError(f"{where}: no server of key {self.key!r} answered within {wait:g} s "
                            "(all busy, or gone)")
        if "error" in answer:
            raise UserError(f"{where}: the server of key {self.key!r} failed to open a session "
                            f"({answer['error']})")
        if answer["device"] is None:
            raise UserError(f"{where}: the server of key {self.key!r} has no {device_type} "
                            "device; start it on a host with one, or give the key of one that has")
        return {**answer["device"], "rpc_key": self.key}


def device_name(device: dict | None) -> str | None:
    """What measured, as a `Measurer.device` description says it, for comparing: the device's
    model (the GPU's name, the CPU's), or the RPC key it was measured through; None where
    nothing was recorded."""
    if not isinstance(device, dict):
        return None
    if device.get("model"):
        return str(device["model"])
    return f"RPC key {device['rpc_key']}" if device.get("rpc_key") else None


def local_device(target_kind: str) -> dict:
    """What measures a target on this host: the CPU, or device 0 of a GPU kind with its model,
    compute capability and versions (`devices.device_description`)."""
    import tvm

    from datagen.devices import device_description, host_cpu_model

    if target_kind == "llvm":
        return {"kind": "cpu", "model": host_cpu_model()}
    dev = tvm.device(target_kind, 0)
    if not dev.exist:
        return {"kind": target_kind, "present": False}
    return device_description(dev, target_kind)


def _init_runner(num_threads: int, kernel_cache: str | None = None,
                 cpus: list[int] | None = None) -> None:
    """Runner worker initializer: the TVM runtime reads its thread count when it starts; CUDA
    kernels that the builders compiled come from `kernel_cache` (others compile as usual); with
    `cpus`, the worker runs on those only."""
    os.environ["TVM_NUM_THREADS"] = str(num_threads)
    if cpus:
        os.sched_setaffinity(0, cpus)
    if kernel_cache:
        from datagen.devices import use_kernel_cache

        try:
            use_kernel_cache(kernel_cache)
        except Exception:  # noqa: BLE001  (no NVRTC here: TVM reports it at the first load)
            pass


def _classify_run_error(message: str) -> str:
    return RUN_TIMEOUT if "Timeout" in message else RUN_ERROR


@functools.cache
def _exclusive_runner_class():
    """`ExclusiveRunner`, defined on first use (this module imports no MetaSchedule at import
    time: the runtime-only measuring process uses it too)."""
    import fcntl

    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner

    @derived_object
    class ExclusiveRunner(PyRunner):
        """A runner whose batches take turns with those of other processes on one device:
        each batch holds an exclusive lock on the file `lock_path` from its first program's
        loading to its last result, so programs of several processes never run at once.
        `held` lists each batch's (start, end) in `time.time()` seconds."""

        def __init__(self, runner, lock_path: str):
            super().__init__()
            self.runner = runner
            self.lock_path = lock_path
            self.held: list[tuple[float, float]] = []

        def run(self, runner_inputs):
            with open(self.lock_path, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    start = time.time()
                    futures = self.runner.run(runner_inputs)
                    for future in futures:
                        future.result()
                    self.held.append((start, time.time()))
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
            return futures

    return ExclusiveRunner


def alloc_arguments(device, args_info, alloc_repeat: int) -> list:
    """A program's arguments as MetaSchedule's runner allocates them (random floats between 1
    and 10), but integer tensors zeros: TVM fills those with the bits of such floats, indices
    far out of every table, so a gather (`take`, an embedding lookup) read outside its buffer
    and its worker died of a segfault. Zero is an index of every table."""
    import numpy as np
    import tvm
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common

    random_fill = tvm.get_global_func("tvm.contrib.random.random_fill_for_measure")

    def fill(tensor) -> None:
        dtype = str(tensor.dtype)
        if dtype.startswith(("int", "uint")):
            tensor.copyfrom(np.zeros(tuple(tensor.shape), dtype))
        else:
            random_fill(tensor)

    return alloc_argument_common(fill, device, args_info, alloc_repeat)


def _run_program(evaluator_config, artifact_path: str, device_type: str,
                 args_info) -> list[float]:
    """What MetaSchedule's `LocalRunner` worker does with a built program (`_worker_func`: load
    it, allocate its arguments, time it with the default evaluator), the arguments allocated by
    `alloc_arguments`."""
    import tvm
    from tvm.s_tir.meta_schedule.runner.local_runner import default_run_evaluator

    module = tvm.runtime.load_module(artifact_path)
    device = tvm.runtime.device(device_type, 0)
    return default_run_evaluator(module, device, evaluator_config,
                                 alloc_arguments(device, args_info, 1))


@functools.cache
def _fork_runner_class():
    """`ForkRunner`, defined on first use (as `ExclusiveRunner`)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, PyRunner
    from tvm.s_tir.meta_schedule.runner.local_runner import LocalRunnerFuture

    from datagen.fork_pool import OK, TIMEOUT, ForkPool

    @derived_object
    class ForkRunner(PyRunner):
        """MetaSchedule's `LocalRunner` (its evaluator, its one worker, its messages), its
        worker forked from the server that imported TVM once (`datagen.fork_pool`) rather than
        a new interpreter that imports it: the same measurement, seconds sooner, with integer
        arguments in range (`alloc_arguments`). The worker starts at the first run;
        `initializer` runs there first."""

        def __init__(self, timeout_sec: float, evaluator_config, initializer):
            super().__init__()
            self.timeout_sec = timeout_sec
            self.evaluator_config = EvaluatorConfig._normalized(evaluator_config)
            self.pool = ForkPool(1, timeout_sec, initializer, max_uses=None, start=False)

        def run(self, runner_inputs):
            jobs = [(self.evaluator_config, str(inp.artifact_path), str(inp.device_type),
                     tuple(arg.as_json() for arg in inp.args_info)) for inp in runner_inputs]
            futures = []
            for status, value in self.pool.map(_run_program, jobs):  # one at a time
                if status == OK:
                    futures.append(LocalRunnerFuture(res=value))
                elif status == TIMEOUT:
                    futures.append(LocalRunnerFuture(error_message=(
                        f"LocalRunner: Timeout, killed after {self.timeout_sec} seconds\n")))
                else:
                    futures.append(LocalRunnerFuture(
                        error_message="LocalRunner: An exception occurred\n" + value))
            return futures

    return ForkRunner


class Measurer:
    """Builds candidates with a persistent builder and times them with MetaSchedule's runner.

    Args:
        target: the `tvm.target.Target` to build for.
        protocol: warm-up/repeat/number/min_repeat_ms/cache_flush (see module docstring).
        tracker: measure through this RPC tracker instead of on this machine; its servers'
            device is checked and described first (`Tracker.device`), and asked again after
            a failed run, as this host's GPU is.
        num_threads: runtime threads for local measurement (TVM_NUM_THREADS).
        build_workers: builder processes.
        build_timeout: seconds before a build is killed.
        run_timeout: seconds before a measurement is killed.
        shared_library: build shared libraries, which the runner loads without linking them
            (default: on this host's GPU; MetaSchedule's tar of objects elsewhere, which an
            RPC server links itself). On this host's CUDA GPU the builders also compile each
            program's kernels (NVRTC) into a cache the runner reads, so neither the link nor
            the compile happens in the process that measures, one program at a time.
        device_lock: a file that measurers of several processes on this host share: their
            programs take turns on the device (see `_exclusive_runner_class`), so several
            tuners can search and build at once while one device times one program at a time.
        runner_cpus: the cores the measuring process runs on (default: all), so that work of
            this process and others on the remaining cores does not preempt it.
        start_builder: start the build workers now (each imports TVM: seconds of a core, for
            CUDA about 10), else at the first build, for a measurer that may never build.
    """

    def __init__(self, target, protocol: dict | None = None, tracker: Tracker | None = None,
                 num_threads: int | None = None, build_workers: int | None = None,
                 build_timeout: float | None = None, run_timeout: float = DEFAULT_RUN_TIMEOUT_SEC,
                 shared_library: bool | None = None, device_lock: str | None = None,
                 runner_cpus: list[int] | None = None, start_builder: bool = True):
        from tvm.s_tir.meta_schedule.runner import EvaluatorConfig

        from datagen.builder import DEFAULT_BUILD_TIMEOUT_SEC, PersistentBuilder
        from datagen.tvm_env import default_num_threads

        if device_lock is not None and tracker is not None:
            raise UserError("a device lock is for measuring on this host, not through an RPC "
                            "tracker")
        self.target = target
        self.protocol = {**DEFAULT_PROTOCOL, **(protocol or {})}
        self.num_threads = num_threads or default_num_threads()
        self.tracker = tracker
        # what a measurer like this one in another process is made with (see `device_lock`)
        self.settings = {"protocol": self.protocol, "num_threads": self.num_threads,
                         "build_timeout": build_timeout, "run_timeout": run_timeout,
                         "shared_library": shared_library}
        self.device_type = "cpu" if target.kind.name == "llvm" else target.kind.name
        self.build_wall = 0.0  # seconds spent building, over the measurer's life
        self.run_wall = 0.0  # seconds spent measuring
        self.stop = None  # a threading.Event: once set, `run_built` stops before the next run
        self.run_timeout = run_timeout
        if tracker is not None:  # before the builder starts its workers
            tracker.check()
            self.device = tracker.device(self.device_type)
        else:
            self.device = local_device(target.kind.name)
        if self.device.get("present") is False:
            raise UserError(
                f"measuring a {target.kind.name} target needs a {target.kind.name} device and "
                "this host has none: run datagen on the GPU host itself, measure through an "
                "RPC tracker (--tracker host:port --key KEY), or build here and measure there "
                "(datagen pack, then python -m datagen.batch_measure on the GPU host, then "
                "datagen ingest)")
        evaluator = EvaluatorConfig(number=self.protocol["number"], repeat=self.protocol["repeat"],
                                    min_repeat_ms=self.protocol["min_repeat_ms"],
                                    enable_cpu_cache_flush=bool(self.protocol.get("cache_flush")))
        on_local_gpu = tracker is None and self.device_type != "cpu"
        if shared_library is None:
            shared_library = on_local_gpu
        self.kernel_cache = tempfile.mkdtemp(prefix="datagen-kernels-") \
            if on_local_gpu and self.device_type == "cuda" else None
        self.builder = PersistentBuilder(target.kind.name, build_workers,
                                         build_timeout or DEFAULT_BUILD_TIMEOUT_SEC,
                                         shared_library, self.kernel_cache, start_builder)
        self._runner = None
        self._runner_args = evaluator, device_lock, runner_cpus

    @property
    def runner(self):
        """The runner: made, and its worker process started (TVM imported there: seconds),
        at its first use, so that a measurer that only reads results back starts none."""
        if self._runner is None:
            self._runner = self._make_runner(*self._runner_args)
        return self._runner

    @runner.setter
    def runner(self, runner) -> None:
        self._runner = runner

    def _make_runner(self, evaluator, device_lock: str | None, runner_cpus: list[int] | None):
        from tvm.s_tir.meta_schedule.runner import RPCConfig, RPCRunner

        if self.tracker is None:
            # set in the runner's worker process only, not in this one
            runner = _fork_runner_class()(self.run_timeout, evaluator, functools.partial(
                _init_runner, self.num_threads, self.kernel_cache, runner_cpus))
            if device_lock is not None:
                runner = _exclusive_runner_class()(runner, device_lock)
            return runner
        from tvm.support.popen_pool import PopenPoolExecutor

        config = RPCConfig(self.tracker.host, self.tracker.port, self.tracker.key,
                           session_timeout_sec=int(math.ceil(self.run_timeout)))
        runner = RPCRunner(config, evaluator, max_workers=1)
        # TVM's RPCRunner waits for its worker without a limit, so a run whose server went
        # away (its request for a session pending for ever) would hang the collection: its
        # worker gets the run timeout, as LocalRunner's does
        unlimited, runner.pool = runner.pool, PopenPoolExecutor(
            max_workers=1, timeout=config.session_timeout_sec)
        unlimited.shutdown(wait=False)
        return runner

    def measure(self, mods: list, retry_cv: float | None = None) -> list[MeasureResult]:
        """Build all scheduled `mods`, then run the built ones one at a time.

        With `retry_cv`, every candidate whose repeats spread more than that (coefficient of
        variation) is run a second time once the whole batch has run, and that measurement
        is kept beside the first as `MeasureResult.retry`.
        """
        return [rounds[0] for rounds in self.remeasure(mods, 1, retry_cv)]

    def remeasure(self, mods: list, rounds: int,
                  retry_cv: float | None = None) -> list[list[MeasureResult]]:
        """Build all `mods` once, then run them interleaved `rounds` times (A B C, A B C, ...),
        so that a slow spell of the machine hits every program alike. Per program, its
        `rounds` results (a program that failed to build: that failure, `rounds` times).
        With `retry_cv`, a last result whose repeats spread more than that is run once more
        at the end (see `measure`)."""
        return self.run_built(mods, self.build(mods), rounds, retry_cv)

    def build(self, mods: list) -> list[tuple]:
        """Build all scheduled `mods` in the builder's processes: per program, its
        (`BuilderResult`, build seconds). Safe to call from another thread while this
        measurer runs programs (what `collect --overlap` does on a GPU)."""
        from tvm.s_tir.meta_schedule.builder import BuilderInput

        start = time.perf_counter()
        built = self.builder.build([BuilderInput(mod, self.target) for mod in mods])
        secs = list(self.builder.last_build_secs)
        self.build_wall += time.perf_counter() - start
        return list(zip(built, secs))

    def run_built(self, mods: list, built: list[tuple], rounds: int = 1,
                  retry_cv: float | None = None) -> list[list[MeasureResult]]:
        """Run programs built by `build` as `remeasure` does, then delete their artifacts.

        Raises:
            UserError: the GPU this host measures on disappeared (nothing of these programs
                is returned, so a caller commits none of them).
            KeyboardInterrupt: `stop` was set (checked before each run).
        """
        from datagen.builder import TIMEOUT_PREFIX, remove_artifact

        results: list[list[MeasureResult]] = [[] for _ in mods]
        try:
            for _ in range(rounds):
                for i, (mod, (res, build_secs)) in enumerate(zip(mods, built)):
                    self._check_stop()
                    if res.error_msg is not None:
                        status = BUILD_TIMEOUT if res.error_msg.startswith(TIMEOUT_PREFIX) \
                            else BUILD_ERROR
                        results[i].append(MeasureResult(status, [],
                                                        res.error_msg[-MAX_ERROR_CHARS:]))
                        continue
                    results[i].append(self._run(mod, res.artifact_path, build_secs))
            if retry_cv is not None:
                for mod, (res, _), runs in zip(mods, built, results):
                    self._check_stop()
                    if runs[-1].status == OK and \
                            latency_stats(runs[-1].latencies)["latency_cv"] > retry_cv:
                        runs[-1].retry = self._run(mod, res.artifact_path, runs[-1].build_secs)
        finally:
            for res, _ in built:
                if res.error_msg is None:
                    remove_artifact(res.artifact_path)
        return results

    def _run(self, mod, artifact_path: str, build_secs: float) -> MeasureResult:
        """Time one built program with the protocol."""
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.meta_schedule.runner import RunnerInput

        runner = self.runner  # its worker started (on first use) before the clock starts
        start = time.perf_counter()
        # arguments as the built function sees them (layout rewrites are undone)
        args_info = ArgInfo.from_entry_func(mod, remove_preproc=True)
        (future,) = runner.run([RunnerInput(artifact_path, self.device_type, args_info)])
        run = future.result()
        run_secs = time.perf_counter() - start
        self.run_wall += run_secs
        if run.error_msg is not None:
            self._check_device()
            return MeasureResult(_classify_run_error(run.error_msg), [],
                                 run.error_msg[-MAX_ERROR_CHARS:], build_secs, run_secs)
        latencies = [float(x) for x in run.run_secs]
        if run_latency(latencies) is None:
            return MeasureResult(RUN_ERROR, latencies, "non-finite latency", build_secs,
                                 run_secs)
        return MeasureResult(OK, latencies, "", build_secs, run_secs)

    def _check_stop(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise KeyboardInterrupt

    def device_lost(self) -> str | None:
        """After a failed run: whether the device it ran on is gone, so that the failure is not
        taken for the program's. None where the device is there (or not checked: this host's
        CPU); where it is gone, what says so ("" for this host's GPU; for RPC, why no server of
        the key gave a session with the device within the run timeout, in parentheses)."""
        if self.tracker is not None:
            try:
                self.tracker.check()
                self.tracker.device(self.device_type, wait=max(self.run_timeout, 1.0))
            except UserError as err:
                return f" ({err})"
            return None
        if self.device_type == "cpu":
            return None
        import tvm

        try:
            present = tvm.device(self.device_type, 0).exist
        except Exception:  # noqa: BLE001  (a lost device may raise rather than answer)
            present = False
        return None if present else ""

    def _check_device(self) -> None:
        lost = self.device_lost()
        if lost is not None:
            raise UserError(f"the {self.device_type} device disappeared while measuring{lost}; "
                            "every round committed before is kept: run the same command again "
                            "when it is back")

    def close(self) -> None:
        """Stop the builder's and the runner's worker processes."""
        self.builder.shutdown()
        from datagen.fork_pool import ForkPool

        pool = getattr(getattr(self._runner, "runner", self._runner), "pool", None)
        if isinstance(pool, ForkPool):
            pool.shutdown()
        elif pool is not None:  # an RPC runner's
            pool.shutdown(wait=False)
        if self.kernel_cache:
            shutil.rmtree(self.kernel_cache, ignore_errors=True)


NETWORK_PROTOCOL = {"number": 1, "repeat": 3, "min_repeat_ms": 100}  # one `time_networks` round
NETWORK_TIMEOUT_SEC = 3600.0


def time_networks(executables: dict, inputs: list, target, rounds: int,
                  protocol: dict | None = None, per_call: bool = False,
                  num_threads: int | None = None,
                  timeout_sec: float = NETWORK_TIMEOUT_SEC) -> dict:
    """Time compiled relax networks on this host as the runner times a task's programs: in a
    worker process of their own, with the runner's threads (`num_threads`, default
    `default_num_threads()`: every core we may use, where the TVM runtime by itself takes half
    the cores of an x86 host), nothing else of this process (a model, a compiler) beside them.

    Args:
        executables: name -> relax `VMExecutable` (exported to shared libraries the worker
            loads), all run on the same `inputs` (numpy arrays).
        target: the target they were built for (its device runs them).
        rounds: rounds of one timing of each network in turn (so every round's networks share
            the machine's state), the order rotated each round (`round_order`), after one
            untimed inference of each.
        protocol: one timing: number / repeat / min_repeat_ms of the VM's `time_evaluator`,
            its median repeat kept (default `NETWORK_PROTOCOL`).
        per_call: in place of `time_evaluator`, one inference a timing with the VM's
            instrument timing every call: per round {"total_s", "spent_s": function -> seconds
            summed over its calls, "calls": function -> calls}.
        num_threads, timeout_sec: the worker's runtime threads; a limit on the whole job.

    Returns:
        name -> per round, seconds per inference (with `per_call`, the dict above).

    Raises:
        RuntimeError: the worker failed or ran past `timeout_sec` (its message).
    """
    from datagen.fork_pool import OK, ForkPool
    from datagen.tvm_env import default_num_threads

    num_threads = num_threads or default_num_threads()
    folder = tempfile.mkdtemp(prefix="datagen-networks-")
    try:
        libraries = {}
        for i, (name, exe) in enumerate(executables.items()):
            libraries[name] = os.path.join(folder, f"network{i}.so")
            exe.export_library(libraries[name])
        pool = ForkPool(1, timeout_sec, _init_runner, (num_threads,), max_uses=None,
                        start=False)
        try:
            ((status, value),) = pool.map(_time_networks_job, [(
                libraries, list(inputs), "cpu" if target.kind.name == "llvm" else
                target.kind.name, rounds, {**NETWORK_PROTOCOL, **(protocol or {})}, per_call,
                num_threads)])
        finally:
            pool.shutdown()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if status != OK:
        raise RuntimeError(f"timing the networks failed ({status}): {value}")
    return value


def round_order(names: list, round_index: int) -> list:
    """The order in which `time_networks` times the networks `names` in round `round_index`:
    rotated by one each round, so that no network always runs first (just after the previous
    round's last), and over a multiple of len(names) rounds each runs at each place alike."""
    shift = round_index % len(names) if names else 0
    return names[shift:] + names[:shift]


def _time_networks_job(libraries: dict, inputs: list, device_type: str, rounds: int,
                       protocol: dict, per_call: bool, num_threads: int) -> dict:
    """`time_networks`' work, in its worker."""
    import numpy as np
    import tvm
    from tvm import relax
    from tvm.runtime.vm import VMInstrumentReturnKind

    if device_type == "cpu" and (threads := tvm.get_global_func("runtime.NumThreads")()) \
            != num_threads:
        raise RuntimeError(f"the TVM runtime here has {threads} runtime threads, not the "
                           f"{num_threads} asked for (TVM_NUM_THREADS is read before its "
                           "thread pool starts)")
    dev = tvm.device(device_type, 0)
    args = [tvm.runtime.tensor(a, dev) for a in inputs]
    vms = {name: relax.VirtualMachine(tvm.runtime.load_module(path), dev)
           for name, path in libraries.items()}
    out: dict = {name: [] for name in vms}
    if not per_call:
        timers = {name: vm.time_evaluator("main", dev, number=protocol["number"],
                                          repeat=protocol["repeat"],
                                          min_repeat_ms=protocol["min_repeat_ms"])
                  for name, vm in vms.items()}
        for vm in vms.values():
            vm["main"](*args)
        for r in range(rounds):
            for name in round_order(list(timers), r):
                out[name].append(float(np.median(timers[name](*args).results)))
        return out
    spent: dict[str, float] = {}
    calls: dict[str, int] = {}
    stack: list[float] = []

    def instrument(func, symbol, before_run, ret_value, *call_args):
        if before_run:
            stack.append(time.perf_counter())
        else:
            spent[symbol] = spent.get(symbol, 0.0) + time.perf_counter() - stack.pop()
            calls[symbol] = calls.get(symbol, 0) + 1
        return VMInstrumentReturnKind.NO_OP

    for vm in vms.values():
        vm.set_instrument(instrument)
        vm["main"](*args)
    for r in range(rounds):
        for name in round_order(list(vms), r):
            vm = vms[name]
            spent.clear()
            calls.clear()
            start = time.perf_counter()
            vm["main"](*args)
            dev.sync()
            out[name].append({"total_s": time.perf_counter() - start, "spent_s": dict(spent),
                              "calls": dict(calls)})
    return out
