"""Workloads from real networks: extraction, deduplication, provenance, the shipped catalogue."""

import json

import pytest
import torch

from conftest import assert_clean_error, run_cli
from datagen import networks
from datagen.suites import get_suite, resolve
from datagen.torch_import import task_pattern


class TwoConvs(torch.nn.Module):
    """Two identical conv+ReLU blocks (one task, weight 2), a depthwise conv and a dense layer."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        x = torch.relu(self.b(torch.relu(self.a(x))))
        return self.fc(self.dw(x).mean((2, 3)))


def _inputs(size):
    return f"1x8x{size}x{size}", lambda: (torch.randn(1, 8, size, size),)


def _broken():
    raise RuntimeError("this model does not build")


REGISTRY = {
    "two-convs": networks.Network("two-convs", TwoConvs, (_inputs(8), _inputs(6)), "torch"),
    "same-again": networks.Network("same-again", TwoConvs, (_inputs(8),), "torch"),
    "broken": networks.Network("broken", _broken, (_inputs(8),), "torch"),
}


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    from datagen.tvm_env import make_target

    path = str(tmp_path_factory.mktemp("cat") / "tasks.jsonl.gz")
    result = networks.extract(["two-convs", "same-again", "broken"], make_target(None), path,
                              progress=False, registry=REGISTRY)
    return path, result


@pytest.mark.slow
def test_tasks_are_deduplicated_across_networks_with_every_source(catalog):
    path, result = catalog
    assert list(result["failed"]) == ["broken"] and "does not build" in result["failed"]["broken"]
    workloads = networks.load_catalog(path)
    assert result["tasks"] == len(workloads) and len({w.key for w in workloads}) == len(workloads)
    assert result["networks"] == 2  # the two that built
    families = {w.family for w in workloads}
    assert {"conv2d", "depthwise_conv2d", "dense"} <= families
    # the 8x8 conv+ReLU occurs twice in each network: one task, both networks, weights summed
    convs = [w for w in workloads if w.family == "conv2d"]
    shared = [w for w in convs if w.network == "same-again,two-convs"]
    assert len(shared) == 1
    assert sorted(shared[0].sources) == [("same-again", "1x8x8x8", 2), ("two-convs", "1x8x8x8", 2)]
    assert shared[0].weight == 4
    recorded = json.loads(shared[0].params_json)["sources"]
    assert sorted(s["network"] for s in recorded) == ["same-again", "two-convs"]
    # the 6x6 input is another task of two-convs only
    assert any(w.network == "two-convs" and w.sources[0][1] == "1x8x6x6" for w in convs)
    suites = networks.network_suites(path)
    assert set(suites) == {"networks", "networks-anchored", "net-two-convs", "net-same-again"}
    assert all(w.family != "elementwise" for w in suites["networks-anchored"])
    assert shared[0] in suites["net-two-convs"] and shared[0] in suites["net-same-again"]


def test_shipped_catalogue_has_the_breadth_of_real_networks():
    workloads = networks.load_catalog()
    nets = {n for w in workloads for n in w.network.split(",")}
    assert len(workloads) >= 300 and len(nets) >= 12
    assert len({w.key for w in workloads}) == len(workloads)
    assert all(w.key.startswith("torch/") and w.sources for w in workloads)
    # suites resolve by name, and a key resolves to the same workload
    suite = get_suite("net-resnet50")
    assert suite and resolve([suite[0].key]) == [suite[0]]
    assert len(get_suite("networks")) == len(workloads)


def test_family_of_a_task_name():
    assert task_pattern("fused_conv2d13_subtract8_add16_relu8") == "conv2d_subtract_add_relu"
    assert task_pattern("max_pool2d") == "max_pool2d"


def test_unknown_network_is_one_line(tmp_path):
    assert_clean_error(run_cli("networks", "--extract", "resnet9000", "--catalog",
                               str(tmp_path / "c.jsonl.gz")), "unknown network(s) resnet9000")
