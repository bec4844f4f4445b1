"""The persistent builder starts its worker processes as it is made and leaves none behind."""

import os
import threading
import time

import psutil
import pytest


def test_the_workers_start_before_the_first_build_and_end_at_shutdown():
    from datagen.builder import PersistentBuilder

    builder = PersistentBuilder("llvm", 2)
    try:
        started = [psutil.Process(pid) for pid in builder.worker_pids()]
        assert len(started) == 2, f"{len(started)} of 2 workers started without a build"
    finally:
        builder.shutdown()
    _, alive = psutil.wait_procs(started, timeout=15)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert builder.worker_pids() == []


@pytest.mark.slow
def test_a_builder_told_not_to_start_starts_its_workers_at_the_first_build():
    """A measurer that may never build (the tuning benchmark's own, with the runs side by side
    in processes of their own) starts no worker process, each of which would import TVM on a
    core the runs search on, until it builds."""
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from datagen.builder import PersistentBuilder, remove_artifact
    from datagen.suites import resolve
    from datagen.tvm_env import make_target

    builder = PersistentBuilder("llvm", 2, start=False)
    try:
        assert builder.worker_pids() == []
        (w,) = resolve(["dense/m32_n32_k32"])
        (res,) = builder.build([BuilderInput(w.mod, make_target(None))])
        assert res.error_msg is None and os.path.getsize(res.artifact_path) > 0
        assert builder.worker_pids()
        remove_artifact(res.artifact_path)
    finally:
        builder.shutdown()


SLOW_LINKER = """#!/bin/sh
case "$*" in *-dumpmachine*) exec g++ "$@";; esac
mktemp "${TMPDIR:-/tmp}/ccXXXXXX.res"  # a temporary file, as gcc's collect2 makes
sleep 120
exec g++ "$@"
"""


@pytest.mark.slow
def test_a_build_killed_mid_link_leaves_no_temporary_file(tmp_path, monkeypatch):
    """`shutdown` during a build kills the compiler the build runs, and that compiler's own
    temporary files (gcc's, made in TMPDIR) are in the builder's folder, deleted with it: a
    collection stopped while its next wave links leaves nothing behind (a host compiler that
    makes a temporary file, then takes its time, stands in for the linker)."""
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from datagen.builder import PersistentBuilder
    from datagen.suites import resolve
    from datagen.tvm_env import make_target

    linker = tmp_path / "slow-cxx"
    linker.write_text(SLOW_LINKER)
    linker.chmod(0o755)
    tmpdir = tmp_path / "tmp"  # what the builder's workers inherit as TMPDIR
    tmpdir.mkdir()
    monkeypatch.setenv("CXX", str(linker))
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    builder = PersistentBuilder("llvm", 1, 300, shared_library=True)
    mod = resolve(["dense/m32_n32_k32"])[0].mod
    build = threading.Thread(target=builder.build, args=([BuilderInput(mod, make_target(None))],))
    build.start()
    try:
        deadline = time.monotonic() + 120
        made = []
        while not made and time.monotonic() < deadline:
            made = list(tmpdir.rglob("*.res")) + list(
                p for p in (os.path.join(d, f) for d, _, fs in os.walk(builder.scratch)
                            for f in fs) if p.endswith(".res"))
            time.sleep(0.1)
        assert made, "the build never reached its linker"
    finally:
        builder.shutdown()
    build.join(60)
    assert not build.is_alive()
    assert not list(tmpdir.rglob("*")), list(tmpdir.rglob("*"))
    assert not os.path.exists(builder.scratch)
    left = []
    for proc in psutil.process_iter(["cmdline"]):
        if str(linker) in " ".join(proc.info["cmdline"] or ()):
            left.append(proc)
    _, alive = psutil.wait_procs(left, timeout=15)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
