"""Splits hold out whole workloads: the sides never share one, and each split holds out what
it names. Also what data training refuses (several targets, contradictory options) and the
per-network rows of the evaluation report."""

import numpy as np
import pandas as pd
import pytest

from datagen.errors import UserError
from costmodel.splits import split_workloads
from costmodel.evaluate import choose_sides

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


def test_the_all_split_holds_nothing_out():
    data = frame()
    sides = split_workloads(data, "all", 0.2, [], 0.2, 0)
    assert sides["test"] == [] and sides["val"]
    assert sorted(sides["train"] + sides["val"]) == sorted(set(data.workload_key))


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


def test_the_all_split_of_another_targets_records_scores_every_workload():
    """A model of one CPU, zero-shot on another's records: no record of that target trained
    it, so `--split all` tests on every workload; on a target it trained on (its own or a
    joint dataset's) the all split holds nothing out, as before."""
    data = frame()
    own = split_workloads(data, "all", 0.2, [], 0.2, 0)
    other = data.assign(target='{"kind": "llvm", "mcpu": "znver5"}')
    meta = {"split": "all", "sides": own, "target": '{"kind": "llvm", "mcpu": "znver4"}'}
    split, sides = choose_sides(meta, other, "all", 0.2, None, None, 0)
    assert split == "all" and sides["test"] == sorted(set(data.workload_key))
    assert sides["train"] == sides["val"] == []
    assert choose_sides(meta, data.assign(target=meta["target"]), "all", 0.2, None, None,
                        0) == ("all", own)
    joint = {**meta, "joint": [{"dataset": "data/b", "target": other.target.iloc[0]}]}
    assert choose_sides(joint, other, "all", 0.2, None, None, 0) == ("all", own)


def test_records_of_several_targets_are_refused():
    from costmodel.splits import check_one_target

    llvm = '{"kind": "llvm", "mcpu": "znver4"}'
    data = pd.DataFrame({"target": [llvm] * 3})
    check_one_target(data, "data/x")  # one target: fine
    data = pd.DataFrame({"target": [llvm, llvm, '{"kind": "llvm", "mcpu": "skylake"}',
                                    '{"kind": "cuda", "arch": "sm_90a"}']})
    with pytest.raises(UserError) as info:
        check_one_target(data, "data/x")
    assert str(info.value) == ("data/x mixes 3 targets (cuda -arch=sm_90a, llvm -mcpu=skylake, "
                               "llvm -mcpu=znver4); train on one target: collect each into its "
                               "own folder")


def test_per_flop_and_per_workload_normalisation_exclude_each_other():
    from costmodel.data_module import ScheduleDataModule

    assert not ScheduleDataModule().hparams.normalize_per_workload  # off by default
    with pytest.raises(UserError, match="per_flop and normalize_per_workload exclude each other"):
        ScheduleDataModule(per_flop=True, normalize_per_workload=True)


def test_the_views_are_named_and_unknown_names_refused_before_any_data():
    from costmodel.data_module import ScheduleDataModule
    from costmodel.lightning_module import CostModelModule

    assert ScheduleDataModule(views=["warp", "store"]).hparams.views == ["warp", "store"]
    for make in (ScheduleDataModule, CostModelModule):
        with pytest.raises(UserError, match="unknown view 'stores'; the views a model may read"):
            make(views=["stores"])
    with pytest.raises(UserError, match="view_options: no view has an option 'layers'"):
        CostModelModule(view_options={"layers": 2})
    module = CostModelModule(hidden=8, views=["trace"], view_options={"trace_layers": 2})
    assert module.model.architecture["trace_layers"] == 2


def scored_frame() -> pd.DataFrame:
    """Two workloads; one of them occurs in two networks."""
    return pd.DataFrame({
        "workload_key": ["dense/a"] * 3 + ["conv2d/b"] * 3,
        "family": ["dense"] * 3 + ["conv2d"] * 3,
        "network": ["bert,resnet50"] * 3 + ["resnet50"] * 3,
        "latency_median": [1.0, 2.0, 4.0, 10.0, 20.0, 40.0],
        "workload_weight": [1] * 6})


def test_per_network_rows_count_a_record_for_each_network_it_lists():
    from costmodel.evaluate import GRAPHSAGE, _markdown, grouped_metrics
    from costmodel.metrics import all_metrics

    data = scored_frame()
    pred = np.array([1.0, 2.0, 4.0, 40.0, 20.0, 10.0])  # dense/a right, conv2d/b backwards
    got = grouped_metrics(data, pred, latency=True)
    assert set(got["per_network"]) == {"bert", "resnet50"}
    assert got["per_network"]["bert"] == got["per_family"]["dense"]  # only dense/a is in bert
    assert got["per_network"]["bert"]["kendall_tau"] == pytest.approx(1.0)
    assert got["per_network"]["resnet50"] == got["overall"]  # both workloads are in resnet50
    assert got["overall"] == all_metrics(data.workload_key, data.latency_median, pred,
                                         data.workload_weight)
    relative = grouped_metrics(data, pred, latency=False)
    assert relative["overall"]["mape"] is None and relative["per_network"]["bert"]["mape"] is None
    assert relative["overall"]["ape"] == got["overall"]["ape"]  # ranking metrics stay
    run = {"overall": got["overall"], "per_family": got["per_family"],
           "per_network": got["per_network"]}
    report = {"split": "shapes", "dataset": "d", "test_workloads": 2, "test_families": ["dense"],
              "test_records": 6, "train_workloads": 3, "plots": [], "models": {
                  GRAPHSAGE: {"runs": 1, "predicts_latency": False, "mean": relative["overall"],
                              "std": relative["overall"], "per_run": [relative]},
                  "lightgbm": {"runs": 1, "mean": relative["overall"],
                               "std": relative["overall"], "per_run": [run]}}}
    text = _markdown(report)
    assert "## Per network" in text and "| bert |" in text and "| resnet50 |" in text
    assert "### lightgbm" in text and "predicts a score relative to each workload" in text
    # records that name no network: no per-network rows, and no empty section
    unnamed = grouped_metrics(data.assign(network=None), pred, latency=True)
    assert unnamed["per_network"] == {}
    for model in report["models"].values():
        model["per_run"] = [unnamed]
    assert "## Per network" not in _markdown(report) and "## Per family" in _markdown(report)


@pytest.mark.slow
def test_max_cv_trains_on_steady_records_only(tiny_dataset, tmp_path):
    from datagen.records import read_records
    from costmodel.data_module import ScheduleDataModule

    kwargs = dict(dataset=tiny_dataset, split="family", test_families=["softmax"],
                  val_fraction=0.5, cache_dir=str(tmp_path / "cache"))
    everything = ScheduleDataModule(**kwargs)
    everything.setup()
    cvs = read_records(tiny_dataset, ["trace_hash", "latency_cv"]).set_index("trace_hash")
    train_cv = cvs.latency_cv[everything.frames["train"].trace_hash]
    threshold = float(train_cv.median())
    steady = ScheduleDataModule(max_cv=threshold, **kwargs)
    steady.setup()
    assert len(steady.frames["train"]) == int((train_cv <= threshold).sum())
    assert steady.noisy_dropped == int((train_cv > threshold).sum()) > 0
    assert (steady.frames["train"].latency_cv <= threshold).all()
    for side in ("val", "test"):  # evaluation keeps every record
        assert len(steady.frames[side]) == len(everything.frames[side])
    with pytest.raises(UserError, match="max_cv must be above 0"):
        ScheduleDataModule(max_cv=0.0)
