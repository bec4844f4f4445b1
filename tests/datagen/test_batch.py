"""Measuring where the device cannot be reached: pack here, measure with the TVM runtime alone,
ingest; real builds and real measurements (the CPU stands in for the device host)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import CLI_TIMEOUT_SEC, GPU_HERE, assert_clean_error, needs_no_gpu, run_cli
from datagen.devices import NVRTC_PREINCLUDE
from datagen.records import read_records

pytestmark = pytest.mark.slow

DENSE = "dense/m32_n32_k32"
SOFTMAX = "softmax/rows16_cols32"
DRAW = ["--per-workload", "8", "--batch-size", "4", "--repeat", "3", "--min-repeat-ms", "2",
        "--no-progress"]


def measure_runtime_only(batch: str, *args: str) -> subprocess.CompletedProcess:
    """The device-host side, as it runs there: a process that loads only the TVM runtime."""
    env = {**os.environ, "TVM_USE_RUNTIME_LIB": "1", "TVM_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "datagen.batch_measure", batch, "--no-progress",
                           *args], capture_output=True, text=True, env=env,
                          timeout=CLI_TIMEOUT_SEC)


@pytest.fixture(scope="module")
def first_batch(tmp_path_factory):
    """A dataset folder and its first packed batch of two workloads."""
    root = tmp_path_factory.mktemp("batch")
    dataset, batch = str(root / "ds"), str(root / "b1")
    proc = run_cli("pack", DENSE, SOFTMAX, "--dataset", dataset, "--out", batch, *DRAW,
                   check=True)
    assert "8 candidates to measure" in proc.stdout
    return dataset, batch


def test_pack_measure_ingest_round_trip_and_resume(first_batch, tmp_path):
    dataset, batch = first_batch
    manifest = json.load(open(os.path.join(batch, "manifest.json")))
    assert manifest["device_type"] == "cpu" and len(manifest["candidates"]) == 8
    assert all(os.path.isfile(os.path.join(batch, "artifacts", c["artifact"]))
               for c in manifest["candidates"])
    proc = measure_runtime_only(batch)
    assert proc.returncode == 0, proc.stderr
    # the measuring process never loaded TVM's compiler
    check = subprocess.run([sys.executable, "-c", "import tvm, sys; "
                            "print(any('compiler' in str(m) for m in "
                            "open('/proc/self/maps').read().split()))"],
                           capture_output=True, text=True,
                           env={**os.environ, "TVM_USE_RUNTIME_LIB": "1"})
    assert check.stdout.strip() == "False", check.stderr
    # a half-measured run continues where it stopped: keep 3 lines, measure the rest again
    lines = open(os.path.join(batch, "results.jsonl")).read().splitlines()
    firsts = [line for line in lines if not json.loads(line)["retry"]]
    # measured in turns over the workloads (the manifest lists them one after the other)
    workload = {c["index"]: c["workload_key"] for c in manifest["candidates"]}
    assert [c["workload_key"] for c in manifest["candidates"]] == [DENSE] * 4 + [SOFTMAX] * 4
    assert [workload[json.loads(line)["index"]] for line in firsts] == [DENSE, SOFTMAX] * 4
    partial = str(tmp_path / "partial.jsonl")
    with open(partial, "w") as handle:
        handle.write("\n".join(firsts[:3]) + "\n" + firsts[3][:20])  # a torn last line
    proc = measure_runtime_only(batch, "--results", partial)
    assert proc.returncode == 0 and "measured 5 of 8" in proc.stdout, proc.stdout + proc.stderr

    # ingest a results file with 3 measurements: 3 records, 5 wait for theirs
    head = str(tmp_path / "head.jsonl")
    with open(head, "w") as handle:
        handle.write("\n".join(firsts[:3]) + "\n")
    proc = run_cli("ingest", batch, "--dataset", dataset, "--results", head, check=True)
    assert "ingested 3 records" in proc.stdout and "5 not measured yet" in proc.stdout
    # then everything: the 3 are not duplicated
    proc = run_cli("ingest", batch, "--dataset", dataset, check=True)
    assert "ingested 5 records" in proc.stdout and "3 were there already" in proc.stdout
    proc = run_cli("ingest", batch, "--dataset", dataset, check=True)
    assert "ingested 0 records" in proc.stdout
    frame = read_records(dataset)
    assert len(frame) == 8 and frame.trace_hash.is_unique
    ok = frame[frame.status == "ok"]
    assert len(ok) >= 6 and (ok.latency_median > 0).all()
    assert all(json.loads(d)["kind"] == "cpu" for d in ok.device)
    assert ok.num_threads.eq(1).all() and ok.cpu_model.str.len().gt(0).all()

    # the next batch evolves from what came back and never repeats a measured schedule
    batch2 = str(tmp_path / "b2")
    run_cli("pack", DENSE, SOFTMAX, "--dataset", dataset, "--out", batch2, *DRAW, check=True)
    manifest2 = json.load(open(os.path.join(batch2, "manifest.json")))
    assert {c["trace_hash"] for c in manifest2["candidates"]}.isdisjoint(set(frame.trace_hash))
    import pandas as pd

    pending = pd.read_parquet(os.path.join(batch2, "pending.parquet"))
    assert "evolved" in set(pending.origin) and pending["round"].eq(1).all()


def test_results_of_another_batch_are_refused(first_batch, tmp_path):
    dataset, batch = first_batch
    other = str(tmp_path / "other")
    shutil.copytree(batch, other)
    manifest = json.load(open(os.path.join(other, "manifest.json")))
    manifest["batch"] = "0" * 32
    json.dump(manifest, open(os.path.join(other, "manifest.json"), "w"))
    results = os.path.join(batch, "results.jsonl")
    if not os.path.isfile(results):
        assert measure_runtime_only(batch).returncode == 0
    before = len(read_records(dataset)) if os.path.isdir(dataset) else 0
    assert_clean_error(run_cli("ingest", other, "--dataset", dataset, "--results", results),
                       "holds results of batch")
    proc = measure_runtime_only(other, "--results", results)
    assert proc.returncode == 2 and "holds results of batch" in proc.stderr
    assert "Traceback" not in proc.stderr
    after = len(read_records(dataset)) if os.path.isdir(dataset) else 0
    assert after == before


def test_a_changed_workload_is_refused(first_batch, tmp_path):
    import pandas as pd

    dataset, batch = first_batch
    results = os.path.join(batch, "results.jsonl")
    if not os.path.isfile(results):
        assert measure_runtime_only(batch).returncode == 0
    run_cli("ingest", batch, "--dataset", dataset, check=True)
    changed = str(tmp_path / "changed")
    shutil.copytree(batch, changed)
    path = os.path.join(changed, "pending.parquet")
    pending = pd.read_parquet(path)
    before = len(read_records(dataset))
    pending.assign(workload_ir=pending.workload_ir + " ").to_parquet(path)
    assert_clean_error(run_cli("ingest", changed, "--dataset", dataset), "another definition")
    # and results that name other schedules than the batch holds
    pending.assign(trace_hash=pending.trace_hash.str.upper()).to_parquet(path)
    assert_clean_error(run_cli("ingest", changed, "--dataset", dataset), "names schedule")
    assert len(read_records(dataset)) == before


def test_results_or_a_collection_on_another_gpu_are_refused(first_batch, tmp_path):
    """One GPU target tag fits several GPUs (an H200 runs the H100 tag's kernels), so the
    device decides: a dataset of one GPU's records takes no other GPU's, from `ingest` or from
    `collect` (whose `load_state` is checked here, as no GPU is). The results file is rewritten
    as the two GPU hosts would have written it."""
    from datagen.collect import load_state
    from datagen.errors import UserError

    dataset, batch = first_batch
    results = os.path.join(batch, "results.jsonl")
    if not os.path.isfile(results):
        assert measure_runtime_only(batch).returncode == 0
    h100 = {"kind": "cuda", "model": "NVIDIA H100 80GB HBM3", "compute": "9.0"}
    h200 = {**h100, "model": "NVIDIA H200"}

    def measured_on(device: dict) -> str:
        path = str(tmp_path / f"{device['model'].replace(' ', '_')}.jsonl")
        with open(path, "w") as handle:
            for line in open(results).read().splitlines():
                handle.write(json.dumps({**json.loads(line), "device": device}) + "\n")
        return path

    gpu_dataset = str(tmp_path / "ds-h100")
    run_cli("ingest", batch, "--dataset", gpu_dataset, "--results", measured_on(h100),
            check=True)
    before = read_records(gpu_dataset)
    assert set(before.device) == {json.dumps(h100, sort_keys=True)}
    assert_clean_error(run_cli("ingest", batch, "--dataset", gpu_dataset, "--results",
                               measured_on(h200)),
                       f"{gpu_dataset} holds records measured on NVIDIA H100 80GB HBM3, not on "
                       "NVIDIA H200 (this measurement's device)")
    assert read_records(gpu_dataset).equals(before)
    proc = run_cli("ingest", batch, "--dataset", gpu_dataset, "--results", measured_on(h100),
                   check=True)
    assert "ingested 0 records" in proc.stdout  # the same GPU again: nothing new, no error
    # a CPU dataset takes any CPU's records of its target (the target names the CPU)
    run_cli("ingest", batch, "--dataset", dataset, check=True)

    target = json.load(open(os.path.join(batch, "manifest.json")))["target"]
    with pytest.raises(UserError, match="holds records measured on NVIDIA H100 80GB HBM3, not "
                                        r"on NVIDIA H200 .*collect into another folder \(--out\)"):
        load_state(gpu_dataset, target, h200)
    assert sum(st.count for st in load_state(gpu_dataset, target, h100).values()) == len(before)
    assert load_state(dataset, target, {"kind": "cpu", "model": "another CPU"})


@needs_no_gpu
def test_cuda_batch_is_built_here_and_refused_without_a_gpu(tmp_path):
    batch = str(tmp_path / "cuda")
    proc = run_cli("pack", "dense/m64_n64_k64", "--target", "nvidia/nvidia-h100", "--dataset",
                   str(tmp_path / "ds"), "--out", batch, "--per-workload", "4", "--batch-size",
                   "4", "--no-progress", check=True)
    manifest = json.load(open(os.path.join(batch, "manifest.json")))
    assert manifest["device_type"] == "cuda" and manifest["candidates"], proc.stdout
    for cand in manifest["candidates"]:
        assert os.path.getsize(os.path.join(batch, "artifacts", cand["artifact"])) > 0
    proc = measure_runtime_only(batch)
    assert proc.returncode == 2 and "this host has no cuda device" in proc.stderr
    # the runtime alone loaded TVM's CUDA library, which stops at the missing driver (it
    # would otherwise look for no CUDA device at all)
    assert "TVM's cuda runtime library does not load here" in proc.stderr, proc.stderr
    assert "libcuda" in proc.stderr, proc.stderr  # the driver, or the CUDA runtime
    assert "Traceback" not in proc.stderr and not os.path.exists(
        os.path.join(batch, "results.jsonl"))


def test_a_gpu_record_reads_the_cuda_driver_version_from_the_driver(tmp_path):
    """TVM's runtime does not report the CUDA driver API version (its `driver_version` is None
    for CUDA), so `device_description` asks libcuda's `cuDriverGetVersion`. Without a driver:
    None. With a stand-in libcuda.so.1 that answers as CUDA 13.0's does: 13000; one that
    fails: None."""
    from datagen.devices import cuda_driver_version

    if not GPU_HERE:
        assert cuda_driver_version() is None
    gcc = shutil.which("gcc") or pytest.skip("no C compiler for the stand-in driver")

    def driver(answer: str, result: int) -> str:
        folder = tmp_path / f"driver{result}"
        folder.mkdir()
        source = folder / "libcuda.c"
        source.write_text("int cuDriverGetVersion(int *v) { *v = %s; return %d; }\n"
                          % (answer, result))
        subprocess.run([gcc, "-shared", "-fPIC", "-o", str(folder / "libcuda.so.1"),
                        str(source)], check=True)
        proc = subprocess.run([sys.executable, "-c", "from datagen.devices import "
                               "cuda_driver_version; print(cuda_driver_version())"],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "LD_LIBRARY_PATH": str(folder)})
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    assert driver("13000", 0) == "13000"
    assert driver("0", 3) == "None"  # CUDA_ERROR_NOT_INITIALIZED


def test_cuda_builders_that_also_compile_kernels_build_the_same_programs(tmp_path):
    """On a host with a CUDA GPU, `collect`'s builders load each built program once so that
    NVRTC compiles its kernels into a cache the runner reads. Here, with no CUDA runtime, that
    load fails and must change nothing: every program builds into a loadable-looking .so, as
    without the cache (whether the cache is hit can only be seen on a GPU)."""
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from datagen.builder import PersistentBuilder, remove_artifact
    from datagen.sampler import ScheduleSampler
    from datagen.tvm_env import make_target
    from datagen.workloads import from_key

    target = make_target("nvidia/nvidia-h100")
    cands = ScheduleSampler(from_key("dense/m64_n64_k64").mod, target).random(3, 0, set())
    sizes = {}
    for cache in (None, str(tmp_path / "kernels")):
        builder = PersistentBuilder("cuda", 1, 60, shared_library=True, kernel_cache=cache)
        try:
            built = builder.build([BuilderInput(c.mod, target) for c in cands])
            assert [r.error_msg for r in built] == [None] * len(cands)
            sizes[cache] = [os.path.getsize(r.artifact_path) for r in built]
            assert all(r.artifact_path.endswith(".so") for r in built)
            remove_artifact(built[0].artifact_path)
            assert not os.path.exists(built[0].artifact_path)
        finally:
            builder.shutdown()
        # what was built and not deleted goes with the builder
        assert not os.path.exists(built[1].artifact_path)
        assert not os.path.exists(builder.scratch)
    assert sizes[None] == sizes[str(tmp_path / "kernels")]


def test_a_replayed_batch_times_another_devices_schedules_again(first_batch, tmp_path):
    """`pack --replay`: the schedules another device's dataset measured of the workloads, built
    again to be timed on this batch's device, each with its record's round and origin; once
    part of them is ingested into the new dataset, the next replay packs only the rest."""
    import pandas as pd

    dataset, batch = first_batch
    if not os.path.isfile(os.path.join(batch, "results.jsonl")):
        assert measure_runtime_only(batch).returncode == 0
    run_cli("ingest", batch, "--dataset", dataset, check=True)
    source = read_records(dataset)
    source = source[source.status == "ok"].set_index("trace_hash")
    mine, first = str(tmp_path / "mine"), str(tmp_path / "r1")
    run_cli("pack", DENSE, SOFTMAX, "--replay", dataset, "--dataset", mine, "--out", first,
            "--no-progress", check=True)
    pending = pd.read_parquet(os.path.join(first, "pending.parquet")).set_index("trace_hash")
    assert sorted(pending.index) == sorted(source.index)
    columns = ["workload_key", "round", "origin", "parent_hash", "trace"]
    assert pending[columns].sort_index().equals(source[columns].sort_index())

    proc = measure_runtime_only(first)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in open(os.path.join(first, "results.jsonl")).read().splitlines()
             if not json.loads(line)["retry"]]
    head = str(tmp_path / "head.jsonl")
    with open(head, "w") as handle:
        handle.write("\n".join(lines[:3]) + "\n")
    run_cli("ingest", first, "--dataset", mine, "--results", head, check=True)
    second = str(tmp_path / "r2")
    run_cli("pack", DENSE, SOFTMAX, "--replay", dataset, "--dataset", mine, "--out", second,
            "--no-progress", check=True)
    rest = pd.read_parquet(os.path.join(second, "pending.parquet"))
    assert sorted(rest.trace_hash) == sorted(set(source.index) - set(read_records(mine).trace_hash))
    assert len(rest) == len(source) - 3

    run_cli("ingest", first, "--dataset", mine, check=True)
    out = ["--dataset", mine, "--out", str(tmp_path / "r3"), "--no-progress"]
    assert_clean_error(run_cli("pack", DENSE, SOFTMAX, "--replay", dataset, *out),
                       "nothing to pack")
    assert_clean_error(run_cli("pack", "dense/m16_n16_k16", "--replay", dataset, *out),
                       "holds no measured record of dense/m16_n16_k16")
    assert_clean_error(run_cli("pack", DENSE, "--replay", dataset, "--target",
                               "nvidia/nvidia-h100", "--dataset", str(tmp_path / "gpu"),
                               "--out", str(tmp_path / "r3"), "--no-progress"),
                       "of another target")
    assert not (tmp_path / "r3").exists()


def test_pack_into_an_existing_folder_is_one_line(tmp_path):
    (tmp_path / "b").mkdir()
    assert_clean_error(run_cli("pack", DENSE, "--dataset", str(tmp_path / "ds"), "--out",
                               str(tmp_path / "b")), "already exists")
    assert_clean_error(run_cli("ingest", str(tmp_path / "b"), "--dataset",
                               str(tmp_path / "ds")), "is not a packed batch")


def test_a_pack_after_a_batch_not_yet_ingested_draws_around_it(first_batch, tmp_path):
    import pandas as pd

    _, first = first_batch
    dataset, second = str(tmp_path / "ds"), str(tmp_path / "b2")  # drawn from as first was
    run_cli("pack", DENSE, SOFTMAX, "--dataset", dataset, "--out", second, "--after", first,
            *DRAW, check=True)
    drawn = [pd.read_parquet(os.path.join(b, "pending.parquet")) for b in (first, second)]
    assert len(drawn[1]) == 8 and set(drawn[1]["round"]) == {1}
    assert not set(drawn[0].trace_hash) & set(drawn[1].trace_hash)
    # the two batches fill --per-workload 8: a third has nothing left to draw
    assert_clean_error(run_cli("pack", DENSE, SOFTMAX, "--dataset", dataset, "--out",
                               str(tmp_path / "b3"), "--after", first, second, *DRAW),
                       "nothing to pack")
    assert_clean_error(run_cli("pack", DENSE, "--dataset", dataset, "--out",
                               str(tmp_path / "b3"), "--after", str(tmp_path), *DRAW),
                       "--after:")
    assert not (tmp_path / "b3").exists()


def test_draw_workers_below_one_is_one_line(tmp_path):
    assert_clean_error(run_cli("pack", DENSE, "--dataset", str(tmp_path / "ds"), "--out",
                               str(tmp_path / "b"), "--draw-workers", "0"),
                       "--draw-workers must be at least 1")
    assert not (tmp_path / "b").exists()


PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def runtime_site(tmp_path_factory):
    """The tvm package of `datagen runtime-bundle` (no compiler library), unpacked."""
    import tarfile

    root = tmp_path_factory.mktemp("bundle")
    bundle = str(root / "tvm-runtime.tar.gz")
    proc = run_cli("runtime-bundle", bundle, check=True)
    assert "without its compiler" in proc.stdout
    site = root / "site"
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        assert not any(n.endswith("libtvm_compiler.so") for n in names)
        tar.extractall(site, filter="data")
    return str(site)


def run_with_bundle(site: str, code: str, *args: str) -> subprocess.CompletedProcess:
    """Python `code` in a process whose tvm is the bundle's, with the runtime alone."""
    env = {**os.environ, "TVM_USE_RUNTIME_LIB": "1", "PYTHONPATH": f"{site}:{PROJECT}"}
    code = "import sys, tvm; assert tvm.__file__.startswith(sys.argv[1]), tvm.__file__\n" + code
    return subprocess.run([sys.executable, "-c", code, site, *args], capture_output=True,
                          text=True, env=env, timeout=CLI_TIMEOUT_SEC)


def test_a_runtime_bundle_alone_measures_a_batch(first_batch, runtime_site, tmp_path):
    """The isolated device host: the tvm package from the bundle (no compiler library), not
    the installed one, measures a packed batch."""
    _, batch = first_batch
    copy = str(tmp_path / "batch")
    shutil.copytree(batch, copy, ignore=shutil.ignore_patterns("results.jsonl"))
    proc = run_with_bundle(runtime_site, "from datagen.batch_measure import main\n"
                           "sys.exit(main(sys.argv[2:]))", copy, "--no-progress")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "measured 8 of 8" in proc.stdout


def test_the_runtime_alone_compiles_kernels_for_the_batch_architecture(runtime_site, tmp_path):
    """With the runtime alone there is no `Target.current` (a compiler-library function), which
    TVM's own CUDA compile callback asks for the architecture: the measuring side's callback
    passes the batch target's instead (a stand-in records what NVRTC is asked: NVRTC and the
    CUDA headers are not installed here)."""
    from datagen.tvm_env import make_target, target_json

    code = """import json
import tvm.support.nvcc as nvcc, tvm_ffi
from tvm.target import Target
from datagen.devices import CUDA_COMPILE_CALLBACK, cuda_arch, use_kernel_cache
try:
    Target.current(allow_none=True)
    print("Target.current works")
except AttributeError:
    print("no Target.current")
asked = []
nvcc.compile_cuda = lambda code, **options: asked.append(options) or b"cubin"
use_kernel_cache(sys.argv[3], cuda_arch(json.loads(sys.argv[2]), None))
binary = tvm_ffi.get_global_func(CUDA_COMPILE_CALLBACK)("__global__ void k() {}")
print(bytes(binary).decode(), json.dumps(asked))
"""
    proc = run_with_bundle(runtime_site, code, target_json(make_target("nvidia/nvidia-h100")),
                           str(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second = proc.stdout.splitlines()
    assert first == "no Target.current"
    binary, asked = second.split(" ", 1)
    assert binary == "cubin"
    (asked,) = json.loads(asked)
    assert {k: asked[k] for k in ("target_format", "arch", "compiler")} == {
        "target_format": "cubin", "arch": "sm_90a", "compiler": "nvrtc"}
    include = str(tmp_path / "cache" / "include")
    assert asked["options"] == [f"-I{include}", f"--pre-include={NVRTC_PREINCLUDE}", "--pch"]


def test_nvrtc_compiler_goes_on_without_precompiled_headers_where_nvrtc_refuses_them(
        tmp_path, monkeypatch, capsys):
    """An NVRTC older than 12.8 knows no `--pch`: the kernel is compiled without, and so are the
    next ones; a kernel that fails either way raises its own error and changes nothing (a
    stand-in for NVRTC that refuses any option)."""
    from tvm.support import nvcc

    from datagen.devices import NVRTC_STD_HEADERS, NvrtcCompiler

    asked = []

    def old_nvrtc(code, target_format, arch, compiler, options=None):
        asked.append(options)
        if options or "bad" in code:
            raise RuntimeError(f"NVRTC compilation failed: {code}")
        return b"cubin of " + code.encode()

    monkeypatch.setattr(nvcc, "compile_cuda", old_nvrtc)
    compile_fn = NvrtcCompiler("sm_90a", str(tmp_path / "include"))
    with open(tmp_path / "include" / NVRTC_PREINCLUDE) as f:
        assert f.read().splitlines() == [f"#include <{h}>" for h in NVRTC_STD_HEADERS]
    with pytest.raises(RuntimeError, match="bad kernel"):
        compile_fn("bad kernel")
    assert len(asked) == 2 and asked[0] and asked[1] is None
    assert compile_fn.pch and not capsys.readouterr().err
    assert compile_fn("k1") == b"cubin of k1"  # refused with --pch: compiled without
    assert not compile_fn.pch
    said = capsys.readouterr().err.splitlines()  # once, in a line the logs keep
    assert len(said) == 1 and said[0].startswith("NVRTC refused the precompiled standard "
                                                 "headers (NVRTC compilation failed: k1)")
    assert compile_fn("k2") == b"cubin of k2" and asked[-1] is None and len(asked) == 5
    assert not capsys.readouterr().err


def test_warm_up_precompiles_with_every_kernels_options_and_never_raises(tmp_path,
                                                                          monkeypatch):
    """A builder's worker warms NVRTC up as it starts (`use_kernel_cache(..., warm_up=True)`):
    an empty kernel, compiled with the options every kernel gets, so that the precompiled
    header NVRTC keeps is the one the first real kernel reuses. Where NVRTC fails (not
    installed, no GPU to ask the architecture) the warm-up says nothing and changes nothing,
    and the first kernel reports its own error (a stand-in for NVRTC)."""
    import tvm_ffi
    from tvm.support import nvcc

    from datagen.devices import (CUDA_COMPILE_CALLBACK, WARM_UP_KERNEL, NvrtcCompiler,
                                 use_kernel_cache)

    asked = []
    working = True

    def nvrtc(code, target_format, arch, compiler, options=None):
        asked.append((code, arch, options))
        if not working:
            raise RuntimeError(f"NVRTC compilation failed: {code}")
        return b"cubin of " + code.encode()

    monkeypatch.setattr(nvcc, "compile_cuda", nvrtc)
    previous = tvm_ffi.get_global_func(CUDA_COMPILE_CALLBACK, allow_missing=True)
    try:
        use_kernel_cache(str(tmp_path / "cache"), "sm_90a", warm_up=True)
        include = str(tmp_path / "cache" / "include")
        pch = [f"-I{include}", f"--pre-include={NVRTC_PREINCLUDE}", "--pch"]
        assert asked == [(WARM_UP_KERNEL, "sm_90a", pch)]
        assert not list((tmp_path / "cache").glob("*.bin"))  # not a kernel to keep
        callback = tvm_ffi.get_global_func(CUDA_COMPILE_CALLBACK)
        assert bytes(callback("k1")) == b"cubin of k1" and asked[-1] == ("k1", "sm_90a", pch)
    finally:
        if previous is not None:
            tvm_ffi.register_global_func(CUDA_COMPILE_CALLBACK, previous, override=True)

    working = False
    compile_fn = NvrtcCompiler(None, str(tmp_path / "include"))
    compile_fn.warm_up()  # fails both ways, silently
    assert compile_fn.pch and asked[-2:] == [(WARM_UP_KERNEL, None, compile_fn.pch_options),
                                             (WARM_UP_KERNEL, None, None)]
    with pytest.raises(RuntimeError, match="k2"):
        compile_fn("k2")


def cuda_toolkit_for_nvrtc() -> str | None:
    """A CUDA toolkit's folder with its headers where NVRTC is installed, else None."""
    import glob

    try:
        from cuda.bindings import nvrtc  # noqa: F401
    except ImportError:
        return None
    found = [os.environ["CUDA_PATH"]] if os.environ.get("CUDA_PATH") else \
        sorted(glob.glob("/usr/local/cuda*"), reverse=True)
    return next((d for d in found if os.path.isfile(os.path.join(d, "include",
                                                                 "cuda_runtime.h"))), None)


def test_nvrtc_with_precompiled_headers_gives_tvms_own_cubin(tmp_path, monkeypatch):
    """Real NVRTC (where it and a CUDA toolkit's headers are installed; CI has neither):
    drawn CUDA candidates of three families compile to the same bytes with the standard
    headers precompiled (by the warm-up, before the first of them) as with TVM's own NVRTC
    compilation."""
    toolkit = cuda_toolkit_for_nvrtc()
    if toolkit is None:
        pytest.skip("needs NVRTC (cuda-bindings, nvidia-cuda-nvrtc) and a CUDA toolkit's headers")
    monkeypatch.setenv("CUDA_PATH", toolkit)
    from tvm.s_tir.meta_schedule.builder.local_builder import default_build
    from tvm.support import nvcc

    from datagen.devices import NvrtcCompiler
    from datagen.sampler import ScheduleSampler
    from datagen.suites import resolve
    from datagen.tvm_env import make_target

    target = make_target("nvidia/nvidia-h100")
    sources = []
    for workload in resolve(["dense/m64_n64_k64", "conv2d/h14_w14_ci32_co32_k3_stride1_pad1",
                             SOFTMAX]):
        for cand in ScheduleSampler(workload.mod, target).random(2, 0, set()):
            sources.append(default_build(cand.mod, target, None).imports[0].inspect_source())
    compile_fn = NvrtcCompiler("sm_90a", str(tmp_path / "include"))
    compile_fn.warm_up()  # as a builder's worker does: the header precompiled before any kernel
    for code in sources:
        ours = bytes(compile_fn(code))
        assert ours == bytes(nvcc.compile_cuda(code, target_format="cubin", arch="sm_90a",
                                               compiler="nvrtc"))
    assert compile_fn.pch  # NVRTC precompiled the headers, it did not fall back


def test_kernel_cache_compiles_each_source_once(tmp_path):
    """The measuring side compiles CUDA sources ahead in parallel processes and then loads
    every kernel from a cache keyed by its source (a stand-in compiler counts the calls: NVRTC
    itself needs the GPU host)."""
    from concurrent.futures import ThreadPoolExecutor

    from datagen.devices import cache_kernel_compiles

    calls = []

    def compile_fn(code):
        calls.append(code)
        return code.upper().encode()

    compile_cached = cache_kernel_compiles(str(tmp_path / "cache"), compile_fn)
    assert bytes(compile_cached("__global__ void a()")) == b"__GLOBAL__ VOID A()"
    with ThreadPoolExecutor(4) as pool:
        again = list(pool.map(compile_cached, ["__global__ void a()"] * 8))
    assert all(bytes(b) == b"__GLOBAL__ VOID A()" for b in again) and len(calls) == 1
    other = cache_kernel_compiles(str(tmp_path / "cache"), compile_fn)  # another process
    assert bytes(other("__global__ void a()")) == b"__GLOBAL__ VOID A()" and len(calls) == 1
    assert bytes(other("__global__ void b()")) == b"__GLOBAL__ VOID B()" and len(calls) == 2


def test_rounds_drawn_in_worker_processes_equal_rounds_drawn_here():
    """`pack` draws each workload's round in a worker process: the same candidates, in the same
    order, as drawing them here, for a first (random) round and a later (evolved) one."""
    import copy
    import dataclasses

    from datagen.batch import draw_rounds
    from datagen.collect import CollectConfig, WorkloadState
    from datagen.suites import resolve
    from datagen.tvm_env import make_target

    cfg = CollectConfig(out="unused", workloads=resolve([DENSE, SOFTMAX]),
                        target=make_target(None), per_workload=8, batch_size=4)

    def drawn(states: dict, workers: int) -> list[tuple]:
        found = draw_rounds(dataclasses.replace(cfg, draw_workers=workers),
                            copy.deepcopy(states), progress=False)
        for w, definition, cand, _ in found:  # each with its workload and a module to build
            assert definition == w.definition() and cand.mod is not None
        return [(w.key, c.trace_hash, c.trace_json, c.origin, round_)
                for w, _, c, round_ in found]

    first = drawn({}, 1)
    assert len(first) == 8 and drawn({}, 2) == first
    states: dict[str, WorkloadState] = {}
    for key, digest, trace, _, _ in first:  # as if the first round had been measured
        st = states.setdefault(key, WorkloadState())
        st.count, st.rounds = st.count + 1, 1
        st.seen.add(digest)
        st.measured.append((1e-3 * st.count, trace))
    second = drawn(states, 1)
    assert drawn(states, 2) == second
    assert {origin for *_, origin, _ in second} == {"random", "evolved"}
    assert {round_ for *_, round_ in second} == {1}
    assert not {c[1] for c in second} & {c[1] for c in first}


def test_kernels_of_a_target_without_arch_are_compiled_for_the_device():
    from types import SimpleNamespace

    from datagen.devices import cuda_arch

    assert cuda_arch({"kind": "cuda", "arch": "sm_80"}, None) == "sm_80"
    assert cuda_arch({"kind": "cuda"}, SimpleNamespace(compute_version="9.0")) == "sm_90a"
    assert cuda_arch({"kind": "cuda"}, SimpleNamespace(compute_version="8.6")) == "sm_86"


def test_kernels_compile_ahead_in_measuring_order_off_the_measuring_core(first_batch, tmp_path):
    """The measuring side compiles CUDA kernels in worker processes while it measures: each
    module is ready in measuring order, the workers run on every core but the measuring
    process's, and a module that does not load is reported, not waited for (here the workers
    load the CPU batch's modules: the same mechanism without CUDA)."""
    import time

    from datagen.batch_measure import CompileAhead

    _, batch = first_batch
    manifest = json.load(open(os.path.join(batch, "manifest.json")))
    paths = [os.path.join(batch, "artifacts", c["artifact"]) for c in manifest["candidates"]]
    broken = tmp_path / "broken.so"
    broken.write_bytes(b"not a shared library")
    cpus = os.sched_getaffinity(0)
    ahead = CompileAhead(paths + [str(broken)], 2)
    try:
        assert [ahead.wait(i) for i in range(len(paths) + 1)] == [True] * len(paths) + [False]
        deadline = time.time() + 60
        while ahead.busy() and time.time() < deadline:
            time.sleep(0.05)
        assert not ahead.busy() and ahead.secs > 0 and ahead.loaded() == len(paths)
        if len(cpus) > 1:
            assert os.sched_getaffinity(0) == {max(cpus)}
            workers = [p.pid for p in ahead._pool._pool]
            assert len(workers) == 2
            while time.time() < deadline and any(  # each pins itself when it starts
                    os.sched_getaffinity(pid) != cpus - {max(cpus)} for pid in workers):
                time.sleep(0.05)
            assert all(os.sched_getaffinity(pid) == cpus - {max(cpus)} for pid in workers)
    finally:
        ahead.close()
    assert os.sched_getaffinity(0) == cpus



@needs_no_gpu
def test_compiling_workers_that_cannot_set_up_do_not_stall_the_measuring(first_batch, tmp_path):
    """Where the compiling workers cannot load TVM's CUDA runtime (here: no CUDA driver), each
    module is reported not compiled at once (measuring then reports the error), rather than a
    pool starting failing workers again and again while the measuring waits."""
    import time

    from datagen.batch_measure import CompileAhead

    _, batch = first_batch
    manifest = json.load(open(os.path.join(batch, "manifest.json")))
    paths = [os.path.join(batch, "artifacts", c["artifact"]) for c in manifest["candidates"]]
    start = time.time()
    ahead = CompileAhead(paths, 2, str(tmp_path / "cache"), "sm_90a")
    try:
        assert [ahead.wait(i) for i in range(len(paths))] == [False] * len(paths)
    finally:
        ahead.close()
    assert time.time() - start < 30

def test_inputs_are_fresh_and_in_range():
    import numpy as np
    import tvm

    from datagen.batch_measure import _inputs

    rng = np.random.default_rng(0)
    info = [["TENSOR", "float32", [64, 32]], ["TENSOR", "float16", [8]],
            ["TENSOR", "int32", [16]]]
    first = [t.numpy() for t in _inputs(info, tvm.cpu(), rng)]
    again = [t.numpy() for t in _inputs(info, tvm.cpu(), rng)]
    assert [a.dtype for a in first] == [np.float32, np.float16, np.int32]
    assert all(a.shape == tuple(s) for a, (_, _, s) in zip(first, info))
    assert first[0].min() >= -1 and first[0].max() < 1 and first[0].std() > 0.5
    assert first[2].min() >= 0 and first[2].max() < 8
    assert not np.array_equal(first[0], again[0])  # each candidate its own values


def test_a_sample_of_candidates_timed_while_compiling_is_timed_again(first_batch, tmp_path):
    """Candidates timed while CUDA kernels compiled on the other cores are marked, and a sample
    of them is timed again at the end, quietly, so their effect on the timings can be read off
    the records (first and retry latencies). Here every first timing is marked by hand: the CPU
    batch compiles nothing."""
    from datagen.batch_measure import AUDIT_COMPILING

    _, batch = first_batch
    copy = str(tmp_path / "batch")
    shutil.copytree(batch, copy, ignore=shutil.ignore_patterns("results.jsonl"))
    assert measure_runtime_only(copy).returncode == 0
    results = os.path.join(copy, "results.jsonl")
    firsts = [json.loads(line) for line in open(results) if not json.loads(line)["retry"]]
    assert not any(line["compiling"] for line in firsts)  # nothing compiled alongside
    assert all(line["load_secs"] >= 0 and line["inputs_secs"] >= 0 for line in firsts)
    with open(results, "w") as handle:
        for line in firsts:
            handle.write(json.dumps({**line, "compiling": True}) + "\n")
    proc = measure_runtime_only(copy)
    assert proc.returncode == 0, proc.stderr
    ok = sum(line["status"] == "ok" for line in firsts)
    assert AUDIT_COMPILING >= ok and f"measured 0 of 8 candidates ({ok} again" in proc.stdout
    lines = [json.loads(line) for line in open(results)]
    again = [line for line in lines if line["retry"]]
    assert sorted(line["index"] for line in again) == sorted(
        line["index"] for line in firsts if line["status"] == "ok")
    assert not any(line["compiling"] for line in again)


# The device is lost after the third candidate: from then on each timing fails and the
# runtime finds no such device, as when a GPU falls off the bus (the CPU stands in for it).
LOSE_THE_DEVICE = """
import sys
import tvm
from datagen import batch_measure
real_measure, real_device, timed = batch_measure.measure_one, tvm.device, []

class Gone:
    exist = False

def measure_one(*args):
    timed.append(1)
    if len(timed) <= 3:
        return real_measure(*args)
    return {"status": "run_error", "latencies": [], "error": "device lost", "run_secs": 0.0,
            "load_secs": None, "inputs_secs": None}

def device(*args):
    return Gone() if len(timed) > 3 else real_device(*args)

batch_measure.measure_one, tvm.device = measure_one, device
sys.exit(batch_measure.main(sys.argv[1:]))
"""


def test_a_device_lost_mid_batch_is_one_line_and_keeps_what_was_measured(first_batch, tmp_path):
    _, batch = first_batch
    mine = str(tmp_path / "b")
    shutil.copytree(batch, mine, ignore=shutil.ignore_patterns("results.jsonl"))
    env = {**os.environ, "TVM_USE_RUNTIME_LIB": "1", "TVM_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", LOSE_THE_DEVICE, mine, "--no-progress"],
                          capture_output=True, text=True, env=env, timeout=CLI_TIMEOUT_SEC)
    assert_clean_error(proc, "the cpu device disappeared after 3 candidates; they are kept in",
                       prog="datagen.batch_measure")
    lines = [json.loads(line) for line in open(os.path.join(mine, "results.jsonl"))]
    assert len(lines) == 3 and not any(line["retry"] for line in lines)
    proc = measure_runtime_only(mine)  # the device is back: the same command goes on
    assert proc.returncode == 0 and "measured 5 of 8" in proc.stdout, proc.stdout + proc.stderr
    firsts = [json.loads(line) for line in open(os.path.join(mine, "results.jsonl"))
              if not json.loads(line)["retry"]]
    assert sorted(line["index"] for line in firsts) == list(range(8))
    assert firsts[:3] == lines
