"""Shared helpers: run the real CLI and benchmark scripts, and a loopback RPC tracker with a server."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time

import psutil
import pytest

CLI_TIMEOUT_SEC = 600
# an NVIDIA GPU's driver is here: the tests of what a host without a GPU does are skipped (where
# a GPU is, those commands would measure on it, which is not what they check)
GPU_HERE = os.path.exists("/dev/nvidiactl")
needs_no_gpu = pytest.mark.skipif(GPU_HERE, reason="checks a host without a GPU; this has one")


def pytest_configure(config):
    """The build workers and the trainings of every test fork from one server
    (`datagen.fork_pool`), which imports what both need, whichever comes first (the fast lane
    trains nothing: its server imports TVM alone)."""
    from datagen.fork_pool import fork_context
    from training.cli import FIT_PRELOAD

    if config.option.markexpr != "not slow":
        fork_context(*FIT_PRELOAD)


# each command's entry point, as pyproject.toml installs it
COMMANDS = {"datagen": ("datagen.cli", "main"), "tune": ("tuning.cli", "main"),
            "train": ("training.cli", "main"), "costmodel": ("costmodel.cli", "main")}


def run_cli(*args: str, cwd=None, check: bool = False, prog: str = "datagen",
            env: dict | None = None, isolated: bool = False) -> subprocess.CompletedProcess:
    """Run `PROG ARGS...` (datagen, tune, ...) as a user would, returning the finished process
    (`env`: environment variables set beside this process's).

    The entry point runs in this process, as the installed script calls it, its output
    captured and its exit status returned (an exception it lets out: status 1 and its traceback
    on stderr, as the script would end), which spares each call a second import of TVM and
    torch. It runs in a process of its own with `isolated`, a `cwd` or an `env`, and always
    for `train` (LightningCLI seeds and configures process-wide state).
    """
    module, func = COMMANDS[prog]
    if isolated or cwd is not None or env or prog == "train":
        code = f"import sys; from {module} import {func}; sys.exit({func}(sys.argv[1:]))"
        proc = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd,
                              env={**os.environ, **env} if env else None,
                              capture_output=True, text=True, timeout=CLI_TIMEOUT_SEC)
    else:
        proc = _run_here(module, func, prog, list(args))
    if check and proc.returncode != 0:
        raise AssertionError(f"{prog} {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def _run_here(module: str, func: str, prog: str, args: list[str]) -> subprocess.CompletedProcess:
    import importlib

    entry = getattr(importlib.import_module(module), func)
    return _captured([prog, *args], lambda: entry(args) or 0)


BENCH_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


def bench_module(script: str):
    """The bench script `script` (bench/ is no package) as a module, loaded from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(os.path.splitext(script)[0],
                                                  os.path.join(BENCH_DIR, script))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_bench(script: str, *args: str, cwd=None, isolated: bool = False,
              timeout: float = CLI_TIMEOUT_SEC) -> subprocess.CompletedProcess:
    """Run `python bench/SCRIPT ARGS...` (in `cwd`), returning the finished process.

    The script runs in this process as `__main__` (its sibling scripts importable, its output
    captured, its exit status returned), which spares a second import of TVM and torch; in a
    process of its own with `isolated`, for what starts workers, tunes or measures.
    """
    import runpy

    path = os.path.join(BENCH_DIR, script)
    if isolated:
        return subprocess.run([sys.executable, path, *args], cwd=cwd, capture_output=True,
                              text=True, timeout=timeout)
    argv, search, here = sys.argv, list(sys.path), os.getcwd()
    sys.argv, sys.path[:0] = [path, *args], [BENCH_DIR]
    try:
        if cwd is not None:
            os.chdir(cwd)
        return _captured([script, *args], lambda: runpy.run_path(path, run_name="__main__"))
    finally:
        sys.argv, sys.path[:] = argv, search
        os.chdir(here)


def _captured(argv: list[str], entry) -> subprocess.CompletedProcess:
    """`entry()` with its output captured and its exit status, as a process would end."""
    import io
    import traceback

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = entry()
        except SystemExit as stop:  # argparse's usage errors, --help, sys.exit(main())
            status = stop.code
            if status is not None and not isinstance(status, int):
                print(status, file=err)  # as Python prints SystemExit("message"), exit 1
                status = 1
        except Exception:  # noqa: BLE001  (what the script would print before exiting 1)
            traceback.print_exc(file=err)
            status = 1
    status = int(status) if isinstance(status, int) else 0  # run_path returns the globals
    return subprocess.CompletedProcess(argv, status, out.getvalue(), err.getvalue())


def assert_clean_error(proc: subprocess.CompletedProcess, match: str,
                       prog: str = "datagen") -> None:
    """Exit status 2 and one line on stderr that names the problem, no traceback."""
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith(f"{prog}: error:")]
    assert len(lines) == 1, proc.stderr
    assert match in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


def tiny_mlp():
    """A two-layer perceptron (16 -> 32 -> 8, a ReLU between) in eval mode: a network of two
    tasks to export with `torch.export` (its input: a (4, 16) tensor)."""
    import torch

    class TinyMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    return TinyMLP().eval()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kill_tree(proc: subprocess.Popen) -> None:
    """Stop a process and every child it left (TVM's RPC leaves popen workers behind)."""
    try:
        parent = psutil.Process(proc.pid)
        procs = parent.children(recursive=True) + [parent]
    except psutil.NoSuchProcess:
        procs = []
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=10)
    proc.wait(timeout=10)


SERVER_AFTER_TRACKER_SEC = 1.5


@contextlib.contextmanager
def loopback_rpc():
    """A TVM RPC tracker and one CPU server registered under key 'loopback-cpu'; on exit both
    are stopped with every process they started."""
    port = free_port()
    key = "loopback-cpu"
    env = {**os.environ, "TVM_NUM_THREADS": "1"}
    tracker = subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host",
                                "127.0.0.1", "--port", str(port), "--port-end",
                                str(port + 1)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    # both import TVM at once; the server tries the tracker once imported, then every 5 s:
    # started a little later, its first try finds the tracker listening
    time.sleep(SERVER_AFTER_TRACKER_SEC)
    server = subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_server", "--tracker",
                               f"127.0.0.1:{port}", "--key", key, "--host", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                              start_new_session=True)
    try:
        deadline = time.time() + 60
        while key not in _tracker_summary(port):
            assert tracker.poll() is None, "the RPC tracker exited at start"
            assert server.poll() is None, "the RPC server exited at start"
            if time.time() > deadline:
                raise TimeoutError("RPC server did not register with the tracker")
            time.sleep(0.2)
        yield {"address": f"127.0.0.1:{port}", "key": key, "procs": [tracker, server]}
    finally:
        for proc in (server, tracker):
            kill_tree(proc)


def _tracker_summary(port: int) -> str:
    """The tracker's summary as text ("" while it does not listen yet)."""
    from tvm import rpc

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return ""
    return str(rpc.connect_tracker("127.0.0.1", port).summary())


@pytest.fixture(scope="module")
def rpc_tracker():
    """`loopback_rpc` shared by a module's tests (none of which stops it)."""
    with loopback_rpc() as info:
        yield info


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory) -> str:
    """A real dataset: 12 measured schedules of each workload of the 'tiny' suite, measured on
    one runtime thread: the tests that learn from its labels run beside another test worker, and
    a kernel of a few microseconds on two threads, one of them descheduled by that neighbour,
    was once measured a thousand times slower (labels no model can learn)."""
    out = str(tmp_path_factory.mktemp("tiny") / "ds")
    run_cli("collect", "tiny", "--out", out, "--per-workload", "12", "--batch-size", "6",
            "--repeat", "3", "--min-repeat-ms", "5", "--threads", "1", "--no-progress",
            check=True, isolated=True)
    return out


CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "graphsage.yaml")


def train_tiny(*args: str, cwd, config: str = CONFIG,
               command_line: bool = False) -> subprocess.CompletedProcess:
    """`train fit` in `cwd` on the tiny dataset's layout: softmax held out, a small network.

    It runs in a process of its own, forked from the server that imported Lightning, torch and
    TVM once (`training.cli.train_process`); with `command_line`, as the `train` command started
    anew (what DDP's launcher needs: it starts the command line again for each process)."""
    argv = ["fit", "--config", config, "--data.split", "family", "--data.test_families",
            "[softmax]", "--data.val_fraction", "0.5", "--model.hidden", "16", *args]
    if command_line:
        return subprocess.run([sys.executable, "-m", "training.cli", *argv], cwd=cwd,
                              capture_output=True, text=True, timeout=CLI_TIMEOUT_SEC)
    from training.cli import train_process

    return train_process(argv, cwd=str(cwd))


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_dataset, tmp_path_factory) -> str:
    """A real checkpoint: 3 epochs of `train fit` on the tiny dataset."""
    import glob

    work = tmp_path_factory.mktemp("train")
    proc = train_tiny("--data.dataset", tiny_dataset, "--trainer.max_epochs", "3", cwd=work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (ckpt,) = glob.glob(str(work / "runs" / "graphsage" / "checkpoints" / "*.ckpt"))
    assert glob.glob(str(work / "runs" / "graphsage" / "**" / "config.yaml"), recursive=True)
    return ckpt


def another_cpu_copy(dataset: str, folder, mcpu: str) -> str:
    """A copy of `dataset` that claims to be measured on CPU `mcpu`: another CPU's dataset
    of the same programs."""
    import json

    return _changed_copy(dataset, folder, "target",
                         lambda text: json.dumps({**json.loads(text), "mcpu": mcpu}))


def renamed_copy(dataset: str, folder, prefix: str) -> str:
    """A copy of `dataset` with every workload key under `prefix`: the same programs on the
    same target collected under other keys (as a generated task that is a network's layer)."""
    return _changed_copy(dataset, folder, "workload_key", lambda key: prefix + key)


def _changed_copy(dataset: str, folder, column: str, change) -> str:
    """A copy of `dataset`'s shards in `folder` with `change` applied to each `column` value."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from datagen.records import shard_paths

    folder.mkdir()
    for path in shard_paths(dataset):
        table = pq.read_table(path)
        i = table.schema.get_field_index(column)
        values = pa.array([change(v) for v in table[column].to_pylist()], pa.string())
        table = table.set_column(i, table.schema.field(i), values)
        pq.write_table(table, folder / os.path.basename(path))
    return str(folder)
