"""The out-of-distribution splits: novel shapes, unseen families, another suite."""

import pandas as pd
import pytest

from datagen.errors import UserError
from datagen.workloads import UNSEEN_FAMILIES, from_key
from costmodel.splits import (SUITE_COLUMN, buffer_shapes, shape_groups, split_workloads,
                           with_test_dataset)
from costmodel.evaluate import choose_sides

KEYS = [
    # three share the 64x64 input, two the 32x32 weight: one group of three, one of two
    "dense/m64_n64_k64", "dense/m64_n32_k64", "dense/m64_n128_k64",
    "dense/m16_n32_k32", "batch_matmul/b2_m16_n32_k32",
    "softmax/rows8_cols24", "layer_norm/rows12_cols40", "dense/m5_n7_k9",
    "conv1d/l32_ci8_co8_k3_stride1_pad1", "lu/n24", "cholesky/n24",
]


@pytest.fixture(scope="module")
def records():
    rows = []
    for key in KEYS:
        w = from_key(key)
        for i in range(3):
            rows.append({"workload_key": key, "family": w.family, "workload_ir": w.definition(),
                         "network": "", "target": '{"kind": "llvm"}', "latency_median": 1e-3})
    return pd.DataFrame(rows)


def test_shape_groups_join_workloads_that_share_a_shape(records):
    shapes = buffer_shapes(records)
    assert (64, 64) in shapes["dense/m64_n64_k64"]
    assert all(len(s) >= 2 for shape_set in shapes.values() for s in shape_set)
    groups = shape_groups(shapes)
    assert ["dense/m64_n128_k64", "dense/m64_n32_k64", "dense/m64_n64_k64"] in groups
    assert sorted(k for g in groups for k in g) == sorted(KEYS)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_novel_shapes_share_no_buffer_shape_with_training(records, seed):
    sides = split_workloads(records, "novel-shapes", 0.3, [], 0.2, seed)
    shapes = buffer_shapes(records)
    train_shapes = set().union(*(shapes[k] for k in sides["train"]))
    for held in ("test", "val"):
        assert sides[held]
        assert not set().union(*(shapes[k] for k in sides[held])) & train_shapes, held
    assert sorted(sum(sides.values(), [])) == sorted(KEYS)


def test_unseen_family_holds_out_the_generators_new_families(records):
    sides = split_workloads(records, "unseen-family", 0.2, [], 0.3, 0)
    assert {from_key(k).family for k in sides["test"]} == {"conv1d", "lu", "cholesky"}
    assert set(UNSEEN_FAMILIES) >= {from_key(k).family for k in sides["test"]}
    val_families = {from_key(k).family for k in sides["val"]}
    train_families = {from_key(k).family for k in sides["train"]}
    assert val_families and not val_families & train_families  # whole families validate
    plain = records[~records.family.isin(UNSEEN_FAMILIES)]
    with pytest.raises(UserError, match="none of the unseen families"):
        split_workloads(plain, "unseen-family", 0.2, [], 0.2, 0)


def test_cross_suite_tests_on_the_other_dataset(records, tmp_path):
    mine = records[~records.family.isin(UNSEEN_FAMILIES)]
    theirs = records[records.family.isin(UNSEEN_FAMILIES)]
    both = pd.concat([mine.assign(**{SUITE_COLUMN: "train"}),
                      theirs.assign(**{SUITE_COLUMN: "test"})], ignore_index=True)
    sides = split_workloads(both, "cross-suite", 0.2, [], 0.2, 0)
    assert sides["test"] == sorted(set(theirs.workload_key))
    assert set(sides["train"]) | set(sides["val"]) == set(mine.workload_key)
    with pytest.raises(UserError, match="tests on another dataset"):
        split_workloads(mine, "cross-suite", 0.2, [], 0.2, 0)
    # evaluation keeps what the checkpoint trained and validated on, and tests on the rest
    meta = {"split": "all", "sides": {"train": sides["train"], "val": sides["val"], "test": []}}
    split, got = choose_sides(meta, records, "cross-suite", 0.2, None, None, 0)
    assert split == "cross-suite" and got["test"] == sides["test"]


def test_cross_suite_refuses_another_target(tmp_path, monkeypatch):
    other = pd.DataFrame({"workload_key": ["dense/m5_n7_k9"], "family": ["dense"],
                          "target": ['{"kind": "cuda"}'], "latency_median": [1e-3],
                          "status": ["ok"]})
    monkeypatch.setattr("datagen.records.read_records", lambda folder, columns=None: other)
    mine = other.assign(target='{"kind": "llvm"}')
    with pytest.raises(UserError, match="compares suites on one target"):
        with_test_dataset(mine, "elsewhere", "here")
