import json
import math

import numpy as np
import pytest

from costmodel.trace_features import (NUM_TRACE_FEATURES, TRACE_FEATURE_NAMES, TRACE_KINDS,
                                      TRACE_VALUES, TraceError, kind_id, trace_tokens)

F = {name: i for i, name in enumerate(TRACE_FEATURE_NAMES)}


def log(v):
    return math.log2(1 + v)


# a dense block's loops split by a sampled tile, an unroll chosen among candidates, postprocessing
TRACE = json.dumps([[
    ["GetSBlock", [], ["C", "main"], ["b0"]],
    ["GetLoops", ["b0"], [], ["l1", "l2", "l3"]],
    ["SamplePerfectTile", ["l2"], [2, 64], ["v4", "v5"]],
    ["Split", ["l2", "v4", "v5"], [True, False], ["l6", "l7"]],
    ["SampleCategorical", [], [[0, 16, 64], [0.3, 0.3, 0.4]], ["v8"]],
    ["Annotate", ["b0", "v8"], ["meta_schedule.unroll_explicit"], []],
    ["EnterPostproc", [], [], []],
    ["Annotate", ["l6", 512], ["pragma_auto_unroll_max_step"], []],
], [[2, [8, 4]], [4, 2]]])


def test_tokens_by_hand():
    kinds, x = trace_tokens(TRACE)
    assert kinds.dtype == np.int64 and x.dtype == np.float32
    assert x.shape == (9, NUM_TRACE_FEATURES) and NUM_TRACE_FEATURES == 7 + TRACE_VALUES
    assert kinds[0] == 0 and not x[0].any()  # the start token
    assert kinds[1] == kind_id("GetSBlock") and kinds[4] == kind_id("Split")
    assert kinds[6] == kind_id("Annotate:meta_schedule.unroll_explicit") != kind_id("Annotate")
    assert all(1 <= k < TRACE_KINDS for k in kinds[1:])
    tile, split, category, unroll, pragma = x[3], x[4], x[5], x[6], x[8]
    # the tile's decision, then its attributes; it works on the second loop of its block
    np.testing.assert_allclose(tile[F["value_0"]:F["value_0"] + 4], [log(8), log(4), log(2),
                                                                     log(64)], rtol=1e-6)
    assert tile[F["loop_index"]] == pytest.approx(log(2))
    # the split reads the decided factors: their product is the loop's extent
    assert split[F["log_input_product"]] == pytest.approx(log(32))
    np.testing.assert_allclose(split[F["value_0"]:F["value_0"] + 4],
                               [log(8), log(4), log(1), 0], rtol=1e-6)
    assert split[F["log_inputs"]] == pytest.approx(log(3))
    assert split[F["log_outputs"]] == pytest.approx(log(2))
    # the categorical's chosen candidate (index 2: 64), not its candidate list
    assert category[F["value_0"]] == pytest.approx(log(64)) and category[F["value_1"]] == 0
    assert category[F["log_values"]] == pytest.approx(log(1))
    assert unroll[F["value_0"]] == pytest.approx(log(64))  # bound through v8
    assert unroll[F["postproc"]] == 0 and pragma[F["postproc"]] == 1
    assert pragma[F["value_0"]] == pytest.approx(log(512))
    np.testing.assert_allclose(x[1:, F["position"]], np.arange(1, 9) / 8)


def test_kind_ids_are_stable():
    """CRC-32 buckets: the same in every process and version (checkpoints depend on them)."""
    import zlib

    assert kind_id("Split") == 1 + zlib.crc32(b"Split") % (TRACE_KINDS - 1)
    assert kind_id("Split") != kind_id("Fuse")


@pytest.mark.parametrize("text", ["{", "[1, 2]", json.dumps([[["Split"]], []]), "null"])
def test_what_is_no_trace_is_refused(text):
    with pytest.raises(TraceError, match="not a MetaSchedule trace"):
        trace_tokens(text)
