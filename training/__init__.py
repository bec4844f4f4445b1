"""training: the `train` command (`train fit --config ...`), LightningCLI over the network's
LightningModule and data module (`costmodel.lightning_module`, `costmodel.data_module`).

- `cli`: the `train` command, and `train_process`, a training forked from a preloaded server.
"""
