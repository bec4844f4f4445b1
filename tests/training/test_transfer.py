"""Few-shot transfer: training on a share of the records (`--data.train_share`), starting from
a trained checkpoint (`--model.init_from`); bench/transfer.py's curve is tested in
tests/bench/test_transfer.py.

The fast tests use real, freshly initialised networks in real checkpoint files; the slow ones
train through the real `train` CLI on the tiny measured dataset."""

import dataclasses
import glob
import hashlib
import json
import os

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import another_cpu_copy, assert_clean_error, renamed_copy, train_tiny
from costmodel import checkpoint, featurize
from costmodel.model import batch_inputs, create_model
from costmodel.normalization import EPS, Normalization
from costmodel.predictor import CostModelPredictor
from datagen.errors import UserError
from costmodel.splits import MIN_PER_WORKLOAD, RECORD_COLUMNS, share_of_records, usable
from costmodel.data_module import JOINT_PREFIX, ScheduleDataModule
from costmodel.lightning_module import CostModelModule

GPU_TARGET = json.dumps({"kind": "cuda", "arch": "sm_90a"})
REPO = os.path.join(os.path.dirname(__file__), "..", "..")
# real CUDA records measured on an H100, committed: another target beside the tiny CPU dataset
GPU_DATASET = os.path.join(REPO, "data", "cuda-h100")


def records(sizes: dict[str, int]) -> pd.DataFrame:
    """`sizes[key]` records of each workload, interleaved, numbered in `id`."""
    keys = [k for k, n in sizes.items() for _ in range(n)]
    frame = pd.DataFrame({"workload_key": keys}).sample(frac=1, random_state=0)
    return frame.reset_index(drop=True).assign(id=range(len(keys)))


SIZES = {"dense/a": 200, "conv2d/b": 40, "softmax/c": 3, "pool2d/d": 1}


@pytest.mark.parametrize("share", [0.01, 0.05, 0.1, 0.5])
def test_a_share_keeps_its_part_of_every_workload_and_at_least_two(share):
    frame = records(SIZES)
    part = share_of_records(frame, share, seed=0)
    counts = part.workload_key.value_counts().to_dict()
    for key, n in SIZES.items():
        expected = min(n, max(MIN_PER_WORKLOAD, int(np.floor(share * n + 0.5))))
        assert counts.get(key, 0) == expected, (key, share)
    assert counts["softmax/c"] >= 2 and counts["pool2d/d"] == 1  # the floor, or all it has
    assert part.id.is_unique and set(part.id) <= set(frame.id)  # records of frame, no repeats
    assert part.id.is_monotonic_increasing  # rows keep their order
    assert part.columns.tolist() == frame.columns.tolist()


def test_a_share_is_seeded_and_nested():
    frame = records(SIZES)
    first = share_of_records(frame, 0.1, seed=3)
    pd.testing.assert_frame_equal(first, share_of_records(frame, 0.1, seed=3))
    assert set(first.id) != set(share_of_records(frame, 0.1, seed=4).id)
    # for one seed a smaller share is part of a larger one, so a curve adds records
    assert set(share_of_records(frame, 0.05, seed=3).id) <= set(first.id) \
        <= set(share_of_records(frame, 0.5, seed=3).id)
    assert len(share_of_records(frame, 1.0, seed=3)) == len(frame)


@pytest.mark.parametrize("share", [0.0, -0.1, 1.5, float("nan")])
def test_a_share_outside_zero_one_is_refused(share):
    with pytest.raises(UserError, match=r"train_share must be in \(0, 1\], not"):
        share_of_records(records(SIZES), share, seed=0)
    with pytest.raises(UserError, match=r"train_share must be in \(0, 1\], not"):
        ScheduleDataModule(train_share=share)
    assert ScheduleDataModule().hparams.train_share == 1.0  # all records by default


def test_fine_tuning_keeps_the_inputs_standardised_as_the_source_saw_them():
    """Features that varied in the source keep its statistics; one that was constant there
    (as thread bindings are in CPU programs) takes the new data's; the target's are new."""
    rng = np.random.default_rng(0)
    source = Normalization(x_mean=np.array([1.0, 0.0], np.float32),
                           x_std=np.array([2.0, EPS], np.float32),
                           program_mean=np.array([5.0, 3.0], np.float32),
                           program_std=np.array([EPS, 0.5], np.float32), y_mean=-9.0, y_std=1.5)
    ours = Normalization(x_mean=rng.normal(size=2), x_std=np.array([3.0, 4.0]),
                         program_mean=rng.normal(size=2), program_std=np.array([6.0, 7.0]),
                         y_mean=-12.0, y_std=0.7, per_workload=True)
    mixed = ours.with_inputs_of(source)
    np.testing.assert_array_equal(mixed.x_mean, [1.0, ours.x_mean[1]])
    np.testing.assert_array_equal(mixed.x_std, [2.0, 4.0])
    np.testing.assert_array_equal(mixed.program_mean, [ours.program_mean[0], 3.0])
    np.testing.assert_array_equal(mixed.program_std, [6.0, 0.5])
    assert (mixed.y_mean, mixed.y_std, mixed.per_workload) == (-12.0, 0.7, True)
    again = mixed.with_inputs_of(source)  # a second setup (fit, then test) changes nothing
    for name in ("x_mean", "x_std", "program_mean", "program_std"):
        np.testing.assert_array_equal(getattr(again, name), getattr(mixed, name))


def architecture(hidden: int = 16, use_program_features: bool = True) -> dict:
    """What `CostModelModule(hidden=..., num_layers=2, dropout=0.0)` builds."""
    return {"name": "graphsage", "num_node_kinds": len(featurize.VOCABULARY),
            "num_node_features": featurize.NUM_NODE_FEATURES,
            "num_edge_types": len(featurize.EDGE_TYPES),
            "num_program_features": featurize.NUM_PROGRAM_FEATURES if use_program_features
            else 0, "hidden": hidden, "num_layers": 2, "dropout": 0.0}


def write_source(path, target: str = GPU_TARGET, **arch) -> str:
    """A checkpoint of a fresh (seeded) network, as `train fit` describes one."""
    torch.manual_seed(1)
    model = create_model(architecture(**arch))
    n, p = featurize.NUM_NODE_FEATURES, featurize.NUM_PROGRAM_FEATURES
    norm = Normalization(np.ones(n), np.ones(n), np.ones(p), np.ones(p), -10.0, 1.0)
    meta = checkpoint.describe(model, norm, target, "data/x", "shapes",
                               {"train": ["dense/a"], "val": [], "test": ["dense/b"]})
    checkpoint.save(str(path), model, meta, {"rank_loss": "logistic"})
    return str(path)


def test_init_from_starts_from_the_checkpoints_weights(tmp_path):
    """Its weights, whatever target it was trained for (a GPU model here); the module
    records where it started."""
    path = write_source(tmp_path / "gpu.ckpt")
    fresh = CostModelModule(hidden=16, num_layers=2, dropout=0.0)
    module = CostModelModule(hidden=16, num_layers=2, dropout=0.0, init_from=path)
    source = checkpoint.load(path).model.state_dict()
    assert module.model.state_dict().keys() == source.keys()
    assert all(torch.equal(w, source[k]) for k, w in module.model.state_dict().items())
    assert not all(torch.equal(w, source[k]) for k, w in fresh.model.state_dict().items())
    assert module.source["path"] == path and module.source["target"] == GPU_TARGET
    assert module.hparams.init_from == path
    assert module.source["sha256"] == hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert fresh.source is None and fresh.source_normalization is None


@pytest.mark.parametrize("ours, theirs, message", [
    ({"hidden": 32}, {}, "hidden 16 there, 32 here (--model.hidden)"),
    ({"num_layers": 3}, {}, "num_layers 2 there, 3 here (--model.num_layers)"),
    ({"use_program_features": False}, {},
     f"num_program_features {featurize.NUM_PROGRAM_FEATURES} there, 0 here "
     "(--model.use_program_features)"),
])
def test_init_from_another_architecture_is_one_clear_error(tmp_path, ours, theirs, message):
    path = write_source(tmp_path / "a.ckpt", **theirs)
    with pytest.raises(UserError) as info:
        CostModelModule(**{"hidden": 16, "num_layers": 2, "dropout": 0.0, **ours},
                        init_from=path)
    text = str(info.value)
    assert text.startswith(f"init_from {path} has another architecture: ") and message in text
    assert "\n" not in text


def test_a_source_without_warp_features_starts_a_model_with_them(tmp_path):
    """A CPU model never read warp features: fine-tuning it into a model that does copies every
    weight and gives the warp columns zero weights, so the widened network predicts exactly
    what the source does until training moves them. The other way round is refused."""
    from costmodel.model import batch_inputs
    from torch_geometric.data import Batch

    path = write_source(tmp_path / "cpu.ckpt")
    module = CostModelModule(hidden=16, num_layers=2, dropout=0.0, init_from=path,
                             views=["warp"])
    source = checkpoint.load(path).model.eval()
    model = module.model.eval()
    n, w = featurize.NUM_NODE_FEATURES, featurize.NUM_WARP_FEATURES
    weight = model.feature_proj.weight
    assert weight.shape[1] == n + w and not weight[:, n:].any()
    assert torch.equal(weight[:, :n], source.feature_proj.weight)
    graphs = [featurize.ProgramGraph(
        node_kind=np.zeros(3, np.int64), x=np.random.default_rng(i).normal(size=(3, n)).astype(
            np.float32), edge_index=np.array([[0, 1], [1, 2]]), edge_type=np.zeros(2, np.int64),
        program=np.zeros(featurize.NUM_PROGRAM_FEATURES, np.float32),
        warp_x=np.full((3, w), 2.0 + i, np.float32)) for i in range(2)]
    norm = Normalization.fit(graphs, [1e-3, 2e-3])
    plain = dataclasses.replace(norm, warp_mean=None, warp_std=None)
    widened = Batch.from_data_list([norm.data(g) for g in graphs])
    narrow = Batch.from_data_list([plain.data(g) for g in graphs])
    with torch.no_grad():
        torch.testing.assert_close(model(*batch_inputs(model, widened)),
                                   source(*batch_inputs(source, narrow)))
    wide = create_model({**architecture(), "num_warp_features": w})
    meta = checkpoint.describe(wide, norm, GPU_TARGET, "data/x", "shapes",
                               {"train": ["dense/a"], "val": [], "test": ["dense/b"]})
    checkpoint.save(str(tmp_path / "wide.ckpt"), wide, meta, {})
    with pytest.raises(UserError, match=r"num_warp_features 2 there, None here "
                                        r"\(--model.views\)"):
        CostModelModule(hidden=16, num_layers=2, dropout=0.0, init_from=str(tmp_path /
                                                                             "wide.ckpt"))


def test_a_source_starts_a_model_of_more_or_fewer_heads(tmp_path):
    """Fine-tuning beside the source's own records (`finetuned_joint_heads`): every weight is
    the source's and the joint head starts as a copy of its head, so both heads predict what
    the source did. A source of more heads (cost model v3, a head per CPU) starts a model of
    fewer from its own heads, the surplus dropped."""
    path = write_source(tmp_path / "cpu.ckpt")
    module = CostModelModule(hidden=16, num_layers=2, dropout=0.0, init_from=path,
                             joint_head=True)
    source = checkpoint.load(path).model.state_dict()
    state = module.model.state_dict()
    assert module.model.architecture["num_heads"] == 2
    assert all(torch.equal(state[k], w) for k, w in source.items())
    heads = [k for k in source if k.startswith("head.")]
    assert heads and set(state) == set(source) | {"extra_" + k.replace("head.", "heads.0.", 1)
                                                  for k in heads}
    assert all(torch.equal(state["extra_" + k.replace("head.", "heads.0.", 1)], source[k])
               for k in heads)
    assert module.model.extra_heads[0][0].weight.data_ptr() != \
        module.model.head[0].weight.data_ptr()  # copies: the two heads train apart
    three = create_model({**architecture(), "num_heads": 3})
    meta = checkpoint.describe(three, checkpoint.load(path).normalization, GPU_TARGET,
                               "data/x", "shapes",
                               {"train": ["dense/a"], "val": [], "test": ["dense/b"]})
    checkpoint.save(str(tmp_path / "three.ckpt"), three, meta, {})
    source = three.state_dict()
    for joint, kept in ((False, 0), (True, 1)):
        module = CostModelModule(hidden=16, num_layers=2, dropout=0.0, joint_head=joint,
                                 init_from=str(tmp_path / "three.ckpt"))
        state = module.model.state_dict()
        assert len(module.model.extra_heads) == kept
        assert set(state) == {k for k in source if not k.startswith("extra_heads.")
                              or int(k.split(".")[1]) < kept}
        assert all(torch.equal(w, source[k]) for k, w in state.items())


class RunsCode:
    """A pickle that runs a shell command when unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def crafted(tmp_path) -> tuple[str, object]:
    """A checkpoint-looking file whose unpickling would create a marker file."""
    marker = tmp_path / "code-ran"
    path = tmp_path / "evil.ckpt"
    torch.save({"costmodel": {"format_version": 2}, "payload": RunsCode(marker)}, path)
    return str(path), marker


def test_init_from_a_crafted_pickle_is_refused_and_runs_nothing(tmp_path):
    path, marker = crafted(tmp_path)
    with pytest.raises(UserError, match="was refused: it holds objects other than tensors"):
        CostModelModule(init_from=path)
    assert not marker.exists()


def test_the_checkpoint_records_its_source_and_share(tmp_path):
    """`describe` writes what `train fit` knows of the start and the share; older callers
    (and older files) have neither."""
    model = create_model(architecture())
    n, p = featurize.NUM_NODE_FEATURES, featurize.NUM_PROGRAM_FEATURES
    norm = Normalization(np.ones(n), np.ones(n), np.ones(p), np.ones(p), -10.0, 1.0)
    sides = {"train": ["dense/a"], "val": [], "test": ["dense/b"]}
    plain = checkpoint.describe(model, norm, GPU_TARGET, "data/x", "shapes", sides)
    assert "init_from" not in plain and "train_share" not in plain
    source = checkpoint.provenance(checkpoint.load(write_source(tmp_path / "s.ckpt")))
    share = {"share": 0.1, "seed": 0, "records": 10, "of": 100}
    meta = checkpoint.describe(model, norm, GPU_TARGET, "data/x", "shapes", sides,
                               init_from=source, train_share=share)
    assert meta["init_from"] == source and meta["train_share"] == share
    assert set(source) == {"path", "sha256", "target", "dataset", "split"}
    path = tmp_path / "new.ckpt"
    checkpoint.save(str(path), model, meta, {})
    assert checkpoint.load(str(path)).meta["init_from"] == source  # plain containers: loads


def test_a_joint_share_outside_zero_one_is_refused():
    with pytest.raises(UserError, match=r"joint_share must be in \(0, 1\], not 0.0"):
        ScheduleDataModule(joint_dataset="data/x", joint_share=0.0)


def test_refitted_targets_keep_the_inputs_and_standardise_the_new_records():
    """Another target's records get target statistics of their own, overall or per workload."""
    n, p = featurize.NUM_NODE_FEATURES, featurize.NUM_PROGRAM_FEATURES
    graphs = [featurize.ProgramGraph(np.zeros(1, np.int64), np.zeros((1, n), np.float32),
                                     np.zeros((2, 0), np.int64), np.zeros(0, np.int64),
                                     np.zeros(p, np.float32)) for _ in range(4)]
    lat = np.array([1e-6, 4e-6, 1e-3, 4e-3])  # two workloads, 1,000 times apart
    keys = ["a", "a", "b", "b"]
    norm = Normalization(np.ones(n), np.ones(n), np.ones(p), np.ones(p), -10.0, 1.0)
    new = norm.refit_targets(graphs, lat, keys)
    y = np.log(lat)
    assert (new.y_mean, new.y_std) == (pytest.approx(y.mean()), pytest.approx(y.std() + EPS))
    np.testing.assert_array_equal(new.x_mean, norm.x_mean)
    np.testing.assert_allclose(new.targets(graphs, lat, keys), (y - y.mean()) / (y.std() + EPS))
    relative = dataclasses.replace(norm, per_workload=True).refit_targets(graphs, lat, keys)
    assert relative.y_mean == 0.0
    assert relative.y_std == pytest.approx(np.log(4) / 2 + EPS)  # each record log(2) off its mean


# -- through the real CLI, on the tiny dataset ----------------------------------------------


def train_frame(dataset: str, sides: dict) -> pd.DataFrame:
    """The usable records of the training side, in the order training reads them."""
    from datagen.records import read_records

    frame, _ = usable(read_records(dataset, RECORD_COLUMNS))
    return frame[frame.workload_key.isin(sides["train"])].reset_index(drop=True)


def raw_outputs(ckpt, graphs) -> np.ndarray:
    """The network's normalised outputs for `graphs` as the checkpoint standardises them."""
    from torch_geometric.data import Batch

    batch = Batch.from_data_list([ckpt.normalization.data(g) for g in graphs])
    with torch.no_grad():
        return ckpt.model(batch.node_kind, batch.x, batch.edge_index, batch.edge_type,
                          batch.batch, batch.program).numpy()


@pytest.mark.slow
def test_fine_tuning_with_lr_0_keeps_the_source_network(tiny_checkpoint, tiny_dataset,
                                                        tmp_path):
    """With learning rate 0 the new checkpoint holds the source's weights and input
    standardisation: its network outputs are the source's exactly; the target statistics
    are those of the half share it trained on, and it says where it started and what share."""
    from costmodel.predictor import CostModelPredictor

    proc = train_tiny("--data.dataset", tiny_dataset, "--model.init_from", tiny_checkpoint,
                      "--model.lr", "0", "--data.train_share", "0.5", "--trainer.max_epochs",
                      "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = glob.glob(str(tmp_path / "runs" / "graphsage" / "checkpoints" / "*.ckpt"))
    new, source = checkpoint.load(path), checkpoint.load(tiny_checkpoint)
    weights = source.model.state_dict()
    assert all(torch.equal(w, weights[k]) for k, w in new.model.state_dict().items())
    meta = new.meta
    assert meta["init_from"]["path"] == tiny_checkpoint
    assert meta["init_from"]["target"] == source.meta["target"]
    assert meta["train_share"]["share"] == 0.5 and meta["train_share"]["seed"] == 0
    train = train_frame(tiny_dataset, meta["sides"])
    half = share_of_records(train, 0.5, seed=0)
    assert (meta["train_share"]["records"], meta["train_share"]["of"]) == (len(half), len(train))
    assert len(half) < len(train)
    # target statistics: fitted on the share; input statistics: the source's
    y = np.log(half.latency_median.to_numpy(float))
    assert new.normalization.y_mean == pytest.approx(y.mean(), rel=1e-6)
    assert new.normalization.y_mean != source.normalization.y_mean
    np.testing.assert_array_equal(new.normalization.x_mean, source.normalization.x_mean)
    np.testing.assert_array_equal(new.normalization.program_std,
                                  source.normalization.program_std)
    predictor = CostModelPredictor.load(path)
    graphs = [predictor.featurizer.featurize_record(r.workload_ir, r.trace, r.trace_hash)
              for r in train.itertuples()]
    np.testing.assert_array_equal(raw_outputs(new, graphs), raw_outputs(source, graphs))
    # so it predicts as the source does, in the new target's statistics
    z_new = (np.log(predictor.predict_graphs(graphs)) - new.normalization.y_mean) \
        / new.normalization.y_std
    z_source = (np.log(CostModelPredictor.load(tiny_checkpoint).predict_graphs(graphs))
                - source.normalization.y_mean) / source.normalization.y_std
    np.testing.assert_allclose(z_new, z_source, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_fine_tuning_with_frozen_parts_trains_only_the_others(tiny_checkpoint, tiny_dataset,
                                                              tmp_path):
    """`--model.freeze '[layers, norms]'`: the message passing keeps the source's weights,
    the head (and the input projection) train."""
    proc = train_tiny("--data.dataset", tiny_dataset, "--model.init_from", tiny_checkpoint,
                      "--model.freeze", "[layers, norms]", "--model.lr", "0.01",
                      "--trainer.max_epochs", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = glob.glob(str(tmp_path / "runs" / "graphsage" / "checkpoints" / "*.ckpt"))
    new = checkpoint.load(path).model.state_dict()
    source = checkpoint.load(tiny_checkpoint).model.state_dict()
    frozen = [k for k in new if k.startswith(("layers.", "norms."))]
    assert frozen and all(torch.equal(new[k], source[k]) for k in frozen)
    for part in ("head.", "feature_proj."):
        assert not all(torch.equal(new[k], source[k]) for k in new if k.startswith(part))


@pytest.mark.slow
def test_init_from_errors_through_the_cli(tiny_checkpoint, tiny_dataset, tmp_path):
    proc = train_tiny("--data.dataset", tiny_dataset, "--model.init_from", tiny_checkpoint,
                      "--model.hidden", "32", "--trainer.fast_dev_run", "true", cwd=tmp_path)
    assert_clean_error(proc, "has another architecture: hidden 16 there, 32 here "
                             "(--model.hidden)", prog="train")
    path, marker = crafted(tmp_path)
    proc = train_tiny("--data.dataset", tiny_dataset, "--model.init_from", path,
                      "--trainer.fast_dev_run", "true", cwd=tmp_path)
    assert_clean_error(proc, "was refused", prog="train")
    assert not marker.exists()
    proc = train_tiny("--data.dataset", tiny_dataset, "--data.train_share", "0",
                      "--trainer.fast_dev_run", "true", cwd=tmp_path)
    assert_clean_error(proc, "train_share must be in (0, 1], not 0.0", prog="train")
    proc = train_tiny("--data.dataset", tiny_dataset, "--model.init_from", tiny_checkpoint,
                      "--model.freeze", "[convs]", "--trainer.fast_dev_run", "true",
                      cwd=tmp_path)
    assert_clean_error(proc, "freeze: the model has no part 'convs'; its parts: "
                             "kind_embedding, feature_proj, layers, norms", prog="train")
    proc = train_tiny("--data.dataset", tiny_dataset, "--model.joint_head", "true",
                      "--trainer.fast_dev_run", "true", cwd=tmp_path)
    assert_clean_error(proc, "joint_head gives another dataset's records a head of their own: "
                             "set data.joint_dataset too", prog="train")


# -- joint training: another target's records beside the training side -----------------------


@pytest.mark.slow
def test_a_joint_dataset_trains_beside_the_training_side_only(tiny_dataset, tmp_path):
    """The tiny CPU dataset with a share of the committed H100 records beside it: they join
    the training side under keys of their own, featurised for their own target, their
    latencies standardised with their own statistics; validation and test are the dataset's
    own, unchanged, and so are the dataset's target statistics."""
    kwargs = dict(dataset=tiny_dataset, split="family", test_families=["softmax"],
                  val_fraction=0.5, cache_dir=str(tmp_path / "cache"))
    alone = ScheduleDataModule(**kwargs)
    alone.setup()
    data = ScheduleDataModule(joint_dataset=GPU_DATASET, joint_share=0.05, **kwargs)
    data.setup()
    train = data.frames["train"]
    joint = train[train.workload_key.str.startswith(JOINT_PREFIX)]
    own = train[~train.workload_key.str.startswith(JOINT_PREFIX)]
    assert list(own.trace_hash) == list(alone.frames["train"].trace_hash)
    for side in ("val", "test"):
        assert list(data.frames[side].trace_hash) == list(alone.frames[side].trace_hash)
    assert data.sides == alone.sides  # what the checkpoint records as its split
    assert set(joint.target) == {data.joint["target"]} and data.target == own.target.iloc[0]
    assert json.loads(data.joint["target"])["kind"] == "cuda"
    assert data.joint == {"dataset": GPU_DATASET, "share": 0.05, "seed": 0,
                          "of": data.joint["of"], "target": data.joint["target"],
                          "records": len(joint), "workloads": joint.workload_key.nunique(),
                          "left_out": 0}
    assert data.joint["of"] > len(joint)  # the share was drawn from all of its usable records
    assert len(joint) >= MIN_PER_WORKLOAD * data.joint["workloads"] > 0
    # featurised for the GPU: CUDA thread bindings are graph features only a GPU program has
    block = featurize.NODE_FEATURES.index("thread_is_block")
    assert any(g.x[:, block].any() for g in joint.graph)
    assert not any(g.x[:, block].any() for g in own.graph)
    # each target's log-latencies standardised with their own mean and spread
    assert (data.normalization.y_mean, data.normalization.y_std) == pytest.approx(
        (alone.normalization.y_mean, alone.normalization.y_std))
    y = np.concatenate([d.y.numpy() for d in data._dataset("train")[0]])
    is_joint = train.workload_key.str.startswith(JOINT_PREFIX).to_numpy()
    for rows in (is_joint, ~is_joint):
        assert y[rows].mean() == pytest.approx(0.0, abs=1e-4)
        assert y[rows].std() == pytest.approx(1.0, abs=1e-4)
    # each record names its head: the other dataset's its own (a model's `joint_head`)
    heads = np.concatenate([d.head.numpy() for d in data._dataset("train")[0]])
    np.testing.assert_array_equal(heads, is_joint.astype(int))
    assert not any(d.head for d in data._dataset("val")[0])
    gpu_y = np.log(joint.latency_median.to_numpy(float))
    assert data.joint_normalization.y_mean == pytest.approx(gpu_y.mean())
    own_y = np.log(own.latency_median.to_numpy(float))  # the dataset's, from its rows alone
    assert data.normalization.y_mean == pytest.approx(own_y.mean())
    # per-workload labels: each of its workloads standardised among its own records
    relative = ScheduleDataModule(joint_dataset=GPU_DATASET, joint_share=0.05,
                                  normalize_per_workload=True, **kwargs)
    relative.setup()
    y = np.concatenate([d.y.numpy() for d in relative._dataset("train")[0]])
    means = pd.Series(y).groupby(relative.frames["train"].workload_key.to_numpy()).mean()
    np.testing.assert_allclose(means.to_numpy(), 0.0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("split", ["unseen-family", "novel-shapes"])
def test_a_split_out_of_distribution_leaves_out_the_joint_workloads_it_would_hold_out(
        tiny_dataset, tmp_path, split):
    """Another CPU's records of the very same programs beside the dataset: in a split out of
    distribution every joint workload the split would hold out (a validation or held-out
    program, one of their families, one sharing a buffer shape with them) is left out of
    training, and counted; in an in-distribution split they all train (few-shot transfer)."""
    from costmodel.splits import buffer_shapes
    from datagen.records import read_records

    other = another_cpu_copy(tiny_dataset, tmp_path / "other", "test-cpu")
    every = set(read_records(other).workload_key)
    kwargs = dict(dataset=tiny_dataset, val_fraction=0.5, cache_dir=str(tmp_path / "cache"),
                  joint_dataset=other)
    data = ScheduleDataModule(split=split, **kwargs,
                              **({"test_families": ["softmax"]} if split == "unseen-family"
                                 else {"test_fraction": 0.3}))
    data.setup()
    unseen = pd.concat([data.frames["val"], data.frames["test"]], ignore_index=True)
    train = data.frames["train"]
    joint = train[train["head"] == 1]
    kept = set(joint.workload_key.str.removeprefix(JOINT_PREFIX))
    assert kept and not kept & set(unseen.workload_key)
    if split == "unseen-family":
        assert not set(joint.family) & set(unseen.family)
    else:
        held_shapes = set().union(*buffer_shapes(unseen).values())
        assert not set().union(*buffer_shapes(joint).values()) & held_shapes
    assert data.joint["left_out"] == len(every - kept) >= unseen.workload_key.nunique()
    plain = ScheduleDataModule(split="family", test_families=["softmax"], **kwargs)
    plain.setup()  # in distribution: the same programs on another CPU all train
    assert plain.joint["left_out"] == 0 and plain.joint["workloads"] == len(every)


@pytest.mark.slow
def test_a_joint_dataset_of_the_same_target_trains_no_held_out_workload(tiny_dataset,
                                                                         tmp_path):
    """In a split in distribution a folder of the dataset's own target that holds a
    validation or held-out workload is refused; in a split out of distribution (more tasks of
    the same CPU beside its network tasks, some of them programs of the test suite) those
    workloads are left out like another CPU's, and the rest train."""
    kwargs = dict(dataset=tiny_dataset, val_fraction=0.5, cache_dir=str(tmp_path / "cache"),
                  joint_dataset=tiny_dataset)
    data = ScheduleDataModule(split="family", test_families=["softmax"], **kwargs)
    with pytest.raises(UserError, match=r"holds \d+ validation or held-out workloads of "
                                        r".* on the same target \(e.g. "):
        data.setup()
    data = ScheduleDataModule(split="unseen-family", test_families=["softmax"], **kwargs)
    data.setup()
    unseen = set(data.frames["val"].workload_key) | set(data.frames["test"].workload_key)
    joint = data.frames["train"][data.frames["train"]["head"] == 1]
    kept = set(joint.workload_key.str.removeprefix(JOINT_PREFIX))
    assert kept and not kept & unseen and data.joint["left_out"] >= len(unseen)
    assert data.joint_targets == [data.target]  # its own head, standardised on its own


@pytest.mark.slow
def test_a_joint_program_under_another_key_is_found_by_its_structure(tiny_dataset, tmp_path):
    """The same programs on the same target collected under other keys (a generated task
    that is a held-out network's layer): refused in a split in distribution, left out in one
    out of distribution, found by structural hash where the keys differ."""
    renamed = renamed_copy(tiny_dataset, tmp_path / "renamed", "generated/")
    kwargs = dict(dataset=tiny_dataset, val_fraction=0.5, cache_dir=str(tmp_path / "cache"),
                  joint_dataset=renamed)
    data = ScheduleDataModule(split="family", test_families=["softmax"], **kwargs)
    with pytest.raises(UserError, match=r"holds \d+ validation or held-out workloads of "
                                        r".* \(e\.g\. generated/"):
        data.setup()
    data = ScheduleDataModule(split="unseen-family", test_families=["softmax"], **kwargs)
    data.setup()
    unseen = set(data.frames["val"].workload_key) | set(data.frames["test"].workload_key)
    joint = data.frames["train"][data.frames["train"]["head"] == 1]
    kept = set(joint.workload_key.str.removeprefix(JOINT_PREFIX + "generated/"))
    assert kept and not kept & unseen and data.joint["left_out"] >= len(unseen)


@pytest.mark.slow
def test_several_joint_datasets_train_a_head_per_target(tiny_dataset, tmp_path):
    """Two folders of one other CPU and the H100's records beside the tiny dataset: the
    folders are grouped by target (the CPU's two one head, the H100 the next), each target's
    latencies standardised with its own statistics; `train fit` with a joint head per target
    makes a model of three heads whose checkpoint lists what trained beside it, and head 0
    still predicts the dataset's own target."""
    a = another_cpu_copy(tiny_dataset, tmp_path / "a", "test-cpu")
    b = another_cpu_copy(tiny_dataset, tmp_path / "b", "test-cpu")
    cache = str(tmp_path / "cache")
    kwargs = dict(dataset=tiny_dataset, split="family", test_families=["softmax"],
                  val_fraction=0.5, cache_dir=cache)
    alone = ScheduleDataModule(**kwargs)
    alone.setup()
    data = ScheduleDataModule(joint_dataset=[a, GPU_DATASET, b], joint_share=0.05, **kwargs)
    data.setup()
    cpu = json.loads(data.joint_targets[0])
    assert cpu["mcpu"] == "test-cpu" and json.loads(data.joint_targets[1])["kind"] == "cuda"
    assert len(data.joint_targets) == 2 and [j["dataset"] for j in data.joint] == [a, GPU_DATASET,
                                                                                    b]
    train = data.frames["train"]
    heads = train["head"].to_numpy()
    for head, target in enumerate([data.target, *data.joint_targets]):
        assert set(train.target[heads == head]) == {target}
    assert train.workload_key[heads == 1].str.startswith(JOINT_PREFIX).all()
    assert train.workload_key[heads == 2].str.startswith(JOINT_PREFIX + "2:").all()
    assert sum(j["records"] for j in data.joint) == int((heads > 0).sum())
    # each target's statistics are its own records': the dataset's as without the others
    own, cpu_norm, gpu_norm = data.normalization, *data.joint_normalizations
    assert (own.y_mean, own.y_std) == pytest.approx((alone.normalization.y_mean,
                                                     alone.normalization.y_std))
    assert data.joint_normalization is cpu_norm
    for norm, head in ((cpu_norm, 1), (gpu_norm, 2)):
        y = np.log(train.latency_median[heads == head].to_numpy(float))
        assert (norm.y_mean, norm.y_std) == pytest.approx((y.mean(), y.std()), rel=1e-3)
    built, _ = data._dataset("train")
    y = np.concatenate([d.y.numpy() for d in built])
    np.testing.assert_array_equal(np.concatenate([d.head.numpy() for d in built]), heads)
    for head in range(3):
        assert y[heads == head].mean() == pytest.approx(0.0, abs=1e-4)
        assert y[heads == head].std() == pytest.approx(1.0, abs=1e-4)
    proc = train_tiny("--data.dataset", tiny_dataset, "--data.cache_dir", cache,
                      "--data.joint_dataset", f"[{a}, {GPU_DATASET}]", "--data.joint_share",
                      "0.05", "--model.joint_head", "true", "--trainer.max_epochs", "1",
                      cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = glob.glob(str(tmp_path / "runs" / "graphsage" / "checkpoints" / "*.ckpt"))
    heads3 = checkpoint.load(path)
    assert heads3.model.architecture["num_heads"] == 3
    assert [j["dataset"] for j in heads3.meta["joint"]] == [a, GPU_DATASET]
    assert heads3.meta["target"] == data.target
    from torch_geometric.data import Batch

    graphs = list(alone.frames["test"].graph)  # head 0 predicts: the dataset's own target
    batch = Batch.from_data_list([heads3.normalization.data(g) for g in graphs])
    heads3.model.eval()
    with torch.no_grad():
        emb = heads3.model.embed(*batch_inputs(heads3.model, batch))
        expected = heads3.normalization.log_latency(heads3.model.head(emb).squeeze(-1),
                                                    batch.offset)
        other = heads3.model.extra_heads[0](emb).squeeze(-1)
    assert not torch.allclose(other, heads3.model.head(emb).squeeze(-1))
    predicted = CostModelPredictor.load(path).predict_graphs(graphs)
    np.testing.assert_allclose(np.log(predicted), expected, rtol=1e-4)
    # each target's records are scored with the head that trained on them, a CPU none
    # trained on with every head's mean, or as asked (`costmodel evaluate --head`)
    from costmodel.evaluate import choose_head
    from costmodel.splits import head_for

    unseen = json.dumps({"kind": "llvm", "mcpu": "unseen-cpu"})
    assert [head_for(heads3.meta, t) for t in (data.target, *data.joint_targets)] == [0, 1, 2]
    assert head_for(heads3.meta, unseen) is None
    predictor = CostModelPredictor.load(path)
    assert [choose_head("auto", predictor, t) for t in (*data.joint_targets, unseen)] == [1, 2,
                                                                                       "mean"]
    assert [choose_head(h, predictor, unseen) for h in ("own", "mean", "2")] == [0, "mean", 2]
    with torch.no_grad():
        each = [h(emb).squeeze(-1) for h in [heads3.model.head, *heads3.model.extra_heads]]
    for head, standardised in ((1, each[1]), (2, each[2]), ("mean", torch.stack(each).mean(0))):
        predictor.use_head(head)
        np.testing.assert_allclose(np.log(predictor.predict_graphs(graphs)),
                                   heads3.normalization.log_latency(standardised, batch.offset),
                                   rtol=1e-4)
    with pytest.raises(UserError, match=r"head 3: the checkpoint has heads 0 to 2 \(one per "):
        predictor.use_head(3)
    with pytest.raises(UserError, match="--head first: choose auto, own, mean or a head's"):
        choose_head("first", predictor, unseen)
    # `tune` predicts with the head for its target: the H100's; the own CPU's also on a host
    # with more cores (a target that differs from a trained one only in its other attributes)
    from datagen.tvm_env import make_target
    from tuning.tuner import load_predictor

    more_cores = {**json.loads(data.target), "num-cores": 64}
    assert head_for(heads3.meta, json.dumps(more_cores)) == 0
    assert load_predictor(path, target=make_target(json.loads(data.joint_targets[1]))).head == 2
    assert load_predictor(path, target=make_target(more_cores)).head == 0
    assert load_predictor(path).head == 0  # no target: the own head, as before
    # another target's records are scored without the programs the joint datasets trained on
    from costmodel.evaluate import evaluate
    from costmodel.splits import leave_out_joint_workloads
    from datagen.records import read_records

    theirs = read_records(a, RECORD_COLUMNS)
    kept, left = leave_out_joint_workloads(theirs, heads3.meta)
    assert kept.empty and left == theirs.workload_key.nunique() == 3
    gpu_only = {**heads3.meta, "joint": [j for j in heads3.meta["joint"]
                                         if j["dataset"] == GPU_DATASET]}
    kept, left = leave_out_joint_workloads(theirs, gpu_only)  # no tiny program on the H100
    assert len(kept) == len(theirs) and left == 0
    gone = {**heads3.meta, "joint": [{**heads3.meta["joint"][0], "dataset": str(tmp_path / "x")}]}
    with pytest.raises(UserError, match=r"x, which trained the checkpoint beside its own "
                                        "dataset, is not here"):
        leave_out_joint_workloads(theirs, gone)
    with pytest.raises(UserError, match="every workload of .* trained the checkpoint in a joint "
                                        "dataset"):
        evaluate([path], a, str(tmp_path / "eval"), split="all", baseline=False)


# -- self-training: a teacher's predicted latencies for the records a share leaves out -------


def teacher_table(frame: pd.DataFrame, scale: float = 2.0) -> pd.DataFrame:
    """Each record's measured latency times `scale`: labels a test can tell from the
    measurements."""
    return pd.DataFrame({"workload_key": frame.workload_key, "trace_hash": frame.trace_hash,
                         "latency": frame.latency_median.astype(float) * scale})


@pytest.mark.slow
def test_pseudo_labels_train_the_records_outside_the_share_only(tiny_dataset, tmp_path):
    """With `pseudo_labels`, the share keeps its measurements, the training side's other
    records train with the teacher's latencies (a record it has no row for stays out),
    validation and test are untouched, and the checkpoint's `train_share` says how many."""
    kwargs = dict(dataset=tiny_dataset, split="family", test_families=["softmax"],
                  val_fraction=0.5, cache_dir=str(tmp_path / "cache"), train_share=0.5)
    alone = ScheduleDataModule(**kwargs)
    alone.setup()
    whole = train_frame(tiny_dataset, alone.sides)
    table = teacher_table(whole).iloc[1:]  # the teacher skipped one record
    path = str(tmp_path / "teacher.parquet")
    table.to_parquet(path)
    data = ScheduleDataModule(pseudo_labels=path, **kwargs)
    data.setup()
    share = alone.frames["train"]
    train = data.frames["train"]
    assert list(train.trace_hash[:len(share)]) == list(share.trace_hash)
    np.testing.assert_array_equal(train.latency_median[:len(share)], share.latency_median)
    rest = train.iloc[len(share):]
    measured = dict(zip(zip(whole.workload_key, whole.trace_hash), whole.latency_median))
    shared = set(zip(share.workload_key, share.trace_hash))
    keys = list(zip(rest.workload_key, rest.trace_hash))
    assert keys and not set(keys) & shared
    skipped = (whole.workload_key.iloc[0], whole.trace_hash.iloc[0])
    expected = set(measured) - shared - {skipped}
    assert set(keys) == expected  # every other training record, but the one without a label
    np.testing.assert_allclose(rest.latency_median, [2 * measured[k] for k in keys])
    for side in ("val", "test"):
        assert list(data.frames[side].trace_hash) == list(alone.frames[side].trace_hash)
    assert data.train_share == {**alone.train_share,
                                "pseudo": {"labels": path, "records": len(rest)}}
    assert data.sides == alone.sides


@pytest.mark.parametrize("table, message", [
    (pd.DataFrame({"workload_key": ["a"], "latency": [1e-3]}), "is no table of workload_key"),
    (pd.DataFrame({"workload_key": ["a"], "trace_hash": ["t"], "latency": [-1.0]}),
     "latencies that are not finite and positive"),
    (pd.DataFrame({"workload_key": ["a", "a"], "trace_hash": ["t", "t"],
                   "latency": [1e-3, 2e-3]}), "labels a workload's trace twice"),
])
def test_a_bad_teacher_table_is_one_clear_error(tmp_path, table, message):
    from costmodel.data_module import read_pseudo_labels

    path = str(tmp_path / "teacher.parquet")
    table.to_parquet(path)
    with pytest.raises(UserError, match=message):
        read_pseudo_labels(path)
    (tmp_path / "code.parquet").write_bytes(b"cos\nsystem\n(S'echo hi'\ntR.")  # not Parquet
    with pytest.raises(UserError, match="is no table of workload_key, trace_hash, latency"):
        read_pseudo_labels(str(tmp_path / "code.parquet"))
    with pytest.raises(UserError, match="set train_share below 1"):
        ScheduleDataModule(pseudo_labels=path)
