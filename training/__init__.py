"""training: Lightning training (`train fit --config ...`), metrics and the baselines.

- `data`: the dataset as a LightningDataModule (splits, normalisation, workload batches).
- `module`: the LightningModule around `costmodel.model.GraphSAGECostModel`.
- `metrics`: the field's cost-model metrics; `baselines`: MetaSchedule's XGBModel on our data.
"""
