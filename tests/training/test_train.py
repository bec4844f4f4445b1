"""Training through the real `train` CLI, on a real (tiny) measured dataset."""

import glob
import json
import lzma
import os

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
                 "--data.per_workload", "4", "--data.workloads_per_batch", "1", cwd=tmp_path,
                 command_line=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "distributed_backend=gloo" in proc.stderr + proc.stdout
    assert glob.glob(str(tmp_path / "runs" / "graphsage" / "checkpoints" / "*.ckpt"))


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
    assert report["test_networks"] == ["tiny"]
    assert list(report["models"]) == ["graphsage", "xgb", "lightgbm", "mlp"]
    # the baselines train on every record of the checkpoint's training workloads
    from costmodel.checkpoint import load
    meta = load(checkpoint).meta
    assert report["baseline_train_records"] == [meta["train_share"]["records"]]
    for name in ("graphsage", "xgb", "lightgbm", "mlp"):
        metrics = report["models"][name]["mean"]
        assert set(metrics) == {"ape", "mape", "kendall_tau", "opa", "top1_score",
                                "top5_score", "apeak32"}
        run = report["models"][name]["per_run"][0]
        assert "softmax" in run["per_family"] and "tiny" in run["per_network"]
        # every record is in "tiny" (NaN, a tree's constant guess on tiny data, is not NaN)
        assert json.dumps(run["per_network"]["tiny"]) == json.dumps(run["overall"])
        # the held-out family has one workload: its figures are that workload's
        assert list(run["per_workload"]) == ["softmax/rows16_cols32"]
        assert json.dumps(run["per_workload"]["softmax/rows16_cols32"]) == \
            json.dumps(run["per_family"]["softmax"])
    assert report["models"]["graphsage"]["predicts_latency"]
    graphsage = report["models"]["graphsage"]
    assert graphsage["mean"]["mape"] == pytest.approx(  # the mean over the runs, a number
        np.mean([run["overall"]["mape"] for run in graphsage["per_run"]]))
    for name in ("xgb", "lightgbm", "mlp"):
        assert report["models"][name]["mean"]["mape"] is None
        assert not report["models"][name]["predicts_latency"]
    text = (out / "report.md").read_text()
    assert text.startswith("# Cost-model evaluation")
    assert "| lightgbm (1 run(s)) |" in text and "### lightgbm" in text
    assert "## Per network" in text and "| tiny |" in text
    assert (out / "predicted_vs_measured.png").stat().st_size > 1000
    assert (out / "kendall_tau_per_workload.png").stat().st_size > 1000
    assert "lightgbm:" in proc.stdout
    # `costmodel report` writes the same markdown again from the kept report, plain or xz
    with lzma.open(out / "report.json.xz", "wt") as f:
        f.write((out / "report.json").read_text())
    again = run_cli("report", str(out / "report.json.xz"), "--out", str(out / "again.md"),
                    prog="costmodel", check=True)
    assert (out / "again.md").read_text() == text and "again.md" in again.stdout
    # elsewhere, where its plots are not, it names them instead of linking them
    run_cli("report", str(out / "report.json"), "--out", str(tmp_path / "elsewhere.md"),
            prog="costmodel", check=True)
    elsewhere = (tmp_path / "elsewhere.md").read_text()
    assert "](predicted_vs_measured.png)" not in elsewhere
    assert "`predicted_vs_measured.png` and `kendall_tau_per_workload.png`" in elsewhere
    (out / "report.md").unlink()
    run_cli("report", str(out / "report.json"), prog="costmodel", check=True)
    assert (out / "report.md").read_text() == text


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


class RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_ckpt_path_resumes_what_fit_wrote_and_refuses_the_rest_in_one_line(
        checkpoint, tiny_dataset, tmp_path):
    """Lightning's --ckpt_path resumes a checkpoint that `train fit` wrote; a missing file, a
    crafted pickle (which must not run) and a model without its training state (as the
    shipped checkpoints) are one line each, where Lightning gave tracebacks or usage pages."""
    import torch

    from costmodel import checkpoint as ckpt_format

    proc = train("--data.dataset", tiny_dataset, "--trainer.max_epochs", "4",
                 "--ckpt_path", checkpoint, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Restored all states from the checkpoint" in proc.stderr + proc.stdout
    marker = tmp_path / "code-ran"
    torch.save({"costmodel": {"format_version": 2}, "payload": RunsCode(marker)},
               tmp_path / "evil.ckpt")
    loaded = ckpt_format.load(checkpoint)
    ckpt_format.save(str(tmp_path / "model-only.ckpt"), loaded.model, loaded.meta,
                     loaded.hparams)
    for name, message in [("missing.ckpt", "does not exist"),
                          ("evil.ckpt", "was refused"),
                          ("model-only.ckpt", "without the state of its training (as the "
                                              "shipped checkpoints), which fit --ckpt_path "
                                              "needs; train from its weights with "
                                              "--model.init_from")]:
        proc = train("--data.dataset", tiny_dataset, "--ckpt_path", str(tmp_path / name),
                     cwd=tmp_path)
        assert_clean_error(proc, message, prog="train")
    assert not marker.exists()


def test_evaluate_refuses_an_out_it_cannot_write_before_any_work(checkpoint, tiny_dataset,
                                                                  tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    for out in ("a-file", "a-file/eval"):
        proc = run_cli("evaluate", checkpoint, "--dataset", tiny_dataset, "--out",
                       str(tmp_path / out), prog="costmodel")
        assert_clean_error(proc, "is a file, not a folder", prog="costmodel")
    assert (tmp_path / "a-file").read_text() == "not a folder"


def test_evaluate_holds_out_the_named_families_without_split(checkpoint, tiny_dataset,
                                                              tmp_path):
    """--test-families alone means the family split (it used to be ignored without --split)."""
    out = tmp_path / "eval"
    run_cli("evaluate", checkpoint, "--dataset", tiny_dataset, "--out", str(out),
            "--test-families", "dense", "--no-baseline", prog="costmodel", check=True)
    report = json.loads((out / "report.json").read_text())
    assert report["split"] == "family" and report["test_families"] == ["dense"]


def test_evaluate_reads_and_fills_a_feature_cache(checkpoint, tiny_dataset, tmp_path):
    """--cache-dir: the model's graphs and the baselines' store rows land in the cache, and a
    report made from it scores as one made without it."""
    def report(name: str, *extra: str) -> dict:
        run_cli("evaluate", checkpoint, "--dataset", tiny_dataset, "--out", str(tmp_path / name),
                "--baselines", "lightgbm", *extra, prog="costmodel", check=True)
        models = json.loads((tmp_path / name / "report.json").read_text())["models"]
        return {name: m["mean"] for name, m in models.items()}

    cache = tmp_path / "cache"
    plain = report("plain")
    assert report("filled", "--cache-dir", str(cache)) == plain
    graphs = list(cache.glob("tir-graph-*/llvm/*.npz"))
    stores = list(cache.glob("ms-per-store-feature-*/llvm/*.npy"))
    assert graphs and stores
    assert report("read", "--cache-dir", str(cache)) == plain
    assert sorted(cache.glob("tir-graph-*/llvm/*.npz")) == sorted(graphs)


def test_evaluate_refuses_a_cache_it_cannot_write(checkpoint, tiny_dataset, tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    proc = run_cli("evaluate", checkpoint, "--dataset", tiny_dataset, "--out",
                   str(tmp_path / "eval"), "--cache-dir", str(tmp_path / "a-file"),
                   prog="costmodel")
    assert_clean_error(proc, "--cache-dir", prog="costmodel")
    assert not (tmp_path / "eval").exists()


def test_evaluate_an_ensemble(checkpoint, tiny_dataset, tmp_path):
    out = tmp_path / "eval"
    run_cli("evaluate", checkpoint, checkpoint, "--ensemble", "--dataset", tiny_dataset,
            "--out", str(out), "--no-baseline", prog="costmodel", check=True)
    model = json.loads((out / "report.json").read_text())["models"]["graphsage"]
    assert model["ensemble"] and model["runs"] == 1


@pytest.mark.parametrize("rank_loss", ["listmle", "lambdarank", "regret"])
def test_other_rank_losses_train_through_the_cli(tiny_dataset, tmp_path, rank_loss):
    proc = train("--data.dataset", tiny_dataset, "--trainer.fast_dev_run", "true",
                 "--model.rank_loss", rank_loss, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "max_steps=1" in proc.stderr + proc.stdout


def test_per_workload_normalisation_trains_a_relative_model(tiny_dataset, tmp_path):
    """Per-workload labels: the checkpoint records it (with the statistics of the training
    workloads), the predictor's scores order programs as the network's outputs do, but they
    are no latency, so the report has no MAPE for it."""
    import torch
    from torch_geometric.data import Batch

    from costmodel import checkpoint as checkpoint_file
    from costmodel.predictor import CostModelPredictor
    from datagen.records import read_records
    from costmodel.metrics import kendall_tau

    proc = train("--data.dataset", tiny_dataset, "--trainer.max_epochs", "4",
                 "--data.normalize_per_workload", "true", "--model.rank_loss", "lambdarank",
                 cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = glob.glob(str(tmp_path / "runs" / "graphsage" / "checkpoints" / "*.ckpt"))
    assert checkpoint_file.read(path)["costmodel"]["normalization"]["per_workload"] is True
    predictor = CostModelPredictor.load(path)
    assert not predictor.predicts_latency
    frame = read_records(tiny_dataset)
    frame = frame[frame.status == "ok"]
    train_side = frame[frame.workload_key.isin(predictor.meta["sides"]["train"])]
    # targets were standardised per training workload: y_std is their pooled spread
    log = np.log(train_side.latency_median.to_numpy())
    residual = log - train_side.assign(log=log).groupby("workload_key").log.transform("mean")
    norm = predictor.members[0].normalization
    assert norm.y_mean == 0.0
    assert norm.y_std == pytest.approx(np.sqrt(np.mean(residual ** 2)), rel=1e-4)
    # the scores rank as the network's outputs do (exactly: a monotone map of them)
    scores = predictor.predict_records(train_side)
    assert np.isfinite(scores).all() and np.ptp(scores) > 0
    member = predictor.members[0]
    graphs = [predictor.featurizer.featurize_record(r.workload_ir, r.trace, r.trace_hash)
              for r in train_side.itertuples()]
    batch = Batch.from_data_list([norm.data(g) for g in graphs])
    with torch.no_grad():
        raw = member.model(batch.node_kind, batch.x, batch.edge_index, batch.edge_type,
                           batch.batch, batch.program).numpy()
    assert kendall_tau(train_side.workload_key, np.exp(raw), scores) == pytest.approx(1.0)
    out = tmp_path / "eval"
    run_cli("evaluate", path, "--dataset", tiny_dataset, "--out", str(out), "--baselines",
            "lightgbm", prog="costmodel", check=True)
    report = json.loads((out / "report.json").read_text())
    assert list(report["models"]) == ["graphsage", "lightgbm"]
    model = report["models"]["graphsage"]
    assert not model["predicts_latency"] and model["mean"]["mape"] is None
    # the mean over the runs (NaN where the tiny held-out side gives a metric nothing to rank)
    runs = model["per_run"]
    for metric in ("kendall_tau", "ape"):
        assert model["mean"][metric] == pytest.approx(
            np.mean([run["overall"][metric] for run in runs]), nan_ok=True)
    assert model["per_run"][0]["per_network"]["tiny"]["mape"] is None
    assert "predicts a score relative to each workload" in (out / "report.md").read_text()


def mixed_target_copy(dataset: str, folder) -> str:
    """A copy of `dataset` whose first shard claims another CPU: two targets in one folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from datagen.records import shard_paths

    folder.mkdir()
    for i, path in enumerate(shard_paths(dataset)):
        table = pq.read_table(path)
        if i == 0:
            other = json.dumps({**json.loads(table["target"][0].as_py()), "mcpu": "test-cpu"})
            column = table.schema.get_field_index("target")
            table = table.set_column(column, table.schema.field(column),
                                     pa.array([other] * len(table), pa.string()))
        pq.write_table(table, folder / os.path.basename(path))
    return str(folder)


def test_a_dataset_of_two_targets_is_refused(tiny_dataset, checkpoint, tmp_path):
    mixed = mixed_target_copy(tiny_dataset, tmp_path / "mixed")
    proc = train("--data.dataset", mixed, "--trainer.fast_dev_run", "true", cwd=tmp_path)
    assert_clean_error(proc, f"{mixed} mixes 2 targets (", prog="train")
    assert "train on one target: collect each into its own folder" in proc.stderr
    proc = run_cli("evaluate", checkpoint, "--dataset", mixed, "--out", str(tmp_path / "e"),
                   prog="costmodel")
    assert_clean_error(proc, f"{mixed} mixes 2 targets (", prog="costmodel")


def test_a_checkpoint_of_another_target_kind_is_refused(checkpoint, tmp_path):
    """A CPU checkpoint on the committed H100 records: its featuriser would lower the CUDA
    schedules for the CPU, so every score would be meaningless; one line, no report."""
    gpu = os.path.join(os.path.dirname(__file__), "..", "..", "data", "cuda-h100")
    out = tmp_path / "e"
    proc = run_cli("evaluate", checkpoint, "--dataset", gpu, "--split", "shapes", "--out",
                   str(out), "--no-baseline", prog="costmodel")
    assert_clean_error(proc, f"{checkpoint} was trained for llvm targets and {gpu} holds "
                             "cuda measurements", prog="costmodel")
    assert "adapt this one to them first" in proc.stderr and not out.exists()


def test_unknown_rank_loss_is_one_line(tiny_dataset, tmp_path):
    proc = train("--data.dataset", tiny_dataset, "--trainer.fast_dev_run", "true",
                 "--model.rank_loss", "nope", cwd=tmp_path)
    assert_clean_error(proc, "unknown rank loss 'nope'", prog="train")


def test_a_cosine_schedule_falls_over_all_of_trainings_steps(tiny_dataset, tmp_path):
    import math

    import torch

    proc = train("--data.dataset", tiny_dataset, "--trainer.max_epochs", "2",
                 "--model.lr_schedule", "cosine", "--model.lr", "0.002", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (ckpt,) = glob.glob(str(tmp_path / "runs" / "graphsage" / "checkpoints" / "*.ckpt"))
    (sched,) = torch.load(ckpt, weights_only=True)["lr_schedulers"]
    steps_per_epoch = sched["T_max"] / 2  # the whole run: both epochs' steps
    assert steps_per_epoch >= 1 and sched["T_max"] == int(sched["T_max"])
    assert 0 < sched["last_epoch"] <= sched["T_max"]
    expected = 0.002 * (1 + math.cos(math.pi * sched["last_epoch"] / sched["T_max"])) / 2
    assert sched["_last_lr"][0] == pytest.approx(expected) and expected < 0.002


def test_unknown_lr_schedule_is_one_line(tiny_dataset, tmp_path):
    proc = train("--data.dataset", tiny_dataset, "--trainer.fast_dev_run", "true",
                 "--model.lr_schedule", "step", cwd=tmp_path)
    assert_clean_error(proc, "unknown lr_schedule 'step'; choose one of constant, cosine",
                       prog="train")


def test_store_features_train_through_the_cli(tiny_dataset, tmp_path):
    """`--model.views [store]` alone makes the data extract the store rows (the CLI links
    the two): the checkpoint reads them, and scores schedules as it scores their records."""
    import tvm

    from costmodel import checkpoint as checkpoint_file
    from costmodel.featurize import NUM_STORE_FEATURES
    from costmodel.predictor import CostModelPredictor
    from datagen.records import read_records
    from datagen.sampler import replay

    proc = train("--data.dataset", tiny_dataset, "--trainer.max_epochs", "2",
                 "--model.views", "[store]", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = glob.glob(str(tmp_path / "runs" / "graphsage" / "checkpoints" / "*.ckpt"))
    meta = checkpoint_file.read(path)["costmodel"]
    assert meta["architecture"]["num_store_features"] == NUM_STORE_FEATURES
    assert len(meta["normalization"]["store_mean"]) == NUM_STORE_FEATURES
    frame = read_records(tiny_dataset)
    frame = frame[frame.status == "ok"].head(12)
    predictor = CostModelPredictor.load(path)
    mods = [replay(tvm.ir.load_json(r.workload_ir), r.trace).mod for r in frame.itertuples()]
    np.testing.assert_allclose(predictor.predict(mods), predictor.predict_records(frame),
                               rtol=1e-5)
    proc = train("--data.dataset", tiny_dataset, "--trainer.fast_dev_run", "true",
                 "--data.views", "[store]", cwd=tmp_path)
    assert proc.returncode != 0  # linked: only the model's flag sets it


def test_warp_features_train_through_the_cli(tiny_dataset, tmp_path):
    """`--model.views [warp]` alone makes the data give every graph its warp rows (the
    CLI links the two; on this CPU dataset they are all 0): the checkpoint reads them beside
    the node features and scores replayed schedules as it scores their records."""
    import tvm

    from costmodel import checkpoint as checkpoint_file
    from costmodel.featurize import NUM_NODE_FEATURES, NUM_WARP_FEATURES, WARP_FEATURES_VERSION
    from costmodel.predictor import CostModelPredictor
    from datagen.records import read_records
    from datagen.sampler import replay

    proc = train("--data.dataset", tiny_dataset, "--trainer.max_epochs", "1",
                 "--model.views", "[warp]", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = glob.glob(str(tmp_path / "runs" / "graphsage" / "checkpoints" / "*.ckpt"))
    ckpt = checkpoint_file.read(path)
    meta = ckpt["costmodel"]
    assert meta["architecture"]["num_warp_features"] == NUM_WARP_FEATURES
    assert meta["warp_features"] == WARP_FEATURES_VERSION
    assert ckpt["state_dict"]["model.feature_proj.weight"].shape[1] \
        == NUM_NODE_FEATURES + NUM_WARP_FEATURES
    frame = read_records(tiny_dataset)
    frame = frame[frame.status == "ok"].head(8)
    predictor = CostModelPredictor.load(path)
    mods = [replay(tvm.ir.load_json(r.workload_ir), r.trace).mod for r in frame.itertuples()]
    np.testing.assert_allclose(predictor.predict(mods), predictor.predict_records(frame),
                               rtol=1e-5)


def test_trace_features_train_through_the_cli(tiny_dataset, tmp_path):
    """`--model.views [trace]` alone makes the data tokenise every record's trace (the
    CLI links the two): the checkpoint reads the trace view, and scores replayed schedules as
    it scores their records."""
    import tvm

    from costmodel import checkpoint as checkpoint_file
    from costmodel.predictor import CostModelPredictor
    from costmodel.trace_features import NUM_TRACE_FEATURES, TRACE_FEATURES_VERSION
    from datagen.records import read_records
    from datagen.sampler import replay

    proc = train("--data.dataset", tiny_dataset, "--trainer.max_epochs", "2",
                 "--model.views", "[trace]", "--model.view_options", "{trace_layers: 2}",
                 cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = glob.glob(str(tmp_path / "runs" / "graphsage" / "checkpoints" / "*.ckpt"))
    meta = checkpoint_file.read(path)["costmodel"]
    assert meta["architecture"]["num_trace_features"] == NUM_TRACE_FEATURES
    assert meta["architecture"]["trace_layers"] == 2
    assert meta["trace_features"] == TRACE_FEATURES_VERSION
    frame = read_records(tiny_dataset)
    frame = frame[frame.status == "ok"].head(12)
    predictor = CostModelPredictor.load(path)
    schedules = [replay(tvm.ir.load_json(r.workload_ir), r.trace) for r in frame.itertuples()]
    np.testing.assert_allclose(predictor.predict(schedules), predictor.predict_records(frame),
                               rtol=1e-5)
    proc = train("--data.dataset", tiny_dataset, "--trainer.fast_dev_run", "true",
                 "--model.views", "[trace]", "--model.view_options", "{trace_layers: 0}",
                 cwd=tmp_path)
    assert_clean_error(proc, "trace_layers must be at least 1, not 0", prog="train")
    proc = train("--data.dataset", tiny_dataset, "--trainer.fast_dev_run", "true",
                 "--model.use_trace_features", "true", cwd=tmp_path)
    assert_clean_error(proc, "the command line: model.use_trace_features is an option of older "
                             "versions; list trace in model.views (views: [trace])",
                       prog="train")


def test_older_view_options_are_refused_in_one_line(tmp_path):
    """`use_KEY` and `trace_layers`, the options of older versions, on the command line or in
    a config file, and a checkpoint whose training had them (Lightning would rebuild the model
    from them), each name what to write instead."""
    import torch

    from datagen.errors import UserError
    from training.cli import check_ckpt_path, check_view_arguments

    old = tmp_path / "old.yaml"
    old.write_text("model:\n  hidden: 8\n  use_warp_features: true\n")
    with pytest.raises(UserError, match=f"^{old}: model.use_warp_features is an option of older "
                                        r"versions; list warp in model.views \(views: \[warp\]\)"):
        check_view_arguments(["fit", "--config", str(old)])
    with pytest.raises(UserError, match=r"model.view_options \(view_options: \{trace_layers"):
        check_view_arguments(["fit", "--model.trace_layers=2"])
    check_view_arguments(["fit", "--config", "configs/graphsage-h100.yaml", "--model.views",
                          "[store]", "--model.view_options", "{trace_layers: 2}"])
    resumable = {"costmodel": {}, "pytorch-lightning_version": "2", "optimizer_states": [],
                 "hyper_parameters": {"hidden": 8, "views": ["warp"]}}
    torch.save(resumable, tmp_path / "new.ckpt")
    check_ckpt_path("fit", str(tmp_path / "new.ckpt"))
    resumable["hyper_parameters"] = {"hidden": 8, "use_store_features": False}
    torch.save(resumable, tmp_path / "old.ckpt")
    with pytest.raises(UserError, match="was written by an older train.*--model.init_from"):
        check_ckpt_path("fit", str(tmp_path / "old.ckpt"))


def _one_family_copy(dataset: str, family: str, out) -> str:
    """A second dataset of the same target: the shards of `dataset` cut to one family."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from datagen.records import shard_paths

    out.mkdir()
    for path in shard_paths(dataset):
        table = pq.read_table(path)
        part = table.filter(pc.equal(table["family"], family))
        if part.num_rows:
            pq.write_table(part, str(out / os.path.basename(path)))
    return str(out)


def test_evaluate_cross_suite_scores_the_other_dataset(checkpoint, tiny_dataset, tmp_path):
    """--split cross-suite: every workload of --dataset the checkpoint never saw is scored,
    and the baselines train on its training workloads' records in --train-dataset."""
    other = _one_family_copy(tiny_dataset, "softmax", tmp_path / "other")
    out = tmp_path / "eval"
    run_cli("evaluate", checkpoint, "--dataset", other, "--split", "cross-suite",
            "--train-dataset", tiny_dataset, "--baselines", "lightgbm", "--out", str(out),
            prog="costmodel", check=True)
    report = json.loads((out / "report.json").read_text())
    assert report["split"] == "cross-suite" and report["train_dataset"] == tiny_dataset
    assert report["test_families"] == ["softmax"] and report["dataset"] == other
    assert report["test_workloads"] == 1 and report["train_workloads"] >= 1
    assert report["baseline_train_records"][0] > 0
    assert set(report["models"]) == {"graphsage", "lightgbm"}
    proc = run_cli("evaluate", checkpoint, "--dataset", other, "--train-dataset", tiny_dataset,
                   "--out", str(tmp_path / "e2"), prog="costmodel")
    assert_clean_error(proc, "--train-dataset names the records of the cross-suite",
                       prog="costmodel")


def test_evaluate_refuses_an_out_of_distribution_split_the_checkpoint_trained_on(
        checkpoint, tiny_dataset, tmp_path):
    proc = run_cli("evaluate", checkpoint, "--dataset", tiny_dataset, "--split", "novel-shapes",
                   "--test-fraction", "0.5", "--no-baseline", "--out", str(tmp_path / "eval"),
                   prog="costmodel")
    assert_clean_error(proc, "held-out workloads trained or validated a checkpoint",
                       prog="costmodel")
