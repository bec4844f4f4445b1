"""The checkpoint format: safe loading, validation with one-line errors, conversion, ensembles.

The checkpoints here are real networks (freshly initialised, untrained) with statistics fitted
on real graphs of random schedules; training is covered by tests/training.
"""

import json
import os
import pickle

import numpy as np
import pytest
import torch

from conftest import assert_clean_error, run_cli
from costmodel import checkpoint, featurize
from costmodel.model import MODELS, create_model
from costmodel.normalization import Normalization
from costmodel.predictor import CostModelPredictor
from datagen.errors import UserError
from datagen.sampler import ScheduleSampler
from datagen.tvm_env import make_target, target_json
from datagen.workloads import Workload

DENSE = Workload("dense", (32, 32, 32))


@pytest.fixture(scope="module")
def target():
    return make_target(None)


@pytest.fixture(scope="module")
def graphs(target):
    featurizer = featurize.Featurizer(target)
    return [featurizer.featurize(c.mod)
            for c in ScheduleSampler(DENSE.mod, target).random(6, 0, set())]


def architecture(hidden: int = 16) -> dict:
    return {"name": "graphsage", "num_node_kinds": len(featurize.VOCABULARY),
            "num_node_features": featurize.NUM_NODE_FEATURES,
            "num_edge_types": len(featurize.EDGE_TYPES),
            "num_program_features": featurize.NUM_PROGRAM_FEATURES, "hidden": hidden,
            "num_layers": 2, "dropout": 0.0}


def write(path, graphs, tvm_target, seed: int = 0, per_workload: bool = False,
          **meta_changes) -> str:
    """A format-2 checkpoint of a fresh network (seeded), with `meta_changes` applied;
    `per_workload`: trained on per-workload standardised labels (two workloads)."""
    torch.manual_seed(seed)
    model = create_model(architecture())
    workloads = [i % 2 for i in range(len(graphs))] if per_workload else None
    norm = Normalization.fit(graphs, np.linspace(1e-4, 2e-4, len(graphs)), workloads=workloads)
    meta = checkpoint.describe(model, norm, target_json(tvm_target), "data/x", "shapes",
                               {"train": ["dense/a"], "val": ["dense/b"], "test": ["dense/c"]})
    meta.update(meta_changes)
    checkpoint.save(str(path), model, meta, {"rank_loss": "logistic"})
    return str(path)


def test_save_load_round_trip(tmp_path, graphs, target):
    path = write(tmp_path / "a.ckpt", graphs, target)
    ckpt = checkpoint.load(path)
    assert ckpt.target_kind == "llvm" and ckpt.meta["format_version"] == checkpoint.FORMAT_VERSION
    assert ckpt.model.architecture == architecture() and not ckpt.model.training
    first = CostModelPredictor.load(path).predict_graphs(graphs)
    again = CostModelPredictor.load(path).predict_graphs(graphs)
    assert first.shape == (len(graphs),) and np.all(first > 0)
    np.testing.assert_array_equal(first, again)
    # the file holds only tensors and plain containers: torch's restricted loader reads it
    assert "costmodel" in torch.load(path, weights_only=True)


class RunsCode:
    """A pickle that runs a shell command when unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_crafted_pickle_is_refused_and_runs_nothing(tmp_path, graphs, target):
    marker = tmp_path / "code-ran"
    ckpt = {"costmodel": {"format_version": 2}, "payload": RunsCode(marker)}
    path = tmp_path / "evil.ckpt"
    torch.save(ckpt, path)
    with pytest.raises(UserError, match="was refused: it holds objects other than tensors"):
        checkpoint.load(str(path))
    plain = tmp_path / "evil.pkl"
    plain.write_bytes(pickle.dumps(RunsCode(marker)))
    with pytest.raises(UserError, match="refused|not a readable checkpoint"):
        CostModelPredictor.load(str(plain))
    assert not marker.exists()
    # the tuner and the evaluator load the same way: one line, exit 2, nothing ran
    proc = run_cli("run", "dense/m32_n32_k32", "--checkpoint", str(path), "--out",
                   str(tmp_path / "o"), prog="tune")
    assert_clean_error(proc, "was refused", prog="tune")
    proc = run_cli("run", "dense/m32_n32_k32", "--checkpoint", str(plain), "--out",
                   str(tmp_path / "o"), prog="tune")
    assert_clean_error(proc, "was refused", prog="tune")
    assert len(proc.stderr.splitlines()) == 1, proc.stderr  # not torch's pickle warning too
    assert not marker.exists()


@pytest.mark.parametrize("changes, message", [
    ({"format_version": 1}, "is a format-1 checkpoint and this version reads format 2: "
                            "convert it with 'costmodel convert"),
    ({"format_version": 9}, "from a newer tvm-costmodel"),
    ({"featurizer_version": "tir-graph-0"}, "trained with featuriser tir-graph-0"),
    ({"vocabulary": {"root": 0}}, "other vocabulary than featuriser"),
    ({"edge_types": ["nest"]}, "other edge types than featuriser"),
    ({"architecture": {"name": "transformer"}}, "unknown model 'transformer'; choose one of"),
    ({"architecture": {**architecture(), "hidden": 32}}, "its weights do not fit architecture"),
    ({"architecture": {**architecture(), "width": 3}}, "does not take these arguments"),
])
def test_each_mismatch_is_one_clear_error(tmp_path, graphs, target, changes, message):
    path = write(tmp_path / "bad.ckpt", graphs, target, **changes)
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        checkpoint.load(path)


def test_target_kind_is_checked_when_asked(tmp_path, graphs, target):
    path = write(tmp_path / "a.ckpt", graphs, target)
    assert checkpoint.load(path, target_kind="llvm")
    with pytest.raises(UserError, match="was trained for llvm targets, not cuda"):
        CostModelPredictor.load(path, target_kind="cuda")


def test_missing_and_foreign_files(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        checkpoint.load(str(tmp_path / "none.ckpt"))
    torch.save({"state_dict": {}}, tmp_path / "other.ckpt")
    with pytest.raises(UserError, match="is not a cost-model checkpoint"):
        checkpoint.load(str(tmp_path / "other.ckpt"))
    (tmp_path / "text.ckpt").write_text("hello")
    with pytest.raises(UserError, match="is not a readable checkpoint: not a file that "
                                        "torch.save wrote"):
        checkpoint.load(str(tmp_path / "text.ckpt"))
    (tmp_path / "empty.ckpt").write_bytes(b"")
    with pytest.raises(UserError, match="is not a readable checkpoint"):
        checkpoint.load(str(tmp_path / "empty.ckpt"))


def test_convert_a_format_1_checkpoint(tmp_path, graphs, target):
    """Format 1 (Lightning's file, no version, architecture or target kind) converts to the
    current format with the same weights and predictions."""
    new = write(tmp_path / "new.ckpt", graphs, target)
    raw = checkpoint.read(new)
    meta = {k: v for k, v in raw["costmodel"].items()
            if k not in ("format_version", "architecture", "target_kind")}
    hp = {"hidden": 16, "num_layers": 2, "dropout": 0.0, "use_program_features": True,
          "rank_loss": "logistic", "_instantiator": "lightning.pytorch.cli.instantiate_module"}
    old = tmp_path / "old.ckpt"
    torch.save({"costmodel": meta, "hyper_parameters": hp, "state_dict": raw["state_dict"],
                "optimizer_states": [{"state": {}}], "epoch": 3}, old)
    with pytest.raises(UserError, match="format-1 checkpoint"):
        checkpoint.load(str(old))
    converted = tmp_path / "converted.ckpt"
    run_cli("convert", str(old), str(converted), prog="costmodel", check=True)
    np.testing.assert_array_equal(CostModelPredictor.load(str(converted)).predict_graphs(graphs),
                                  CostModelPredictor.load(new).predict_graphs(graphs))
    # the hyperparameters carry training's names, Lightning's instantiator dropped
    hp_new = checkpoint.load(str(converted)).hparams
    assert hp_new["architecture"] == "graphsage" and hp_new["hidden"] == 16
    assert "model" not in hp_new and "_instantiator" not in hp_new
    proc = run_cli("convert", str(converted), str(tmp_path / "again.ckpt"), prog="costmodel")
    assert_clean_error(proc, "already a format-2 checkpoint", prog="costmodel")
    assert not (tmp_path / "again.ckpt").exists()


def test_an_ensemble_averages_log_latency(tmp_path, graphs, target):
    paths = [write(tmp_path / f"s{s}.ckpt", graphs, target, seed=s) for s in (0, 1)]
    singles = [CostModelPredictor.load(p) for p in paths]
    ensemble = CostModelPredictor.load(paths)
    seconds, emb = ensemble.predict_and_embed(graphs)
    logs = [np.log(p.predict_graphs(graphs)) for p in singles]
    assert not np.allclose(logs[0], logs[1])  # the members differ ...
    np.testing.assert_allclose(seconds, np.exp(np.mean(logs, axis=0)), rtol=1e-6)  # ... mean
    widths = [p.predict_and_embed(graphs)[1].shape[1] for p in singles]
    assert emb.shape == (len(graphs), sum(widths))
    cuda = write(tmp_path / "cuda.ckpt", graphs, target,
                 target=json.dumps({"kind": "cuda", "arch": "sm_90a"}), target_kind="cuda")
    with pytest.raises(UserError, match="ensemble members disagree on the target"):
        CostModelPredictor.load([paths[0], cuda])


def test_a_packed_ensemble_predicts_as_its_members(tmp_path, graphs, target):
    paths = [write(tmp_path / f"s{s}.ckpt", graphs, target, seed=s) for s in (0, 1, 2)]
    apart = CostModelPredictor.load(paths).predict_and_embed(graphs)
    proc = run_cli("ensemble", *paths, "--out", str(tmp_path / "e.ckpt"), prog="costmodel")
    assert proc.returncode == 0 and "3 networks" in proc.stdout, proc.stderr
    packed = CostModelPredictor.load(str(tmp_path / "e.ckpt"))
    assert len(packed.members) == 3 and packed.files == [str(tmp_path / "e.ckpt")]
    for got, want in zip(packed.predict_and_embed(graphs), apart):
        np.testing.assert_array_equal(got, want)  # the same networks, the same order
    assert checkpoint.read(str(tmp_path / "e.ckpt"))["costmodel"]["ensemble"] == 3
    # one network is what fine-tuning starts from: a packed file is refused there
    with pytest.raises(UserError, match="is an ensemble of 3 networks and this needs one"):
        checkpoint.load(str(tmp_path / "e.ckpt"))
    # float16 weights: stored as float16, loaded as float32, log-latency within rounding
    run_cli("ensemble", *paths, "--out", str(tmp_path / "h.ckpt"), "--half", prog="costmodel",
            check=True)
    half = CostModelPredictor.load(str(tmp_path / "h.ckpt"))
    assert all(p.dtype == torch.float32 for m in half.members for p in m.model.parameters())
    stored = checkpoint.read(str(tmp_path / "h.ckpt"))
    assert stored["costmodel"]["weights_dtype"] == "float16" and {
        w.dtype for state in stored["members"] for w in state.values()} == {torch.float16}
    assert os.path.getsize(tmp_path / "h.ckpt") < os.path.getsize(tmp_path / "e.ckpt")
    np.testing.assert_allclose(np.log(half.predict_graphs(graphs)), np.log(apart[0]),
                               atol=5e-3)
    # packing a packed file with another member flattens it; a single network stays a plain file
    CostModelPredictor.load([str(tmp_path / "e.ckpt"), paths[0]]).save(str(tmp_path / "f.ckpt"))
    assert len(CostModelPredictor.load(str(tmp_path / "f.ckpt")).members) == 4
    CostModelPredictor.load(paths[0]).save(str(tmp_path / "one.ckpt"))
    assert "ensemble" not in checkpoint.load(str(tmp_path / "one.ckpt")).meta


def test_an_ensemble_packs_only_seeds_of_one_configuration(tmp_path, graphs, target):
    a = write(tmp_path / "a.ckpt", graphs, target)
    other = write(tmp_path / "b.ckpt", graphs, target, seed=1, dataset="data/y")
    proc = run_cli("ensemble", a, other, "--out", str(tmp_path / "e.ckpt"), prog="costmodel")
    assert_clean_error(proc, "differ in dataset", prog="costmodel")
    assert not (tmp_path / "e.ckpt").exists()
    proc = run_cli("ensemble", a, "--out", str(tmp_path / "e.ckpt"), prog="costmodel")
    assert_clean_error(proc, "two checkpoints or more", prog="costmodel")
    proc = run_cli("ensemble", a, str(tmp_path / "b.ckpt"), "--out", a, prog="costmodel")
    assert_clean_error(proc, "is one of the checkpoints packed", prog="costmodel")
    torch.save({"costmodel": checkpoint.read(a)["costmodel"], "members": {"x": 1}},
               tmp_path / "bad.ckpt")
    with pytest.raises(UserError, match="not a list of networks' weights"):
        CostModelPredictor.load(str(tmp_path / "bad.ckpt"))


def test_the_shipped_checkpoints_are_current_and_installed():
    from costmodel import checkpoints

    # a seed ensemble packed in one file (`costmodel ensemble --half`)
    members = checkpoint.load_members(checkpoints.path("graphsage-v3.ckpt"), target_kind="llvm")
    ckpt = members[0]
    assert len(members) == 2 and ckpt.meta["ensemble"] == 2
    assert ckpt.meta["weights_dtype"] == "float16"
    assert ckpt.meta["format_version"] == checkpoint.FORMAT_VERSION
    # not trained with per-workload normalisation: it predicts latency
    assert not ckpt.meta["normalization"].get("per_workload") and ckpt.predicts_latency
    assert CostModelPredictor.load(checkpoints.path("graphsage-v3.ckpt")).predicts_latency
    # tune's default: the network tasks and, a head of their own, the same CPU's generated
    # tasks, split cross-suite: the hand-written suite and novel network shapes never trained
    default = checkpoint.load_members(checkpoints.path())[0]
    assert os.path.basename(checkpoints.path()) == "graphsage-v3.ckpt"
    assert default.meta["split"] == "cross-suite" and len(default.meta["sides"]["test"]) == 52
    assert default.meta["test_dataset"] == "data/llvm-full" and default.meta["sides"]["val"]
    assert [j["dataset"] for j in default.meta["joint"]] == ["data/llvm-znver4"]
    assert os.path.isfile(checkpoints.path().replace(".ckpt", ".xgb.npz"))
    # and predicts its blend with that pretrained XGBModel and TenSet's MLP (each a share)
    cpu = CostModelPredictor.load(checkpoints.path())
    assert cpu.companion.name == "xgb+mlp" and 0 < cpu.companion.weight < 1
    assert all(cpu.companion.shares > 0) and cpu.companion.fits(default.meta)
    assert abs(cpu.companion.weight + cpu.companion.shares.sum() - 1) < 1e-9
    # the evaluation checkpoints are not shipped
    for name in ("graphsage-v2.ckpt", "graphsage-v2-networks.ckpt", "graphsage.ckpt"):
        with pytest.raises(UserError, match="missing from this installation"):
            checkpoints.path(name)
    # the GPU model ships with its LightGBM companion, fitted on its own training records
    gpu = CostModelPredictor.load(checkpoints.path("graphsage-h100.ckpt"))
    assert gpu.target_kind == "cuda" and gpu.companion is not None
    assert gpu.companion.info["records"] > 7000 and gpu.companion.weight == 0.5
    assert CostModelPredictor.load(checkpoints.path("graphsage-h100.ckpt"),
                                   blend=False).companion is None
    with pytest.raises(UserError, match="missing from this installation"):
        checkpoints.path("nope.ckpt")
    # the files beside them are store models to the one interface of costmodel.store_models
    from costmodel.store_models import load_store_model

    for name, kind in (("graphsage-v3.xgb.npz", "xgb"), ("graphsage-h100.lgb.npz", "lightgbm")):
        model = load_store_model(checkpoints.path(name), scoring_only=True)
        assert model.name == kind and model.fitted_on["records"] > 7000
    assert cpu.companion.info["fingerprint"] == load_store_model(
        checkpoints.path("graphsage-v3.xgb.npz"), scoring_only=True).fitted_on["fingerprint"]


def test_models_are_created_by_name():
    assert "graphsage" in MODELS.names()
    model = create_model(architecture(8))
    assert model.architecture == architecture(8) and model.embedding_size == 8 * 3
    with pytest.raises(UserError, match="unknown model"):
        MODELS.create("nope")


def test_a_per_workload_checkpoint_says_it_predicts_no_latency(tmp_path, graphs, target):
    """Trained on per-workload standardised labels, a model predicts a relative score: the
    checkpoint records it, the predictor says so, and an ensemble never mixes the two."""
    path = write(tmp_path / "rel.ckpt", graphs, target, per_workload=True)
    assert checkpoint.read(path)["costmodel"]["normalization"]["per_workload"] is True
    predictor = CostModelPredictor.load(path)
    assert not predictor.predicts_latency and not predictor.members[0].predicts_latency
    assert "relative score" in repr(predictor)
    scores = predictor.predict_graphs(graphs)
    assert scores.shape == (len(graphs),) and np.isfinite(scores).all()
    latency = write(tmp_path / "lat.ckpt", graphs, target)
    assert CostModelPredictor.load(latency).predicts_latency
    with pytest.raises(UserError, match="disagree on what they predict: .*rel.ckpt predicts a "
                                        "score relative to each workload"):
        CostModelPredictor.load([latency, path])
    # adapting standardises the measured latencies within each group, as training did
    before = predictor.predict_graphs(graphs)
    loss = predictor.adapt(graphs, np.linspace(1e-4, 9e-4, len(graphs)),
                           [i % 2 for i in range(len(graphs))], steps=3, lr=1e-2)
    assert np.isfinite(loss) and not np.allclose(before, predictor.predict_graphs(graphs))


def test_the_predictor_runs_on_the_device_asked_for(tmp_path, graphs, target):
    """"cpu" (the default) works; "cuda" needs a CUDA build of torch and a GPU: without one it
    is one clear error, here and in `tune --device`; with one, the networks are there and
    predict what they predict on the CPU."""
    path = write(tmp_path / "a.ckpt", graphs, target)
    default = CostModelPredictor.load(path)
    cpu = CostModelPredictor.load(path, device="cpu")
    assert default.device == cpu.device == torch.device("cpu")
    np.testing.assert_array_equal(cpu.predict_graphs(graphs), default.predict_graphs(graphs))
    with pytest.raises(UserError, match="unknown torch device 'gpu0'"):
        CostModelPredictor.load(path, device="gpu0")
    if torch.cuda.is_available():
        gpu = CostModelPredictor.load(path, device="cuda")
        assert all(p.device.type == "cuda" for p in gpu.members[0].model.parameters())
        np.testing.assert_allclose(gpu.predict_graphs(graphs), cpu.predict_graphs(graphs),
                                   rtol=1e-4)
        return
    with pytest.raises(UserError, match=r"device 'cuda' asked for, but torch .* sees no CUDA "
                                        "GPU; run on cpu"):
        CostModelPredictor.load(path, device="cuda")
    proc = run_cli("run", "dense/m32_n32_k32", "--checkpoint", path, "--device", "cuda",
                   "--out", str(tmp_path / "o"), prog="tune")
    assert_clean_error(proc, "sees no CUDA GPU", prog="tune")
    assert not (tmp_path / "o").exists()  # refused before any work


def test_a_checkpoint_rebuilds_its_readout(tmp_path, graphs, target):
    """A model with another readout travels in its architecture; one with the default has no
    `readout` key, so checkpoints written before readouts existed read as they did."""
    torch.manual_seed(0)
    model = create_model({**architecture(), "readout": "mean_max_logsum"})
    norm = Normalization.fit(graphs, np.linspace(1e-4, 2e-4, len(graphs)))
    meta = checkpoint.describe(model, norm, target_json(target), "data/x", "shapes",
                               {"train": ["dense/a"], "val": ["dense/b"], "test": ["dense/c"]})
    checkpoint.save(str(tmp_path / "l.ckpt"), model, meta, {"rank_loss": "logistic"})
    loaded = checkpoint.load(str(tmp_path / "l.ckpt"))
    assert loaded.model.architecture["readout"] == "mean_max_logsum"
    for name, weights in model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], weights), name
    assert "readout" not in checkpoint.load(write(tmp_path / "d.ckpt", graphs, target)) \
        .model.architecture


@pytest.mark.slow  # featurises real GPU records: the full run
def test_the_shipped_gpu_checkpoint_scores_the_committed_gpu_records_on_a_cpu():
    """The H100 model and its records need no GPU to be read: CUDA schedules lower and
    featurise here, and the model ranks some of them apart."""
    from costmodel import checkpoints
    from datagen import records

    path = checkpoints.path("graphsage-h100.ckpt")
    ckpt = checkpoint.load(path, target_kind="cuda")
    assert ckpt.meta["format_version"] == checkpoint.FORMAT_VERSION
    assert json.loads(ckpt.meta["target"])["arch"] == "sm_90a"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    frame = records.read_records(os.path.join(root, ckpt.meta["dataset"]))
    frame = frame[(frame.status == "ok")
                  & frame.workload_key.isin(ckpt.meta["sides"]["test"])].head(8)
    assert len(frame) == 8
    predicted = CostModelPredictor.load(path).predict_records(frame)
    assert predicted.shape == (8,) and np.all(np.isfinite(predicted)) and np.all(predicted > 0)
    assert len(set(np.round(predicted, 12))) > 1
    with pytest.raises(UserError, match="target"):
        checkpoint.load(path, target_kind="llvm")


def test_a_store_feature_checkpoint_extracts_store_rows_to_predict(tmp_path, graphs, target):
    """A model that reads per-store features records their layout; its predictor extracts
    them for every program it scores, and a file naming another layout is refused."""
    schedules = ScheduleSampler(DENSE.mod, target).random(6, 0, set())
    with_rows = featurize.Featurizer(target, stores=True).featurize_many(
        [c.mod for c in schedules])
    torch.manual_seed(0)
    model = create_model({**architecture(), "num_store_features": featurize.NUM_STORE_FEATURES})
    norm = Normalization.fit(with_rows, np.linspace(1e-4, 2e-4, len(with_rows)))
    meta = checkpoint.describe(model, norm, target_json(target), "data/x", "shapes",
                               {"train": ["dense/a"], "val": [], "test": []})
    assert meta["store_features"] == featurize.STORE_FEATURES_VERSION
    checkpoint.save(str(tmp_path / "s.ckpt"), model, meta, {})
    predictor = CostModelPredictor.load(str(tmp_path / "s.ckpt"))
    assert predictor.featurizer.stores
    seconds = predictor.predict([c.sch for c in schedules])
    np.testing.assert_allclose(seconds, predictor.predict_graphs(with_rows), rtol=1e-5)
    assert len(set(seconds.round(12))) > 1
    checkpoint.save(str(tmp_path / "old.ckpt"), model,
                    {**meta, "store_features": "ms-per-store-feature-3-5"}, {})
    with pytest.raises(UserError, match="reads store features ms-per-store-feature-3-5 "
                                        r"\(164 per store\).*retrain it"):
        checkpoint.load(str(tmp_path / "old.ckpt"))
    assert not CostModelPredictor.load(write(tmp_path / "g.ckpt", graphs,
                                             target)).featurizer.stores


def test_a_warp_feature_checkpoint_featurises_warps_to_predict(tmp_path, graphs, target):
    """A model that reads warp features records their layout; its predictor computes them for
    every program it scores (here CUDA schedules, built and featurised without a GPU), and a
    file naming another layout is refused."""
    gpu = make_target("nvidia/nvidia-a100")
    featurizer = featurize.Featurizer(gpu, warps=True)
    schedules, cuda = [], []
    for c in ScheduleSampler(DENSE.mod, gpu).random(12, 0, set()):
        try:
            cuda.append(featurizer.featurize(c.mod))
        except featurize.FeaturizeError:
            continue
        schedules.append(c.sch)
    assert len(cuda) >= 2
    torch.manual_seed(0)
    model = create_model({**architecture(), "num_warp_features": featurize.NUM_WARP_FEATURES})
    norm = Normalization.fit(cuda, np.linspace(1e-4, 2e-4, len(cuda)))
    meta = checkpoint.describe(model, norm, target_json(gpu), "data/x", "shapes",
                               {"train": ["dense/a"], "val": [], "test": []})
    assert meta["warp_features"] == featurize.WARP_FEATURES_VERSION
    checkpoint.save(str(tmp_path / "w.ckpt"), model, meta, {})
    predictor = CostModelPredictor.load(str(tmp_path / "w.ckpt"))
    assert predictor.featurizer.warps and not predictor.featurizer.stores
    seconds = predictor.predict(schedules)
    np.testing.assert_allclose(seconds, predictor.predict_graphs(cuda), rtol=1e-5)
    checkpoint.save(str(tmp_path / "old.ckpt"), model, {**meta, "warp_features": "warp-0"}, {})
    with pytest.raises(UserError, match=r"reads warp features warp-0 \(2 per node\).*retrain"):
        checkpoint.load(str(tmp_path / "old.ckpt"))
    assert not CostModelPredictor.load(write(tmp_path / "g.ckpt", graphs,
                                             target)).featurizer.warps


def test_a_trace_reading_checkpoint_tokenises_traces_to_predict(tmp_path, target):
    """A model that reads the trace view records its token layout; its predictor tokenises the
    trace of every schedule it scores (and of every record), and a file naming another layout
    or vocabulary is refused."""
    from costmodel import trace_features

    schedules = ScheduleSampler(DENSE.mod, target).random(6, 0, set())
    with_tokens = featurize.Featurizer(target, traces=True).featurize_many(
        [c.sch for c in schedules])
    torch.manual_seed(0)
    model = create_model({**architecture(),
                          "num_trace_features": trace_features.NUM_TRACE_FEATURES,
                          "num_trace_kinds": trace_features.TRACE_KINDS, "trace_layers": 1})
    norm = Normalization.fit(with_tokens, np.linspace(1e-4, 2e-4, len(with_tokens)))
    assert norm.trace_mean.shape == (trace_features.NUM_TRACE_FEATURES,)
    meta = checkpoint.describe(model, norm, target_json(target), "data/x", "shapes",
                               {"train": ["dense/a"], "val": [], "test": []})
    assert meta["trace_features"] == trace_features.TRACE_FEATURES_VERSION
    checkpoint.save(str(tmp_path / "t.ckpt"), model, meta, {})
    predictor = CostModelPredictor.load(str(tmp_path / "t.ckpt"))
    assert predictor.featurizer.traces and not predictor.featurizer.stores
    np.testing.assert_array_equal(predictor.members[0].normalization.trace_std, norm.trace_std)
    seconds = predictor.predict([c.sch for c in schedules])
    np.testing.assert_allclose(seconds, predictor.predict_graphs(with_tokens), rtol=1e-5)
    assert len(set(seconds.round(12))) > 1
    with pytest.raises(featurize.FeaturizeError, match="give Schedules"):
        predictor.predict([c.mod for c in schedules])
    for changes, message in [({"trace_features": "ms-trace-0"}, "reads trace tokens ms-trace-0"),
                             ({"architecture": {**meta["architecture"], "num_trace_kinds": 64}},
                              "64 kinds")]:
        checkpoint.save(str(tmp_path / "old.ckpt"), model, {**meta, **changes}, {})
        with pytest.raises(UserError, match=message + ".*retrain it"):
            checkpoint.load(str(tmp_path / "old.ckpt"))
