"""tuning: the learned model inside MetaSchedule's tuning loop.

- `search`: `BayesOptSearch`, Bayesian optimisation with the learned model as prior (a
  MetaSchedule search strategy); surrogates by name in `SURROGATES`.
- `cost_model`: `LearnedCostModel`, the predictor as a MetaSchedule cost model.
- `tuner`: the tuners compared (`TUNERS`), tuning a workload or a relax network, the curves.
- `compare`: tuners side by side (`tune compare`); `cli`: the `tune` command.
"""
