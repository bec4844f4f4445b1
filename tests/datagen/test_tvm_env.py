"""The tensor intrinsics that `load_tensor_intrinsics` registers are TVM's own."""

import json
import subprocess
import sys

import pytest

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


@pytest.fixture(scope="module")
def registered() -> dict:
    """{(kind, how): the dump}, the four interpreters run side by side: each spends most of a
    minute importing TVM's tensor intrinsics, on one core."""
    procs = {(kind, how): subprocess.Popen([sys.executable, "-c", DUMP, kind, how],
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True)
             for kind in ("llvm", "cuda") for how in ("ours", "theirs")}
    out = {}
    for key, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stderr[-3000:]
        out[key] = json.loads(stdout.splitlines()[-1])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["llvm", "cuda"])
def test_intrinsics_parse_the_same_without_frame_sources(kind, registered):
    ours, theirs = registered[kind, "ours"], registered[kind, "theirs"]
    assert len(theirs) >= 10
    assert ours == theirs
