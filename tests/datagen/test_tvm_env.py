"""The tensor intrinsics that `load_tensor_intrinsics` registers are TVM's own.

TVM's own import of them takes about two minutes a backend here (each `@T.prim_func` walks
every loaded module for each caller frame), so what it registers is recorded once per TVM
version in `data/tensor_intrinsics.json` (structural hashes, the same in every process) and
the test compares with that; under another TVM version it imports them TVM's way again.
`python tests/datagen/test_tvm_env.py` records them anew.
"""

import json
import os
import subprocess
import sys

import pytest

RECORDED = os.path.join(os.path.dirname(__file__), "data", "tensor_intrinsics.json")
KINDS = ("llvm", "cuda")

# prints {intrinsic name: [hash of desc, hash of impl]} for the names the backend modules define
DUMP = """
import importlib, inspect, json, sys
import tvm, tvm.s_tir, tvm_ffi
from tvm.s_tir import TensorIntrin
kind, ours = sys.argv[1], sys.argv[2] == "ours"
stack = inspect.stack
if ours:
    from datagen.tvm_env import load_tensor_intrinsics
    load_tensor_intrinsics(kind)
    assert inspect.stack is stack, "inspect.stack was not restored"
hashes = {}
for name in {"llvm": ["x86", "arm_cpu"], "cuda": ["cuda"]}[kind]:
    module = importlib.import_module("tvm.s_tir.tensor_intrin." + name)
    for value in vars(module).values():
        if isinstance(value, str) and TensorIntrin.get(value, allow_missing=True) is not None:
            intrin = TensorIntrin.get(value)
            hashes[value] = [tvm_ffi.structural_hash(intrin.desc),
                             tvm_ffi.structural_hash(intrin.impl)]
print(json.dumps(hashes))
"""


def dumps(runs: list[tuple[str, str]]) -> dict:
    """{(kind, how): the dump} of the interpreters `runs` names, run side by side."""
    procs = {(kind, how): subprocess.Popen([sys.executable, "-c", DUMP, kind, how],
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True)
             for kind, how in runs}
    out = {}
    for key, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 0, stderr[-3000:]
        out[key] = json.loads(stdout.splitlines()[-1])
    return out


def record() -> dict:
    """TVM's own intrinsics of each kind, as this TVM registers them."""
    import tvm

    theirs = dumps([(kind, "theirs") for kind in KINDS])
    return {"tvm_version": tvm.__version__, **{kind: theirs[kind, "theirs"] for kind in KINDS}}


@pytest.fixture(scope="module")
def registered() -> dict:
    """{(kind, how): the dump}: ours imported here, TVM's own from the record of this TVM
    version (imported TVM's way where the record is of another)."""
    import tvm

    with open(RECORDED) as f:
        recorded = json.load(f)
    if recorded["tvm_version"] != tvm.__version__:
        recorded = record()
    return {**dumps([(kind, "ours") for kind in KINDS]),
            **{(kind, "theirs"): recorded[kind] for kind in KINDS}}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["llvm", "cuda"])
def test_intrinsics_parse_the_same_without_frame_sources(kind, registered):
    ours, theirs = registered[kind, "ours"], registered[kind, "theirs"]
    assert len(theirs) >= 10
    assert ours == theirs


if __name__ == "__main__":
    with open(RECORDED, "w") as f:
        json.dump(record(), f, indent=0, sort_keys=True)
        f.write("\n")
