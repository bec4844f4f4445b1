"""Tasks with realistic shapes drawn at random: many more distinct tasks than networks give.

TenSet found that at a fixed measuring budget more tasks beat more schedules per task. The
network catalogue (`datagen.networks`) holds about 700 anchored tasks; this module draws as
many more as wanted from the operator families of `datagen.workloads`, each parameter from
the values real networks use (resolutions and channel counts that shrink and grow together as
a CNN deepens, kernel sizes, strides, groups, batch sizes, sequence lengths, hidden sizes and
head dimensions of transformers, fused epilogues as relax makes them), and keeps a draw only if
one run of it is affordable to measure here (`MIN_FLOPS` to `MAX_FLOPS`).

The draws are deterministic in the seed, so a suite's keys are the same on every host and
in every session, and each generated workload is an ordinary registry workload (`from_key`
rebuilds it). Two suites come from here (`datagen workloads`):

- `generated`: about `GENERATED_COUNT` tasks (a family with few affordable shapes gives
  fewer) of the families the catalogue's networks have;
- `unseen-families`: `UNSEEN_PER_FAMILY` tasks of each of `UNSEEN_FAMILIES` (1-D, 3-D,
  dilated and transposed convolutions, and the LU, Cholesky and 3mm kernels), which no
  network task has: the `unseen-family` split tests on them.

A slice of any suite (`generated[0:500]`, see `datagen.suites`) collects part of it breadth
first.
"""

from __future__ import annotations

import functools
import math
import random

from datagen.workloads import UNSEEN_FAMILIES, Workload, _trim

GENERATED_COUNT = 4000
UNSEEN_PER_FAMILY = 24
GENERATED_SUITE = "generated"
UNSEEN_SUITE = "unseen-families"
NETWORK = "generated"
MIN_FLOPS = 2e5
MAX_FLOPS = 6e8

RESOLUTIONS = (7, 14, 28, 56, 112)
ODD_RESOLUTIONS = (8, 10, 12, 13, 16, 17, 19, 20, 24, 32, 35, 38, 48, 64, 71, 73, 96, 147)
CHANNELS = (16, 24, 32, 40, 48, 56, 64, 72, 80, 96, 112, 120, 128, 144, 160, 192, 224, 240,
            256, 288, 320, 336, 384, 432, 448, 480, 512, 576, 640, 672, 720, 768, 896, 960,
            1024, 1152, 1280, 1536, 2048)
HIDDEN = (128, 192, 256, 320, 384, 512, 640, 768, 1024, 1280, 1536, 2048, 2560, 3072, 4096)
HEAD_DIMS = (32, 64, 80, 96, 128)
HEADS = (2, 4, 6, 8, 12, 16)
SEQ_LENGTHS = (16, 32, 49, 50, 64, 77, 96, 128, 196, 197, 256, 384, 512)
BATCHES = (1, 1, 1, 1, 2, 4, 8, 16)

# family -> share of the `generated` suite, about as the network catalogue's tasks divide
SHARES = {"conv2d": 0.22, "conv2d_bias_relu": 0.14, "depthwise_conv2d": 0.08,
          "group_conv2d": 0.05, "pool2d": 0.05, "dense": 0.16, "dense_bias_gelu": 0.05,
          "batch_matmul": 0.10, "softmax": 0.07, "layer_norm": 0.08}


def _pick(rng: random.Random, values, p=None):
    return rng.choices(values, weights=p)[0] if p else values[rng.randrange(len(values))]


def _resolution(rng) -> int:
    return _pick(rng, RESOLUTIONS) if rng.random() < 0.75 else _pick(rng, ODD_RESOLUTIONS)


def _channels_at(rng, h: int) -> int:
    """A channel count for a feature map of side `h`: about 64 at 56, doubling as it halves,
    spread by a factor of about 2 either way."""
    centre = 64 * 56 / max(h, 1)
    target = centre * math.exp(rng.gauss(0, 0.7))
    nearest = min(CHANNELS, key=lambda c: abs(math.log(c / target)))
    return nearest


def _kernel(rng, sizes=(1, 3, 5, 7), p=(0.45, 0.42, 0.08, 0.05)) -> int:
    return _pick(rng, sizes, p)


def _conv(rng) -> tuple:
    h = _resolution(rng)
    w = h if rng.random() < 0.85 else _resolution(rng)
    ci = 3 if h >= 112 and rng.random() < 0.3 else _channels_at(rng, h)
    co = _channels_at(rng, h)
    k = _kernel(rng)
    stride = 2 if rng.random() < 0.2 and h > 7 else 1
    pad = k // 2 if rng.random() < 0.9 else 0
    return (h, w, ci, co, k, stride, pad, _pick(rng, BATCHES))


def _depthwise(rng) -> tuple:
    h = _resolution(rng)
    c = _channels_at(rng, h) * _pick(rng, (1, 1, 3, 6)) // 2 * 2
    k = _kernel(rng, (3, 5, 7), (0.7, 0.2, 0.1))
    stride = 2 if rng.random() < 0.25 and h > 7 else 1
    return (h, h, min(c, 2048), k, stride, k // 2, _pick(rng, BATCHES))


def _group(rng) -> tuple:
    h = _resolution(rng)
    groups = _pick(rng, (2, 4, 8, 16, 32, 64))
    c = max(groups, _channels_at(rng, h) // groups * groups)
    per_group = c // groups
    if per_group < 2:
        c = groups * 2
    stride = 2 if rng.random() < 0.2 and h > 7 else 1
    return (h, h, c, c, 3, stride, 1, groups, _pick(rng, BATCHES))


def _pool(rng) -> tuple:
    h = _resolution(rng)
    c = _channels_at(rng, h)
    kind = _pick(rng, ("max", "avg"))
    shape = rng.random()
    if shape < 0.25:  # global average pooling at a network's end
        return (h, h, c, h, 1, 0, "avg", _pick(rng, BATCHES))
    k = _pick(rng, (2, 3))
    stride = 2 if rng.random() < 0.8 else 1
    return (h, h, c, k, stride, k // 2 if k == 3 else 0, kind, _pick(rng, BATCHES))


def _tokens(rng) -> int:
    return _pick(rng, BATCHES) * _pick(rng, SEQ_LENGTHS)


def _dense(rng) -> tuple:
    m = _pick(rng, (1, 2, 4, 8, 16, 32)) if rng.random() < 0.2 else _tokens(rng)
    hidden = _pick(rng, HIDDEN)
    shape = rng.random()
    if shape < 0.3:  # an FFN's expansion or contraction
        n, k = (4 * hidden, hidden) if rng.random() < 0.5 else (hidden, 4 * hidden)
    elif shape < 0.45:  # fused QKV projection
        n, k = 3 * hidden, hidden
    elif shape < 0.55:  # a classifier head
        n, k = _pick(rng, (10, 100, 1000, 1001)), hidden
    else:
        n, k = hidden, _pick(rng, HIDDEN)
    return (m, min(n, 8192), min(k, 8192))


def _dense_gelu(rng) -> tuple:
    hidden = _pick(rng, HIDDEN[:11])
    return (_tokens(rng), 4 * hidden, hidden)


def _batch_matmul(rng) -> tuple:
    b = _pick(rng, (1, 1, 2, 4)) * _pick(rng, HEADS)
    seq = _pick(rng, SEQ_LENGTHS)
    head = _pick(rng, HEAD_DIMS)
    if rng.random() < 0.5:  # scores: Q . K^T
        return (b, seq, seq, head)
    return (b, seq, head, seq)  # context: P . V


def _softmax(rng) -> tuple:
    seq = _pick(rng, SEQ_LENGTHS)
    keys = seq if rng.random() < 0.7 else _pick(rng, SEQ_LENGTHS)  # cross-attention
    return (_pick(rng, (1, 2, 4, 8)) * _pick(rng, HEADS) * seq, keys)


def _layer_norm(rng) -> tuple:
    return (_tokens(rng), _pick(rng, HIDDEN[:12]))


def _conv1d(rng) -> tuple:
    k = _pick(rng, (1, 3, 5, 7, 9, 11))
    return (_pick(rng, (16, 32, 50, 64, 100, 128, 200, 256, 500, 512, 1024)),
            _pick(rng, CHANNELS[:24]), _pick(rng, CHANNELS[:24]), k,
            2 if rng.random() < 0.25 else 1, k // 2, _pick(rng, BATCHES))


def _conv3d(rng) -> tuple:
    h = _pick(rng, (7, 14, 16, 28, 32, 56))
    k = _pick(rng, (1, 3), (0.3, 0.7))
    return (_pick(rng, (4, 8, 16)), h, h, _pick(rng, CHANNELS[:15]), _pick(rng, CHANNELS[:15]),
            k, 2 if rng.random() < 0.2 else 1, k // 2, 1)


def _dilated(rng) -> tuple:
    h = _pick(rng, (14, 17, 28, 33, 56, 65))
    dilation = _pick(rng, (2, 3, 4, 6))
    return (h, h, _channels_at(rng, h), _channels_at(rng, h), 3, 1, dilation, dilation,
            _pick(rng, BATCHES[:5]))


def _transpose(rng) -> tuple:
    h = _pick(rng, (4, 7, 8, 14, 16, 28, 32))
    k, pad = _pick(rng, ((2, 0), (3, 1), (4, 1)))
    ci = _channels_at(rng, 2 * h)
    return (h, h, ci, max(16, ci // 2), k, 2, pad, _pick(rng, BATCHES[:5]))


def _square(rng) -> tuple:
    return (rng.randrange(72, 513, 8) if rng.random() < 0.5 else rng.randrange(72, 513),)


def _mm3(rng) -> tuple:
    sizes = (16, 20, 32, 40, 50, 60, 64, 70, 80, 96, 128, 180, 190, 200, 210, 220, 256)
    return tuple(_pick(rng, sizes) for _ in range(5))


DRAWS = {"conv2d": _conv, "conv2d_bias_relu": _conv, "depthwise_conv2d": _depthwise,
         "group_conv2d": _group, "pool2d": _pool, "dense": _dense,
         "dense_bias_gelu": _dense_gelu, "batch_matmul": _batch_matmul, "softmax": _softmax,
         "layer_norm": _layer_norm, "conv1d": _conv1d, "conv3d": _conv3d,
         "conv2d_dilated": _dilated, "conv2d_transpose": _transpose, "lu": _square,
         "cholesky": _square, "3mm": _mm3}


def flops(family: str, p: tuple) -> float:
    """Multiply-adds times two of one run, by formula (no TVM): the budget check of a draw."""
    def conv_out(size, k, stride, pad, dilation=1):
        return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1

    if family in ("conv2d", "conv2d_bias_relu", "group_conv2d", "conv2d_dilated"):
        h, w, ci, co, k, stride, pad = p[:7]
        dilation = p[7] if family == "conv2d_dilated" else 1
        groups = p[7] if family == "group_conv2d" else 1
        n = p[-1]
        return 2.0 * n * conv_out(h, k, stride, pad, dilation) * \
            conv_out(w, k, stride, pad, dilation) * co * k * k * ci / groups
    if family == "depthwise_conv2d":
        h, w, c, k, stride, pad, n = p
        return 2.0 * n * conv_out(h, k, stride, pad) * conv_out(w, k, stride, pad) * c * k * k
    if family == "pool2d":
        h, w, c, k, stride, pad, _, n = p
        return 1.0 * n * conv_out(h, k, stride, pad) * conv_out(w, k, stride, pad) * c * k * k
    if family in ("dense", "dense_bias_gelu"):
        return 2.0 * p[0] * p[1] * p[2]
    if family == "batch_matmul":
        return 2.0 * p[0] * p[1] * p[2] * p[3]
    if family in ("softmax", "layer_norm"):
        return 8.0 * p[0] * p[1]
    if family == "conv1d":
        length, ci, co, k, stride, pad, n = p
        return 2.0 * n * conv_out(length, k, stride, pad) * co * k * ci
    if family == "conv3d":
        d, h, w, ci, co, k, stride, pad, n = p
        return 2.0 * n * conv_out(d, k, stride, pad) * conv_out(h, k, stride, pad) * \
            conv_out(w, k, stride, pad) * co * k ** 3 * ci
    if family == "conv2d_transpose":
        h, w, ci, co, k, stride, pad, n = p
        return 2.0 * n * h * w * ci * co * k * k
    if family in ("lu", "cholesky"):  # the masked triangle is computed too
        return 2.0 * p[0] ** 3
    if family == "3mm":
        ni, nj, nk, nl, nm = p
        return 2.0 * (ni * nj * nk + nj * nl * nm + ni * nl * nj)
    raise KeyError(family)


def draw(family: str, count: int, seed: int, skip: set[str] | None = None) -> list[Workload]:
    """`count` distinct workloads of one family, deterministic in `seed`, within the budget,
    none of whose keys is in `skip`."""
    rng = random.Random(f"{seed}/{family}")
    seen = set(skip or ())
    out: list[Workload] = []
    for _ in range(50 * count):  # families with few realistic shapes give fewer than `count`
        if len(out) == count:
            break
        params = DRAWS[family](rng)
        if not MIN_FLOPS <= flops(family, params) <= MAX_FLOPS:
            continue
        w = Workload(family, _trim(family, params), network=NETWORK)
        if w.key not in seen:
            seen.add(w.key)
            out.append(w)
    return out


def mixed(count: int, seed: int, shares: dict[str, float] = SHARES) -> list[Workload]:
    """`count` workloads over the families of `shares`, in a shuffled (seeded) order, so that
    any prefix of the list holds every family in about its share."""
    total = sum(shares.values())
    counts = {f: int(round(count * s / total)) for f, s in shares.items()}
    counts[max(shares, key=shares.get)] += count - sum(counts.values())
    pool = [w for f, n in counts.items() for w in draw(f, n, seed)]
    random.Random(seed).shuffle(pool)
    return pool


@functools.lru_cache(maxsize=1)
def generated_suites() -> dict[str, list[Workload]]:
    """The two generated suites (see the module docstring)."""
    unseen = [w for f in UNSEEN_FAMILIES for w in draw(f, UNSEEN_PER_FAMILY, seed=1)]
    random.Random(1).shuffle(unseen)
    return {GENERATED_SUITE: mixed(GENERATED_COUNT, seed=0), UNSEEN_SUITE: unseen}
