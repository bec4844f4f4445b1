"""Operator families, workloads with shapes from real networks, and named suites.

A `Workload` is one tensor program: an operator family plus its shape parameters. Its `key` is
stable (made of the family and the parameters, never of TVM's printing or hashing) and its
`mod` is rebuilt from those parameters, so a record's key and params are enough to get the
PrimFunc back. Workloads imported from a PyTorch model carry their IRModule instead (see
`datagen.torch_import`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from functools import cached_property

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


def _conv_inputs(h, w, ci, co, k, groups=1):
    from tvm import te

    data = te.placeholder((1, h, w, ci), DTYPE, name="data")
    weight = te.placeholder((k, k, ci // groups, co), DTYPE, name="weight")
    return data, weight


def _conv2d(h, w, ci, co, k, stride, pad):
    from tvm import topi

    data, weight = _conv_inputs(h, w, ci, co, k)
    return [data, weight, topi.nn.conv2d_nhwc(data, weight, stride, pad, 1)]


def _conv2d_bias_relu(h, w, ci, co, k, stride, pad):
    from tvm import te, topi

    data, weight = _conv_inputs(h, w, ci, co, k)
    bias = te.placeholder((co,), DTYPE, name="bias")
    conv = topi.nn.conv2d_nhwc(data, weight, stride, pad, 1)
    out = topi.nn.relu(topi.add(conv, bias))
    return [data, weight, bias, out]


def _depthwise_conv2d(h, w, c, k, stride, pad):
    from tvm import te, topi

    data = te.placeholder((1, h, w, c), DTYPE, name="data")
    weight = te.placeholder((k, k, c, 1), DTYPE, name="weight")
    return [data, weight, topi.nn.depthwise_conv2d_nhwc(data, weight, stride, pad, 1)]


def _group_conv2d(h, w, ci, co, k, stride, pad, groups):
    from tvm import topi

    data, weight = _conv_inputs(h, w, ci, co, k, groups)
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


def _pool2d(h, w, c, k, stride, pad, kind):
    from tvm import te, topi

    data = te.placeholder((1, h, w, c), DTYPE, name="data")
    out = topi.nn.pool2d(data, (k, k), (stride, stride), (1, 1), (pad, pad, pad, pad), kind,
                         layout="NHWC")
    return [data, out]


# name -> (TE builder, parameter names in key order)
FAMILIES: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "dense": (_dense, ("m", "n", "k")),
    "batch_matmul": (_batch_matmul, ("b", "m", "n", "k")),
    "conv2d": (_conv2d, ("h", "w", "ci", "co", "k", "stride", "pad")),
    "conv2d_bias_relu": (_conv2d_bias_relu, ("h", "w", "ci", "co", "k", "stride", "pad")),
    "depthwise_conv2d": (_depthwise_conv2d, ("h", "w", "c", "k", "stride", "pad")),
    "group_conv2d": (_group_conv2d, ("h", "w", "ci", "co", "k", "stride", "pad", "groups")),
    "softmax": (_softmax, ("rows", "cols")),
    "layer_norm": (_layer_norm, ("rows", "cols")),
    "pool2d": (_pool2d, ("h", "w", "c", "k", "stride", "pad", "kind")),
}


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

    @cached_property
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
    """Rebuild a registry workload from its key."""
    family, _, rest = key.partition("/")
    if family not in FAMILIES:
        raise UserError(f"unknown workload family {family!r} in key {key!r}; "
                        f"families: {', '.join(FAMILIES)}")
    names = FAMILIES[family][1]
    parts = rest.split("_")
    if len(parts) != len(names):
        raise UserError(f"workload key {key!r} does not match family {family} "
                        f"(expects {', '.join(names)})")
    params = []
    for name, part in zip(names, parts):
        value = part[len(name):]
        if not part.startswith(name):
            raise UserError(f"workload key {key!r}: expected parameter {name!r}")
        params.append(int(value) if value.lstrip("-").isdigit() else value)
    return Workload(family, tuple(params))


def _w(family, *params, network, weight=1):
    return Workload(family, tuple(params), network=network, weight=weight)


# --- shapes taken from real networks (batch 1, NHWC, fp32) ----------------------------------
RESNET50 = [
    _w("conv2d", 224, 224, 3, 64, 7, 2, 3, network="resnet50"),
    _w("conv2d", 56, 56, 64, 64, 1, 1, 0, network="resnet50"),
    _w("conv2d", 56, 56, 64, 64, 3, 1, 1, network="resnet50", weight=3),
    _w("conv2d", 56, 56, 64, 256, 1, 1, 0, network="resnet50", weight=4),
    _w("conv2d", 56, 56, 256, 64, 1, 1, 0, network="resnet50", weight=2),
    _w("conv2d", 28, 28, 128, 128, 3, 1, 1, network="resnet50", weight=3),
    _w("conv2d", 28, 28, 128, 512, 1, 1, 0, network="resnet50", weight=4),
    _w("conv2d", 14, 14, 256, 256, 3, 1, 1, network="resnet50", weight=5),
    _w("conv2d", 14, 14, 1024, 256, 1, 1, 0, network="resnet50", weight=5),
    _w("conv2d", 7, 7, 512, 512, 3, 1, 1, network="resnet50", weight=2),
    _w("conv2d", 7, 7, 512, 2048, 1, 1, 0, network="resnet50", weight=3),
    _w("conv2d_bias_relu", 56, 56, 64, 64, 3, 1, 1, network="resnet50", weight=3),
    _w("conv2d_bias_relu", 28, 28, 512, 128, 1, 1, 0, network="resnet50", weight=3),
    _w("conv2d_bias_relu", 14, 14, 256, 256, 3, 1, 1, network="resnet50", weight=5),
    _w("conv2d_bias_relu", 7, 7, 2048, 512, 1, 1, 0, network="resnet50", weight=2),
    _w("pool2d", 112, 112, 64, 3, 2, 1, "max", network="resnet50"),
    _w("pool2d", 7, 7, 2048, 7, 1, 0, "avg", network="resnet50"),
    _w("dense", 1, 1000, 2048, network="resnet50"),
]
MOBILENETV2 = [
    _w("depthwise_conv2d", 112, 112, 32, 3, 1, 1, network="mobilenetv2"),
    _w("depthwise_conv2d", 112, 112, 96, 3, 2, 1, network="mobilenetv2"),
    _w("depthwise_conv2d", 56, 56, 144, 3, 1, 1, network="mobilenetv2"),
    _w("depthwise_conv2d", 28, 28, 192, 3, 1, 1, network="mobilenetv2", weight=2),
    _w("depthwise_conv2d", 14, 14, 384, 3, 1, 1, network="mobilenetv2", weight=3),
    _w("depthwise_conv2d", 14, 14, 576, 3, 1, 1, network="mobilenetv2", weight=2),
    _w("depthwise_conv2d", 7, 7, 960, 3, 1, 1, network="mobilenetv2", weight=2),
    _w("conv2d_bias_relu", 112, 112, 32, 16, 1, 1, 0, network="mobilenetv2"),
    _w("conv2d_bias_relu", 56, 56, 24, 144, 1, 1, 0, network="mobilenetv2"),
    _w("conv2d_bias_relu", 28, 28, 32, 192, 1, 1, 0, network="mobilenetv2", weight=2),
    _w("conv2d_bias_relu", 14, 14, 64, 384, 1, 1, 0, network="mobilenetv2", weight=3),
    _w("conv2d_bias_relu", 7, 7, 160, 960, 1, 1, 0, network="mobilenetv2", weight=2),
    _w("conv2d", 7, 7, 320, 1280, 1, 1, 0, network="mobilenetv2"),
    _w("pool2d", 7, 7, 1280, 7, 1, 0, "avg", network="mobilenetv2"),
    _w("dense", 1, 1000, 1280, network="mobilenetv2"),
]
BERT_BASE = [  # sequence length 128, 12 heads of 64
    _w("dense", 128, 768, 768, network="bert-base", weight=48),
    _w("dense", 128, 3072, 768, network="bert-base", weight=12),
    _w("dense", 128, 768, 3072, network="bert-base", weight=12),
    _w("batch_matmul", 12, 128, 128, 64, network="bert-base", weight=12),
    _w("batch_matmul", 12, 128, 64, 128, network="bert-base", weight=12),
    _w("softmax", 12 * 128, 128, network="bert-base", weight=12),
    _w("layer_norm", 128, 768, network="bert-base", weight=25),
]
RESNEXT50 = [  # 32x4d grouped convolutions
    _w("group_conv2d", 56, 56, 128, 128, 3, 1, 1, 32, network="resnext50", weight=3),
    _w("group_conv2d", 28, 28, 256, 256, 3, 1, 1, 32, network="resnext50", weight=4),
    _w("group_conv2d", 14, 14, 512, 512, 3, 1, 1, 32, network="resnext50", weight=6),
    _w("group_conv2d", 7, 7, 1024, 1024, 3, 1, 1, 32, network="resnext50", weight=3),
]
VIT_B16 = [  # 197 tokens, 12 heads
    _w("dense", 197, 2304, 768, network="vit-b16", weight=12),
    _w("batch_matmul", 12, 197, 197, 64, network="vit-b16", weight=12),
    _w("softmax", 12 * 197, 197, network="vit-b16", weight=12),
    _w("layer_norm", 197, 768, network="vit-b16", weight=25),
]
GPT2 = [  # sequence length 256
    _w("softmax", 12 * 256, 256, network="gpt2", weight=12),
    _w("layer_norm", 256, 768, network="gpt2", weight=25),
]
POOLS = [
    _w("pool2d", 56, 56, 256, 2, 2, 0, "max", network="vgg16"),
    _w("pool2d", 28, 28, 512, 3, 1, 1, "avg", network="inception-v3"),
]
TINY = [  # seconds to build and measure: for tests and smoke runs
    _w("dense", 32, 32, 32, network="tiny"),
    _w("softmax", 16, 32, network="tiny"),
    _w("conv2d", 8, 8, 8, 8, 3, 1, 1, network="tiny"),
]

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
