"""bench/gpu_host.sh, the GPU host's side of a short stretch, rehearsed with the CPU standing in
for the GPU: a kit made by hand as `kit` makes it (the runtime bundle, the compiler in two
pieces, a packed batch), `measure` timing the batch with the runtime alone, `tune` joining the
compiler and starting the tuning bench, and the order of the two refused in one line."""

import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from conftest import CLI_TIMEOUT_SEC, needs_no_gpu, run_cli

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "gpu_host.sh")


def host(*args: str, host_dir) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPU_HOST_DIR": str(host_dir), "PYTHON": sys.executable}
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=CLI_TIMEOUT_SEC)


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """kit/measure and kit/tune as `gpu_host.sh kit` lays them out, and the packed batch."""
    import tvm

    root = tmp_path_factory.mktemp("kit")
    batch = root / "b1"
    run_cli("pack", "dense/m32_n32_k32", "--dataset", str(root / "ds"), "--out", str(batch),
            "--per-workload", "4", "--batch-size", "4", "--repeat", "2", "--min-repeat-ms", "1",
            "--no-progress", check=True)
    measure, tune = root / "kit" / "measure", root / "kit" / "tune"
    measure.mkdir(parents=True)
    tune.mkdir()
    run_cli("runtime-bundle", str(measure / "tvm-runtime.tar.xz"), check=True)
    with tarfile.open(measure / "batch.tar.xz", "w:xz") as tar:
        tar.add(batch / "manifest.json", arcname="b1/manifest.json")
        tar.add(batch / "artifacts", arcname="b1/artifacts")
    compiler = os.path.join(os.path.dirname(tvm.__file__), "lib", "libtvm_compiler.so")
    packed = subprocess.run(["xz", "-0", "-T0", "-c", compiler], capture_output=True,
                            check=True).stdout
    half = len(packed) // 2
    (measure / "compiler.xz.00").write_bytes(packed[:half])
    (tune / "compiler.xz.01").write_bytes(packed[half:])
    return root, compiler


@needs_no_gpu
def test_measure_then_tune_on_one_host(kit, tmp_path):
    root, compiler = kit
    host_dir = tmp_path / "host"
    proc = host("tune", str(root / "kit" / "tune"), str(tmp_path / "r"), "60", host_dir=host_dir)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: no compiler piece kept on this host: run measure first, on the same host"]

    # a step stopped at its time limit: one line, exit status 2, what it measured kept
    proc = host("measure", str(root / "kit" / "measure"), str(tmp_path / "r0"), "1",
                host_dir=tmp_path / "stopped")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: stopped after 1 s: every "
                                                           "line measured is in")

    proc = host("measure", str(root / "kit" / "measure"), str(tmp_path / "r1"),
                host_dir=host_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "measured 4 of 4 candidates" in proc.stdout
    run_cli("ingest", str(root / "b1"), "--dataset", str(root / "ds"), "--results",
            str(tmp_path / "r1" / "results.jsonl"), check=True)
    # the runtime alone measured: the host's tvm package has no compiler until `tune`
    site_lib = host_dir / "site" / "tvm" / "lib"
    assert not (site_lib / "libtvm_compiler.so").exists()

    # tune joins the compiler again and runs the tuning bench, which on this CPU host refuses
    # the GPU part in one line; it starts from an earlier stretch's results carried in the kit,
    # and what its folder holds comes back as RESULTS/tuning.tar.xz
    earlier = tmp_path / "earlier" / "tuning-gpu" / "pairs"
    earlier.mkdir(parents=True)
    (earlier / "conv2d__seed0.json").write_text("{}")
    with tarfile.open(root / "kit" / "tune" / "earlier.tar.xz", "w:xz") as tar:
        tar.add(tmp_path / "earlier" / "tuning-gpu", arcname="tuning-gpu")
    proc = host("tune", str(root / "kit" / "tune"), str(tmp_path / "r2"), "300",
                host_dir=host_dir)
    assert proc.returncode == 1
    assert "needs a cuda device and this host has none" in proc.stderr
    assert "Traceback" not in proc.stderr
    with open(site_lib / "libtvm_compiler.so", "rb") as joined, open(compiler, "rb") as orig:
        assert joined.read() == orig.read()
    with tarfile.open(tmp_path / "r2" / "tuning.tar.xz") as tar:
        assert "./tuning-gpu/pairs/conv2d__seed0.json" in tar.getnames()
    # run from the source tree, the checkpoints are importable as their package
    assert os.path.islink(os.path.join(ROOT, "costmodel", "checkpoints"))
    shutil.rmtree(host_dir)


@needs_no_gpu
def test_a_kit_without_a_batch_only_readies_the_host_for_tune(kit, tmp_path):
    """A stretch that only tunes (`kit - KIT`): `measure` unpacks the runtime and keeps the
    compiler piece that `tune` needs, and measures nothing."""
    root, _ = kit
    measure = tmp_path / "measure"
    shutil.copytree(root / "kit" / "measure", measure)
    os.remove(measure / "batch.tar.xz")
    host_dir = tmp_path / "host"
    proc = host("measure", str(measure), str(tmp_path / "r"), host_dir=host_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no batch in this kit: the runtime unpacked and the compiler piece kept for tune" \
        in proc.stdout
    assert (host_dir / "stash" / "compiler.xz.00").is_file()
    assert (host_dir / "site" / "tvm" / "__init__.py").is_file()
    assert not (tmp_path / "r" / "results.jsonl").exists()


def test_usage_and_a_kit_folder_that_exists_are_one_line(tmp_path):
    proc = host("deploy", host_dir=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: usage: gpu_host.sh")
    proc = host("kit", str(tmp_path), str(tmp_path), host_dir=tmp_path)
    assert proc.returncode == 2
    assert "is not a packed batch" in proc.stderr and "give - for a kit without one" in proc.stderr
