"""Workloads from a user's PyTorch model, through torch.export, relax and task extraction."""

import pytest
import torch

from conftest import assert_clean_error, run_cli
from datagen.records import read_records

pytestmark = pytest.mark.slow


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


@pytest.fixture(scope="module")
def pt2(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "smallcnn.pt2"
    program = torch.export.export(SmallCNN().eval(), (torch.randn(1, 3, 8, 8),))
    torch.export.save(program, str(path))
    return str(path)


def test_tasks_become_workloads(pt2):
    import tvm

    from datagen.torch_import import workloads_from_file
    from datagen.tvm_env import make_target

    workloads = workloads_from_file(pt2, make_target(None))
    keys = [w.key for w in workloads]
    assert any("conv2d" in k for k in keys) and any("matmul" in k for k in keys)
    assert all(k.startswith("torch/") and w.network == "smallcnn" for k, w in zip(keys, workloads))
    conv = next(w for w in workloads if "conv2d" in w.key)
    tvm.ir.assert_structural_equal(tvm.ir.load_json(conv.definition()), conv.mod)


def test_collect_from_a_model(pt2, tmp_path):
    out = str(tmp_path / "ds")
    run_cli("collect", "--torch-model", pt2, "--out", out, "--per-workload", "2",
            "--batch-size", "2", "--no-progress", check=True)
    frame = read_records(out)
    assert frame.workload_key.str.startswith("torch/").all()
    assert {"conv2d", "dense"} & set(frame.family)  # anchor families, not "torch"
    assert frame.workload_key.nunique() >= 2
    assert (frame.status == "ok").sum() >= 2


def test_not_an_exported_program(tmp_path):
    bogus = tmp_path / "model.pt2"
    bogus.write_bytes(b"nope")
    assert_clean_error(run_cli("collect", "--torch-model", str(bogus), "--out",
                               str(tmp_path / "ds")), "is not a torch.export program")
