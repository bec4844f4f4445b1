"""Splits hold out whole workloads: the sides never share one, and each split holds out what
it names."""

import pandas as pd
import pytest

from datagen.errors import UserError
from training.data import split_workloads
from training.evaluate import choose_sides

FAMILIES = {"dense": 5, "conv2d": 6, "softmax": 3, "pool2d": 1}


def frame() -> pd.DataFrame:
    """Three records of each workload; workloads belong to networks, one to two of them."""
    rows = []
    for fam, n in FAMILIES.items():
        for i in range(n):
            network = ["resnet50", "bert", "vit"][i % 3]
            if fam == "dense" and i == 0:
                network = "bert,resnet50"  # shared by two networks
            rows += [{"workload_key": f"{fam}/w{i}", "family": fam, "network": network}] * 3
    return pd.DataFrame(rows)


def check_disjoint(sides: dict, data: pd.DataFrame) -> None:
    keys = [set(sides[s]) for s in ("train", "val", "test")]
    assert all(keys), sides
    assert not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2])
    assert set().union(*keys) == set(data.workload_key)
    assert all(type(k) is str for side in sides.values() for k in side)  # plain, serialisable


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shapes_split_is_disjoint_and_holds_out_each_family(seed):
    data = frame()
    sides = split_workloads(data, "shapes", 0.34, [], 0.2, seed)
    check_disjoint(sides, data)
    held = {k.split("/")[0] for k in sides["test"]}
    assert held == {fam for fam, n in FAMILIES.items() if n > 1}  # a lone workload trains
    assert sides == split_workloads(data, "shapes", 0.34, [], 0.2, seed)  # seeded


def test_family_split_holds_out_whole_families():
    data = frame()
    sides = split_workloads(data, "family", 0.2, ["softmax", "pool2d"], 0.2, 0)
    check_disjoint(sides, data)
    assert sorted(sides["test"]) == ["pool2d/w0", "softmax/w0", "softmax/w1", "softmax/w2"]
    with pytest.raises(UserError, match=r"test_families \['gemm'\] not in the dataset"):
        split_workloads(data, "family", 0.2, ["gemm"], 0.2, 0)


def test_network_split_holds_out_networks_but_not_shared_workloads():
    data = frame()
    sides = split_workloads(data, "network", 0.2, [], 0.2, 0, test_networks=["bert"])
    check_disjoint(sides, data)
    test = set(sides["test"])
    assert "dense/w0" not in test  # also in resnet50, which is trained on
    assert test == {k for k, n in zip(data.workload_key, data.network) if n == "bert"}
    with pytest.raises(UserError, match="not in the dataset"):
        split_workloads(data, "network", 0.2, [], 0.2, 0, test_networks=["gpt2"])
    with pytest.raises(UserError, match="unknown split"):
        split_workloads(data, "layers", 0.2, [], 0.2, 0)


def test_evaluation_sides_follow_what_is_asked():
    data = frame()
    own = split_workloads(data, "shapes", 0.34, [], 0.2, 0)
    meta = {"split": "shapes", "sides": own}
    assert choose_sides(meta, data, None, 0.2, None, None, 0) == ("shapes", own)
    assert choose_sides(meta, data, "shapes", 0.2, None, None, 0) == ("shapes", own)
    # naming test families (or networks) without --split used to be ignored
    split, sides = choose_sides(meta, data, None, 0.2, ["softmax"], None, 0)
    assert split == "family" and sorted(sides["test"]) == ["softmax/w0", "softmax/w1",
                                                            "softmax/w2"]
    split, sides = choose_sides(meta, data, None, 0.2, None, ["vit"], 0)
    assert split == "network" and all(k in {"dense/w2", "conv2d/w2", "conv2d/w5", "softmax/w2"}
                                      for k in sides["test"])
