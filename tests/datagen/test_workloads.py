import json

import pytest

from datagen.errors import UserError
from datagen.suites import get_suite, resolve
from datagen.workloads import FAMILIES, SUITES, UNSEEN_FAMILIES, Workload, from_key


def test_registry_covers_families_and_networks():
    full = get_suite("full")
    assert len(FAMILIES) >= 8
    assert {w.family for w in full} == set(FAMILIES) - set(UNSEEN_FAMILIES) - {"dense_bias_gelu"}
    assert {"resnet50", "mobilenetv2", "bert-base"} <= {w.network for w in full}
    assert len({w.key for w in full}) == len(full) >= 40


def test_key_is_stable_and_rebuilds_the_same_program():
    import tvm

    w = Workload("dense", (128, 768, 768))
    assert w.key == "dense/m128_n768_k768"
    assert json.loads(w.params_json) == {"m": 128, "n": 768, "k": 768}
    again = from_key(w.key)
    assert again.key == w.key
    tvm.ir.assert_structural_equal(again.mod, w.mod)
    # the stored definition alone gives the PrimFunc back
    tvm.ir.assert_structural_equal(tvm.ir.load_json(w.definition()), w.mod)


def test_string_parameters_round_trip():
    w = from_key("pool2d/h7_w7_c2048_k7_stride1_pad0_kindavg")
    assert w.params == (7, 7, 2048, 7, 1, 0, "avg")


def test_resolve_mixes_suites_and_keys_without_duplicates():
    tiny = SUITES["tiny"]
    got = resolve(["tiny", tiny[0].key, "dense/m8_n8_k8"])
    assert [w.key for w in got] == [w.key for w in tiny] + ["dense/m8_n8_k8"]


def test_unknown_names_get_a_suggestion():
    with pytest.raises(UserError, match="did you mean 'resnet50'"):
        resolve(["resnet5"])
    with pytest.raises(UserError, match="unknown workload family"):
        from_key("convolution/h1")


def test_flops_of_a_dense():
    assert Workload("dense", (4, 8, 16)).flops() == pytest.approx(2 * 4 * 8 * 16)


def test_cli_lists_suites_and_workloads(capsys):
    from datagen.cli import main

    assert main(["workloads"]) == 0
    listing = capsys.readouterr().out
    assert "full\t" in listing and "tiny\t" in listing
    assert "net-resnet50\t" in listing and "networks-anchored\t" in listing
    assert main(["workloads", "bert-base"]) == 0
    assert "dense/m128_n768_k768\tdense\tbert-base\tweight=48" in capsys.readouterr().out
    assert main(["workloads", "nosuch"]) == 2
    assert "unknown suite 'nosuch'" in capsys.readouterr().err


def test_collection_goes_breadth_first_whatever_was_collected_before():
    """A restarted collection continues with the least-collected workload, not the first."""
    from datagen.collect import WorkloadState, next_workload
    from datagen.suites import get_suite

    a, b, c = get_suite("tiny")
    order = {w.key: i for i, w in enumerate((a, b, c))}
    states = {a.key: WorkloadState(count=32), b.key: WorkloadState(count=16),
              c.key: WorkloadState(count=16)}
    assert next_workload([a, b, c], states, order) is b
    states[b.key].count = 32
    assert next_workload([a, b, c], states, order) is c
    states[c.key].count = 32
    assert next_workload([a, b, c], states, order) is a
