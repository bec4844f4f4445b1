"""Measurers of several processes that share a device lock take turns on the device; integer
arguments are indices in range; whole networks are timed in a worker with the threads asked
for."""

import json
import subprocess
import sys

import pytest

from conftest import tiny_mlp
from datagen.errors import UserError

# one process: draw and build 3 schedules, wait until the other process has built too, then
# time them (each program at least 3 x 50 ms) and print the intervals its runner held the lock;
# one runtime thread and a long time limit, so that a busy machine (other tests beside this one)
# slows the timing down but does not fail it
CHILD = """
import json, os, sys, time
from datagen.measure import Measurer
from datagen.sampler import ScheduleSampler
from datagen.suites import resolve
from datagen.tvm_env import make_target

lock, sync, me = sys.argv[1:4]
target = make_target(None)
mods = [c.mod for c in ScheduleSampler(resolve(["dense/m32_n32_k32"])[0].mod, target)
        .random(3, int(me), set())]
measurer = Measurer(target, protocol={"repeat": 3, "min_repeat_ms": 50}, build_workers=1,
                    device_lock=lock, num_threads=1, run_timeout=120)
built = measurer.build(mods)
open(os.path.join(sync, me), "w").close()
while len(os.listdir(sync)) < 2:
    time.sleep(0.02)
runs = measurer.run_built(mods, built)
measurer.close()
print(json.dumps({"held": measurer.runner.held, "status": [r[0].status for r in runs],
                  "errors": [r[0].error[-300:] for r in runs]}))
"""


@pytest.mark.slow
def test_measurers_sharing_a_device_lock_never_run_programs_at_once(tmp_path):
    sync = tmp_path / "ready"
    sync.mkdir()
    lock = str(tmp_path / "device.lock")
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, lock, str(sync), str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert all(o["status"] == ["ok"] * 3 for o in outs), outs
    held = sorted((start, end, i) for i, o in enumerate(outs) for start, end in o["held"])
    assert len(held) == 6 and {i for *_, i in held} == {0, 1}
    # both started timing at the same moment: without the lock their programs would overlap
    for (_, end, _), (start, _, _) in zip(held, held[1:]):
        assert end <= start


def test_a_device_lock_is_for_this_hosts_device():
    from datagen.measure import Measurer, Tracker
    from datagen.tvm_env import make_target

    with pytest.raises(UserError, match="not through an RPC tracker"):
        Measurer(make_target(None), tracker=Tracker("127.0.0.1", 9, "key"),
                 device_lock="lock")


@pytest.mark.slow
def test_networks_are_timed_in_a_worker_with_the_threads_asked_for(tmp_path):
    """The TVM runtime by itself runs half an x86 host's cores; a tuner's runner runs every
    core, so the networks it tuned are timed with the runner's threads, in a worker of their
    own (the worker refuses to time with any other count)."""
    import torch
    import tvm
    from tvm import relax

    from datagen.measure import time_networks
    from datagen.torch_import import relax_module
    from datagen.tvm_env import make_target

    target = make_target(None)
    x = torch.randn(4, 16)
    mod = relax_module(torch.export.export(tiny_mlp(), (x,)), target)
    with target:
        exe = relax.build(mod, target=target)
    # one more than this process's runtime runs: the worker's count is not the default's
    threads = tvm.get_global_func("runtime.NumThreads")() + 1
    timed = time_networks({"a": exe, "b": exe}, [x.numpy()], target, rounds=2,
                          protocol={"repeat": 1, "min_repeat_ms": 1}, num_threads=threads)
    assert sorted(timed) == ["a", "b"] and all(len(v) == 2 and min(v) > 0
                                               for v in timed.values())
    calls = time_networks({"a": exe}, [x.numpy()], target, rounds=1, per_call=True,
                          num_threads=threads)["a"]
    assert len(calls) == 1 and 0 < sum(calls[0]["spent_s"].values()) < calls[0]["total_s"]
    assert all(n == 1 for s, n in calls[0]["calls"].items() if not s.startswith("vm.builtin."))


def test_networks_take_turns_at_each_place_in_a_round():
    from datagen.measure import round_order

    orders = [round_order(["a", "b", "c"], r) for r in range(6)]
    assert orders[:3] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert orders[3:] == orders[:3]  # over 3 rounds each network runs first, second and last once
    assert round_order(["a"], 5) == ["a"] and round_order([], 1) == []


def test_integer_arguments_are_in_range_indices_and_floats_random():
    import numpy as np
    import tvm

    from datagen.measure import alloc_arguments

    info = (("TENSOR", "float32", [64]), ("TENSOR", "int64", [16]), ("TENSOR", "int32", [4]))
    (floats, ints64, ints32), = alloc_arguments(tvm.cpu(), info, 1)
    values = floats.numpy()
    assert values.min() >= 1 and values.max() <= 10 and len(set(values.tolist())) > 1
    assert not ints64.numpy().any() and not ints32.numpy().any()


@pytest.mark.slow
def test_a_gather_is_measured_not_killed():
    """An embedding lookup (`take` with int64 indices, fast mode: no bounds check) timed by
    the runner: with TVM's fill its indices were far out of the table and the worker died."""
    import tvm
    from tvm import te, topi

    from datagen.measure import OK, Measurer
    from datagen.tvm_env import make_target

    table = te.placeholder((30522, 256), "float32", name="table")
    ids = te.placeholder((1, 128), "int64", name="ids")
    out = topi.take(table, ids, axis=0, mode="fast")
    mod = tvm.IRModule({"main": te.create_prim_func([table, ids, out])})
    measurer = Measurer(make_target(None), protocol={"repeat": 3, "min_repeat_ms": 5},
                        build_workers=1, num_threads=1)
    try:
        (result,) = measurer.measure([mod])
    finally:
        measurer.close()
    assert result.status == OK, result.error
    assert 0 < min(result.latencies) < 1e-2
