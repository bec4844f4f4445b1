"""The registry of feature views: every view declares what the featuriser, the normalisation,
the checkpoint checks and the model read of it, and a view registered here and nowhere else
(a toy) is featurised, cached, standardised, encoded, recorded, checked and trained by those
loops.
"""

import importlib
import pkgutil

import numpy as np
import pytest
import torch

from costmodel import checkpoint, featurize, views
from costmodel.model import batch_inputs, create_model
from costmodel.normalization import Normalization
from costmodel.predictor import CostModelPredictor
from costmodel.views import View
from datagen.errors import UserError
from datagen.sampler import ScheduleSampler
from datagen.tvm_env import make_target, target_json
from datagen.workloads import Workload

DENSE = Workload("dense", (32, 32, 32))
SHIPPED = ("checkpoints/graphsage-v3.ckpt", "checkpoints/graphsage-h100.ckpt")
# what checkpoints and feature caches name of the shipped views, in their order: a change here
# is a new version, not a refactor (a new view adds to the registry, not to these)
VERSIONS = {"graph": "tir-graph-1", "program": "tir-graph-1",
            "store": "ms-per-store-feature-5-10", "trace": "ms-trace-1", "warp": "warp-1"}
SIZES = {"graph": {"num_node_kinds": 30, "num_node_features": 20, "num_edge_types": 5},
         "program": {"num_program_features": 17}, "store": {"num_store_features": 164},
         "trace": {"num_trace_features": 15, "num_trace_kinds": 256},
         "warp": {"num_warp_features": 2}}


@pytest.fixture(scope="module")
def target():
    return make_target(None)


def architecture(**views_read) -> dict:
    return {**{"name": "graphsage"}, **views.GRAPH.sizes, **views.PROGRAM.sizes, "hidden": 16,
            "num_layers": 2, "dropout": 0.0, **views_read}


def test_the_registry_is_every_views_module_in_order():
    """Each module of the package declares one view; `VIEWS` is all of them, found, by
    `order`, the shipped ones in their order (that of the model's inputs)."""
    declared = []
    for module in pkgutil.iter_modules(views.__path__):
        found = {id(v): v for v in vars(importlib.import_module(
            f"costmodel.views.{module.name}")).values() if isinstance(v, View)}
        declared += list(found.values())
    assert sorted(declared, key=lambda v: v.order) == views.VIEWS
    assert len({v.order for v in views.VIEWS}) == len({v.name for v in views.VIEWS}) \
        == len(views.VIEWS)
    assert [v.name for v in views.VIEWS if v.name in VERSIONS] == list(VERSIONS)
    assert views.named(["warp", "store"]) == [views.STORE, views.WARP]
    assert views.named(None) == []
    there = ", ".join(v.name for v in views.optional())
    with pytest.raises(UserError, match=f"unknown view 'bogus'; the views a model may read: "
                                        f"{there}$"):
        views.named(["bogus"])


def test_every_view_declares_its_version_sizes_and_names():
    assert {v.name: v.version for v in views.VIEWS if v.name in VERSIONS} == VERSIONS
    assert {v.name: v.sizes for v in views.VIEWS if v.name in SIZES} == SIZES
    names = [n for v in views.VIEWS for n in (*v.statistics, *v.arrays, v.count) if n]
    assert len(names) == len(set(names))  # no two views share an array or a statistic
    for view in views.optional():
        assert view.label and view.key and view.rows in view.arrays
        assert len(view.units) == len(view.sizes)
        assert sum(f is not None for f in (view.from_module, view.from_trace,
                                           view.from_walk)) == 1
        assert not view.cached or view.arrays == (view.rows,)  # a cached view is one array
        assert (view.encoder is None) == (view.module is None)
    assert [v for v in views.optional() if v.name in VERSIONS] == \
        [views.STORE, views.TRACE, views.WARP]
    assert [v for v in views.encoded() if v.name in VERSIONS] == [views.STORE, views.TRACE]
    assert checkpoint.LAYOUT == {k: v for view in views.VIEWS for k, v in view.layout.items()}
    assert {**views.GRAPH.layout, **views.PROGRAM.layout}.items() <= checkpoint.LAYOUT.items()


def test_the_loops_cover_every_view(target):
    """Each optional view is a featuriser flag, a pair of normalisation statistics (None until
    fitted) and, when its first size is set, a checkpoint entry and architecture arguments."""
    featurizer = featurize.Featurizer(target)
    norm = Normalization(*(np.zeros(1),) * 4, 0.0, 1.0)
    for view in views.optional():
        assert getattr(featurizer, view.flag) is False and f"{view.flag}=False" in repr(featurizer)
        assert all(getattr(norm, k) is None for k in view.statistics)
        assert all(norm.to_dict()[k] is None for k in view.statistics)
        model = create_model(architecture(**view.sizes))
        assert all(model.architecture[k] == size for k, size in view.sizes.items())
        meta = checkpoint.describe(model, norm, target_json(target), "d", "shapes",
                                   {"train": ["a"]})
        assert meta[view.key] == view.version
        assert [v.key for v in views.optional() if v.key in meta] == [view.key]
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        featurize.Featurizer(target, bogus=True)


@pytest.mark.parametrize("path", SHIPPED)
def test_shipped_checkpoints_read_as_before(path):
    """The shipped checkpoints' entries are the views' names: each validates, rebuilds its
    network with every weight in place, and its normalisation dict reads back unchanged; the
    hyperparameters of their training name the views read, by older flags (`use_KEY`, the GPU
    model's) read back as today's `views`, or as `views` itself."""
    raw = checkpoint.read(path)
    meta = raw[checkpoint.META_KEY]
    members = checkpoint.load_members(path)  # the CPU model: a seed ensemble in one file
    assert all(m.model.architecture == meta["architecture"] for m in members)
    ckpt = members[0]
    read = [v.name for v in views.optional() if v.reads(meta["architecture"])]
    assert read == {"graphsage-v3.ckpt": ["store"],
                    "graphsage-h100.ckpt": ["store", "warp"]}[path.rsplit("/", 1)[1]]
    assert ckpt.hparams["views"] == read == raw["hyper_parameters"].get("views", read)
    assert not any(k.startswith("use_") and k != "use_program_features" for k in ckpt.hparams)
    assert ckpt.hparams["hidden"] == raw["hyper_parameters"]["hidden"]
    again = ckpt.normalization.to_dict()
    for key, value in meta["normalization"].items():
        assert again[key] == value, key


def test_older_hyperparameters_name_the_views_read():
    """An older file's flag per view (`use_KEY`) and the views' options on their own become
    `views` and `view_options`; a file that names its views comes back as it is."""
    old = {"hidden": 8, "use_program_features": True, "use_store_features": True,
           "use_trace_features": False, "trace_layers": 2, "use_warp_features": True}
    assert checkpoint.current_hparams(old) == {
        "hidden": 8, "use_program_features": True, "views": ["store", "warp"],
        "view_options": {"trace_layers": 2}}
    assert checkpoint.current_hparams({"hidden": 8}) == {"hidden": 8, "views": []}
    new = {"hidden": 8, "views": None, "view_options": None}
    assert checkpoint.current_hparams(new) == new


# --- a toy view, registered only here -------------------------------------------------------

def toy_rows(mod, target) -> dict[str, np.ndarray]:
    """One row per argument buffer of the program: (its position, its rank)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    return {"toy_x": np.array([[i, len(a.shape)] for i, a in
                               enumerate(ArgInfo.from_prim_func(mod["main"]))], np.float32)}


class ToyEncoder(torch.nn.Module):
    def __init__(self, hidden: int, num_toy_features: int):
        super().__init__()
        self.proj = torch.nn.Linear(num_toy_features, hidden)
        self.width = hidden

    def forward(self, rows, count):
        from torch_geometric.nn import global_add_pool

        owner = torch.repeat_interleave(torch.arange(len(count)), count)
        return global_add_pool(self.proj(rows), owner, len(count))


TOY = View(name="toy", order=1000, version="toy-1", sizes={"num_toy_features": 2},
           rows="toy_x", statistics=("toy_mean", "toy_std"), arrays=("toy_x",),
           count="toy_count", label="toy rows", key="toy_features", flag="toys",
           from_module=toy_rows, cached=True, units=("per buffer",), encoder=ToyEncoder,
           module="toy_encoder")


def toy_node_rows(nodes: int, accesses) -> dict[str, np.ndarray]:
    """One row per node: 1 on the stores and loads the walk met, else 0."""
    rows = np.zeros((nodes, 1), np.float32)
    rows[[a.node for a in accesses]] = 1.0
    return {"toy_node_x": rows}


# a view of more node features, made from the graph walker's walk
TOY_NODES = View(name="toy_nodes", order=1001, version="toy-nodes-1",
                 sizes={"num_toy_node_features": 1}, rows="toy_node_x",
                 statistics=("toy_node_mean", "toy_node_std"), arrays=("toy_node_x",),
                 label="toy node rows", key="toy_node_features", flag="toy_nodes",
                 from_walk=toy_node_rows, units=("per node",), node_features=True)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setattr(views, "VIEWS", [*views.VIEWS, TOY, TOY_NODES])
    return TOY


def test_a_new_view_is_one_module_and_its_test(toy, target, tmp_path):
    schedules = ScheduleSampler(DENSE.mod, target).random(4, 0, set())
    ir = DENSE.definition()
    # featurised, cached beside the graph, and read back from the cache
    toyed = featurize.Featurizer(target, cache_dir=tmp_path, toys=True)
    assert toyed.toys and "toys=True" in repr(toyed)
    first = schedules[0]
    graph = toyed.featurize_record(ir, first.trace_json, first.trace_hash)
    np.testing.assert_array_equal(graph.toy_x, toy_rows(first.mod, target)["toy_x"])
    key = featurize.record_key(ir, first.trace_hash)
    assert (tmp_path / "toy-1" / "llvm" / f"{key}.npy").exists()
    cached = featurize.Featurizer(target, cache_dir=tmp_path, toys=True).featurize("unused", key)
    np.testing.assert_array_equal(cached.toy_x, graph.toy_x)
    plain = featurize.Featurizer(target, cache_dir=tmp_path)
    assert plain.featurize_record(ir, first.trace_json, first.trace_hash).toy_x is None
    second = schedules[1]  # cached without its toy rows: featurised again, not handed out
    plain.featurize_record(ir, second.trace_json, second.trace_hash)
    assert toyed._cached(featurize.record_key(ir, second.trace_hash)) is None
    data = graph.to_pyg()
    assert data.toy_x.shape == (3, 2) and data.toy_count.tolist() == [3]
    graphs = toyed.featurize_many([c.mod for c in schedules], workers=2)
    assert all(g.toy_x.shape == (3, 2) for g in graphs)

    # standardised with statistics of its own, which the checkpoint's dict keeps
    latencies = np.linspace(1e-4, 2e-4, len(graphs))
    norm = Normalization.from_dict(Normalization.fit(graphs, latencies).to_dict())
    np.testing.assert_allclose(norm.toy_mean, [1.0, 2.0])
    assert norm.to_dict()["toy_std"] == pytest.approx([np.sqrt(2 / 3) + 1e-6, 1e-6])
    np.testing.assert_allclose(norm.data(graphs[0]).toy_x[:, 0].numpy(),
                               np.array([-1, 0, 1]) / np.sqrt(2 / 3), rtol=1e-5)
    without = featurize.Featurizer(target).featurize(first.mod)
    with pytest.raises(ValueError, match=r"standardises toy rows.*Featurizer\(toys=True\)"):
        norm.data(without)
    assert not hasattr(Normalization.fit([without], [1e-4]).data(graph), "toy_x")

    # encoded by the model under its module's name, recorded and checked by the checkpoint
    torch.manual_seed(0)
    model = create_model(architecture(num_toy_features=2)).eval()
    assert isinstance(model.toy_encoder, ToyEncoder) and model.embedding_size == 4 * 16
    assert any(k.startswith("toy_encoder.") for k in model.state_dict())
    batch = torch_geometric_batch([norm.data(g) for g in graphs])
    assert batch_inputs(model, batch)[-2:] == (batch.toy_x, batch.toy_count)
    meta = checkpoint.describe(model, norm, target_json(target), "data/x", "shapes",
                               {"train": ["dense/a"], "val": [], "test": []})
    assert meta["toy_features"] == "toy-1" and meta["architecture"]["num_toy_features"] == 2
    checkpoint.save(str(tmp_path / "toy.ckpt"), model, meta, {})
    predictor = CostModelPredictor.load(str(tmp_path / "toy.ckpt"))
    assert predictor.featurizer.toys and not predictor.featurizer.stores
    np.testing.assert_allclose(predictor.predict([c.sch for c in schedules]),
                               predictor.predict_graphs(graphs), rtol=1e-5)
    checkpoint.save(str(tmp_path / "old.ckpt"), model, {**meta, "toy_features": "toy-0"}, {})
    with pytest.raises(UserError, match=r"reads toy rows toy-0 \(2 per buffer\), this version "
                                        r"makes toy-1 \(2\): retrain it"):
        checkpoint.load(str(tmp_path / "old.ckpt"))
    plain_model = create_model(architecture())
    assert "toy_features" not in checkpoint.describe(
        plain_model, norm, target_json(target), "d", "shapes", {"train": ["a"]})
    assert plain_model.toy_encoder is None


def torch_geometric_batch(data):
    from torch_geometric.data import Batch

    return Batch.from_data_list(data)


def small_dataset(out) -> str:
    """Eight records of each of three dense and three softmax workloads of the committed CPU
    dataset, as a dataset folder of their own."""
    import os

    import pyarrow.parquet as pq

    from datagen.records import shard_paths

    out.mkdir()
    (path,) = shard_paths(os.path.join(os.path.dirname(__file__), "..", "..", "data",
                                       "llvm-full"))
    table = pq.read_table(path)
    frame = table.select(["workload_key", "family", "status"]).to_pandas()
    ok = frame[frame.status == "ok"]
    keys = [k for family in ("dense", "softmax")
            for k in sorted(ok[ok.family == family].workload_key.unique())[:3]]
    rows = [i for k in keys for i in ok.index[ok.workload_key == k][:8]]
    pq.write_table(table.take(rows), str(out / os.path.basename(path)))
    return str(out)


def test_a_new_view_trains_when_named(toy, tmp_path):
    """Named in training's `views`, the toy views are featurised by the data module and read
    by the model, the toy encoder's weights move in a training step, and the node view widens
    the node projection (zero columns where a source never read it)."""
    import lightning as L

    from costmodel.data_module import ScheduleDataModule
    from costmodel.lightning_module import CostModelModule

    data = ScheduleDataModule(dataset=small_dataset(tmp_path / "ds"), split="family",
                              test_families=["softmax"], val_fraction=0.5,
                              cache_dir=str(tmp_path / "cache"), views=["toy_nodes", "toy"],
                              workloads_per_batch=2, per_workload=4)
    module = CostModelModule(hidden=16, num_layers=1, dropout=0.0, views=["toy", "toy_nodes"])
    assert [v.name for v in module.read_views] == ["toy", "toy_nodes"]
    assert module.model.feature_proj.in_features == featurize.NUM_NODE_FEATURES + 1
    before = module.model.toy_encoder.proj.weight.detach().clone()
    L.Trainer(fast_dev_run=True, accelerator="cpu", logger=False, enable_checkpointing=False,
              enable_progress_bar=False, enable_model_summary=False).fit(module, datamodule=data)
    graphs = data.frames["train"].graph
    assert all(g.toy_x.shape == (3, 2) for g in graphs)  # a dense program's three buffers
    assert all(g.toy_node_x.shape == (g.num_nodes, 1) and g.toy_node_x.any() for g in graphs)
    assert data.normalization.toy_node_mean is not None
    assert not torch.equal(module.model.toy_encoder.proj.weight, before)

    # a source that never read the node view starts a model that does
    source = create_model(architecture())
    meta = checkpoint.describe(source, data.normalization, data.target, "d", "shapes",
                               {"train": ["a"]})
    checkpoint.save(str(tmp_path / "source.ckpt"), source, meta, {})
    widened = CostModelModule(hidden=16, num_layers=2, dropout=0.0, views=["toy_nodes"],
                              init_from=str(tmp_path / "source.ckpt")).model
    weight, n = widened.feature_proj.weight, featurize.NUM_NODE_FEATURES
    assert torch.equal(weight[:, :n], source.feature_proj.weight) and not weight[:, n:].any()
