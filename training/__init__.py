"""training: Lightning training (`train fit --config ...`).

- `data`: the dataset as a LightningDataModule (the sides of `costmodel.splits`, normalisation,
  workload batches, joint datasets, pseudo-labels).
- `module`: the LightningModule around a network of `costmodel.model`.
- `cli`: the `train` command, and `train_process`, a training forked from a preloaded server.
"""
