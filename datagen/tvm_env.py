"""TVM session set-up shared by every datagen process: imports, targets, versions.

Importing `tvm.s_tir.tensor_intrin` registers tensor intrinsics for every backend and costs
tens of seconds (the CUDA ones dominate). MetaSchedule imports it from every `TuneContext` and
every build. `load_tensor_intrinsics` registers only the backend a target needs and makes later
imports of the package free, so a collector pays the cost once, and only for its own target.
It also keeps TVMScript from reading the source lines of every caller frame for each of the
package's functions (see `_frames_without_source`): on a GPU host with a slow disk that reading
was most of a 64-second import, and every draw and build worker pays it.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import logging
import os
import sys
import types
from typing import Any

from datagen.errors import UserError

_INTRIN_PACKAGE = "tvm.s_tir.tensor_intrin"
_INTRIN_MODULES = {"llvm": ("x86", "arm_cpu"), "cuda": ("cuda",)}


def load_tensor_intrinsics(target_kind: str) -> None:
    """Register the tensor intrinsics of one target kind, skipping the other backends."""
    import tvm.s_tir  # noqa: F401  (the parent package must exist)

    package = sys.modules.get(_INTRIN_PACKAGE)
    if package is None:
        spec = importlib.util.find_spec(_INTRIN_PACKAGE)
        package = types.ModuleType(_INTRIN_PACKAGE)
        package.__path__ = list(spec.submodule_search_locations)
        package.__package__ = _INTRIN_PACKAGE
        sys.modules[_INTRIN_PACKAGE] = package
    with _frames_without_source():
        for name in _INTRIN_MODULES.get(target_kind, ()):
            importlib.import_module(f"{_INTRIN_PACKAGE}.{name}")


@contextlib.contextmanager
def _frames_without_source():
    """Make `inspect.stack()` skip the source lines of the frames while the block runs.

    TVMScript's `@T.prim_func` calls `inspect.stack()` to find the caller's scope; with the
    default context of one line, Python looks up each frame's source file and module, which
    walks every imported module (about 2,000 once `import tvm` has pulled in torch) for each
    frame of each function. The parser only uses the lines to tell a function defined in an
    `@I.ir_module` class, and the intrinsic modules define none, so their functions parse the
    same (tested). Even `inspect.stack(0)` looks each frame's file up, and for the frozen
    import machinery's frames, which have no file, walks every module: so the frames are
    listed here straight from the interpreter, with no source and no look-up at all.
    """
    def stack(context: int = 1) -> list[inspect.FrameInfo]:
        frames, frame = [], sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            frames.append(inspect.FrameInfo(frame, code.co_filename, frame.f_lineno,
                                            code.co_name, None, None))
            frame = frame.f_back
        return frames

    original, inspect.stack = inspect.stack, stack
    try:
        yield
    finally:
        inspect.stack = original


METASCHEDULE_LOGGER = "tvm.s_tir.meta_schedule"


@contextlib.contextmanager
def metaschedule_logging():
    """Let MetaSchedule set up its loggers whatever handlers the host process attached.

    `tune_tir` and `tune_relax` rebuild MetaSchedule's loggers with `logging.config.dictConfig`
    and list every handler already on the `tvm.s_tir.meta_schedule` logger by name: an unnamed
    handler (pytest 9's log capture attaches one to every non-propagating logger, and so does
    any logging set-up that decorates all loggers) crashes it with `None.format`, a foreign
    named one with "Unable to configure handler". Inside this block such handlers are taken
    off that logger, and afterwards they are put back, beside MetaSchedule's own. A log line
    that cannot be written (a full disk) is dropped quietly inside it, rather than printing a
    traceback of its own: the log files are a record of the run, not its results.

        with metaschedule_logging():
            ms.tune_tir(...)
    """
    logger = logging.getLogger(METASCHEDULE_LOGGER)
    foreign = [h for h in logger.handlers
               if not (h.get_name() or "").startswith(METASCHEDULE_LOGGER + ".")]
    for handler in foreign:
        logger.removeHandler(handler)
    raising, logging.raiseExceptions = logging.raiseExceptions, False
    try:
        yield
    finally:
        logging.raiseExceptions = raising
        for handler in foreign:
            if handler not in logger.handlers:
                logger.addHandler(handler)


def to_python(obj: Any) -> Any:
    """Convert TVM FFI containers (Map, Array, String, IntImm) to plain JSON-able Python."""
    if isinstance(obj, (str, bool, int, float)) or obj is None:
        return obj if not isinstance(obj, str) else str(obj)
    if hasattr(obj, "items"):
        return {str(k): to_python(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) or hasattr(obj, "__len__") and hasattr(obj, "__getitem__"):
        return [to_python(v) for v in obj]
    if hasattr(obj, "value"):
        return obj.value
    return str(obj)


def host_cpu() -> str:
    """The LLVM name of the host CPU (for example 'znver4'), as TVM's LLVM sees it."""
    import tvm_ffi

    return str(tvm_ffi.get_global_func("target.llvm_get_system_cpu")())


def default_num_threads() -> int:
    """Runtime threads for measurement: TVM_NUM_THREADS if set, else every core we may use."""
    env = os.environ.get("TVM_NUM_THREADS")
    if env:
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def make_target(spec: str | dict | None, num_threads: int | None = None):
    """Build a `tvm.target.Target` from JSON text, a dict or a tag; None means this host's CPU.

    An llvm target without `mcpu` gets the host CPU (without it LLVM emits generic x86 code that
    runs several times slower) and `num-cores` defaults to the runtime thread count.

    Raises:
        UserError: if the spec is not a target TVM accepts.
    """
    import tvm

    if spec is None or spec == "llvm":
        config: dict | str = {"kind": "llvm"}
    elif isinstance(spec, dict):
        config = dict(spec)
    else:
        text = spec.strip()
        if text.startswith("{"):
            try:
                config = json.loads(text)
            except json.JSONDecodeError as err:
                raise UserError(f"target is not valid JSON ({err.msg}): {text}") from None
        else:
            config = text  # a tag such as "nvidia/nvidia-a100"
    if isinstance(config, dict) and config.get("kind") == "llvm":
        config.setdefault("mcpu", host_cpu())
        config.setdefault("num-cores", num_threads or default_num_threads())
    try:
        return tvm.target.Target(config)
    except Exception as err:  # TVM raises ValueError or its own errors
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(
            f"malformed target {spec!r}: {first} "
            '(give JSON such as \'{"kind": "llvm", "mcpu": "znver4"}\' or a tag such as '
            "'nvidia/nvidia-a100')"
        ) from None


def target_json(target) -> str:
    """The target as canonical JSON text."""
    return json.dumps(to_python(target.export()), sort_keys=True)


def describe_target(text: str) -> str:
    """A short name of a target's JSON: its kind and -mcpu / -arch, e.g. "llvm -mcpu=znver4"."""
    try:
        target = json.loads(text)
    except (TypeError, ValueError):
        return str(text)[:60]
    if not isinstance(target, dict):
        return str(text)[:60]
    return " ".join([str(target.get("kind", "?"))] + [f"-{k}={target[k]}" for k in ("mcpu", "arch")
                                                       if target.get(k)])


def versions() -> dict[str, str]:
    """Versions that decide what a measurement means: TVM, its FFI and this project."""
    import tvm
    import tvm_ffi

    from datagen import __version__

    return {"tvm": tvm.__version__, "tvm_ffi": tvm_ffi.__version__, "project": __version__}
