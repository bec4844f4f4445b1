"""Workloads from a user's own PyTorch model, through relax and MetaSchedule task extraction.

The model is given as a `torch.export` program (`torch.export.save(ep, "model.pt2")`), which
carries its example inputs, so no model code is executed when loading it. Each extracted task
becomes a `Workload` (key `torch/NAME`, family from `datagen.networks.task_family`) whose
IRModule travels with it, and whose weight is the
number of times the task occurs in the model.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import zipfile

from datagen.errors import UserError
from datagen.tvm_env import load_tensor_intrinsics
from datagen.workloads import Workload


def relax_module(exported_program, target):
    """Import an ExportedProgram into relax and lower it to the stage MetaSchedule tunes."""
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    mod = from_exported_program(exported_program, keep_params_as_input=False)
    with target:
        mod = relax.transform.DecomposeOpsForInference()(mod)
        mod = relax.transform.CanonicalizeBindings()(mod)
        mod = relax.get_pipeline("zero")(mod)
    return mod


def workloads_from_exported(exported_program, target, network: str = "torch") -> list[Workload]:
    """The MetaSchedule tasks of an ExportedProgram as workloads."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from datagen.networks import task_family

    load_tensor_intrinsics(target.kind.name)
    tasks = ms.relax_integration.extract_tasks(relax_module(exported_program, target), target)
    out = []
    for task in tasks:
        mod = task.dispatched[0]
        digest = hashlib.sha1(mod.script().encode()).hexdigest()[:10]
        name = re.sub(r"[^A-Za-z0-9_]+", "_", str(task.task_name))
        out.append(Workload(task_family(name, mod), (), network=network,
                            weight=int(task.weight), ir_json=tvm.ir.save_json(mod),
                            name=f"{name}_{digest}",
                            sources=((network, "", int(task.weight)),)))
    return out


def load_exported(path: str):
    """Load a `.pt2` file written by `torch.export.save`.

    Raises:
        UserError: the file is missing or not an exported program.
    """
    import torch

    if not os.path.isfile(path):
        raise UserError(f"PyTorch model file {path} does not exist")
    hint = "write one with torch.export.save(torch.export.export(model, args), path)"
    if not zipfile.is_zipfile(path):
        raise UserError(f"{path} is not a torch.export program; {hint}")
    logger = logging.getLogger("torch.export")
    level = logger.level
    logger.setLevel(logging.ERROR)  # torch logs its own traceback before raising
    try:
        return torch.export.load(path)
    except Exception as err:  # noqa: BLE001
        raise UserError(f"{path} is not a torch.export program ({type(err).__name__}); "
                        f"{hint}") from None
    finally:
        logger.setLevel(level)


def workloads_from_file(path: str, target) -> list[Workload]:
    """Load a `.pt2` file written by `torch.export.save` and extract its tasks.

    Raises:
        UserError: the file is missing or not an exported program, or has no tunable task.
    """
    program = load_exported(path)
    network = os.path.splitext(os.path.basename(path))[0]
    workloads = workloads_from_exported(program, target, network)
    if not workloads:
        raise UserError(f"{path} has no operator MetaSchedule can tune")
    return workloads
