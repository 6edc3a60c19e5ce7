# Exact sizes of a tiered cache (kvedge.tier.cache: a hot ring in RAM, older tokens compressed on flash) and of its
# cold store's files (kvedge.tier.store). A module of its own beside kvedge.sizes: a tier loads these formulas
# without the rest of kvedge.budget, and a run without a tier loads neither. kvedge.budget re-exports them.
# Also the flash format's two small rules its files share with a saved session's (kvedge.session), here so that a
# session loads neither the store nor the tier: the Adler-32 fold and the sequence numbers' order.
from kvedge.sizes import FULL, I4, I8, LOWBIT, META_BYTES, QK, align_up, kv_bytes, row_bytes

TIER_HEADER_BYTES = 40  # one header file of a cold store; it has two (the newer valid one wins)
TIER_TAG_BYTES = 16  # after each block (and the sinks' rows): its number and checksum
SEQ_MOD = 1 << 30  # sequence numbers wrap here (small ints on 31-bit boards)
ADLER_RUN = 2048  # bytes summed between reductions: a < 65521 + 255 * 2048, b < 65521 * 2049 + 255 * 2048**2 / 2,
#                    both below 2**30 (small ints on a 31-bit board)


def adler(buf, n, ab):
    """Fold buf[0:n] into the Adler-32 state ab = [a, b] (small ints only; zlib.adler32 gives the same). The sums
    are reduced once every ADLER_RUN bytes, not at every byte: ~4x fewer instructions on the emulated Cortex-M3."""
    a = ab[0]
    b = ab[1]
    mv = memoryview(buf)
    i = 0
    while i < n:
        e = i + ADLER_RUN if n - i > ADLER_RUN else n
        for x in mv[i:e]:
            a += x
            b += a
        a %= 65521
        b %= 65521
        i = e
    ab[0] = a
    ab[1] = b


def newer(s, t):
    """Whether sequence number s comes after t (both below SEQ_MOD, at most half of it apart)."""
    return (s - t) % SEQ_MOD < (SEQ_MOD >> 1)


def cold_record_bytes(kv_heads, head_dim, block, dtype, align=0):
    """One layer of one cold block: K and V rows and scales of `block` tokens, laid out as a one-layer KVCache of
    `block` slots (i4: KIVI, keys per channel over the block, values per token) without its f32 residual."""
    d = kv_bytes(1, kv_heads, head_dim, block, dtype, align, group=block, detail=True)
    return d["total"] - d["residual"]


def tiered_bytes(layers, heads, kv_heads, head_dim, window, sinks, block, cold_blocks, dtype=I8, cold_dtype=I4,
                 align=64, cold_align=0, group=QK, f32_sinks=True, residual=None):
    """Exact RAM and flash of kvedge.tier.cache.TieredCache, as a dict:

      ring      the hot KVCache arena: `sinks` slots (f32 as its prefix, or with f32_sinks=False in `dtype`, a
                ring's first slots) + `window` slots in `dtype` (i4/i2: KIVI `residual` as in kv_bytes, 0 = none)
      staging   the one-layer, one-block KVCache (cold dtype) that encodes a block leaving the ring and holds each
                block read back from flash during attention
      tables    the tiered object's arrays: one token's K and V in f32 (re-quantizing), and per query head the
                float path's running max, sum and head_dim accumulators (f64), plus, when the integer path is
                possible (ring in i8/i4/i2, cold in i8/i4), its 5 state ints and head_dim accumulators (int32)
      ram       ring + staging + tables
      record    one layer of one cold block on flash; block = layers records + tag
      sink_row  bytes of one sink's row (K or V of one layer and KV head) in the sinks' record, its own scale (i8)
                or scale and zero (i4/i2) included; the sinks' record also holds, after the rows, the per-channel
                scales and zeros of KIVI key groups (i4/i2 with residual > 0: one group's per G sinks)
      flash     the store's files at most: two headers, the sinks' record (when sinks > 0), and two segment files
                of cold_blocks blocks each (blocks are only appended; a segment restarts when it is dead)
      cold_tokens, tokens   the cold cap in tokens, and sinks + cold + window"""
    ring = kv_bytes(layers, kv_heads, head_dim, sinks + window, dtype, align, group, residual,
                    prefix=sinks if f32_sinks else 0)
    staging = kv_bytes(1, kv_heads, head_dim, block, cold_dtype, cold_align, group=block)
    tables = 2 * kv_heads * head_dim * 4 + heads * (2 + head_dim) * 8
    if dtype in (I8,) + LOWBIT and cold_dtype in (I8, I4) and head_dim <= 256:
        tables += heads * (5 + head_dim) * 4
    record = cold_record_bytes(kv_heads, head_dim, block, cold_dtype, cold_align)
    blk = TIER_TAG_BYTES + layers * record
    key_groups = 0  # bytes of the sinks' KIVI key scales and zeros, per layer and KV head
    if f32_sinks:
        sink_row = align_up(row_bytes(head_dim, FULL), align)
    elif dtype in LOWBIT:
        sink_row = align_up(row_bytes(head_dim, dtype), align) + 2 * META_BYTES
        if (group if residual is None else residual):  # KIVI keys: per channel per group, not per row
            key_groups = (sinks // group) * head_dim * 2 * META_BYTES - sinks * 2 * META_BYTES
    else:
        sink_row = align_up(row_bytes(head_dim, dtype), align) + (META_BYTES if dtype == I8 else 0)
    sink_rec = TIER_TAG_BYTES + layers * kv_heads * (2 * sinks * sink_row + key_groups) if sinks else 0
    return {"ring": ring, "staging": staging, "tables": tables, "ram": ring + staging + tables, "record": record,
            "block": blk, "sinks": sink_rec, "sink_row": sink_row,
            "flash": 2 * TIER_HEADER_BYTES + sink_rec + 2 * cold_blocks * blk,
            "cold_tokens": cold_blocks * block, "tokens": sinks + cold_blocks * block + window}
