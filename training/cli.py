"""The `train` command.

    train fit --config configs/graphsage.yaml
    train fit --config configs/graphsage.yaml --trainer.fast_dev_run true
    train fit --config configs/graphsage.yaml --trainer.strategy ddp --trainer.devices 2
    train fit --config configs/graphsage.yaml --trainer.accelerator gpu --trainer.devices 1

`train` is LightningCLI over `CostModelModule` and `ScheduleDataModule`; `costmodel.cli`
scores, converts and blends the checkpoints it writes.
"""

from __future__ import annotations

import os
import subprocess
import sys

from datagen.errors import UserError, run_command

# what Lightning's --ckpt_path also accepts besides a file: it finds those checkpoints itself
LIGHTNING_CKPT_NAMES = ("best", "last", "hpc", "registry")


def check_ckpt_path(subcommand: str, path: str | None) -> None:
    """A `--ckpt_path` that Lightning would fail on with a traceback, refused in one line: a
    missing file, one that is not a checkpoint or would run code, one without Lightning's
    entries (the shipped checkpoints keep only the model), for `fit`, which resumes
    training, one without the optimiser's state, and one of older training whose
    hyperparameters name the views otherwise (Lightning rebuilds the model from them).

    Raises:
        UserError: as above.
    """
    from costmodel import checkpoint

    if not path or (not os.path.exists(path) and (path in LIGHTNING_CKPT_NAMES
                                                  or path.startswith("registry:"))):
        return
    ckpt = checkpoint.read(path)
    if "pytorch-lightning_version" not in ckpt or \
            (subcommand == "fit" and "optimizer_states" not in ckpt):
        raise UserError(f"{path} holds a trained model without the state of its training "
                        f"(as the shipped checkpoints), which {subcommand} --ckpt_path needs; "
                        f"train from its weights with --model.init_from {path}, or score it "
                        f"with 'costmodel evaluate {path} --dataset DIR --out DIR'")
    hparams = ckpt.get("hyper_parameters") or {}
    if set(hparams) - set(checkpoint.current_hparams(hparams)):  # options named as before
        raise UserError(f"{path} was written by an older train, whose model options name the "
                        f"views it reads otherwise, so Lightning cannot resume it; train from "
                        f"its weights with --model.init_from {path}")


def check_view_arguments(args: list[str]) -> None:
    """Refuse, in one line, the per-view model options of older versions (`use_KEY` for each
    optional view, and the views' options such as `trace_layers`) on the command line or in
    a `--config` file: models now name the views they read (`model.views`).

    Raises:
        UserError: the first such option, with what to write instead.
    """
    import yaml

    from costmodel import views

    old = {f"use_{view.key}": f"list {view.name} in model.views (views: [{view.name}])"
           for view in views.optional()}
    old.update((k, f"give it in model.view_options (view_options: {{{k}: N}})")
               for view in views.optional() for k in view.options)
    given = [(arg.split("=", 1)[0].removeprefix("--model."), "the command line") for arg in args
             if arg.startswith("--model.")]
    for i, arg in enumerate(args):  # and the model sections of the config files
        path = arg.split("=", 1)[1] if arg.startswith("--config=") else \
            args[i + 1] if arg in ("--config", "-c") and i + 1 < len(args) else None
        if path and os.path.isfile(path):
            with open(path) as f:
                config = yaml.safe_load(f)
            model = config.get("model") if isinstance(config, dict) else None
            given += [(k, path) for k in model or {}] if isinstance(model, dict) else []
    for name, where in given:
        if name in old:
            raise UserError(f"{where}: model.{name} is an option of older versions; "
                            f"{old[name]}")


def _fit(args: list[str] | None) -> int:
    from lightning.pytorch.cli import LightningCLI

    from costmodel.data_module import ScheduleDataModule
    from costmodel.lightning_module import CostModelModule

    class CLI(LightningCLI):
        def add_arguments_to_parser(self, parser):
            # the data featurise each optional view exactly when the model reads it
            parser.link_arguments("model.views", "data.views")

        def parse_arguments(self, parser, args):
            super().parse_arguments(parser, args)
            if subcommand := self.config.get("subcommand"):
                check_ckpt_path(subcommand, self.config[subcommand].get("ckpt_path"))

    check_view_arguments(sys.argv[1:] if args is None else args)
    CLI(CostModelModule, ScheduleDataModule, seed_everything_default=0,
        save_config_kwargs={"overwrite": True}, args=args)
    return 0


def main(args: list[str] | None = None) -> int:
    """`train`: LightningCLI (fit, validate, test, predict)."""
    return run_command("train", _fit, args)


def run_trainer(work: str, accelerator: str = "cpu", max_epochs: int = 30,
                steps: int | None = None) -> dict:
    """The trainer settings (the `trainer` section of a config) of a training in folder `work`
    that benchmarks run many of: `max_epochs` epochs, or with `steps`, that many optimiser
    steps validated every `steps` / `max_epochs` steps (every share the same steps); its
    checkpoint of best validation Kendall tau as `work`/checkpoints/best.ckpt, a CSV log, no
    progress bar."""
    checkpoint = {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                  "init_args": {"dirpath": os.path.join(work, "checkpoints"), "filename": "best",
                                "monitor": "val/kendall_tau", "mode": "max", "save_top_k": 1}}
    logger = {"class_path": "lightning.pytorch.loggers.CSVLogger",
              "init_args": {"save_dir": work, "name": "logs"}}
    length = {"max_epochs": max_epochs}
    if steps:
        length = {"max_epochs": -1, "max_steps": steps, "check_val_every_n_epoch": None,
                  "val_check_interval": max(1, steps // max_epochs)}
    return {"accelerator": accelerator, "devices": 1, **length, "default_root_dir": work,
            "callbacks": [checkpoint], "logger": logger, "enable_progress_bar": False}


# what every training process imports first (seconds), beside TVM (which featurises what is not
# cached; `datagen.fork_pool.FORK_PRELOAD`): imported once, in the fork server
FIT_PRELOAD = ["lightning.pytorch.cli", "costmodel.data_module", "costmodel.lightning_module",
               "costmodel.views"]


def train_process(args: list[str], cwd: str | None = None) -> subprocess.CompletedProcess:
    """`train ARGS...` in a process of its own (LightningCLI seeds and configures
    process-wide state), run in `cwd`; the finished process, its output captured.

    The process is forked from a server that imported Lightning, torch, TVM and the model once
    (`FIT_PRELOAD`), rather than started anew (an import of seconds each): what the benchmarks
    that train many models, and the tests, run. Not for DDP, whose launcher starts the
    command line again: run `train` itself."""
    import tempfile

    from datagen.fork_pool import fork_context

    context = fork_context(*FIT_PRELOAD)  # the server the build workers fork from, too
    with tempfile.TemporaryDirectory(prefix="train-") as logs:
        out, err = os.path.join(logs, "stdout"), os.path.join(logs, "stderr")
        child = context.Process(target=_train_child,
                                     args=(args, cwd or os.getcwd(), dict(os.environ), out, err))
        child.start()
        child.join()
        return subprocess.CompletedProcess(["train", *args], child.exitcode, _read(out),
                                           _read(err))


def _read(path: str) -> str:
    """A file's text, "" if the process ended before it made it."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _train_child(args: list[str], cwd: str, environ: dict, out: str, err: str) -> None:
    """The forked process of `train_process`: the caller's folder and environment, its output
    into the files `out` and `err`, `train ARGS` and its exit status."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(environ)
    for stream, path in ((sys.stdout, out), (sys.stderr, err)):
        stream.flush()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, stream.fileno())
        os.close(fd)
    try:
        status = main(args)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(status)


if __name__ == "__main__":
    sys.exit(main())
