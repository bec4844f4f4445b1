"""Measurers of several processes that share a device lock take turns on the device."""

import json
import subprocess
import sys

import pytest

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
