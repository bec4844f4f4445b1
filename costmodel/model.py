"""The latency models: plain `torch.nn.Module`s, filed in `MODELS` by name.

A model is rebuilt from its architecture, `{"name": ..., **constructor arguments}`, which every
model exposes as `.architecture` and every checkpoint stores (`costmodel.checkpoint`). Training
(loss, optimiser, normalisation) lives in `training`.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import SAGEConv, global_add_pool, global_max_pool, global_mean_pool
from torch_geometric.nn.aggr import AttentionalAggregation
from torch_geometric.utils import to_dense_batch

from costmodel import views
from costmodel.registry import Registry

MODELS = Registry("model")
# graph readouts: always mean and max pooling of the node embeddings, optionally plus
# "attention" (a learnt softmax-weighted mean) or "logsum" (log of the sum of non-negative
# per-node cost vectors: latency adds up over statements, so a sum in log space)
READOUTS = ("mean_max", "mean_max_attention", "mean_max_logsum")


def create_model(architecture: dict) -> nn.Module:
    """A freshly initialised network from its architecture (`{"name": ..., **arguments}`)."""
    arguments = {k: v for k, v in architecture.items() if k != "name"}
    return MODELS.create(architecture["name"], **arguments)


@MODELS.register("graphsage")

class GraphSAGECostModel(nn.Module):
    """Predicts normalised log-latency of scheduled programs from their graphs.

    Node inputs are an embedding of the node kind plus a projection of the numeric features
    (with `num_warp_features`, the node's warp access features follow its own in `x`:
    `Normalization.data` appends them).
    Each layer runs one `SAGEConv` per edge type and sums them (a typed GraphSAGE), followed
    by a residual connection and layer norm. The readout concatenates mean and max pooling,
    optionally a third pooling (`READOUTS`), when given a projection of whole-program
    features, and, with `num_store_features`, a second view of the program beside the graph:
    MetaSchedule's per-store features (TenSet's input), each store's row through an MLP, summed
    over the program's stores (latency adds up over statements) and log-compressed. With
    `num_trace_features`, a third view: the schedule's trace as tokens (TLP's input, one per
    primitive with its decisions; `costmodel.views.trace`), each token its kind's embedding
    plus a projection of its numbers plus its position's embedding, through `trace_layers`
    self-attention layers, then mean and max pooled. With `num_heads` above 1 the graphs
    share every layer up to the readout and each has one of `num_heads` heads (MTL-TLP's
    multi-task recipe: one head per target when two targets' records train together); head
    0 is the model's own, the one every prediction uses unless a graph names another.

    Args:
        num_node_kinds: size of the node-kind vocabulary.
        num_node_features: numeric features per node.
        num_edge_types: edge types in the graphs.
        num_program_features: whole-program features per graph (0: none).
        hidden: width of node embeddings.
        num_layers: message-passing layers.
        dropout: dropout in the head.
        readout: a name in `READOUTS`.
        num_heads: heads beside one another on the shared readout (1: one head).
        **view_arguments: the architecture arguments of the optional views it reads
            (`costmodel.views`: each view's `sizes` and `options`; a view whose first size is
            0 or missing is not read). A view with an `encoder` adds that module under the
            view's `module` name and its `width` to the readout; a view of `node_features`
            widens the node projection:
            num_store_features: per-store features per store row (`StoreEncoder`).
            num_trace_features: numbers per trace token (`TraceEncoder`).
            num_trace_kinds: size of the trace tokens' kind vocabulary.
            trace_layers: self-attention layers over the trace (default 1).
            num_warp_features: warp access features per node after the
                `num_node_features`.

    Shapes:
        - **input:** node kinds :math:`(|V|)`, node features :math:`(|V|, F)`, edge index
          :math:`(2, |E|)`, edge types :math:`(|E|)`, batch vector :math:`(|V|)`, program
          features :math:`(B, P)`, then the inputs of each view with an encoder in
          `costmodel.views.VIEWS` order (`batch_inputs`; None for a view it does not read):
          store rows :math:`(S, F_s)` and the number of rows of each graph :math:`(B)`, trace
          token kinds :math:`(T)`, token features :math:`(T, F_t)` and the number of tokens of
          each graph :math:`(B)`; and, by name, each graph's head :math:`(B)` (None: head 0)
        - **output:** :math:`(B)`, one prediction per graph
    """

    def __init__(self, num_node_kinds: int, num_node_features: int, num_edge_types: int,
                 num_program_features: int = 0, hidden: int = 128, num_layers: int = 3,
                 dropout: float = 0.1, readout: str = "mean_max", num_heads: int = 1,
                 **view_arguments: int):
        super().__init__()
        if readout not in READOUTS:
            raise ValueError(f"unknown readout {readout!r}; choose one of {', '.join(READOUTS)}")
        if num_heads < 1:
            raise ValueError(f"num_heads must be at least 1, not {num_heads}")
        optional = views.optional()
        known = {k for view in optional for k in (*view.sizes, *view.options)}
        if unknown := sorted(set(view_arguments) - known):
            raise TypeError(f"{type(self).__name__}.__init__() got an unexpected keyword argument "
                            f"{unknown[0]!r}")
        read = [view for view in optional if view.reads(view_arguments)]
        self.architecture = {
            "name": "graphsage", "num_node_kinds": num_node_kinds,
            "num_node_features": num_node_features, "num_edge_types": num_edge_types,
            "num_program_features": num_program_features, "hidden": hidden,
            "num_layers": num_layers, "dropout": dropout}
        if readout != READOUTS[0]:  # checkpoints of the default read as they always did
            self.architecture["readout"] = readout
        for view in read:  # a view the model does not read leaves its architecture as before
            self.architecture.update(view.arguments(view_arguments))
        if num_heads > 1:
            self.architecture["num_heads"] = num_heads
        self.num_edge_types = num_edge_types
        self.kind_embedding = nn.Embedding(num_node_kinds, hidden)
        more_node_features = sum(self.architecture[next(iter(view.sizes))] for view in read
                                 if view.node_features)
        self.feature_proj = nn.Linear(num_node_features + more_node_features, hidden)
        self.layers = nn.ModuleList(
            nn.ModuleList(SAGEConv(hidden, hidden, aggr="mean") for _ in range(num_edge_types))
            for _ in range(num_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(num_layers))
        self.program_proj = nn.Linear(num_program_features, hidden) \
            if num_program_features else None
        self.pool = None
        if readout == "mean_max_attention":
            self.pool = AttentionalAggregation(nn.Linear(hidden, 1))
        elif readout == "mean_max_logsum":
            self.pool = nn.Linear(hidden, hidden)  # per-node costs, softplus then summed
        self.readout = readout
        readout = (3 if self.pool is not None else 2) * hidden \
            + (hidden if num_program_features else 0)
        for view in views.encoded():  # each under its own name: checkpoints key weights by it
            encoder = view.encoder(hidden, **view.arguments(view_arguments)) \
                if view in read else None
            setattr(self, view.module, encoder)
            readout += encoder.width if encoder is not None else 0

        def head() -> nn.Module:
            return nn.Sequential(nn.Linear(readout, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, hidden // 2), nn.ReLU(),
                                 nn.Linear(hidden // 2, 1))

        self._new_head = head
        self.head = head()  # head 0 (its own name, so one-head checkpoints read as before)
        self.extra_heads = nn.ModuleList(head() for _ in range(num_heads - 1))

    def add_heads(self, count: int, copy_head: bool = False) -> None:
        """`count` more heads beside the others (one per target that trains beside the
        model's own), newly initialised, or with `copy_head` each a copy of head 0 (a trained
        source's: the new target's records start where the source left them)."""
        for _ in range(count):
            extra = self._new_head()
            if copy_head:
                extra.load_state_dict(self.head.state_dict())
            self.extra_heads.append(extra.to(next(self.head.parameters()).device))
        if self.extra_heads:
            self.architecture["num_heads"] = 1 + len(self.extra_heads)

    def embed(self, node_kind: torch.Tensor, x: torch.Tensor, edge_index: torch.Tensor,
              edge_type: torch.Tensor, batch: torch.Tensor,
              program: torch.Tensor | None = None, *view_inputs: torch.Tensor | None
              ) -> torch.Tensor:
        """Graph embeddings :math:`(B, readout)`, the input of the head."""
        h = self.kind_embedding(node_kind) + self.feature_proj(x)
        masks = [edge_type == t for t in range(self.num_edge_types)]
        for convs, norm in zip(self.layers, self.norms):
            msg = sum(conv(h, edge_index[:, m]) for conv, m in zip(convs, masks))
            h = norm(h + torch.relu(msg))
        size = int(batch.max()) + 1 if batch.numel() else 0
        parts = [global_mean_pool(h, batch, size), global_max_pool(h, batch, size)]
        if self.readout == "mean_max_attention":
            parts.append(self.pool(h, batch, dim_size=size))
        elif self.readout == "mean_max_logsum":
            cost = nn.functional.softplus(self.pool(h))
            parts.append(torch.log1p(global_add_pool(cost, batch, size)))
        if self.program_proj is not None:
            parts.append(torch.relu(self.program_proj(program)))
        given = iter(view_inputs)
        for view in views.encoded():
            inputs = [next(given, None) for _ in view.inputs]
            if (encoder := getattr(self, view.module, None)) is not None:
                parts.append(encoder(*inputs))
        return torch.cat(parts, dim=-1)

    @property
    def embedding_size(self) -> int:
        """Width of `embed`'s output."""
        return self.head[0].in_features

    def forward(self, node_kind: torch.Tensor, x: torch.Tensor, edge_index: torch.Tensor,
                edge_type: torch.Tensor, batch: torch.Tensor,
                program: torch.Tensor | None = None, *view_inputs: torch.Tensor | None,
                head: torch.Tensor | None = None) -> torch.Tensor:
        emb = self.embed(node_kind, x, edge_index, edge_type, batch, program, *view_inputs)
        out = self.head(emb).squeeze(-1)
        if head is not None:
            for i, extra in enumerate(self.extra_heads, start=1):
                out = torch.where(head == i, extra(emb).squeeze(-1), out)
        return out


class StoreEncoder(nn.Sequential):
    """Per-store feature rows -> one vector per program :math:`(B, hidden)` (TenSet's MLP):
    each row through two ReLU layers, summed over the program's rows (latency adds up over
    statements) and log-compressed; a program without stores gets log(1 + 0) = 0. A
    `Sequential`, so its weights keep the names of the plain MLP it replaced (`store_mlp.0`,
    `store_mlp.2`)."""

    def __init__(self, num_features: int, hidden: int):
        super().__init__(nn.Linear(num_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU())
        self.width = hidden

    def forward(self, rows: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        size = len(count)
        owner = torch.repeat_interleave(torch.arange(size, device=count.device), count)
        return torch.log1p(global_add_pool(super().forward(rows), owner, size))


class TraceEncoder(nn.Module):
    """Schedule traces as token sequences -> one vector each :math:`(B, 2 hidden)`.

    A token is its kind's embedding plus a projection of its numbers plus its position's
    embedding (positions past `MAX_TRACE_POSITION` share the last); `layers` pre-norm
    self-attention layers (4 heads) mix them, and the readout is the mean and the max over each
    trace's tokens. Every trace has at least its start token, so no sequence is empty.
    """

    MAX_TRACE_POSITION = 128

    def __init__(self, num_kinds: int, num_features: int, hidden: int, layers: int):
        super().__init__()
        self.width = 2 * hidden
        self.kind_embedding = nn.Embedding(num_kinds, hidden)
        self.feature_proj = nn.Linear(num_features, hidden)
        self.position_embedding = nn.Embedding(self.MAX_TRACE_POSITION, hidden)
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(hidden, 4, 2 * hidden, dropout=0.0, batch_first=True,
                                       norm_first=True), layers, enable_nested_tensor=False)

    def forward(self, kind: torch.Tensor, x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        size = len(count)
        owner = torch.repeat_interleave(torch.arange(size, device=count.device), count)
        start = torch.cumsum(count, 0) - count
        position = (torch.arange(len(kind), device=kind.device) - start[owner]).clamp(
            max=self.MAX_TRACE_POSITION - 1)
        h = self.kind_embedding(kind) + self.feature_proj(x) + self.position_embedding(position)
        dense, mask = to_dense_batch(h, owner, batch_size=size)
        dense = self.encoder(dense, src_key_padding_mask=~mask)[mask]
        return torch.cat([global_mean_pool(dense, owner, size),
                          global_max_pool(dense, owner, size)], dim=-1)


def batch_inputs(model: nn.Module, batch) -> tuple:
    """The inputs of `model` (its `forward` and `embed`) from a batch of
    `Normalization.data` graphs: program features only if its architecture reads them, then
    the inputs of each view with an encoder (`costmodel.views.encoded`: the store rows and
    their counts, the trace's tokens), None for a view it does not read. Each graph's head is
    not among them (`forward`'s `head`, default head 0: the model's own)."""
    arch = model.architecture
    return (batch.node_kind, batch.x, batch.edge_index, batch.edge_type, batch.batch,
            batch.program if arch.get("num_program_features") else None,
            *(getattr(batch, name) if view.reads(arch) else None
              for view in views.encoded() for name in view.inputs))
