"""training: Lightning training (`train fit --config ...`) and evaluation of cost models.

Not built yet: see the project's cost-model issue.
"""
