# Per-layer sliding windows and batches in the exact budget formulas, pinned to hand-computed figures.
# Runs on every runtime (figures past 2**30 included: they must stay exact on 31-bit small-int boards).
from kvedge import budget
from _support import raises, message

GEMMA2_2B = [4096, 0] * 13  # 26 layers, even layers local (sliding window 4096), odd layers global


def test_layer_tokens_is_min_of_window_and_context():
    assert budget.layer_tokens(100, 0) == 100
    assert budget.layer_tokens(100, 32) == 32
    assert budget.layer_tokens(20, 32) == 20


def test_gemma2_alternating_layers_hand_computed():
    # f16, 4 KV heads x head_dim 256: one layer costs 2 * 4 * 256 * 2 = 4096 bytes per token
    # at 8192 tokens: 13 global layers hold 8192 tokens, 13 local layers hold 4096
    n = budget.kv_bytes_layers(GEMMA2_2B, 4, 256, 8192, "f16", align=0)
    assert n == 13 * 4096 * 8192 + 13 * 4096 * 4096 == 654311424
    # below the window every layer holds the whole context
    assert budget.kv_bytes_layers(GEMMA2_2B, 4, 256, 2048, "f16", align=0) == 26 * 4096 * 2048


def test_mistral_every_layer_windowed_stops_growing():
    w = [4096] * 32  # Mistral-7B v0.1: 32 layers, 8 KV heads, head_dim 128, window 4096
    at_window = budget.kv_bytes_layers(w, 8, 128, 4096, "f16", align=0)
    assert at_window == 536870912  # 512 MiB
    assert budget.kv_bytes_layers(w, 8, 128, 32768, "f16", align=0) == at_window
    # no window: the same as the single-cache formula
    assert budget.kv_bytes_layers([0] * 32, 8, 128, 32768, "f16", 0) == budget.kv_bytes(32, 8, 128, 32768, "f16", 0)


def test_batch_multiplies_every_part_and_stays_exact_past_2_pow_30():
    one = budget.kv_bytes_layers([0] * 32, 8, 128, 32768, "f16", align=0, detail=True)
    four = budget.kv_bytes_layers([0] * 32, 8, 128, 32768, "f16", align=0, batch=4, detail=True)
    assert one["total"] == 4294967296
    assert four["total"] == 17179869184
    assert four["total"] - 17179869183 == 1
    assert four["k"] == four["v"] == 8589934592
    for k in one:
        assert four[k] == 4 * one[k], k


def test_detail_sums_padding_and_scales_over_layer_groups():
    # 2 layers, 1 KV head, head_dim 8, i8, align 64, context 10; layer 1 has a window of 4
    d = budget.kv_bytes_layers([0, 4], 1, 8, 10, "i8", align=64, detail=True)
    # rows: 8 code bytes padded to 64, one 2-byte scale each; K and V; 10 + 4 token slots
    assert d["data"] == 2 * 14 * 64
    assert d["meta"] == 2 * 14 * 2
    assert d["padding"] == 2 * 14 * 56
    assert d["total"] == 1792 + 56 == d["k"] + d["v"]


def test_prefix_in_a_window_layer_is_capped_by_its_tokens():
    # f32 prefix rows: global layer keeps 6 prefix + 4 others; window-3 layer keeps min(6, 3) = 3 prefix rows
    n = budget.kv_bytes_layers([0, 3], 1, 8, 10, "f16", align=0, prefix=6)
    assert n == 2 * (6 * 32 + 4 * 16) + 2 * (3 * 32)


def test_max_context_for_budget_hand_computed():
    # one global layer and one window-4 layer, f16 head_dim 8: 32 bytes per token per layer (K and V)
    # need(t) = 32 t + 32 min(t, 4); 1000 bytes -> 27 tokens (992), 28 would need 1024
    assert budget.max_context_for_budget(1000, [0, 4], 1, 8, "f16", align=0) == 27
    assert budget.kv_bytes_layers([0, 4], 1, 8, 27, "f16", 0) == 992
    # every layer windowed: the cache stops at 2 * 32 * 4 = 256 bytes, so any context fits 256 bytes
    assert budget.max_context_for_budget(256, [4, 4], 1, 8, "f16", align=0, limit=5000) == 5000
    assert budget.max_context_for_budget(255, [4, 4], 1, 8, "f16", align=0, limit=5000) == 3
    # batch 2 halves what fits
    assert budget.max_context_for_budget(1024, [0], 1, 8, "f16", align=0, batch=2) == 16
    assert budget.max_context_for_budget(10, [0], 1, 8, "f16", align=0) == 0


def test_max_context_i4_whole_groups():
    t = budget.max_context_for_budget(5000, [0], 1, 8, "i4", align=0, group=32)
    assert t % 32 == 0 and t > 0
    assert budget.kv_bytes_layers([0], 1, 8, t, "i4", 0) <= 5000 < budget.kv_bytes_layers([0], 1, 8, t + 32, "i4", 0)


def test_kv_bytes_growth():
    assert budget.kv_bytes_growth(5, 4, 8, 10, "f16", align=0) == 10 * 2 * 5 * 4 * 16
    # i4, one group of 32 tokens: codes 2*32*4 + value scale/zero 32*4 + key scale/zero per channel 8*4
    assert budget.kv_bytes_growth(1, 1, 8, 32, "i4", align=0, group=32) == 256 + 128 + 32
    assert budget.kv_bytes_growth(22, 4, 64, 1, "q8_0", align=0) == 2 * 22 * 4 * 68


def test_bad_layer_inputs():
    e = raises(ValueError, budget.kv_bytes_layers, [0, 0], 1, 8, 10, "f16", 0, 0)
    assert "batch must be a positive integer, got 0" in message(e)
    e = raises(ValueError, budget.kv_bytes_layers, [], 1, 8, 10)
    assert "at least one layer" in message(e)
    e = raises(ValueError, budget.kv_bytes_layers, [0, -4], 1, 8, 10)
    assert "window must be >= 0, got -4" in message(e)
    e = raises(ValueError, budget.kv_bytes_layers, [0], 1, 8, -1)
    assert "tokens must be >= 0, got -1" in message(e)
    e = raises(ValueError, budget.kv_bytes_layers, [0], 1, 8, 10, "f8")
    assert "dtype must be one of" in message(e)


def test_h2o_scores_and_weight_row_buffer():
    # kvedge.evict.H2O: `scores` and `acc`, one array('i') entry per slot each
    assert budget.h2o_score_bytes(100) == 2 * 100 * 4
    # widest input of stories260K is hidden_dim 172: one row of w2
    assert budget.weights_row_buffer_bytes(64, 172, "f32") == 688
    assert budget.weights_row_buffer_bytes(64, 172, "i8") == 176
    assert budget.weights_row_buffer_bytes(64, 171, "i4") == 6 * (16 + 2)  # 6 groups of 32: nibbles, f16 scale
    e = raises(ValueError, budget.weights_row_buffer_bytes, 64, 172, "q8_0")
    assert "weights dtype must be one of" in message(e)


def test_weights_streamed_from_flash():
    # stories260K (dim 64, hidden 172, 5 layers): 8 rows of w2's 172 inputs; the scales of a chunk of the
    # narrowest rows (64 inputs: 1376 // 64 = 21 rows); one f32 norm vector read from the file when applied (all
    # of them, 2 per layer + the final one, with norms=True: what the integer and ulab passes keep)
    from kvedge.model import sizes as msizes
    p = budget.llama_params(64, 172, 5, 8, 4, 512)
    norms = 4 * 64
    assert msizes.STREAM_ROWS == 8
    assert msizes.stream_buffer_bytes(64, 172, "i8") == 1376
    assert msizes.stream_scale_slots(64, 172, "i8", 1376) == 21
    assert msizes.weights_stream_bytes(p, 64, 172, "i8") == norms + 1376 + 4 * 21 == 1716
    assert msizes.weights_stream_bytes(p, 64, 172, "i8", norms=True) == 4 * (5 * 2 * 64 + 64) + 1376 + 4 * 21
    assert msizes.weights_stream_bytes(p, 64, 172, "f32") == norms + 8 * 172 * 4 == 5760   # no scales
    # int4: 171 inputs are 6 groups of 32, each 16 bytes of nibbles and a 2-byte f16 scale, 8 rows, 4 of padding
    assert msizes.weights_stream_bytes(p, 64, 171, "i4") == norms + 8 * 6 * (16 + 2) + 4
    assert msizes.weights_stream_bytes(p, 64, 172, "i8", buffer_bytes=640) == norms + 640 + 4 * 10
    e = raises(ValueError, msizes.stream_buffer_bytes, 64, 172, "q8_0")
    assert "weights dtype must be one of" in message(e)
