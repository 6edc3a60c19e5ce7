"""A 15M-class model (stories15M's shape: dim 288, 6 layers, 6 heads, hidden 768, 32,000 tokens, 256 positions)
with int4 weights on flash fits the 16 MB-flash PSRAM profiles (ESP32-S3 N16R8, RP2350 + 8 MB PSRAM) at its full
context: the plan keeps all 256 tokens in a cache in PSRAM, and its weights figure is the int4 file's length as
counted here from the format's documented layout (docs/model.md), not from kvedge's formula."""
import json

import pytest

from _boardkit import kvedge


def _i4_file_bytes(d, h, L, heads, kv_heads, V):
    """kvedge's int4 file: per matrix its f16 group scales (a group per 32 columns of a row), padded to 4 bytes,
    then 16 bytes of nibbles a group; norms f32; a 40-byte header. The classifier is the embedding."""
    def m(rows, cols):
        g = -(-cols // 32)
        return -(-2 * rows * g // 4) * 4 + 16 * rows * g
    kv = kv_heads * (d // heads)
    return 40 + m(V, d) + L * (2 * m(d, d) + 2 * m(kv, d) + 2 * m(h, d) + m(d, h)) + 4 * (2 * L * d + d)


@pytest.mark.parametrize("board", ["esp32s3-n16r8", "rp2350-psram8"])
def test_stories15m_with_int4_weights_fits_its_full_context_on_a_16mb_psram_board(board):
    p = kvedge("plan", "--preset", "stories15m", "--board", board, "--context", "256", "--weights-dtype", "i4",
               "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    c = doc["configurations"][doc["chosen"]]
    assert c["fits"] and c["tokens_kept"] == 256 and c["cache"]["max_tokens"] == 256
    assert c["weights"]["dtype"] == "i4" and c["weights"]["place"] == "flash"
    assert c["weights"]["bytes"] + 40 == _i4_file_bytes(288, 768, 6, 6, 6, 32000)
    assert c["weights"]["bytes"] <= doc["flash_fs_bytes"]
    kv = next(x for x in c["placement"] if x["array"] == "kv cache")
    assert "PSRAM" in kv["where"]


def test_an_int4_plan_counts_the_int4_rows_buffers_not_the_int8_row_words():
    """The integer pass over int4 rows keeps no per-row scale words (int8's streamed rows keep one a row in RAM:
    199,424 bytes for stories15M): the plan's activations are budget.activation_bytes, pass_int4' scratch and the
    prompt chunk's buffers (a plan once counted int8's, and the board peaked at 82 % of it)."""
    from kvedge import budget
    from kvedge.model import pass_int4, pass_int, prefill
    from kvedge.model.header import ModelConfig
    p = kvedge("plan", "--preset", "stories15m", "--board", "esp32s3-n16r8", "--context", "256", "--weights-dtype",
               "i4", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    c = doc["configurations"][doc["chosen"]]
    assert c["forward"] == "int" and c["weights"]["place"] == "flash"
    cfg = ModelConfig(288, 768, 6, 6, 6, 32000, 256)
    chunk = prefill.chunk_bytes(cfg, c.get("prefill") or 1, 4, "i4")
    want = budget.activation_bytes(288, 768, 6, 32000, 32, head_dim=48) + pass_int4.scratch_bytes(cfg, True) + chunk
    assert c["activation_bytes"] == want, (c["activation_bytes"], want)
    assert pass_int.scratch_bytes(cfg, True) - pass_int4.scratch_bytes(cfg, True) > 150000  # what was miscounted
