"""costmodel: TIR graphs of scheduled programs, the latency models and their inference API.

- `featurize`: lowering to loop-level TIR and the typed program graph; `trace_features`: the
  schedule's trace as tokens, an optional second view of the program.
- `model`: the networks, by name in `MODELS` (GraphSAGE); `losses`: the training losses, rank
  losses by name in `RANK_LOSSES`; `normalization`: the statistics a model is trained with.
- `store_models`: the cost models on MetaSchedule's per-store features (XGBModel, LightGBM,
  TenSet's MLP), one interface: `fit`, `score`, `save`, `load_store_model`, `fitted_on`;
  `blend`, `companions`: such a model fitted beside a checkpoint and blended with it.
- `splits`: which records train, validate and test (held-out shapes, families, networks, and
  the splits out of distribution); `metrics`: the field's cost-model metrics; `baselines`: the
  store models fitted and scored on those splits, by name in `BASELINES`; `evaluate` and `cli`:
  the `costmodel` command (evaluate, convert, blend; `companion_fit`, `pretrained_xgb`: the
  tree models fitted beside a checkpoint); `figures`: plots written atomically.
- `checkpoint`: the one checkpoint format: save, safe load (no code runs), validation.
- `data_module`, `lightning_module`: the network's training in Lightning (the dataset as a
  LightningDataModule: sides, normalisation, workload batches, joint datasets, pseudo-labels;
  the LightningModule: losses, optimiser, metrics), which `training`'s `train` command runs.
- `predictor`: fit the network on records in one call, or load a checkpoint (or a seed
  ensemble), and predict latencies; what `training` and `tuning` call.
- `checkpoints`: the shipped checkpoints (the repository's `checkpoints/` folder).
- `registry`: the `create(name)` registries the swappable pieces are filed in.

Imports flow one way: datagen <- costmodel <- training <- tuning.
"""
