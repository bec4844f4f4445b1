"""Workers forked from the server that imported TVM: they run as children of the caller would
(its environment, folder and cores), a job past its time limit is killed and the next one gets
a fresh worker, errors come back as text, and a worker is recycled after its uses."""

import os
import time

from datagen.fork_pool import ERROR, FORK_SAFE_ENV, OK, TIMEOUT, ForkPool


def test_workers_take_the_callers_environment_folder_and_cores(tmp_path, monkeypatch):
    monkeypatch.setenv("FORK_POOL_TEST", "here")
    monkeypatch.chdir(tmp_path)
    cores = sorted(os.sched_getaffinity(0))[:1]
    before = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, cores)
    try:
        pool = ForkPool(1, 60)
    finally:
        os.sched_setaffinity(0, before)
    try:
        assert pool.map(os.getenv, [("FORK_POOL_TEST",)]) == [(OK, "here")]
        assert pool.map(os.getcwd, [()]) == [(OK, str(tmp_path))]
        assert pool.map(os.sched_getaffinity, [(0,)]) == [(OK, set(cores))]
        (status, text), = pool.map(int, [("not a number",)])
        assert status == ERROR and text.startswith("ValueError: invalid literal")
    finally:
        pool.shutdown()
    assert pool.pids() == []


def _server_state() -> tuple[dict, bool]:
    """In a worker: the environment its server started with, and whether importing TVM there
    loaded tvm_ffi's torch extension (the import that asks a CUDA torch for the GPU)."""
    import sys

    with open(f"/proc/{os.getppid()}/environ", "rb") as handle:
        environ = dict(entry.decode().split("=", 1) for entry in handle.read().split(b"\0")
                       if b"=" in entry)
    return environ, hasattr(sys.modules["tvm_ffi._optional_torch_c_dlpack"], "_LIB")


def test_the_server_imports_tvm_without_starting_cuda(monkeypatch):
    """On a GPU host, workers forked from a server that started CUDA fail every build and
    device query ("initialization error"): the server imports TVM with tvm_ffi's torch
    extension off and torch's CUDA check on NVML. The workers fork from that server, so they
    hold its modules as imported there."""
    for name in FORK_SAFE_ENV:
        monkeypatch.delenv(name, raising=False)
    pool = ForkPool(1, 60)
    try:
        (status, (environ, loaded)), = pool.map(_server_state, [()])
    finally:
        pool.shutdown()
    assert status == OK
    assert {name: environ.get(name) for name in FORK_SAFE_ENV} == FORK_SAFE_ENV
    assert not loaded


def test_a_job_past_its_limit_is_killed_and_the_next_gets_a_fresh_worker():
    pool = ForkPool(1, 0.5, max_uses=2)
    try:
        (status, pid), = pool.map(os.getpid, [()])
        assert status == OK and pool.pids() == [pid]
        start = time.monotonic()
        assert pool.map(time.sleep, [(30,)]) == [(TIMEOUT, None)]
        assert time.monotonic() - start < 10 and pool.pids() == []  # killed, not waited for
        results = pool.map(os.getpid, [(), (), ()])
        pids = [p for _, p in results]
        assert all(s == OK for s, _ in results) and pid not in pids
        assert pids[0] == pids[1] != pids[2]  # recycled after max_uses jobs
    finally:
        pool.shutdown()


def test_a_temporary_folder_too_long_for_a_socket_still_starts_the_server(tmp_path):
    """multiprocessing makes the fork server's socket in TMPDIR, and a socket's path has at
    most 107 bytes: under a longer TMPDIR the server's socket goes to the system's /tmp, and
    nothing is left in TMPDIR once the process ends."""
    import subprocess
    import sys

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    code = ("from datagen.fork_pool import ForkPool\n"
            "pool = ForkPool(1, 60)\n"
            "print(pool.map(len, [('abc',)]))\n"
            "pool.shutdown()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "TMPDIR": str(deep)}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[('ok', 3)]"
    assert not list(deep.iterdir())
