"""The convention for files that live beside a checkpoint `NAME.ckpt`: a tree model fitted on
exactly its training records, `NAME.xgb.npz` (MetaSchedule's XGBModel, `ms-xgb-pretrained`'s
model and a part of bo's prior; blended into the network's predictions once it holds a blend
weight), `NAME.lgb.npz` (TenSet's LightGBM) and `NAME.mlp.npz` (TenSet's MLP), each blended into
the network's predictions when its file holds a blend weight (several at once with a share
each).

Each file is a NumPy archive of plain arrays (loaded with `allow_pickle=False`; nothing in it
runs), and names what it was fitted on with `fingerprint`, so a file of other records is never
used. Large text or byte payloads (a booster, a feature matrix) are stored LZMA-compressed with
`pack`: a tree model's text shrinks about four times more than the archive's own deflate does.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os

import numpy as np

XGB_SUFFIX = ".xgb.npz"
LIGHTGBM_SUFFIX = ".lgb.npz"
MLP_SUFFIX = ".mlp.npz"
MAX_UNPACKED_BYTES = 1 << 31  # no companion comes near this: a larger payload is refused


def beside(checkpoint_path: str, suffix: str) -> str:
    """Where the file with `suffix` of a checkpoint file lives next to it."""
    return os.path.splitext(checkpoint_path)[0] + suffix


def fingerprint(meta: dict, **versions: str) -> str:
    """What a model fitted on the training records of a checkpoint with description `meta`
    was fitted on: its training workloads, its target, the joint datasets' records that
    trained beside them (where there are any) and the `versions` of what the model reads (a
    feature extractor's, TVM's)."""
    from costmodel.splits import joint_entries

    joint = joint_entries(meta)
    text = json.dumps({"train": sorted(meta["sides"]["train"]), "target": meta["target"],
                       **({"joint": [[j["dataset"], j["share"], j["records"]] for j in joint]}
                          if joint else {}), **versions}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()


# an array of 4-byte numbers (a feature matrix, its row indices): LZMA2 told that its values are
# 4 bytes wide (positions aligned to them, no literal context), at the slowest preset: written
# once by `costmodel blend`, read by every install, and 9% smaller than preset 6 on a CPU
# model's per-store features
_FOUR_BYTE_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME,
                       "lc": 0, "lp": 2, "pb": 2}]


# the same for 2-byte numbers (a network's float16 weights): 4% smaller than preset 9 alone
_TWO_BYTE_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME,
                      "lc": 0, "lp": 1, "pb": 1}]


def pack(data: bytes | np.ndarray) -> np.ndarray:
    """`data` (bytes, or an array's raw bytes) LZMA-compressed, as a uint8 array to store."""
    if isinstance(data, np.ndarray) and data.dtype.itemsize in (2, 4):
        filters = _FOUR_BYTE_FILTERS if data.dtype.itemsize == 4 else _TWO_BYTE_FILTERS
        packed = lzma.compress(data.tobytes(), format=lzma.FORMAT_XZ, filters=filters)
    else:
        raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        packed = lzma.compress(raw, preset=6)
    return np.frombuffer(packed, dtype=np.uint8)


def unpack(array: np.ndarray) -> bytes:
    """The bytes `pack` stored.

    Raises:
        ValueError: the array is not an LZMA stream or unpacks to more than
            MAX_UNPACKED_BYTES.
    """
    decoder = lzma.LZMADecompressor()
    try:
        out = decoder.decompress(np.asarray(array, dtype=np.uint8).tobytes(),
                                 max_length=MAX_UNPACKED_BYTES)
    except lzma.LZMAError as err:
        raise ValueError(f"not a packed payload ({err})") from None
    if not decoder.eof:
        raise ValueError("a packed payload that is truncated or too large")
    return out
