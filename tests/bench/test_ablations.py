"""bench/ablations.py: variants trained through the real `train` CLI on the tiny measured
dataset, scored on the same held-out workloads, with their ensemble and a tree baseline."""

import json
import os
import types

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import CONFIG, another_cpu_copy, assert_clean_error, bench_module, run_bench
from costmodel.blend import blend
from costmodel.metrics import kendall_tau, top_k_score
from costmodel.predictor import CostModelPredictor

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "ablations.py")


@pytest.fixture
def tiny_config(tiny_dataset, tmp_path) -> str:
    """The shipped config on the tiny dataset's layout: softmax held out, a small network."""
    with open(CONFIG) as f:
        config = yaml.safe_load(f)
    config["model"]["hidden"] = 16
    config["data"].update(dataset=tiny_dataset, split="family", test_families=["softmax"],
                          val_fraction=0.5)
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.mark.slow
def test_the_ablation_bench_scores_variants_ensembles_and_a_baseline_and_resumes(
        tiny_config, tmp_path):
    out = tmp_path / "ablations"
    args = ["--config", tiny_config, "--variants", "base", "listmle",
            "--seeds", "0", "1", "--max-epochs", "1", "--baselines", "xgb", "--out", str(out),
            "--cache-dir", str(tmp_path / "cache")]
    proc = run_bench("ablations.py", *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["test_workloads"] == 1 and set(summary["variants"]) == {"base", "listmle"}
    runs = {(r["variant"], r["seed"]): r for r in summary["runs"]}
    assert set(runs) == {(v, s) for v in ("base", "listmle") for s in (0, 1)}
    # the choice is the variant of the best mean validation tau over its seeds, whatever the
    # test side says
    mean_val = {v: np.mean([runs[v, s]["val_kendall_tau"] for s in (0, 1)])
                for v in ("base", "listmle")}
    assert summary["chosen_on_validation"] == max(mean_val, key=mean_val.get)
    for (variant, seed), run in runs.items():
        # each run's validation tau is its best logged epoch, and its checkpoint is kept
        (log,) = (out / "runs" / variant / f"seed{seed}" / "logs").glob("*/metrics.csv")
        assert run["val_kendall_tau"] == pytest.approx(
            pd.read_csv(log)["val/kendall_tau"].max())
        assert run["train_seconds"] > 0 and (out / run["checkpoint"]).is_file()
    listmle = json.loads((out / "runs" / "listmle" / "seed0" / "run-config.json").read_text())
    assert listmle["model"]["rank_loss"] == "listmle"
    # every figure is that of the models' (or the trees') own predictions of the same records
    held = _ablations().HeldOut(types.SimpleNamespace(
        config=tiny_config, dataset=None, cache_dir=str(tmp_path / "cache"), accelerator="cpu"))

    def predicted(frame, *seeds, variant="base"):
        """The log-latency that `variant`'s runs of `seeds` (as one ensemble) predict."""
        paths = [str(out / runs[variant, seed]["checkpoint"]) for seed in seeds]
        return np.log(CostModelPredictor.load(paths if len(paths) > 1 else paths[0],
                                              cache_dir=held.cache_dir, blend=False)
                      .predict_records(frame))

    def assert_figures(found, frame, scores):
        assert found["kendall_tau"] == pytest.approx(
            kendall_tau(frame.workload_key, frame.latency_median, scores), nan_ok=True)
        if "top1_score" in found:
            assert found["top1_score"] == pytest.approx(top_k_score(
                frame.workload_key, frame.latency_median, scores, 1, frame.workload_weight))

    for variant, row in summary["variants"].items():
        assert row["test"]["top1_score"]["n"] == 2
        assert_figures(row["ensemble"]["overall"], held.test,
                       predicted(held.test, 0, 1, variant=variant))
    with np.load(out / "baselines" / "xgb-scores.npz") as kept:  # lower is faster
        xgb = kept["scores"]
    assert len(xgb) == len(held.test)
    assert_figures(summary["baselines"]["xgb"]["overall"], held.test, xgb)
    assert "base ensemble" in proc.stdout and "chosen on validation" in proc.stdout
    # resumed with the hybrid ablation, its weight chosen on validation: runs and the
    # baseline's held-out scores are read back, the baseline scores the validation side once
    hybrid_args = args + ["--hybrid", "xgb", "--hybrid-weight", "val"]
    again = run_bench("ablations.py", *hybrid_args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("read back") == 4 and "\ntraining " not in "\n" + again.stdout
    assert "baseline xgb on the test" not in again.stdout  # read back as well
    assert again.stdout.count("baseline xgb on the val") == 1  # once for both variants
    hybrid = json.loads((out / "summary.json").read_text())["variants"]["base"]["hybrid"]
    assert hybrid["with"] == "xgb" and hybrid["overall"]["mape"] is None
    # the base ensemble's predictions and the trees' scores, blended at the chosen weight
    assert_figures(hybrid["overall"], held.test,
                   blend(predicted(held.test, 0, 1), -xgb, held.test.workload_key.to_numpy(),
                         hybrid["weight"]))
    curve = hybrid["val_curve"]
    assert list(curve) == [f"{i / 10:.1f}" for i in range(11)]
    assert curve[f"{hybrid['weight']:.1f}"]["top1_score"] == max(
        c["top1_score"] for c in curve.values())
    assert f"base ensemble + xgb ({hybrid['weight']:.1f})" in again.stdout
    # a third run reads everything back and diagnoses: labels' ceiling, top-1's weight, fit
    third = run_bench("ablations.py", *hybrid_args + ["--diagnose"], cwd=tmp_path)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "baseline xgb on the test" not in third.stdout  # only the fit sample is new
    assert "baseline xgb on the fit records" in third.stdout
    diagnosis = json.loads((out / "summary.json").read_text())["diagnosis"]
    # the ceiling is that of the held-out records' own repeats (how far above chance real
    # repeats agree depends on the machine's noise; the noise-free and the noise-only cases
    # are checked by hand below)
    assert diagnosis["label_ceiling"] == pytest.approx(_ablations().label_ceiling(held.test))
    assert diagnosis["label_ceiling"]["draws"] == _ablations().CEILING_DRAWS
    assert diagnosis["top1_weight"]["tasks"] == 1
    assert diagnosis["top1_weight"]["heaviest_10_share"] == pytest.approx(1.0)
    sample = _ablations().fit_sample(held)  # the training workloads every fit is scored on
    for variant in ("base", "listmle"):
        fitted = diagnosis["fit"][variant]
        assert set(fitted) == {"train", "val", "test"}
        assert fitted["train"]["records"] == len(sample) > 0
        assert_figures(fitted["train"], sample, predicted(sample, 0, variant=variant))
        assert fitted["test"]["worst_picks"][0]["picked_us"] >= fitted["test"]["worst_picks"][0][
            "best_us"]
        assert f"{variant} seed 0 fits train tau" in third.stdout
    tree = diagnosis["fit"]["xgb"]["train"]  # the trees, on the same training workloads
    assert tree["records"] == diagnosis["fit"]["base"]["train"]["records"]
    with np.load(out / "baselines" / "xgb-fit-scores.npz") as kept:
        assert_figures(tree, sample, kept["scores"])
    assert "xgb fits train tau" in third.stdout
    assert "test, its costliest top-1 picks: " in third.stdout
    assert "held-out labels, one repeat against another" in third.stdout


def _ablations():
    return bench_module("ablations.py")


def test_the_trees_fit_the_joint_datasets_records_beside_the_networks(tiny_config,
                                                                      tiny_dataset, tmp_path):
    """With `data.joint_dataset` in the base config, the trees fit what the network trains
    on: the training side's records and the other CPU's share, under the joint keys; the
    network's own training side (what `--diagnose` samples) stays the dataset's."""
    from costmodel.data_module import JOINT_PREFIX
    from costmodel.splits import share_of_records, usable
    from datagen.records import read_records

    other = another_cpu_copy(tiny_dataset, tmp_path / "other", "test-cpu")
    with open(tiny_config) as f:
        config = yaml.safe_load(f)
    config["data"].update(joint_dataset=[other], joint_share=0.5)
    path = tmp_path / "joint.yaml"
    path.write_text(yaml.safe_dump(config))
    held = _ablations().HeldOut(types.SimpleNamespace(
        config=str(path), dataset=None, cache_dir=str(tmp_path / "cache"), accelerator="cpu"))
    plain = _ablations().HeldOut(types.SimpleNamespace(
        config=tiny_config, dataset=None, cache_dir=str(tmp_path / "cache"), accelerator="cpu"))
    pd.testing.assert_frame_equal(held.train, plain.train)
    assert plain.trees_train is plain.train
    joint = held.trees_train.iloc[len(held.train):]
    pd.testing.assert_frame_equal(held.trees_train.iloc[:len(held.train)], held.train)
    assert list(held.trees_train.columns) == list(held.train.columns)
    assert joint.workload_key.str.startswith(JOINT_PREFIX).all()
    assert set(joint.target.map(lambda t: json.loads(t)["mcpu"])) == {"test-cpu"}
    share = share_of_records(usable(read_records(other))[0], 0.5, config["data"]["seed"])
    assert sorted(joint.trace_hash) == sorted(share.trace_hash) and 0 < len(joint) < len(
        usable(read_records(other))[0])
    assert not set(held.test.workload_key) & set(held.trees_train.workload_key)


@pytest.mark.parametrize("extra, message", [
    (["--hybrid", "xgb", "--hybrid-weight", "1.5"], "neither a weight in [0, 1] nor 'val'"),
    (["--hybrid-weight", "val"], "--hybrid-weight blends with a baseline: name it with --hybrid"),
])
def test_a_bad_hybrid_weight_is_one_line(tmp_path, extra, message):
    proc = run_bench("ablations.py", "--config", CONFIG, "--out", str(tmp_path / "x"), *extra,
                     cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not (tmp_path / "x").exists()


def test_an_unknown_variant_is_one_line(tmp_path):
    proc = run_bench("ablations.py", "--config", CONFIG, "--variants", "bigger", "--out",
                     str(tmp_path / "x"), cwd=tmp_path)
    assert_clean_error(proc, "unknown variant 'bigger'", prog="ablations")
    assert not (tmp_path / "x").exists()


def test_the_label_ceiling_and_top1_weight_by_hand():
    """Steady repeats rank perfectly; noisy ones less. Top-1's weight is w_t times the best."""
    import numpy as np
    import pandas as pd

    ablations = _ablations()
    steady = pd.DataFrame({"workload_key": ["a"] * 4 + ["b"] * 2,
                           "latencies": [np.full(5, v) for v in (1.0, 2.0, 3.0, 4.0, 30.0, 10.0)],
                           "latency_median": [1.0, 2.0, 3.0, 4.0, 30.0, 10.0],
                           "workload_weight": [1] * 4 + [3] * 2})
    ceiling = ablations.label_ceiling(steady)
    assert ceiling["kendall_tau"] == 1.0 and ceiling["top1_score"] == 1.0
    noisy = steady.assign(latencies=[np.array(r) for r in ([1.0, 1.9], [1.2, 2.0], [1.8, 2.5],
                                                           [4.0, 4.1], [9.0, 12.0], [10.0, 11.0])])
    assert ablations.label_ceiling(noisy)["kendall_tau"] < 1.0
    weight = ablations.top1_weight(steady)  # a: 1 x 1.0, b: 3 x 10.0
    assert weight == {"tasks": 2, "heaviest_10_share": 1.0, "tasks_holding_half": 1}


def test_the_costliest_picks_by_hand():
    """Each task's pick is its lowest prediction; the costliest is weight x what it adds."""
    import numpy as np
    import pandas as pd

    ablations = _ablations()
    frame = pd.DataFrame({"workload_key": ["a"] * 3 + ["b"] * 3,
                          "latency_median": [1e-6, 2e-6, 3e-6, 10e-6, 20e-6, 40e-6],
                          "workload_weight": [10] * 3 + [1] * 3})
    # a picks its 3 us schedule (adds 10 x 2 us), b its 20 us one (adds 1 x 10 us)
    picks = ablations.worst_picks(frame, np.array([0.5, 0.4, 0.1, 3.0, 1.0, 2.0]), n=2)
    assert [p["workload"] for p in picks] == ["a", "b"]
    assert picks[0]["picked_us"] == pytest.approx(3.0) and picks[0]["faster_than_pick"] == 2
    assert picks[1]["cost"] == pytest.approx(10e-6) and picks[1]["records"] == 3
