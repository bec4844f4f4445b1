"""bench/transfer.py: the few-shot transfer curve, trained through the real `train` CLI on the
tiny measured dataset, resumed from its finished runs; the source scored as fine-tuning starts
from it. Each figure is checked against one recomputed from the models' own predictions."""

import glob
import hashlib
import json
import os
import shutil
import subprocess
import types

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import BENCH_DIR, assert_clean_error, bench_module, run_bench, run_cli
from costmodel import checkpoint, featurize
from costmodel.evaluate import score
from costmodel.metrics import kendall_tau, top_k_score
from costmodel.model import create_model
from costmodel.normalization import EPS, Normalization
from costmodel.predictor import CostModelPredictor
from costmodel.splits import RECORD_COLUMNS, usable
from datagen.records import read_records

# real CUDA records measured on an H100, committed: another target beside the tiny CPU dataset
GPU_DATASET = os.path.join(BENCH_DIR, "..", "data", "cuda-h100")


def transfer(args: list[str], cwd) -> subprocess.CompletedProcess:
    """`python bench/transfer.py ARGS...` in `cwd` (its trainings run in processes of their own)."""
    return run_bench("transfer.py", *args, cwd=cwd)


def _transfer_bench():
    return bench_module("transfer.py")


def scoring_side(args):
    """The bench's `HeldOut` for `args`, keeping the last predictor it scored (`predictor`),
    so that a test scores that predictor's predictions itself."""
    class Scoring(_transfer_bench().HeldOut):
        def metrics(self, predictor, keys, count_ranked=False):
            self.predictor = predictor
            return super().metrics(predictor, keys, count_ranked)

    return Scoring(args)


def figures(records: pd.DataFrame, predicted: np.ndarray) -> dict:
    """Kendall tau (None where undefined), top-1 score and the workloads whose predictions
    differ at all, of `predicted` (lower is faster) on `records`."""
    tau = kendall_tau(records.workload_key, records.latency_median, predicted)
    spread = pd.Series(predicted).groupby(records.workload_key.to_numpy()).agg(np.ptp)
    return {"kendall_tau": None if np.isnan(tau) else tau,
            "top1_score": top_k_score(records.workload_key, records.latency_median, predicted, 1,
                                      records.workload_weight),
            "ranked_workloads": int((spread > 0).sum())}


def written(metrics: dict) -> dict:
    """The figures of `figures` as a run wrote them (a NaN tau as None)."""
    tau = metrics["kendall_tau"]
    return {"kendall_tau": None if tau is None or np.isnan(tau) else tau,
            "top1_score": metrics["top1_score"],
            **({"ranked_workloads": metrics["ranked_workloads"]}
               if "ranked_workloads" in metrics else {})}


@pytest.mark.slow  # featurises real GPU records: the full run
def test_the_source_is_also_scored_as_fine_tuning_starts_from_it(tmp_path):
    """A CPU model's thread bindings and shared memory were constant in its training data:
    standardised with its own statistics they divide by EPS on GPU programs and every
    prediction clips alike (no workload ranked). Scored as fine-tuning starts from it (the
    programs featurised for the GPU, those features standardised with the GPU training
    workloads' statistics), it ranks every held-out workload."""
    torch.manual_seed(0)
    model = create_model({"name": "graphsage", "num_node_kinds": len(featurize.VOCABULARY),
                          "num_node_features": featurize.NUM_NODE_FEATURES,
                          "num_edge_types": len(featurize.EDGE_TYPES),
                          "num_program_features": featurize.NUM_PROGRAM_FEATURES,
                          "hidden": 16, "num_layers": 2, "dropout": 0.0})
    n, p = featurize.NUM_NODE_FEATURES, featurize.NUM_PROGRAM_FEATURES
    x_std, program_std = np.ones(n), np.ones(p)
    gpu_only = ("thread_is_block", "thread_is_virtual")
    x_std[[featurize.NODE_FEATURES.index(f) for f in gpu_only]] = EPS
    program_std[[featurize.PROGRAM_FEATURES.index(f) for f in (
        "log_thread_blocks", "log_threads_per_block", "log_shared_bytes", "log_local_bytes")]] = EPS
    norm = Normalization(np.zeros(n), x_std, np.zeros(p), program_std, -10.0, 1.0)
    cpu = json.dumps({"kind": "llvm", "mcpu": "skylake"})
    meta = checkpoint.describe(model, norm, cpu, "data/x", "shapes",
                               {"train": ["dense/a"], "val": [], "test": ["dense/b"]})
    source = str(tmp_path / "cpu.ckpt")
    checkpoint.save(source, model, meta, {"rank_loss": "logistic"})
    side = scoring_side(types.SimpleNamespace(dataset=GPU_DATASET, accelerator="cpu",
                                              cache_dir=str(tmp_path / "cache")))
    keys = sorted(side.frame.workload_key.unique())
    test, train = keys[:2], keys[2:3]
    assert side.score(source, test, count_ranked=True)["ranked_workloads"] == 0
    adapted = side.score_as_fine_tuning_starts(source, train, test)
    # the figures of the adapted model's own predictions, which tell both workloads apart
    records = side.records(test)
    expected = figures(records, side.predictor.predict_records(records))
    assert expected["ranked_workloads"] == 2 and expected["kendall_tau"] is not None
    assert written(adapted) == pytest.approx(expected)
    np.testing.assert_allclose(checkpoint.load(source).normalization.x_std, x_std)  # as it was


@pytest.mark.slow
def test_the_transfer_bench_writes_its_curve_and_resumes(tiny_checkpoint, tiny_dataset,
                                                         tmp_path):
    """Two shares, one seed, both modes on the tiny dataset; run again, it reads them back."""
    out, cache = tmp_path / "transfer", str(tmp_path / "cache")
    args = ["--dataset", tiny_dataset, "--init-from", tiny_checkpoint,
            "--split", "family", "--test-families", "softmax", "--val-fraction", "0.5",
            "--shares", "0.5", "1.0", "--seeds", "0", "--max-epochs", "1", "--out", str(out),
            "--cache-dir", cache]
    proc = transfer(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["test_workloads"] == 1 and summary["shares"] == [0.5, 1.0]
    assert set(summary["curves"]) == {"scratch", "finetuned"}
    runs = {(r["mode"], r["share"]): r for r in summary["runs"]}
    keys = runs["scratch", 0.5]["test_workloads"]
    frame, _ = usable(read_records(tiny_dataset, RECORD_COLUMNS))
    held_out = frame[frame.workload_key.isin(keys)].reset_index(drop=True)

    def predictions(paths):
        return CostModelPredictor.load(paths, cache_dir=cache).predict_records(held_out)

    for mode in ("scratch", "finetuned"):
        assert set(summary["curves"][mode]) == {"0.5", "1"}
        row = summary["curves"][mode]["0.5"]
        assert row["seeds"] == [0] and row["top1_score"]["n"] == 1
        # one seed: the curve's point is the figures of that run's model's predictions
        expected = figures(held_out, predictions(str(out / runs[mode, 0.5]["checkpoint"])))
        assert row["top1_score"]["mean"] == pytest.approx(expected["top1_score"])
        assert row["top1_score"]["std"] == 0.0
        # None where undefined: a tiny model may predict the held-out workload alike (NaN tau)
        tau = row["kendall_tau"] and row["kendall_tau"]["mean"]
        assert tau == pytest.approx(expected["kendall_tau"])
    assert runs["scratch", 0.5]["train_records"] == runs["finetuned", 0.5]["train_records"] \
        < runs["scratch", 1.0]["train_records"] == runs["scratch", 1.0]["train_records_of"]
    fine = checkpoint.read(str(out / runs["finetuned", 0.5]["checkpoint"]))["costmodel"]
    scratch = checkpoint.read(str(out / runs["scratch", 0.5]["checkpoint"]))["costmodel"]
    assert fine["init_from"]["path"] == tiny_checkpoint and "init_from" not in scratch
    # the source's figures, and how many held-out workloads it tells apart (its tau is over
    # those), are those of its own predictions
    assert written(summary["source"]["metrics"]) == pytest.approx(
        figures(held_out, predictions(tiny_checkpoint)))
    assert "held-out workloads (tau is over those)" in proc.stdout
    # scored again as fine-tuning starts: its inputs standardised with the training side's
    # programs, the side the runs trained on
    side = scoring_side(types.SimpleNamespace(dataset=tiny_dataset, accelerator="cpu",
                                              cache_dir=cache))
    side.score_as_fine_tuning_starts(tiny_checkpoint, scratch["sides"]["train"], keys)
    assert written(summary["source"]["fine_tuning_start"]) == pytest.approx(
        figures(held_out, side.predictor.predict_records(held_out)))
    assert "source, untrained, as fine-tuning starts: tau" in proc.stdout
    assert (out / "transfer.png").stat().st_size > 1000
    assert "finetuned tau" in proc.stdout and "source, untrained: " in proc.stdout
    stamps = {p: os.path.getmtime(p) for p in glob.glob(str(out / "runs" / "*" / "*" / "*"))}
    again = transfer(args, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("read back") == 4 and "\ntraining " not in "\n" + again.stdout
    assert stamps == {p: os.path.getmtime(p) for p in stamps}  # nothing was redone
    assert json.loads((out / "summary.json").read_text())["curves"] == summary["curves"]
    # --together: each share's scratch and fine-tuned models as one ensemble, nothing trained
    both = transfer(args + ["--together"], tmp_path)
    assert both.returncode == 0, both.stderr[-3000:]
    assert "\ntraining " not in "\n" + both.stdout
    mixed = json.loads((out / "summary.json").read_text())["together"]
    assert mixed["modes"] == ["scratch", "finetuned"] and set(mixed["curves"]) == {"0.5", "1"}
    (row,) = [r for r in mixed["runs"] if r["share"] == 0.5]
    paths = [str(out / runs[mode, 0.5]["checkpoint"]) for mode in ("scratch", "finetuned")]
    assert keys == runs["finetuned", 0.5]["test_workloads"]
    predictor = CostModelPredictor.load(paths, cache_dir=cache)
    expected = score(predictor, held_out, predictor.predict_records(held_out))["overall"]
    assert row["models"] == 2 and row["metrics"] == pytest.approx(expected, nan_ok=True)
    assert "the 2 models of scratch and finetuned of each seed as one ensemble" in both.stdout
    alone = transfer(args + ["--together", "--modes", "scratch"], tmp_path)
    assert_clean_error(alone, "--together scores the models of several modes as one",
                       prog="transfer")
    os.remove(paths[1])
    gone = transfer(args + ["--together"], tmp_path)
    assert_clean_error(gone, "--together scores the runs' checkpoints", prog="transfer")
    changed = transfer(args[:-4] + ["--max-epochs", "2"] + args[-4:], tmp_path)
    assert_clean_error(changed, "was made with other settings (max_epochs)", prog="transfer")


@pytest.mark.slow
def test_a_run_made_before_the_dataset_grew_is_not_read_back(tiny_checkpoint, tiny_dataset,
                                                             tmp_path):
    """The runs record the number of the dataset's usable records: the same folder grown since
    (here by a second copy of its shard) is refused in one line, not read back as its own."""
    dataset = tmp_path / "ds"
    shutil.copytree(tiny_dataset, dataset)
    args = ["--dataset", str(dataset), "--init-from", tiny_checkpoint,
            "--split", "family", "--test-families", "softmax", "--val-fraction", "0.5",
            "--shares", "0.5", "--seeds", "0", "--modes", "scratch", "--max-epochs", "1",
            "--out", str(tmp_path / "transfer"), "--cache-dir", str(tmp_path / "cache")]
    proc = transfer(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = json.loads((tmp_path / "transfer" / "summary.json").read_text())["runs"]
    records = len(usable(read_records(str(dataset), RECORD_COLUMNS))[0])
    assert run["settings"]["records"] == records
    shard = sorted(glob.glob(str(dataset / "shard-*.parquet")))[0]
    shutil.copy(shard, shard.replace(".parquet", "-copy.parquet"))
    grown = transfer(args, tmp_path)
    assert_clean_error(grown, "was made with other settings (records)", prog="transfer")


@pytest.mark.slow
def test_an_ensemble_run_trains_its_members_on_one_share_and_scores_them_together(
        tiny_checkpoint, tiny_dataset, tmp_path):
    """--ensemble 2: each run trains two models on the same share (the share's seed kept, the
    training seeded apart), scores their mean prediction as the run's and each alone; a run
    of another --ensemble is not read back as one, and 0 is refused."""
    out = tmp_path / "transfer"
    args = ["--dataset", tiny_dataset, "--init-from", tiny_checkpoint,
            "--split", "family", "--test-families", "softmax", "--val-fraction", "0.5",
            "--shares", "0.5", "--seeds", "3", "--modes", "scratch", "--max-epochs", "1",
            "--out", str(out), "--cache-dir", str(tmp_path / "cache")]
    proc = transfer(args + ["--ensemble", "2"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ensemble"] == 2
    (run,) = summary["runs"]
    assert run["settings"]["ensemble"] == 2 and len(run["members"]) == 2
    ckpts = [str(out / c) for c in run["checkpoints"]]
    configs = [json.loads(open(os.path.join(os.path.dirname(os.path.dirname(c)),
                                            "run-config.json")).read()) for c in ckpts]
    assert [c["seed_everything"] for c in configs] == [3, 1003]  # trained apart ...
    assert {c["data"]["share_seed"] for c in configs} == {3}  # ... on the same share
    metas = [checkpoint.read(c)["costmodel"] for c in ckpts]
    assert metas[0]["train_share"] == metas[1]["train_share"]
    weights = [checkpoint.load(c).model.state_dict() for c in ckpts]
    assert any(not torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    # the run's metrics are the two as one ensemble, the members' each alone
    frame, _ = usable(read_records(tiny_dataset, RECORD_COLUMNS))
    held_out = frame[frame.workload_key.isin(run["test_workloads"])].reset_index(drop=True)
    for paths, metrics in ((ckpts, run["metrics"]), ([ckpts[0]], run["members"][0]),
                           ([ckpts[1]], run["members"][1])):
        predictor = CostModelPredictor.load(paths, cache_dir=str(tmp_path / "cache"))
        expected = score(predictor, held_out, predictor.predict_records(held_out))["overall"]
        assert metrics == pytest.approx(expected, nan_ok=True)
    row = summary["curves"]["scratch"]["0.5"]
    assert row["members"]["top1_score"]["n"] == 2 and row["top1_score"]["n"] == 1
    assert "the 2 members of each seed's ensemble alone: tau" in proc.stdout
    alone = transfer(args, tmp_path)
    assert_clean_error(alone, "was made with other settings (ensemble)", prog="transfer")
    zero = transfer(args + ["--ensemble", "0"], tmp_path)
    assert_clean_error(zero, "--ensemble must be a positive number of models, not 0",
                       prog="transfer")


@pytest.mark.slow
def test_with_steps_every_share_trains_the_same_steps(tiny_checkpoint, tiny_dataset, tmp_path):
    """--steps: a small share takes as many optimiser steps as all records (an epoch of it is
    fewer), validated --max-epochs times; the runs record it, and read back only with it.
    --reference: a `costmodel evaluate` report of the same held-out records, drawn and
    printed; a report of other records, or none, is refused before any training."""
    evaluated = tmp_path / "eval"
    proc = run_cli("evaluate", tiny_checkpoint, "--dataset", tiny_dataset, "--out",
                   str(evaluated), "--no-baseline", "--cache-dir", str(tmp_path / "cache"),
                   prog="costmodel")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((evaluated / "report.json").read_text())
    out = tmp_path / "transfer"
    args = ["--dataset", tiny_dataset, "--init-from", tiny_checkpoint,
            "--split", "family", "--test-families", "softmax", "--val-fraction", "0.5",
            "--shares", "0.25", "1.0", "--seeds", "0", "--modes", "scratch", "--steps", "12",
            "--max-epochs", "3", "--out", str(out), "--cache-dir", str(tmp_path / "cache")]
    proc = transfer(args + ["--reference", str(evaluated / "report.json")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "12 steps each" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 12
    mean = report["models"]["graphsage"]["mean"]
    assert summary["reference"]["metrics"] == {"kendall_tau": mean["kendall_tau"],
                                               "top1_score": mean["top1_score"]}
    assert f"top-1 {mean['top1_score']:.3f}" in proc.stdout.split("all records (")[1]
    report["test_records"] += 1  # another split's report
    (tmp_path / "other.json").write_text(json.dumps(report))
    for bad, message in ((tmp_path / "other.json", "scored"),
                         (tmp_path / "missing.json", "is no `costmodel evaluate` report.json")):
        refused = transfer(args + ["--reference", str(bad), "--shares", "0.5"], tmp_path)
        assert_clean_error(refused, message, prog="transfer")
    assert not (out / "runs" / "scratch" / "share0.5-seed0").exists()  # nothing trained
    records = {}
    for run in summary["runs"]:
        assert run["settings"]["steps"] == 12
        records[run["share"]] = run["train_records"]
        (log,) = glob.glob(str(out / "runs" / "scratch" / f"share{run['share']:g}-seed0" /
                               "logs" / "*" / "metrics.csv"))
        metrics = pd.read_csv(log)
        validated = metrics.dropna(subset=["val/kendall_tau"])
        assert len(validated) == 3  # every 12 // 3 steps
        assert validated.step.max() == 11  # 12 steps, numbered from 0
        assert metrics.epoch.max() >= 1  # more than one epoch of the tiny share
    assert records[0.25] < records[1.0]
    again = transfer(args[:-8] + ["--max-epochs", "3"] + args[-4:], tmp_path)
    assert_clean_error(again, "was made with other settings (steps)", prog="transfer")
    zero = transfer(args[:-8] + ["--steps", "0"] + args[-4:], tmp_path)
    assert_clean_error(zero, "--steps must be a positive number of optimiser steps, not 0",
                       prog="transfer")


@pytest.mark.slow
def test_the_transfer_bench_trains_jointly(tiny_checkpoint, tiny_dataset, tmp_path):
    """--modes scratch joint joint_heads finetuned_joint_heads: the joint runs train on the
    share and on the other dataset's records, their checkpoints are for the share's target,
    predict its latencies and say so; with joint_heads the other records trained a head of
    their own; finetuned_joint_heads is the same started from --init-from."""
    out = tmp_path / "transfer"
    args = ["--dataset", tiny_dataset, "--init-from", tiny_checkpoint,
            "--split", "family", "--test-families", "softmax", "--val-fraction", "0.5",
            "--shares", "1.0", "--seeds", "0", "--max-epochs", "1", "--modes", "scratch",
            "joint", "joint_heads", "finetuned_joint_heads", "--joint-dataset", GPU_DATASET,
            "--joint-share", "0.05",
            "--out", str(out), "--cache-dir", str(tmp_path / "c")]
    proc = transfer(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["modes"] == ["scratch", "joint", "joint_heads", "finetuned_joint_heads"]
    assert set(summary["curves"]) == set(summary["modes"])
    assert not summary["normalize_per_workload"] and summary["joint_share"] == 0.05
    runs = {r["mode"]: r for r in summary["runs"]}
    assert runs["joint"]["train_records"] == runs["scratch"]["train_records"]
    assert runs["joint"]["joint_records"] > 0 and runs["scratch"]["joint_records"] is None
    joint = checkpoint.load(str(out / runs["joint"]["checkpoint"]))
    scratch = checkpoint.load(str(out / runs["scratch"]["checkpoint"]))
    assert joint.meta["joint"]["records"] == runs["joint"]["joint_records"]
    assert json.loads(joint.meta["joint"]["target"])["kind"] == "cuda"
    assert joint.meta["target"] == scratch.meta["target"] and joint.meta["target_kind"] == "llvm"
    assert joint.normalization.predicts_latency and scratch.normalization.predicts_latency
    assert runs["joint"]["metrics"]["mape"] is not None
    assert "joint" not in scratch.meta
    CostModelPredictor.load(str(out / runs["joint"]["checkpoint"]))  # a model for the CPU
    assert "joint tau" in proc.stdout and "finetuned tau" not in proc.stdout
    heads = checkpoint.load(str(out / runs["joint_heads"]["checkpoint"]))
    assert heads.model.architecture["num_heads"] == 2 and "num_heads" not in \
        joint.model.architecture
    assert heads.meta["joint"] == joint.meta["joint"]  # the same records beside it
    assert heads.model.architecture == {**joint.model.architecture, "num_heads": 2}
    assert runs["joint_heads"]["metrics"]["mape"] is not None
    assert not torch.equal(heads.model.head[0].weight, heads.model.extra_heads[0][0].weight)
    CostModelPredictor.load(str(out / runs["joint_heads"]["checkpoint"]))  # head 0 predicts
    tuned = checkpoint.load(str(out / runs["finetuned_joint_heads"]["checkpoint"]))
    assert tuned.model.architecture == heads.model.architecture
    assert tuned.meta["joint"] == joint.meta["joint"] and "init_from" not in heads.meta
    assert tuned.meta["init_from"]["sha256"] == hashlib.sha256(
        open(tiny_checkpoint, "rb").read()).hexdigest()
    bad = transfer(args[:-4] + ["--joint-share", "2"] + args[-4:], tmp_path)
    assert_clean_error(bad, "--joint-share must be in (0, 1], not 2.0", prog="transfer")


@pytest.mark.slow
def test_the_transfer_bench_self_trains_on_the_other_modes_models(tiny_checkpoint,
                                                                  tiny_dataset, tmp_path):
    """--modes self_trained scratch: the scratch model (the teacher, trained first whatever the
    order) labels the training records; the student trains from random weights on the share
    and on the others with those labels; its result says so and is read back."""
    out = tmp_path / "transfer"
    args = ["--dataset", tiny_dataset, "--init-from", tiny_checkpoint,
            "--split", "family", "--test-families", "softmax", "--val-fraction", "0.5",
            "--shares", "0.5", "--seeds", "0", "--max-epochs", "1", "--out", str(out),
            "--cache-dir", str(tmp_path / "cache")]
    proc = transfer(args + ["--modes", "self_trained", "scratch"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.index("training scratch") < proc.stdout.index("training self_trained")
    summary = json.loads((out / "summary.json").read_text())
    runs = {r["mode"]: r for r in summary["runs"]}
    student, teacher = runs["self_trained"], runs["scratch"]
    assert student["settings"] == {**teacher["settings"], "teacher": ["scratch"]}
    assert student["train_records"] == teacher["train_records"]
    labels = pd.read_parquet(out / "runs" / "self_trained" / "share0.5-seed0.teacher.parquet")
    meta = checkpoint.load(str(out / student["checkpoint"])).meta
    assert "init_from" not in meta
    assert 0 < student["pseudo_records"] == meta["train_share"]["pseudo"]["records"] \
        == student["train_records_of"] - student["train_records"]
    # the labels are the teacher's predictions of the training workloads' records
    frame, _ = usable(read_records(tiny_dataset, RECORD_COLUMNS))
    train = frame[frame.workload_key.isin(meta["sides"]["train"])].reset_index(drop=True)
    assert len(labels) == len(train) and set(labels.trace_hash) == set(train.trace_hash)
    predictor = CostModelPredictor.load(str(out / teacher["checkpoint"]),
                                        cache_dir=str(tmp_path / "cache"))
    rows = train.set_index(["workload_key", "trace_hash"]).loc[
        list(zip(labels.workload_key, labels.trace_hash))].reset_index()
    np.testing.assert_allclose(labels.latency, predictor.predict_records(rows), rtol=1e-5)
    assert "self_trained tau" in proc.stdout
    again = transfer(args + ["--modes", "scratch", "self_trained"], tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("read back") == 2
    alone = transfer(args + ["--modes", "self_trained"], tmp_path)
    assert_clean_error(alone, "self_trained learns from the models of the other --modes",
                       prog="transfer")
    whole = transfer(args + ["--shares", "1.0", "--modes", "scratch", "self_trained"], tmp_path)
    assert_clean_error(whole, "self_trained labels the records a share leaves out",
                       prog="transfer")


def test_report_draws_a_finished_benchmarks_plot_again_from_its_summary(tmp_path):
    """--report trains nothing: the committed summary of a finished run (xz-compressed) gives
    its table and transfer.png; no summary, or a damaged one, is one line."""
    committed = os.path.join(BENCH_DIR, "results", "cuda-h100", "transfer-10k-all")
    out = tmp_path / "finished"
    out.mkdir()
    shutil.copy(os.path.join(committed, "summary.json.xz"), out)
    proc = transfer(["--report", "--out", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "source, untrained: " in proc.stdout and "\ntraining " not in "\n" + proc.stdout
    assert (out / "transfer.png").stat().st_size > 1000
    assert sorted(os.listdir(out)) == ["summary.json.xz", "transfer.png"]
    assert_clean_error(transfer(["--report", "--out", str(tmp_path / "empty")], tmp_path),
                       "holds no summary.json", prog="transfer")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "summary.json").write_text('{"curves": 1}')
    assert_clean_error(transfer(["--report", "--out", str(tmp_path / "bad")], tmp_path),
                       "is no readable transfer summary", prog="transfer")
    assert_clean_error(transfer(["--out", str(out)], tmp_path),
                       "the following arguments are required: --dataset, --init-from",
                       prog="transfer.py")
