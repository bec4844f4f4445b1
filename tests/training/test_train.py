"""Training through the real `train` CLI, on a real (tiny) measured dataset."""

import glob
import json

import numpy as np
import pytest

from conftest import assert_clean_error, run_cli, train_tiny

pytestmark = pytest.mark.slow

train = train_tiny


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoint):
    return tiny_checkpoint


def test_fast_dev_run_through_the_cli(tiny_dataset, tmp_path):
    proc = train("--data.dataset", tiny_dataset, "--trainer.fast_dev_run", "true", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "max_steps=1" in proc.stderr + proc.stdout


def test_ddp_with_two_cpu_processes(tiny_dataset, tmp_path):
    proc = train("--data.dataset", tiny_dataset, "--trainer.max_epochs", "1",
                 "--trainer.strategy", "ddp", "--trainer.devices", "2",
                 "--data.per_workload", "4", "--data.workloads_per_batch", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "distributed_backend=gloo" in proc.stderr + proc.stdout
    assert glob.glob(str(tmp_path / "checkpoints" / "*.ckpt"))


def test_checkpoint_round_trip_predicts_the_same(checkpoint, tiny_dataset):
    from costmodel import checkpoint as checkpoint_file
    from costmodel.predictor import CostModelPredictor
    from datagen.records import read_records

    frame = read_records(tiny_dataset)
    frame = frame[frame.status == "ok"]
    first = CostModelPredictor.load(checkpoint).predict_records(frame)
    second = CostModelPredictor.load(checkpoint).predict_records(frame)
    assert first.shape == (len(frame),) and np.isfinite(first).all() and (first > 0).all()
    np.testing.assert_array_equal(first, second)
    meta = checkpoint_file.read(checkpoint)["costmodel"]
    assert meta["format_version"] == checkpoint_file.FORMAT_VERSION
    assert meta["featurizer_version"] and meta["vocabulary"] and meta["normalization"]
    assert meta["architecture"]["name"] == "graphsage" and meta["architecture"]["hidden"] == 16
    assert meta["target_kind"] == "llvm"
    assert meta["sides"]["test"] == ["softmax/rows16_cols32"]


def test_scoring_schedules_equals_scoring_their_graphs(checkpoint, tiny_dataset):
    """`predict` streams lowered programs into the network; the result is the batch one's."""
    import tvm

    from costmodel.predictor import CostModelPredictor
    from datagen.records import read_records
    from datagen.sampler import replay

    frame = read_records(tiny_dataset)
    frame = frame[frame.status == "ok"].head(20)
    predictor = CostModelPredictor.load(checkpoint)
    mods = [replay(tvm.ir.load_json(r.workload_ir), r.trace).mod for r in frame.itertuples()]
    seconds, emb = predictor.score_schedules(mods)
    graphs = [predictor.featurizer.featurize(m) for m in mods]
    np.testing.assert_allclose(seconds, predictor.predict_graphs(graphs), rtol=1e-5)
    np.testing.assert_allclose(predictor.predict(mods), seconds, rtol=1e-5)
    np.testing.assert_allclose(seconds, predictor.predict_records(frame), rtol=1e-5)
    assert emb.shape[0] == len(mods)


def test_evaluate_writes_report_and_plots(checkpoint, tiny_dataset, tmp_path):
    out = tmp_path / "eval"
    proc = run_cli("evaluate", checkpoint, "--dataset", tiny_dataset, "--out", str(out),
                   prog="costmodel")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["split"] == "family" and report["test_families"] == ["softmax"]
    for name in ("graphsage", "xgb"):
        metrics = report["models"][name]["mean"]
        assert set(metrics) == {"ape", "mape", "kendall_tau", "opa", "top1_score",
                                "top5_score", "apeak32"}
    assert report["models"]["xgb"]["mean"]["mape"] is None
    assert "softmax" in report["models"]["graphsage"]["per_run"][0]["per_family"]
    assert (out / "report.md").read_text().startswith("# Cost-model evaluation")
    assert (out / "predicted_vs_measured.png").stat().st_size > 1000


@pytest.mark.parametrize("args, message", [
    (["--data.dataset", "{tmp}/missing"], "does not exist"),
    (["--data.split", "shapes"], "leaves test empty"),
])
def test_bad_input(tiny_dataset, tmp_path, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = train("--data.dataset", tiny_dataset, "--trainer.fast_dev_run", "true", *args,
                 cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_evaluate_holds_out_the_named_families_without_split(checkpoint, tiny_dataset,
                                                              tmp_path):
    """--test-families alone means the family split (it used to be ignored without --split)."""
    out = tmp_path / "eval"
    run_cli("evaluate", checkpoint, "--dataset", tiny_dataset, "--out", str(out),
            "--test-families", "dense", "--no-baseline", prog="costmodel", check=True)
    report = json.loads((out / "report.json").read_text())
    assert report["split"] == "family" and report["test_families"] == ["dense"]


def test_evaluate_an_ensemble(checkpoint, tiny_dataset, tmp_path):
    out = tmp_path / "eval"
    run_cli("evaluate", checkpoint, checkpoint, "--ensemble", "--dataset", tiny_dataset,
            "--out", str(out), "--no-baseline", prog="costmodel", check=True)
    model = json.loads((out / "report.json").read_text())["models"]["graphsage"]
    assert model["ensemble"] and model["runs"] == 1


def test_unknown_rank_loss_is_one_line(tiny_dataset, tmp_path):
    proc = train("--data.dataset", tiny_dataset, "--trainer.fast_dev_run", "true",
                 "--model.rank_loss", "nope", cwd=tmp_path)
    assert_clean_error(proc, "unknown rank loss 'nope'", prog="train")
