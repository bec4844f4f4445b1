"""The shipped cost-model checkpoints, installed as `costmodel.checkpoints` (see README.md here).

`path()` is the checkpoint `tune` uses by default, wherever the package is installed.
"""

from __future__ import annotations

import os

from datagen.errors import UserError

DEFAULT = "graphsage-v2.ckpt"


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
