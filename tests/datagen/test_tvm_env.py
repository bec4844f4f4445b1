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


def _registered(kind: str, how: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", DUMP, kind, how], capture_output=True,
                          text=True, timeout=300, check=True)
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["llvm", "cuda"])
def test_intrinsics_parse_the_same_without_frame_sources(kind):
    ours, theirs = _registered(kind, "ours"), _registered(kind, "theirs")
    assert len(theirs) >= 10
    assert ours == theirs
