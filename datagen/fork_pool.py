"""Worker processes forked from a server that imported TVM once, each running one job at a time
within a time limit.

Every worker of TVM's `PopenPoolExecutor` is a new interpreter that imports TVM (seconds of a
core: the TVM library, and torch, which TVM's FFI imports first). The workers of a `ForkPool`
are forked from multiprocessing's fork server instead, a process that imported TVM once
(`FORK_PRELOAD`, and whatever else `fork_context` was asked for before it started) and lives as
long as the process that started it: a worker starts in a fraction of a second, however many
pools a process makes. A worker gets the caller's environment, folder and cores (`os.environ`,
`os.getcwd()`, its affinity) as it starts, not the server's, so it runs as a child of the caller
would. A job that overruns its time limit has its worker killed with every process below it (a
compiler, a linker), and the slot starts a fresh worker for its next job; so does a worker that
died, and one that ran `max_uses` jobs (long-lived TVM processes accumulate memory).
"""

from __future__ import annotations

import os
import queue
import threading
import time
import traceback

import psutil

FORK_PRELOAD = ["tvm", "datagen.builder"]
# The server must never start CUDA: a process forked from one that did gets "initialization
# error" from every CUDA call, so on a GPU host every build (NVRTC) and every device query of
# its workers fails. Importing tvm_ffi asks a CUDA torch whether a GPU is there (and loads its
# DLPack extension for it), and torch's default check initialises the CUDA driver; with these
# the import leaves torch alone, and any later check asks NVML, which is safe to fork after.
FORK_SAFE_ENV = {"TVM_FFI_DISABLE_TORCH_C_DLPACK": "1", "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
# the longest path of a Unix socket on Linux (108 bytes with its NUL), which the fork server's
# socket in multiprocessing's temporary folder must fit: "pymp-XXXXXXXX/listener-XXXXXXXX"
MAX_SOCKET_PATH = 107
SOCKET_NAME = len("/pymp-xxxxxxxx/listener-xxxxxxxx")
READY_TIMEOUT_SEC = 600  # a worker's start (its initializer: a target's intrinsics, NVRTC's headers)
OK, TIMEOUT, ERROR = "ok", "timeout", "error"

_preload: list[str] = []
_context = None


def fork_context(*preload: str):
    """multiprocessing's fork-server context, its server (started by the first process forked
    from it, once per process) importing `FORK_PRELOAD` and every module asked for so far,
    in an environment that keeps it off CUDA (`FORK_SAFE_ENV`, set in this process's too)."""
    import multiprocessing

    global _context
    for name, value in FORK_SAFE_ENV.items():  # the server inherits them as it starts
        os.environ[name] = value
    for module in (*FORK_PRELOAD, *preload):
        if module not in _preload:
            _preload.append(module)
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
    _context.set_forkserver_preload(list(_preload))  # used only if the server is not running
    _socket_folder()
    return _context


def _socket_folder() -> str:
    """multiprocessing's temporary folder of this process, where the fork server's socket is
    made: in TMPDIR, as multiprocessing makes it, unless TMPDIR's path is too long for a socket
    (the server would not start: "AF_UNIX path too long"), then in the system's /tmp. Made
    once per process (and removed at its exit, as multiprocessing does)."""
    import tempfile
    from multiprocessing import util

    if len(tempfile.gettempdir()) + SOCKET_NAME <= MAX_SOCKET_PATH:
        return util.get_temp_dir()
    chosen, tempfile.tempdir = tempfile.tempdir, "/tmp"
    try:
        return util.get_temp_dir()  # unless made before this call
    finally:
        tempfile.tempdir = chosen


def kill_process_tree(pid: int) -> list[psutil.Process]:
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


def wait_ended(processes: list[psutil.Process], timeout: float) -> None:
    """Wait until every one of `processes` has ended (gone, or a zombie not yet reaped)."""
    def running(process: psutil.Process) -> bool:
        try:
            return process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + timeout
    while any(running(p) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.01)


def pin_threads(cpus: list[int]) -> None:
    """Pin every thread of this process to `cpus`, not only the calling one (thread pools
    that a parent or an import started run on whatever cores they had)."""
    for thread in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(thread), cpus)
        except OSError:  # a thread that ended meanwhile
            pass


def _worker(conn, environ: dict, cwd: str, cpus: list[int], initializer, initargs) -> None:
    """A forked worker: the caller's environment, folder and cores, its initializer, then each
    job it is sent, answered (OK, result) or (ERROR, the exception and its traceback)."""
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    pin_threads(cpus)
    try:
        if initializer is not None:
            initializer(*initargs)
        conn.send((OK, None))
    except BaseException:  # noqa: BLE001  (said to the pool, which reports it per job)
        conn.send((ERROR, traceback.format_exc()))
        return
    while True:
        try:
            job = conn.recv()
        except EOFError:  # the pool is gone
            return
        if job is None:
            return
        func, args = job
        try:
            answer = (OK, func(*args))
        except BaseException as err:  # noqa: BLE001
            answer = (ERROR, f"{type(err).__name__}: {err}\n{traceback.format_exc()}")
        conn.send(answer)


class ForkPool:
    """`workers` forked worker processes (see the module doc) running `map`'s jobs.

    Args:
        workers: how many jobs run at once.
        timeout_sec: a job running longer is killed (its worker with it) and reported TIMEOUT.
        initializer, initargs: run in each worker as it starts.
        max_uses: a worker that ran this many jobs is ended; the next job starts a new one
            (None: never).
        start: start every worker now (its initializer runs while the caller goes on), else
            at its first job.
    """

    def __init__(self, workers: int, timeout_sec: float, initializer=None, initargs=(),
                 max_uses: int | None = 256, start: bool = True):
        self.workers = workers
        self.timeout_sec = timeout_sec
        self._init = (initializer, tuple(initargs))
        self.max_uses = max_uses
        self._slots: list[dict | None] = [None] * workers
        self._lock = threading.Lock()  # one `map` at a time
        self._closed = False
        if start:
            for slot in range(workers):
                self._start(slot)

    def _start(self, slot: int) -> dict:
        context = fork_context()
        mine, theirs = context.Pipe()
        process = context.Process(
            target=_worker, daemon=True,
            args=(theirs, dict(os.environ), os.getcwd(), sorted(os.sched_getaffinity(0)),
                  *self._init))
        process.start()
        theirs.close()
        self._slots[slot] = {"process": process, "conn": mine, "uses": 0, "ready": False}
        return self._slots[slot]

    def pids(self) -> list[int]:
        """The process ids of the workers running now."""
        return [s["process"].pid for s in self._slots
                if s is not None and s["process"].is_alive()]

    def _end(self, slot: int) -> None:
        """Kill the worker of `slot` and everything it started."""
        worker, self._slots[slot] = self._slots[slot], None
        if worker is not None:
            wait_ended(kill_process_tree(worker["process"].pid), timeout=5)
            worker["conn"].close()
            worker["process"].join(5)

    def _run(self, slot: int, func, args) -> tuple[str, object]:
        worker = self._slots[slot]
        if worker is None or not worker["process"].is_alive():
            self._end(slot)
            if self._closed:
                return ERROR, "the pool was shut down"
            worker = self._start(slot)
        try:
            if not worker["ready"]:
                if not worker["conn"].poll(READY_TIMEOUT_SEC):
                    raise EOFError("the worker did not start")
                status, value = worker["conn"].recv()
                if status != OK:
                    self._end(slot)
                    return ERROR, f"the worker failed to start: {value}"
                worker["ready"] = True
            worker["conn"].send((func, args))
            if not worker["conn"].poll(self.timeout_sec):
                self._end(slot)
                return TIMEOUT, None
            answer = worker["conn"].recv()
        except (EOFError, OSError) as err:  # it died (killed by `shutdown`, or crashed)
            code = worker["process"].exitcode
            self._end(slot)
            return ERROR, f"the worker process ended (exit code {code}: {err or 'no answer'})"
        worker["uses"] += 1
        if self.max_uses is not None and worker["uses"] >= self.max_uses:
            worker["conn"].send(None)
            self._end(slot)
        return answer

    def map(self, func, jobs: list[tuple]) -> list[tuple[str, object]]:
        """`func(*job)` for every job, up to `workers` at once: per job in order, (OK, its
        result), (TIMEOUT, None) or (ERROR, the error as text)."""
        if self._closed:
            raise RuntimeError("the pool is shut down")
        results: list[tuple[str, object] | None] = [None] * len(jobs)
        todo: queue.Queue = queue.Queue()
        for item in enumerate(jobs):
            todo.put(item)

        def serve(slot: int) -> None:
            while not self._closed:
                try:
                    i, job = todo.get_nowait()
                except queue.Empty:
                    return
                results[i] = self._run(slot, func, job)

        with self._lock:
            threads = [threading.Thread(target=serve, args=(slot,), daemon=True)
                       for slot in range(min(self.workers, len(jobs)))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        return [r if r is not None else (ERROR, "the pool was shut down") for r in results]

    def shutdown(self) -> None:
        """Kill every worker, a job in progress with it (the processes it started too); a `map`
        in progress returns with those jobs failed and the others not run."""
        self._closed = True
        for slot in range(self.workers):
            self._end(slot)
