"""tuning: a Bayesian-optimisation tuner with the learned model as prior, and MetaSchedule adapters.

Not built yet: see the project's tuning issue.
"""
