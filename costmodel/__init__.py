"""costmodel: TIR graphs of scheduled programs, the GraphSAGE latency model and its inference API.

- `featurize`: lowering to loop-level TIR and the typed program graph.
- `model`, `losses`: the network and its training losses.
- `predictor`: load a checkpoint and predict latencies (what everything else calls).
- `evaluate`, `cli`: `costmodel evaluate`, reports against MetaSchedule's XGBoost model.
"""
