# Exact memory formulas, pinned to hand-computed figures. Runs on every runtime (sizes past 2**30 included).
from kvedge import budget
from kvedge.config import CacheConfig
from _support import raises, message


def test_worked_example_7b_shape_is_one_gib():
    assert budget.kv_bytes(32, 32, 128, 2048, "f16") == 1073741824
    assert budget.kv_bytes(32, 32, 128, 2048, "f16", align=0) == 1073741824


def test_worked_example_16_layers_is_128_mib_not_67():
    n = budget.kv_bytes(16, 16, 64, 2048, "f16")
    assert n == 134217728
    d = budget.kv_bytes(16, 16, 64, 2048, "f16", detail=True)
    assert d["k"] == d["v"] == 67108864  # the source document's "67 MB" is K (or V) alone


def test_gqa_8_of_32_heads_is_exactly_4x_smaller_and_mqa_32x():
    mha = budget.kv_bytes(32, 32, 128, 2048, "f16")
    assert budget.kv_bytes(32, 8, 128, 2048, "f16") * 4 == mha
    assert budget.kv_bytes(32, 1, 128, 2048, "f16") * 32 == mha


def test_sizes_past_2_pow_30_are_exact():
    # 80 layers, 8 KV heads, head_dim 128, 32768 tokens, f16: 2*80*8*128*2*32768
    assert budget.kv_bytes(80, 8, 128, 32768, "f16") == 10737418240
    assert budget.kv_bytes(80, 8, 128, 32768, "f32") == 21474836480
    assert budget.kv_bytes(80, 8, 128, 32768, "f32") - 21474836479 == 1


def test_i8_scales_and_padding_hand_computed():
    # 2 layers x 2 KV heads x 10 tokens x (K,V): rows of 8 codes, one f16 scale each
    assert budget.kv_bytes(2, 2, 8, 10, "i8", align=0) == 640 + 160
    d = budget.kv_bytes(2, 2, 8, 10, "i8", align=64, detail=True)
    assert d["data"] == 5120 and d["meta"] == 160 and d["padding"] == 4480 and d["total"] == 5280


def test_i4_kivi_hand_computed():
    # 64 slots: codes 2*64*4 = 512; value scale+zero 64*4 = 256; key scale+zero per channel per group:
    # 2 groups * 8 channels * 4 = 64; sliding residual R = 32: R + G - 1 = 63 f32 rows of 32 bytes, K and V:
    # 2 * 63 * 32 = 4032
    assert budget.kv_bytes(1, 1, 8, 64, "i4", align=0, group=32) == 512 + 256 + 64 + 4032
    d = budget.kv_bytes(1, 1, 8, 64, "i4", align=0, group=32, detail=True)
    assert d["residual"] == 4032 and d["meta"] == 320 and d["data"] == 512
    # a 4-token f32 prefix adds 2 * 4 * 32 = 256
    assert budget.kv_bytes(1, 1, 8, 68, "i4", align=0, group=32, prefix=4) == 4864 + 256
    # R = 64 (two groups): 95 rows; group 8 with R = 16: 23 rows and 8 key groups of 8 channels
    assert budget.kv_bytes(1, 1, 8, 128, "i4", align=0, group=32, residual=64) == 1024 + 512 + 128 + 2 * 95 * 32
    assert budget.kv_bytes(1, 1, 8, 64, "i4", align=0, group=8, residual=16) == 512 + 256 + 256 + 2 * 23 * 32
    # padded to 64 bytes: each residual row takes 64 (2 layers, 3 KV heads: 6 pairs)
    d = budget.kv_bytes(2, 3, 8, 64, "i4", align=64, group=32, detail=True)
    assert d["residual"] == 6 * 2 * 63 * 64 and d["padding"] == 6 * 2 * (64 * 60 + 63 * 32)
    # a cache of fewer slots than R + G - 1 after the prefix: its residual ring holds every slot (32 + 4 here)
    d = budget.kv_bytes(1, 1, 8, 36, "i4", align=0, group=32, prefix=4, detail=True)
    assert d["residual"] == 2 * 32 * 32 and d["prefix"] == 2 * 4 * 32
    assert budget.kv_bytes(1, 1, 8, 64, "i4", align=0, group=32, residual=64) == 512 + 256 + 64 + 2 * 64 * 32
    # naive per-token keys: no residual, both K and V carry a scale+zero per row
    assert budget.kv_bytes(1, 1, 8, 64, "i4", align=0, group=32, residual=0) == 512 + 256 + 256


def test_i2_kivi_hand_computed():
    # 64 slots of head_dim 8: codes 2*64*2 = 256 (four per byte); value scale+zero 64*4 = 256; key scale+zero per
    # channel per group 2*8*4 = 64; residual R = 32: 63 f32 rows of 32 bytes, K and V: 4032
    assert budget.kv_bytes(1, 1, 8, 64, "i2", align=0, group=32) == 256 + 256 + 64 + 4032
    # per-token keys: a scale+zero per row for K too, no residual
    assert budget.kv_bytes(1, 1, 8, 64, "i2", align=0, group=32, residual=0) == 256 + 256 + 256
    # padded rows: a 2-byte row takes 16 with align 16
    d = budget.kv_bytes(1, 1, 8, 64, "i2", align=16, group=32, residual=0, detail=True)
    assert d["data"] == 2 * 64 * 16 and d["padding"] == 2 * 64 * 14
    raises(ValueError, budget.row_bytes, 6, "i2")


def test_padding_is_reported_separately():
    d = budget.kv_bytes(1, 1, 8, 1, "f32", align=64, detail=True)
    assert d["total"] == 128 and d["padding"] == 64
    d = budget.kv_bytes(1, 1, 8, 1, "f32", align=1, detail=True)
    assert d["total"] == 64 and d["padding"] == 0
    assert budget.padded_row_bytes(100, "f16", 64) == 256
    assert budget.padded_row_bytes(100, "f16", 0) == 200


def test_llama_cpp_block_types():
    # q8_0: 34 bytes per 32 values, q4_0: 18 bytes per 32 values (llama.cpp's block sizes)
    assert budget.row_bytes(128, "q8_0") == 136
    assert budget.row_bytes(128, "q4_0") == 72
    assert budget.kv_bytes(22, 4, 64, 2048, "q8_0", align=0) == 2 * 22 * 4 * 2048 * 68


def test_kv_bytes_per_token():
    assert budget.kv_bytes_per_token(5, 4, 8, "f32", align=0) == 2 * 5 * 4 * 32
    assert budget.kv_bytes_per_token(5, 4, 8, "i8", align=0) == 2 * 5 * 4 * (8 + 2)
    raises(ValueError, budget.kv_bytes_per_token, 5, 4, 8, "i4")


def test_max_tokens_for_budget():
    assert budget.max_tokens_for_budget(1000, 1, 1, 8, "f16", align=0) == 31
    assert budget.max_tokens_for_budget(1000, 1, 1, 8, "f16", align=64) == 7
    assert budget.max_tokens_for_budget(10, 1, 1, 8, "f16", align=0) == 0
    # i4 KIVI rounds to whole groups; the answer fits and one more group would not
    t = budget.max_tokens_for_budget(5000, 1, 1, 8, "i4", align=0, group=32)
    assert t % 32 == 0
    assert budget.kv_bytes(1, 1, 8, t, "i4", align=0) <= 5000 < budget.kv_bytes(1, 1, 8, t + 32, "i4", align=0)


def test_stories260k_full_context_f32():
    # 5 layers, 4 KV heads, head_dim 8, 512 tokens, f32, no padding: docs/planning.md's 655,360 bytes
    assert budget.kv_bytes(5, 4, 8, 512, "f32", align=0) == 655360


def test_deployment_total_parts():
    d = budget.deployment_bytes(100, 200, 30, 4)
    assert d == {"weights": 100, "kv": 200, "activations": 30, "workspace": 4, "total": 334}
    p = budget.llama_params(64, 172, 5, 8, 4, 512)
    # stories260K: 512*64 embedding; per layer wq 64*64, wk+wv 2*32*64, wo 64*64, w1,w2,w3 3*64*172
    assert p["embedding"] == 32768
    assert p["matrices"] == 5 * (4096 + 4096 + 4096 + 33024)
    assert p["norms"] == 5 * 128 + 64
    assert budget.weights_bytes(p, "f32") == 4 * (32768 + 5 * 45312) + 4 * 704


def test_cache_config_size_matches_formula():
    c = CacheConfig(5, 8, 4, 8, 512, "f32", align=0)
    assert c.nbytes() == 655360 and c.slots == 512 and c.group_size == 2
    w = CacheConfig(5, 8, 4, 8, 512, "i8", window=64, sinks=4, align=64)
    assert w.slots == 68
    assert w.nbytes() == budget.kv_bytes(5, 4, 8, 68, "i8", 64)


def _bad(msg_part, **kw):
    args = dict(layers=2, heads=4, kv_heads=2, head_dim=8, max_tokens=64)
    args.update(kw)
    e = raises(ValueError, CacheConfig, **args)
    assert msg_part in message(e), (msg_part, message(e))


def test_bad_configs_name_field_and_value():
    _bad("layers must be a positive integer, got 0", layers=0)
    _bad("head_dim must be a positive integer, got -8", head_dim=-8)
    _bad("max_tokens must be an integer, got 1.5", max_tokens=1.5)
    _bad("layers must be an integer, got True", layers=True)
    _bad("heads (6) must be a multiple of kv_heads (4)", heads=6, kv_heads=4)
    _bad("heads (2) must be a multiple of kv_heads (4)", heads=2, kv_heads=4)
    _bad("dtype must be one of f32, f16, i8, i4, i2, got 'f8'", dtype="f8")
    _bad("max_tokens is absurdly large: 1000000000", max_tokens=1000000000)
    _bad("align must be 0, 1 or a power of two, got 48", align=48)
    _bad("sinks + window (80) must be <= max_tokens (64)", window=76, sinks=4)
    _bad("sinks (4) need a window", sinks=4)
    _bad("prefix (8) must be <= sinks (4)", window=32, sinks=4, prefix=8)
    _bad("head_dim must be even for i4", dtype="i4", head_dim=7)
    _bad("window (48) must be a multiple of group (32)", dtype="i4", window=48, sinks=0)
    _bad("residual applies to i4 and i2 only", dtype="i8", residual=4)
    _bad("head_dim must be a multiple of 4 for i2", dtype="i2", head_dim=6)
    _bad("window (48) must be >= residual + group (64) for i2", dtype="i2", window=48, group=16, residual=48)
    _bad("residual must be 0 or a multiple of group (32) for i4, got 48", dtype="i4", residual=48)
    _bad("window (64) must be >= residual + group (96) for i4", dtype="i4", residual=64, window=64)
    e = raises(ValueError, CacheConfig.from_dict, {"layer": 2})
    assert "unknown cache config field 'layer'" in message(e)
    e = raises(ValueError, CacheConfig.from_dict, {"layers": 2})
    assert "missing 'heads'" in message(e)


def test_config_round_trips_through_dict():
    c = CacheConfig(2, 4, 2, 8, 64, "i4", window=64, sinks=0, group=32, align=0)
    assert CacheConfig.from_dict(c.to_dict()) == c
    assert c.residual == 32
