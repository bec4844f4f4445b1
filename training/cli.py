"""`train`: LightningCLI over `CostModelModule` and `ScheduleDataModule`.

    train fit --config configs/graphsage.yaml
    train fit --config configs/graphsage.yaml --trainer.fast_dev_run true
    train fit --config configs/graphsage.yaml --trainer.strategy ddp --trainer.devices 2
"""

from __future__ import annotations

import sys

from lightning.pytorch.cli import LightningCLI

from datagen.tvm_env import UserError
from training.data import ScheduleDataModule
from training.module import CostModelModule


def main(args: list[str] | None = None) -> int:
    try:
        LightningCLI(CostModelModule, ScheduleDataModule, seed_everything_default=0,
                     save_config_kwargs={"overwrite": True}, args=args)
    except UserError as err:
        print(f"train: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
