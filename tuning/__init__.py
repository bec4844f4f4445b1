"""tuning: the learned model inside MetaSchedule's tuning loop (`LearnedCostModel`).

The Bayesian-optimisation tuner is not built yet: see the project's tuning issue.
"""
