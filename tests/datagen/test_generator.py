"""The task generator, the families no network has, optional parameters and bad shapes."""

import collections

import pytest

from datagen.errors import UserError
from datagen.generator import (GENERATED_COUNT, GENERATED_SUITE, MAX_FLOPS, MIN_FLOPS, SHARES,
                               UNSEEN_PER_FAMILY, UNSEEN_SUITE, draw, flops, generated_suites)
from datagen.suites import resolve
from datagen.workloads import FAMILIES, UNSEEN_FAMILIES, Workload, check_shape, from_key


def test_generated_suites_are_large_distinct_and_deterministic():
    suites = generated_suites()
    gen, unseen = suites[GENERATED_SUITE], suites[UNSEEN_SUITE]
    # a family with few affordable realistic shapes (dense_bias_gelu) gives a few less
    assert 0.99 * GENERATED_COUNT <= len(gen) <= GENERATED_COUNT
    assert len({w.key for w in gen}) == len(gen)
    assert {w.family for w in gen} == set(SHARES)
    assert {w.family for w in unseen} == set(UNSEEN_FAMILIES)
    assert collections.Counter(w.family for w in unseen) == {
        f: UNSEEN_PER_FAMILY for f in UNSEEN_FAMILIES}
    assert not {w.key for w in gen} & {w.key for w in unseen}
    # the same draws in a new process: the keys are the seed's, not the session's
    generated_suites.cache_clear()
    assert [w.key for w in generated_suites()[GENERATED_SUITE]] == [w.key for w in gen]
    # a prefix holds every family (the suite is shuffled), so a slice collects all of them
    assert {w.family for w in gen[:200]} == set(SHARES)


def test_draws_stay_within_the_budget_and_vary_the_shapes():
    convs = draw("conv2d", 300, seed=3)
    assert all(MIN_FLOPS <= flops("conv2d", w.params + (1,) * (8 - len(w.params)))
               <= MAX_FLOPS for w in convs)
    assert len({w.params[4] for w in convs}) >= 3  # kernel sizes
    assert len({w.params[0] for w in convs}) >= 8  # resolutions
    assert {1, 2} <= {w.params[5] for w in convs}  # strides
    assert any(len(w.params) == 8 for w in convs)  # batch sizes above 1
    assert draw("conv2d", 50, seed=3) == convs[:50]


def test_formula_flops_match_tvms_count():
    for key in ["conv2d/h14_w14_ci32_co64_k3_stride2_pad1_n2", "dense/m64_n96_k128",
                "batch_matmul/b4_m32_n16_k64", "depthwise_conv2d/h28_w28_c32_k5_stride1_pad2",
                "conv1d/l64_ci16_co32_k3_stride1_pad1", "3mm/ni16_nj20_nk24_nl28_nm32",
                "conv3d/d4_h8_w8_ci8_co16_k3_stride1_pad1",
                "conv2d_dilated/h16_w16_ci8_co8_k3_stride1_pad2_dilation2", "lu/n40"]:
        w = from_key(key)
        names = FAMILIES[w.family][1]
        full = w.params + (1,) * (len(names) - len(w.params))
        assert flops(w.family, full) == pytest.approx(w.flops(), rel=0.02), key


def test_every_generated_workload_builds():
    for w in generated_suites()[UNSEEN_SUITE] + generated_suites()[GENERATED_SUITE][:300]:
        check_shape(w.family, w.params)


def test_new_families_compute_what_they_say():
    import numpy as np
    import tvm

    rng = np.random.default_rng(0)
    n = 12
    factors = rng.standard_normal((n, n)).astype("float32")
    for family, expected in (
            ("lu", (np.tril(factors, -1) + np.eye(n)) @ np.triu(factors)),
            ("cholesky", np.tril(factors) @ np.tril(factors).T)):
        lib = tvm.compile(Workload(family, (n,)).mod, target="llvm")
        out = tvm.runtime.tensor(np.zeros((n, n), "float32"))
        lib["main"](tvm.runtime.tensor(factors), out)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)
    a, b, c, d = (rng.standard_normal(s).astype("float32") for s in
                  [(4, 6), (6, 5), (5, 7), (7, 3)])
    lib = tvm.compile(Workload("3mm", (4, 5, 6, 3, 7)).mod, target="llvm")
    out = tvm.runtime.tensor(np.zeros((4, 3), "float32"))
    lib["main"](*(tvm.runtime.tensor(x) for x in (a, b, c, d)), out)
    np.testing.assert_allclose(out.numpy(), (a @ b) @ (c @ d), rtol=1e-4, atol=1e-4)


def test_optional_batch_keeps_the_old_keys():
    assert Workload("conv2d", (56, 56, 64, 64, 3, 1, 1, 1)).key == \
        "conv2d/h56_w56_ci64_co64_k3_stride1_pad1"
    batched = from_key("conv2d/h56_w56_ci64_co64_k3_stride1_pad1_n4")
    assert batched.params[-1] == 4
    assert "T.Buffer((4, 56, 56, 64)" in batched.mod.script()


@pytest.mark.parametrize("key, says", [
    ("dense/m0_n128_k128", "m must be an integer of at least 1"),
    ("conv2d/h7_w7_ci8_co8_k9_stride1_pad0", "TVM cannot build these shapes"),
    ("pool2d/h8_w8_c4_k2_stride2_pad0_kindmin", "kind must be one of avg, max"),
    ("group_conv2d/h8_w8_ci8_co8_k3_stride1_pad1_groups3", "groups (3) must divide"),
    ("pool2d/h4_w4_c4_k9_stride1_pad0_kindmax", "empty"),
])
def test_shapes_no_program_has_are_one_line(key, says):
    with pytest.raises(UserError) as err:
        resolve([key])
    assert says in str(err.value) and "\n" not in str(err.value)


def test_suite_slices():
    gen = generated_suites()[GENERATED_SUITE]
    assert [w.key for w in resolve(["generated[10:14]"])] == [w.key for w in gen[10:14]]
    assert len(resolve(["unseen-families[:5]"])) == 5
    with pytest.raises(UserError, match="empty slice"):
        resolve(["tiny[7:9]"])
    with pytest.raises(UserError, match="unknown suite"):
        resolve(["generatd[0:3]"])


def test_collect_names_the_cpus_own_folder():
    from datagen.cli import default_dataset
    from datagen.tvm_env import host_cpu, make_target

    assert default_dataset(make_target(None)) == f"data/llvm-{host_cpu()}"
    assert default_dataset(make_target('{"kind": "llvm", "mcpu": "znver4"}')) == \
        "data/llvm-znver4"
