import math

import pytest
import torch

from costmodel.losses import cost_model_loss, pairwise_rank_loss
from costmodel.model import GraphSAGECostModel
from datagen.errors import UserError


def _tiny_batch():
    # two graphs: a 4-node chain and a 3-node star, two edge types
    node_kind = torch.tensor([0, 1, 2, 1, 0, 2, 2])
    x = torch.arange(7 * 3, dtype=torch.float32).reshape(7, 3) / 10
    edge_index = torch.tensor([[0, 1, 2, 4, 4], [1, 2, 3, 5, 6]])
    edge_type = torch.tensor([0, 0, 1, 0, 1])
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    return node_kind, x, edge_index, edge_type, batch


def test_shapes_repr_and_determinism():
    torch.manual_seed(0)
    model = GraphSAGECostModel(num_node_kinds=3, num_node_features=3, num_edge_types=2,
                               num_program_features=2, hidden=16).eval()
    program = torch.ones(2, 2)
    out = model(*_tiny_batch(), program)
    assert out.shape == (2,)
    assert torch.equal(out, model(*_tiny_batch(), program))
    assert model.embed(*_tiny_batch(), program).shape == (2, 3 * 16)
    assert "SAGEConv(16, 16" in repr(model)
    out.sum().backward()  # gradients flow to every parameter
    assert all(p.grad is not None for p in model.parameters())


def test_graphs_do_not_leak_into_each_other():
    model = GraphSAGECostModel(3, 3, 2, hidden=8).eval()
    kinds, x, ei, et, batch = _tiny_batch()
    before = model(kinds, x, ei, et, batch)
    x2 = x.clone()
    x2[4:] += 5.0  # change only graph 1
    after = model(kinds, x2, ei, et, batch)
    assert after[0] == before[0] and after[1] != before[1]


def test_rank_loss_on_a_hand_made_pair():
    target = torch.tensor([1.0, 2.0])  # candidate 1 is slower
    group = torch.tensor([0, 0])
    right = torch.tensor([0.0, 1.0])
    wrong = torch.tensor([1.0, 0.0])
    assert pairwise_rank_loss(right, target, group).item() == pytest.approx(math.log1p(math.exp(-1)))
    assert pairwise_rank_loss(wrong, target, group).item() == pytest.approx(math.log1p(math.exp(1)))
    assert pairwise_rank_loss(right, target, group, "hinge").item() == 0.0
    assert pairwise_rank_loss(wrong, target, group, "hinge").item() == pytest.approx(1.1)


def test_rank_loss_ignores_pairs_across_workloads():
    pred = torch.tensor([5.0, 0.0], requires_grad=True)
    loss = pairwise_rank_loss(pred, torch.tensor([1.0, 2.0]), torch.tensor([0, 1]))
    assert loss.item() == 0.0
    loss.backward()


def test_combined_loss_weights():
    pred, target, group = torch.tensor([0.0, 1.0]), torch.tensor([0.0, 3.0]), torch.tensor([0, 0])
    total, parts = cost_model_loss(pred, target, group, mse_weight=2.0, rank_weight=0.5)
    assert parts["mse"].item() == pytest.approx(2.0)
    assert total.item() == pytest.approx(2 * 2.0 + 0.5 * math.log1p(math.exp(-1)))
    with pytest.raises(UserError, match="unknown rank loss 'cosine'; choose one of logistic, hinge"):
        pairwise_rank_loss(pred, target, group, "cosine")


@pytest.mark.parametrize("per_flop", [False, True])
def test_normalization_round_trips_latency(per_flop):
    import numpy as np

    from costmodel.featurize import NUM_NODE_FEATURES, NUM_PROGRAM_FEATURES, ProgramGraph
    from costmodel.normalization import Normalization

    def graph(log2_flops):
        program = np.zeros(NUM_PROGRAM_FEATURES, np.float32)
        program[0] = log2_flops
        return ProgramGraph(node_kind=np.zeros(2, np.int64),
                            x=np.ones((2, NUM_NODE_FEATURES), np.float32),
                            edge_index=np.array([[0], [1]]), edge_type=np.zeros(1, np.int64),
                            program=program)

    graphs, latencies = [graph(10.0), graph(20.0), graph(12.0)], [1e-4, 2e-1, 3e-4]
    norm = Normalization.fit(graphs, latencies, per_flop=per_flop)
    again = Normalization.from_dict(norm.to_dict())
    assert again.per_flop == per_flop
    for g, lat in zip(graphs, latencies):
        data = again.data(g, lat)
        assert math.isclose(float(again.latency(data.y, data.offset)[0]), lat, rel_tol=1e-5)
    # per FLOP, the targets leave out the programs' log FLOPs
    offsets = [norm.offset(g) for g in graphs]
    assert offsets == ([0.0] * 3 if not per_flop else [10 * math.log(2), 20 * math.log(2),
                                                        12 * math.log(2)])
