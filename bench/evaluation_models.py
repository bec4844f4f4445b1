"""The evaluation checkpoints: models trained with something held out, which only the
benchmarks use. They are not shipped (they would double the size of every clone and install);
each is made by the command in `MADE_BY`, into `bench/models/` (ignored by git), and a
benchmark that needs one that is missing says how to make it.

The exact files behind the published figures stay in the project's history: `git show
REVISION:checkpoints/NAME > bench/models/NAME` restores one byte for byte. A model trained
again with the same config and seed ranks the same way up to the run-to-run noise of training
on another machine; its `.xgb.npz` is fitted from its dataset on first use and cached.
"""

from __future__ import annotations

import os

FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
# the last revision that carried each in checkpoints/, and the files that shipped beside it
LAST_SHIPPED = {"graphsage-v2.ckpt": "68bc5e1", "graphsage-v2-networks.ckpt": "7889b92",
                "graphsage-family-depthwise.ckpt": "7889b92", "graphsage.ckpt": "583e42c"}
# each one's pretrained XGBModel (what ms-xgb-pretrained tunes with) shipped beside it
BESIDE = {name: [name.replace(".ckpt", ".xgb.npz")] for name in LAST_SHIPPED}
MADE_BY = {
    # cost model v2, tune's default until v3: every network task of data/llvm-networks
    "graphsage-v2.ckpt":
        "train fit --config configs/graphsage-v2.yaml, then copy runs/v2/checkpoints/*.ckpt "
        "here and `costmodel blend bench/models/graphsage-v2.ckpt --with xgb --weight 0.3`",
    # the first model (the default until cost model v2): the shapes split of data/llvm-full,
    # picked among training seeds 0, 1 and 2 by validation Kendall tau
    "graphsage.ckpt":
        "train fit --config configs/graphsage.yaml --seed_everything 2, then copy "
        "runs/graphsage/checkpoints/*.ckpt here",
    # cost model v2's recipe with ResNet-50, MobileNetV2 and T5-small encoder held out
    "graphsage-v2-networks.ckpt":
        "train fit --config configs/graphsage-networks.yaml --model.views [store] "
        "(seed 0), then copy runs/networks/checkpoints/*.ckpt here",
    # the first recipe with every depthwise convolution held out
    "graphsage-family-depthwise.ckpt":
        "train fit --config configs/graphsage.yaml --data.split family "
        "--data.test_families '[depthwise_conv2d]' --trainer.max_epochs 12, then copy "
        "runs/graphsage/checkpoints/*.ckpt here",
}


def path(name: str) -> str:
    """The file of evaluation checkpoint `name` in `FOLDER`.

    Raises:
        UserError: it has not been made here yet (the message says how).
    """
    from datagen.errors import UserError

    file = os.path.join(FOLDER, name)
    if not os.path.isfile(file):
        how = MADE_BY.get(name, "train it with `train fit`")
        revision = LAST_SHIPPED.get(name, "REVISION")
        also = "".join(f" (and its {other} the same way)" for other in BESIDE.get(name, []))
        raise UserError(
            f"{name} is an evaluation checkpoint and not shipped; restore it with `git show "
            f"{revision}:checkpoints/{name} > bench/models/{name}`{also} or make it with "
            f"`{how}`, or pass --checkpoint")
    return file
