"""Workloads from a user's own PyTorch model, through relax and MetaSchedule task extraction.

The model is given as a `torch.export` program (`torch.export.save(ep, "model.pt2")`), which
carries its example inputs, so no model code is executed when loading it. Each extracted task
becomes a `Workload` (key `torch/NAME`, family from `task_family` below, which also classifies the
tasks of the network catalogue, `datagen.networks`) whose IRModule travels with it, and whose
weight is the number of times the task occurs in the model.
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


def _words(name: str) -> list[str]:
    """The op names of a task name without the numbering relax adds (conv2d3 -> conv2d)."""
    return [w for w in (re.sub(r"\d+$", "", t) for t in name.split("_")) if w and w != "fused"]


def _tokens_of(name: str) -> set[str]:
    return set(_words(name))


def task_family(name: str, mod) -> str:
    """A coarse operator family of a fused task, from its name and its anchor's shapes.

    conv2d tasks split into conv2d, depthwise_conv2d and group_conv2d by their weight's
    input channels; matmuls into dense (a 2-D weight) and batch_matmul; then softmax,
    layer_norm (any normalisation), pool2d, reduction, gather, and elementwise for the rest
    (reshapes, transposes, activations, casts).
    """
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    tokens = _tokens_of(name)
    shapes = [[int(d) for d in a.shape] for a in ArgInfo.from_prim_func(mod["main"])]
    if "conv2d" in tokens or "conv1d" in tokens:
        data, weight = shapes[0], shapes[1]
        if len(data) == 4 and len(weight) == 4 and weight[1] < data[1]:
            return "depthwise_conv2d" if weight[1] == 1 else "group_conv2d"
        return "conv2d"
    if "matmul" in tokens or "dense" in tokens:
        return "batch_matmul" if len(shapes) > 1 and len(shapes[1]) >= 3 else "dense"
    for family, words in [("softmax", {"softmax"}),
                          ("layer_norm", {"norm", "layer", "group", "rms", "instance"}),
                          ("pool2d", {"pool2d", "pool"}),
                          ("reduction", {"mean", "sum", "max", "min", "variance", "std", "prod"}),
                          ("gather", {"take", "gather", "embedding"})]:
        if tokens & words:
            return family
    return "elementwise"


def task_pattern(name: str) -> str:
    """The task name without the numbering relax adds: fused_conv2d3_add2 -> conv2d_add."""
    return "_".join(_words(name))
