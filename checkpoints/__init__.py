"""The shipped cost-model checkpoints, installed as `costmodel.checkpoints` (see README.md here).

`path()` is the checkpoint `tune` uses by default, wherever the package is installed;
`for_target(kind)` the one it uses for a target of that kind (the GPU model for `cuda`).
"""

from __future__ import annotations

import os

from datagen.errors import UserError

DEFAULT = "graphsage-v3.ckpt"
# the shipped model of each target kind: tune's default for a target of that kind
BY_TARGET_KIND = {"llvm": DEFAULT, "cuda": "graphsage-h100.ckpt"}


def path(name: str = DEFAULT) -> str:
    """The file of a shipped checkpoint.

    Raises:
        UserError: the installation lacks it.
    """
    file = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    if not os.path.isfile(file):
        raise UserError(f"the shipped checkpoint {name} is missing from this installation "
                        f"({file}); reinstall tvm-costmodel or pass --checkpoint")
    return file


def for_target(kind: str) -> str:
    """The file of the shipped checkpoint for targets of `kind` ("llvm", "cuda").

    Raises:
        UserError: no checkpoint ships for that kind, or the installation lacks it.
    """
    if kind not in BY_TARGET_KIND:
        raise UserError(f"no checkpoint ships for {kind} targets (shipped: "
                        f"{', '.join(sorted(BY_TARGET_KIND))}); train one with `train fit` and "
                        "pass --checkpoint")
    return path(BY_TARGET_KIND[kind])
