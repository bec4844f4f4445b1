"""The registry of feature views: every view declares what the featuriser, the normalisation,
the checkpoint checks and the model read of it, and a view registered here and nowhere else
(a toy) is featurised, cached, standardised, encoded, recorded and checked by those loops.
"""

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
SHIPPED = ("checkpoints/graphsage-v2.ckpt", "checkpoints/graphsage.ckpt",
           "checkpoints/graphsage-h100.ckpt")
# what checkpoints and feature caches name: a change here is a new version, not a refactor
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


def test_every_view_declares_its_version_sizes_and_names():
    assert [v.name for v in views.VIEWS] == list(VERSIONS)
    assert {v.name: v.version for v in views.VIEWS} == VERSIONS
    assert {v.name: v.sizes for v in views.VIEWS} == SIZES
    names = [n for v in views.VIEWS for n in (*v.statistics, *v.arrays, v.count) if n]
    assert len(names) == len(set(names))  # no two views share an array or a statistic
    for view in views.optional():
        assert view.label and view.key and view.rows in view.arrays
        assert len(view.units) == len(view.sizes)
        assert (view.from_module is None) or (view.from_trace is None)
        assert not view.cached or view.arrays == (view.rows,)  # a cached view is one array
        assert (view.encoder is None) == (view.module is None)
    assert [v.name for v in views.optional()] == ["store", "trace", "warp"]
    assert [v.name for v in views.encoded()] == ["store", "trace"]
    assert checkpoint.LAYOUT == {**views.GRAPH.layout, **views.PROGRAM.layout}


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
    network with every weight in place, and its normalisation dict reads back unchanged."""
    meta = checkpoint.read(path)[checkpoint.META_KEY]
    ckpt = checkpoint.load(path)
    assert ckpt.model.architecture == meta["architecture"]
    read = [v.name for v in views.optional() if v.reads(meta["architecture"])]
    assert read == {"graphsage-v2.ckpt": ["store"], "graphsage.ckpt": [],
                    "graphsage-h100.ckpt": ["store", "warp"]}[path.rsplit("/", 1)[1]]
    again = ckpt.normalization.to_dict()
    for key, value in meta["normalization"].items():
        assert again[key] == value, key


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


TOY = View(name="toy", version="toy-1", sizes={"num_toy_features": 2}, rows="toy_x",
           statistics=("toy_mean", "toy_std"), arrays=("toy_x",), count="toy_count",
           label="toy rows", key="toy_features", flag="toys", from_module=toy_rows,
           cached=True, units=("per buffer",), encoder=ToyEncoder, module="toy_encoder")


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setattr(views, "VIEWS", [*views.VIEWS, TOY])
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
