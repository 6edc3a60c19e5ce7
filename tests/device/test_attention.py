# Tiled online-softmax attention, float path, against a naive full-softmax reference (plain Python, every
# runtime); the integer path is in test_attention_int.py.
import gc

from kvedge.compat import zeros
from kvedge.attention import Attention, quantize_query
from kvedge.cache import KVCache
from kvedge.config import CacheConfig
from _support import raises, message, preload_floats
from _attref import CASES, reference, rel_err, cosine, _case, _int_step
preload_floats()  # f32 rows' conversion (att_conv_f32): loaded early, not mid-file in a fragmented heap


def _float_case(dtype, case, seed):
    """(relative error, cosine) of the float path on one case; everything it built is freed on return."""
    cfg, c, K, V, live, q, att = _case(dtype, case, seed)
    out = zeros("f", (cfg.heads * cfg.head_dim))
    att.step(0, q, out)
    want = reference(cfg, K, V, live, 0, q)
    return rel_err(out, want), cosine(out, want)


def test_float_path_f32_matches_reference_for_every_gqa_ratio():
    for i, case in enumerate(CASES):
        err = _float_case("f32", case, 10 + i)[0]
        assert err <= 1e-5, (case, err)
        gc.collect()


def test_float_path_f16_within_half_rounding():
    for i, case in enumerate(CASES[:4]):
        # K and V are rounded to 11 significant bits: the output moves by about that much, not more
        err = _float_case("f16", case, 20 + i)[0]
        assert err <= 4e-3, (case, err)
        gc.collect()


def test_float_path_on_i8_i4_and_i2_caches():
    for i, case in enumerate(CASES):
        for dtype, bound in (("i8", 0.999), ("i4", 0.99), ("i2", 0.9)):
            cs = _float_case(dtype, case, 30 + i)[1]
            assert cs >= bound, (dtype, case, cs)
            gc.collect()


def test_wrong_head_mapping_is_caught():
    # trap 1 (docs/architecture.md): the same check, with the reference using h % kv_heads, not h // group, must fail
    cfg, c, K, V, live, q, att = _case("f32", (8, 2, 8, 30, 0, 0), 50)
    out = zeros("f", (cfg.heads * cfg.head_dim))
    att.step(0, q, out)
    assert rel_err(out, reference(cfg, K, V, live, 0, q)) <= 1e-5
    wrong = reference(cfg, K, V, live, 0, q, mapping=lambda h: h % cfg.kv_heads)
    assert rel_err(out, wrong) > 0.05
    assert [att.kv_head(h) for h in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_tile_size_does_not_change_the_result():
    # one cache, read with every tile size: only the tiling changes between the runs
    cfg, c, K, V, live, q, att = _case("i8", (4, 2, 16, 50, 24, 2), 60, 1)
    first = zeros("f", 64)
    att.step(0, q, first)
    got = zeros("f", 64)
    for tile in (64, 8, 3, 1):  # the largest scratch first, while the heap has its largest block
        att = None
        gc.collect()
        att = Attention(c, tile=tile)
        out = _int_step(att, cfg, q)[0]
        assert cosine(out, reference(cfg, K, V, live, 0, q)) >= 0.999, tile
        att.step(0, q, got)
        assert rel_err(got, first) <= 1e-5, tile


def test_scores_report_probabilities():
    cfg, c, K, V, live, q, att = _case("i8", (4, 2, 8, 20, 0, 0), 70)
    sf = zeros("i", cfg.slots)
    si = zeros("i", cfg.slots)
    out = zeros("f", 32)
    att.step(0, q, out, scores=sf)
    n = 32
    qc, qs, oq, oe = zeros("b", n), zeros("H", 4), zeros("i", n), zeros("i", 4)
    quantize_query(q, qc, qs, 4)
    att.q8_step(0, qc, qs, oq, oe, si, None, -1)  # the core: these rows run past step_q8's Q8_RANGE
    # each query head's probabilities sum to 1 (Q16), so four heads sum to 4
    assert abs(sum(sf) - 4 * 65536) <= 4 * len(live)
    assert abs(sum(si) - 4 * 65536) <= 4 * 65536 // 200
    for s in range(cfg.slots):
        assert abs(sf[s] - si[s]) <= 65536 // 50, (s, sf[s], si[s])


def test_attention_bad_input():
    cfg, c, K, V, live, q, att = _case("f32", (4, 2, 8, 5, 0, 0), 80)
    e = raises(ValueError, att.step, 0, zeros("f", 31), zeros("f", 32))
    assert "q has 31 values, expected 32" in message(e)
    e = raises(IndexError, att.step, 1, q, zeros("f", 32))
    assert "layer 1 out of range" in message(e)
    e = raises(ValueError, att.step_q8, 0, zeros("b", 32), zeros("H", 4), zeros("i", 32),
               zeros("i", 4))
    assert "integer path needs an i8, i4 or i2 cache" in message(e)
    empty = Attention(KVCache(CacheConfig(1, 4, 2, 8, 4, "f32", align=0)))
    e = raises(ValueError, empty.step, 0, q, zeros("f", 32))
    assert "no cached tokens" in message(e)
    e = raises(ValueError, Attention, c, 0)
    assert "tile must be 1..64" in message(e)
