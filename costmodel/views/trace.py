"""The trace view: the schedule's trace as a sequence of tokens, TLP's input.

TLP (Zhai et al., ASPLOS 2023) ranks schedules from their MetaSchedule/Ansor primitives and
their decisions instead of the lowered program: which rules shaped the program and what they
sampled. `trace_tokens` reads a trace as `datagen.sampler.trace_to_json` writes it
(postprocessing included) into one token per instruction:

- a kind id: the instruction's name, for `Annotate`/`Unannotate` with the annotation key
  (`Annotate:meta_schedule.parallel`), hashed into `TRACE_KINDS` buckets (CRC-32, stable across
  processes and versions; id 0 is the start token that every sequence begins with, so none is
  empty);
- `TRACE_FEATURES` numbers (`TRACE_FEATURE_NAMES`; values as sign(v) log2(1 + |v|)): where the
  instruction sits in the trace, its arity, whether it is postprocessing, which loop of its
  block it works on (a loop's index in the `GetLoops` that made it), the product of its numeric
  inputs (a `Split`'s factors multiply to the loop's extent), and its first `TRACE_VALUES`
  numbers: the decision of a sampling instruction (the chosen candidate of
  `SampleCategorical`), then its inputs that are numbers or variables bound by earlier
  decisions, then its numeric attributes.

Only numbers and names are read: a trace is data, nothing in it runs.

A graph carries the tokens as `ProgramGraph.trace_kind` and `ProgramGraph.trace_x`
(`Featurizer(traces=True)`; programs must then come as `Schedule`s or records, and the tokens
are made again rather than cached); the model reads them through self-attention
(`costmodel.model.TraceEncoder`).
"""

from __future__ import annotations

import json
import math
import zlib

import numpy as np

from costmodel.lowering import FeaturizeError
from costmodel.views import View

TRACE_FEATURES_VERSION = "ms-trace-1"
TRACE_KINDS = 256  # hash buckets of instruction kinds; 0 is the start token
TRACE_VALUES = 8  # numbers kept per instruction
TRACE_FEATURE_NAMES = ("position", "log_inputs", "log_outputs", "postproc", "loop_index",
                       "log_input_product", "log_values",
                       *(f"value_{i}" for i in range(TRACE_VALUES)))
NUM_TRACE_FEATURES = len(TRACE_FEATURE_NAMES)
_ANNOTATIONS = ("Annotate", "Unannotate")


class TraceError(ValueError):
    """A trace that is not MetaSchedule's JSON form; the message is one line."""


def kind_id(name: str) -> int:
    """The token id of an instruction name: a CRC-32 bucket in 1..TRACE_KINDS-1."""
    return 1 + zlib.crc32(name.encode()) % (TRACE_KINDS - 1)


def _log(v: float) -> float:
    return math.copysign(math.log2(1.0 + abs(v)), v)


def _numbers(obj) -> list[float]:
    """The numbers in a (nested) attribute, in order; booleans as 0/1, strings skipped."""
    if isinstance(obj, bool):
        return [float(obj)]
    if isinstance(obj, (int, float)):
        return [float(obj)]
    if isinstance(obj, list):
        return [v for item in obj for v in _numbers(item)]
    return []


def _bind_decision(kind: str, attrs: list, outputs: list, decision, bound: dict) -> list[float]:
    """Bind a sampling instruction's output variables to what it decided; its numbers."""
    if kind == "SampleCategorical" and isinstance(decision, int) and attrs \
            and isinstance(attrs[0], list) and 0 <= decision < len(attrs[0]):
        values = _numbers(attrs[0][decision])
    else:
        values = _numbers(decision)
    if len(values) == len(outputs):
        bound.update(zip(outputs, values))
    return values


def trace_tokens(trace_json: str) -> tuple[np.ndarray, np.ndarray]:
    """The tokens of a trace: kind ids int64 [T] and features float32 [T, NUM_TRACE_FEATURES],
    T = 1 + the number of instructions (the start token first).

    Raises:
        TraceError: if the text is not a MetaSchedule trace as JSON.
    """
    try:
        insts, decisions = json.loads(trace_json)
        decided = {int(i): d for i, d in decisions}
        rows = [(str(k), list(inp), list(att), list(out)) for k, inp, att, out in insts]
    except (TypeError, ValueError) as err:
        raise TraceError(f"not a MetaSchedule trace: {err}") from None
    kinds = np.zeros(len(rows) + 1, np.int64)
    x = np.zeros((len(rows) + 1, NUM_TRACE_FEATURES), np.float32)
    bound: dict[str, float] = {}  # variable -> the value a decision gave it
    loop_index: dict[str, int] = {}  # loop variable -> its index in its block's GetLoops
    postproc = False
    for i, (kind, inputs, attrs, outputs) in enumerate(rows, start=1):
        postproc = postproc or kind == "EnterPostproc"
        name = f"{kind}:{attrs[0]}" if kind in _ANNOTATIONS and attrs else kind
        kinds[i] = kind_id(name)
        values = _bind_decision(kind, attrs, outputs, decided[i - 1], bound) \
            if i - 1 in decided else []
        numeric_inputs = [bound[v] if isinstance(v, str) and v in bound else n
                          for v in inputs for n in (_numbers(v) or [None])]
        numeric_inputs = [v for v in numeric_inputs if v is not None]
        values += numeric_inputs
        if not (kind == "SampleCategorical" and i - 1 in decided):
            values += _numbers(attrs)
        loop = next((loop_index[v] for v in inputs if isinstance(v, str) and v in loop_index), -1)
        if kind == "GetLoops":
            loop_index.update((v, j) for j, v in enumerate(outputs))
        product = math.prod(abs(v) for v in numeric_inputs) if numeric_inputs else 0.0
        head = values[:TRACE_VALUES]
        x[i, :7] = (i / len(rows), _log(len(inputs)), _log(len(outputs)), float(postproc),
                    _log(loop + 1), _log(product), _log(len(values)))
        x[i, 7:7 + len(head)] = [_log(v) for v in head]
    return kinds, x


def _from_trace(trace_json: str) -> dict[str, np.ndarray]:
    try:
        kinds, x = trace_tokens(trace_json)
    except TraceError as err:
        raise FeaturizeError(str(err)) from None
    return {"trace_kind": kinds, "trace_x": x}


def _encoder(hidden: int, num_trace_features: int, num_trace_kinds: int, trace_layers: int):
    from costmodel.model import TraceEncoder

    return TraceEncoder(num_trace_kinds, num_trace_features, hidden, trace_layers)


TRACE = View(
    name="trace", order=40, version=TRACE_FEATURES_VERSION,
    sizes={"num_trace_features": NUM_TRACE_FEATURES, "num_trace_kinds": TRACE_KINDS},
    rows="trace_x", statistics=("trace_mean", "trace_std"), arrays=("trace_kind", "trace_x"),
    count="trace_count", label="trace tokens", key="trace_features", flag="traces",
    from_trace=_from_trace, units=("numbers", "kinds"), encoder=_encoder, module="trace",
    options={"trace_layers": 1})
