"""training: Lightning training (`train fit --config ...`), evaluation, metrics and baselines.

- `data`: the dataset as a LightningDataModule (splits, normalisation, workload batches).
- `module`: the LightningModule around a network of `costmodel.model`.
- `metrics`: the field's cost-model metrics; `baselines`: the store models of
  `costmodel.store_models` (MetaSchedule's XGBModel, TenSet's LightGBM and MLP) fitted and
  scored on our splits, by name in `BASELINES`.
- `evaluate`: `costmodel evaluate`, checkpoints against the baselines on held-out workloads.
- `cli`: the `train` and `costmodel` commands.
"""
