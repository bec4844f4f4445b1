"""The persistent builder starts its worker processes as it is made and leaves none behind."""

import time

import psutil


def _workers() -> list[psutil.Process]:
    workers = []
    for child in psutil.Process().children():
        try:
            if "tvm.exec.popen_worker" in child.cmdline():
                workers.append(child)
        except psutil.NoSuchProcess:
            pass
    return workers


def test_the_workers_start_before_the_first_build_and_end_at_shutdown():
    from datagen.builder import PersistentBuilder

    before = {p.pid for p in _workers()}
    builder = PersistentBuilder("llvm", 2)
    try:
        deadline = time.monotonic() + 120
        started = []
        while time.monotonic() < deadline:
            started = [p for p in _workers() if p.pid not in before]
            if len(started) == 2:
                break
            time.sleep(0.2)
        assert len(started) == 2, f"{len(started)} of 2 workers started without a build"
    finally:
        builder.shutdown()
    _, alive = psutil.wait_procs(started, timeout=15)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
