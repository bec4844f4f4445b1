"""Operator families, workloads with shapes from real networks, and named suites.

A `Workload` is one tensor program: an operator family plus its shape parameters. Its `key` is
stable (made of the family and the parameters, never of TVM's printing or hashing) and its
`mod` is rebuilt from those parameters, so a record's key and params are enough to get the
PrimFunc back. Workloads imported from a PyTorch model carry their IRModule instead (see
`datagen.torch_import`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Callable

from datagen.errors import UserError

DTYPE = "float32"


# --- operator families: params -> list of TE tensors (inputs then output) -------------------

def _dense(m, n, k):
    from tvm import te, topi

    data = te.placeholder((m, k), DTYPE, name="data")
    weight = te.placeholder((n, k), DTYPE, name="weight")
    return [data, weight, topi.nn.dense(data, weight)]


def _batch_matmul(b, m, n, k):
    from tvm import te, topi

    lhs = te.placeholder((b, m, k), DTYPE, name="lhs")
    rhs = te.placeholder((b, n, k), DTYPE, name="rhs")
    return [lhs, rhs, topi.nn.batch_matmul(lhs, rhs, transpose_b=True)]


def _conv_inputs(h, w, ci, co, k, groups=1, n=1):
    from tvm import te

    data = te.placeholder((n, h, w, ci), DTYPE, name="data")
    weight = te.placeholder((k, k, ci // groups, co), DTYPE, name="weight")
    return data, weight


def _conv2d(h, w, ci, co, k, stride, pad, n=1):
    from tvm import topi

    data, weight = _conv_inputs(h, w, ci, co, k, n=n)
    return [data, weight, topi.nn.conv2d_nhwc(data, weight, stride, pad, 1)]


def _conv2d_bias_relu(h, w, ci, co, k, stride, pad, n=1):
    from tvm import te, topi

    data, weight = _conv_inputs(h, w, ci, co, k, n=n)
    bias = te.placeholder((co,), DTYPE, name="bias")
    conv = topi.nn.conv2d_nhwc(data, weight, stride, pad, 1)
    out = topi.nn.relu(topi.add(conv, bias))
    return [data, weight, bias, out]


def _depthwise_conv2d(h, w, c, k, stride, pad, n=1):
    from tvm import te, topi

    data = te.placeholder((n, h, w, c), DTYPE, name="data")
    weight = te.placeholder((k, k, c, 1), DTYPE, name="weight")
    return [data, weight, topi.nn.depthwise_conv2d_nhwc(data, weight, stride, pad, 1)]


def _group_conv2d(h, w, ci, co, k, stride, pad, groups, n=1):
    from tvm import topi

    data, weight = _conv_inputs(h, w, ci, co, k, groups, n)
    return [data, weight, topi.nn.group_conv2d_nhwc(data, weight, stride, pad, 1, groups)]


def _softmax(rows, cols):
    from tvm import te, topi

    data = te.placeholder((rows, cols), DTYPE, name="data")
    return [data, topi.nn.softmax(data, axis=-1)]


def _layer_norm(rows, cols):
    from tvm import te, topi

    data = te.placeholder((rows, cols), DTYPE, name="data")
    gamma = te.placeholder((cols,), DTYPE, name="gamma")
    beta = te.placeholder((cols,), DTYPE, name="beta")
    return [data, gamma, beta, topi.nn.layer_norm(data, gamma, beta, axis=[1])]


def _pool2d(h, w, c, k, stride, pad, kind, n=1):
    from tvm import te, topi

    data = te.placeholder((n, h, w, c), DTYPE, name="data")
    out = topi.nn.pool2d(data, (k, k), (stride, stride), (1, 1), (pad, pad, pad, pad), kind,
                         layout="NHWC")
    return [data, out]


# --- families that no network of the catalogue has (the `unseen-family` split) ---------------

def _conv1d(length, ci, co, k, stride, pad, n=1):
    from tvm import te, topi

    data = te.placeholder((n, length, ci), DTYPE, name="data")
    weight = te.placeholder((k, ci, co), DTYPE, name="weight")
    return [data, weight, topi.nn.conv1d_nwc(data, weight, stride, pad, 1)]


def _conv3d(d, h, w, ci, co, k, stride, pad, n=1):
    from tvm import te, topi

    data = te.placeholder((n, d, h, w, ci), DTYPE, name="data")
    weight = te.placeholder((k, k, k, ci, co), DTYPE, name="weight")
    return [data, weight, topi.nn.conv3d_ndhwc(data, weight, stride, pad, 1, 1)]


def _conv2d_dilated(h, w, ci, co, k, stride, pad, dilation, n=1):
    from tvm import topi

    data, weight = _conv_inputs(h, w, ci, co, k, n=n)
    return [data, weight, topi.nn.conv2d_nhwc(data, weight, stride, pad, dilation)]


def _conv2d_transpose(h, w, ci, co, k, stride, pad, n=1):
    from tvm import te, topi

    data = te.placeholder((n, ci, h, w), DTYPE, name="data")
    weight = te.placeholder((ci, co, k, k), DTYPE, name="weight")
    return [data, weight, topi.nn.conv2d_transpose_nchw(data, weight, (stride, stride),
                                                          (pad, pad), DTYPE, (0, 0))]


def _triangular_product(n, lower_right):
    """out = L . R over k <= min(i, j): L the lower triangle of the packed factor matrix with
    a unit diagonal, R its upper triangle (LU) or L's transpose (Cholesky)."""
    import tvm
    from tvm import te

    factors = te.placeholder((n, n), DTYPE, name="factors")
    k = te.reduce_axis((0, n), name="k")

    def lower(i, j):
        return factors[i, j] if lower_right else te.if_then_else(i == j, 1.0, factors[i, j])

    def right(kk, j):
        return factors[j, kk] if lower_right else factors[kk, j]

    # the triangle as a mask in the reduction: `te.sum(where=...)` is dropped by
    # create_prim_func, so the masked terms are zeros the schedule cannot skip
    out = te.compute((n, n), lambda i, j: te.sum(te.if_then_else(
        tvm.tirx.all(k <= i, k <= j), lower(i, k) * right(k, j), 0.0), axis=k), name="product")
    return [factors, out]


def _lu(n):
    # TE has no loop-carried updates, so the factorisation itself (a sequence of n rank-1
    # updates) is not a TE program; its compute pattern is: A = L . U from the packed factors,
    # a triangular reduction (k <= min(i, j)), as LU's
    return _triangular_product(n, lower_right=False)


def _cholesky(n):
    # as `_lu`: A = L . L^T from the lower factor, Cholesky's triangular reduction
    return _triangular_product(n, lower_right=True)


def _mm3(ni, nj, nk, nl, nm):
    """PolyBench's 3mm: E = A.B, F = C.D, G = E.F, three matmuls in one program."""
    from tvm import te

    a = te.placeholder((ni, nk), DTYPE, name="A")
    b = te.placeholder((nk, nj), DTYPE, name="B")
    c = te.placeholder((nj, nm), DTYPE, name="C")
    d = te.placeholder((nm, nl), DTYPE, name="D")
    k1 = te.reduce_axis((0, nk), name="k1")
    k2 = te.reduce_axis((0, nm), name="k2")
    k3 = te.reduce_axis((0, nj), name="k3")
    e = te.compute((ni, nj), lambda i, j: te.sum(a[i, k1] * b[k1, j], axis=k1), name="E")
    f = te.compute((nj, nl), lambda i, j: te.sum(c[i, k2] * d[k2, j], axis=k2), name="F")
    g = te.compute((ni, nl), lambda i, j: te.sum(e[i, k3] * f[k3, j], axis=k3), name="G")
    return [a, b, c, d, g]


def _dense_bias_gelu(m, n, k):
    """A transformer's first FFN matmul with its epilogue, as relax fuses it."""
    import tvm
    from tvm import te, topi

    data = te.placeholder((m, k), DTYPE, name="data")
    weight = te.placeholder((n, k), DTYPE, name="weight")
    bias = te.placeholder((n,), DTYPE, name="bias")
    pre = topi.add(topi.nn.dense(data, weight), bias)
    out = te.compute(pre.shape, lambda i, j: pre[i, j] * 0.5 * (
        1.0 + tvm.tirx.erf(pre[i, j] * 0.7071067811865476)), name="gelu")
    return [data, weight, bias, out]


# name -> (TE builder, parameter names in key order). Parameters with a default in the
# builder (the batch `n`) are optional: a key leaves out trailing ones at their default, so the
# keys of batch 1 are those of the datasets collected before the batch existed.
FAMILIES: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "dense": (_dense, ("m", "n", "k")),
    "dense_bias_gelu": (_dense_bias_gelu, ("m", "n", "k")),
    "batch_matmul": (_batch_matmul, ("b", "m", "n", "k")),
    "conv2d": (_conv2d, ("h", "w", "ci", "co", "k", "stride", "pad", "n")),
    "conv2d_bias_relu": (_conv2d_bias_relu, ("h", "w", "ci", "co", "k", "stride", "pad", "n")),
    "depthwise_conv2d": (_depthwise_conv2d, ("h", "w", "c", "k", "stride", "pad", "n")),
    "group_conv2d": (_group_conv2d, ("h", "w", "ci", "co", "k", "stride", "pad", "groups",
                                     "n")),
    "softmax": (_softmax, ("rows", "cols")),
    "layer_norm": (_layer_norm, ("rows", "cols")),
    "pool2d": (_pool2d, ("h", "w", "c", "k", "stride", "pad", "kind", "n")),
    "conv1d": (_conv1d, ("l", "ci", "co", "k", "stride", "pad", "n")),
    "conv3d": (_conv3d, ("d", "h", "w", "ci", "co", "k", "stride", "pad", "n")),
    "conv2d_dilated": (_conv2d_dilated, ("h", "w", "ci", "co", "k", "stride", "pad",
                                         "dilation", "n")),
    "conv2d_transpose": (_conv2d_transpose, ("h", "w", "ci", "co", "k", "stride", "pad", "n")),
    "lu": (_lu, ("n",)),
    "cholesky": (_cholesky, ("n",)),
    "3mm": (_mm3, ("ni", "nj", "nk", "nl", "nm")),
}
# the families of the `unseen-family` split: no task of the network catalogue has them
UNSEEN_FAMILIES = ("conv1d", "conv3d", "conv2d_dilated", "conv2d_transpose", "lu", "cholesky",
                   "3mm")
TEXT_PARAMS = {"kind": ("avg", "max")}  # the only parameter that is not a size


@functools.lru_cache(maxsize=None)
def _defaults(family: str) -> dict[str, object]:
    import inspect

    return {name: p.default for name, p in
            inspect.signature(FAMILIES[family][0]).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _trim(family: str, params: tuple) -> tuple:
    """`params` without trailing optional parameters at their defaults."""
    if family not in FAMILIES:
        return params
    names, defaults = FAMILIES[family][1], _defaults(family)
    params = tuple(params)
    while params and names[len(params) - 1] in defaults \
            and params[-1] == defaults[names[len(params) - 1]]:
        params = params[:-1]
    return params


def check_shape(family: str, params: tuple) -> None:
    """Refuse, in one line, parameters no program can be made of: a size below 1 (a padding
    below 0), a pooling kind TE lacks, or shapes whose output is empty or that TE rejects.

    Raises:
        UserError: naming the workload and what is wrong.
    """
    names = FAMILIES[family][1]
    key = f"{family}/" + "_".join(f"{n}{v}" for n, v in zip(names, params))
    for name, value in zip(names, params):
        if name in TEXT_PARAMS:
            if value not in TEXT_PARAMS[name]:
                raise UserError(f"workload {key}: {name} must be one of "
                                f"{', '.join(TEXT_PARAMS[name])}, not {value!r}")
            continue
        least = 0 if name == "pad" else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise UserError(f"workload {key}: {name} must be an integer of at least {least}, "
                            f"not {value!r}")
    if family == "group_conv2d" and (params[2] % params[7] or params[3] % params[7]):
        raise UserError(f"workload {key}: groups ({params[7]}) must divide both channel "
                        f"counts ({params[2]}, {params[3]})")
    try:
        tensors = FAMILIES[family][0](*params)
        shapes = [[int(d) for d in t.shape] for t in tensors]
    except Exception as err:  # noqa: BLE001  (TE raises its own errors for impossible shapes)
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else \
            type(err).__name__
        raise UserError(f"workload {key}: TVM cannot build these shapes ({first})") from None
    if any(d < 1 for shape in shapes for d in shape):
        raise UserError(f"workload {key}: the output would be empty (shape {shapes[-1]}); "
                        "the kernel, stride or padding does not fit the input")


@dataclasses.dataclass(frozen=True)
class Workload:
    """One tensor program to sample schedules of.

    Args:
        family: operator family (a key of `FAMILIES`, or for tasks imported from a network
            the coarse family of `datagen.torch_import.task_family`).
        params: shape parameters of the family, in the family's order.
        network: the network the shape was taken from (several, comma-separated, for a task
            shared by networks).
        weight: how often the program occurs in its network(s).
        ir_json: for imported workloads only, the IRModule as `tvm.ir.save_json` text.
        name: for imported workloads only, the task's name.
        sources: for imported workloads, every (network, input shape, weight) it occurs in.
    """

    family: str
    params: tuple = ()
    network: str = ""
    weight: int = 1
    ir_json: str | None = None
    name: str = ""
    sources: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "params", _trim(self.family, self.params))

    @property
    def key(self) -> str:
        """Stable identifier: family and parameters, e.g. 'dense/m128_n768_k768'."""
        if self.ir_json is not None:
            return f"torch/{self.name}"
        names = FAMILIES[self.family][1]
        return f"{self.family}/" + "_".join(f"{n}{v}" for n, v in zip(names, self.params))

    @property
    def params_json(self) -> str:
        if self.ir_json is not None:
            return json.dumps({"name": self.name, "sources": [
                {"network": n, "input": i, "weight": w} for n, i, w in self.sources]})
        return json.dumps(dict(zip(FAMILIES[self.family][1], self.params)))

    @functools.cached_property
    def mod(self):
        """The workload as an IRModule with a single PrimFunc named 'main'."""
        import tvm
        from tvm import te

        if self.ir_json is not None:
            return tvm.ir.load_json(self.ir_json)
        builder = FAMILIES[self.family][0]
        func = te.create_prim_func(builder(*self.params))
        return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})

    def definition(self) -> str:
        """The IRModule as JSON text: what a record stores to rebuild the PrimFunc."""
        import tvm

        return self.ir_json if self.ir_json is not None else tvm.ir.save_json(self.mod)

    def flops(self) -> float:
        """Floating-point operations of one run, as TVM's estimator counts them."""
        from tvm.s_tir.analysis import estimate_tir_flops

        return float(estimate_tir_flops(self.mod))


def from_key(key: str) -> Workload:
    """Rebuild a registry workload from its key.

    Raises:
        UserError: an unknown family, a key that does not match its family's parameters, or
            shapes no program can be made of (`check_shape`).
    """
    family, _, rest = key.partition("/")
    if family not in FAMILIES:
        raise UserError(f"unknown workload family {family!r} in key {key!r}; "
                        f"families: {', '.join(FAMILIES)}")
    names = FAMILIES[family][1]
    required = len(names) - len(_defaults(family))
    parts = rest.split("_")
    if not required <= len(parts) <= len(names):
        raise UserError(f"workload key {key!r} does not match family {family} "
                        f"(expects {', '.join(names)})")
    params = []
    for name, part in zip(names, parts):
        value = part[len(name):]
        if not part.startswith(name):
            raise UserError(f"workload key {key!r}: expected parameter {name!r}")
        params.append(int(value) if value.lstrip("-").isdigit() else value)
    check_shape(family, tuple(params))
    return Workload(family, tuple(params))


TABLES = os.path.join(os.path.dirname(__file__), "workload_tables.json")


def _tables(path: str = TABLES) -> dict[str, list[Workload]]:
    """The hand-written workloads of `workload_tables.json` (data: families, parameters,
    networks, weights), by table."""
    with open(path, encoding="utf-8") as f:
        tables = json.load(f)["tables"]
    return {name: [Workload(family, tuple(params), network=network, weight=weight)
                   for family, params, network, weight in rows]
            for name, rows in tables.items()}


# shapes taken from real networks (batch 1, NHWC, fp32)
_TABLES = _tables()
RESNET50, MOBILENETV2, BERT_BASE = _TABLES["resnet50"], _TABLES["mobilenetv2"], _TABLES["bert-base"]
RESNEXT50, VIT_B16, GPT2 = _TABLES["resnext50"], _TABLES["vit-b16"], _TABLES["gpt2"]
POOLS, TINY = _TABLES["pools"], _TABLES["tiny"]  # TINY: seconds to build and measure

SUITES: dict[str, list[Workload]] = {
    "tiny": TINY,
    "resnet50": RESNET50,
    "mobilenetv2": MOBILENETV2,
    "bert-base": BERT_BASE,
    "resnext50": RESNEXT50,
    "vit-b16": VIT_B16,
    "full": RESNET50 + MOBILENETV2 + BERT_BASE + RESNEXT50 + VIT_B16 + GPT2 + POOLS,
}
SUITES["default"] = [RESNET50[5], BERT_BASE[0], MOBILENETV2[3], BERT_BASE[5]]
