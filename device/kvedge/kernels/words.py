# The int blocks the kernels read, word by word: each index named once, here. kvedge.cache fills the arena
# offsets in them (it owns the arena's layout), kvedge.attention and kvedge.model.pass_int the rest; the plain and
# native kernels import these names, the viper and asm kernels (which cannot read another module's constants at
# compile time) use the same numbers as literals, and the tests hold every kind bit-identical to the plain one.
from kvedge.compat import const

# ---- the attention tile (array('i') of T_HDR + 7 * T words): a header, then seven runs of T entries ----
T_N = const(0)  # entries in this tile
T_D = const(1)  # head_dim
T_QOFF = const(2)  # the query head's first code in the query
T_T = const(3)  # entries per run (the tile's size)
T_B = const(4)  # the query's scale mantissa times log2(e) / sqrt(D), Q14
T_EQ = const(5)  # the query's scale exponent
T_M = const(6)
T_WS = const(7)
T_EVMAX = const(8)
T_TMAX = const(9)
T_EVT = const(10)
T_KIVI = const(11)  # 1 when i4 keys have per-channel scales (meta offset = the group's first channel)
T_LSUM = const(12)  # running sum of weights (att_div_q10 divides by it)
T_SH = const(13)  # att_rescale: right shift of the accumulator (a larger V scale arrived)
T_CORR = const(14)  # att_rescale: Q14 factor 2**-(growth of the running max), 16384 = none
T_QBITS = const(15)  # att_conv_i4: bits per code of the low-bit rows, 4 (i4) or 2 (i2), packed low bits first
T_HDR = const(16)
# the runs, each T words from T_HDR + run * T: arena offsets of the K rows and their scales, the scores U, the V
# rows and scales, the weights, and the cache slot of each entry
R_KROW = const(0)
R_KSC = const(1)
R_U = const(2)
R_VROW = const(3)
R_VSC = const(4)
R_W = const(5)
R_SLOT = const(6)
R_RUNS = const(7)

# (names with a leading underscore are positions another method fills: documented here, kept out of RAM)
# ---- geo (array('i')): att_fill_i8's geometry of one KV head's i8 rows, a query head's running state, scratch ----
G_KROW = const(0)  # arena offset of the head's K row 0 (KVCache.head_geo fills G_KROW..G_PITCH)
_G_VROW = const(1)  # ... of its V row 0
_G_KSC = const(2)  # ... of K row 0's f16 scale (2 bytes a row)
_G_VSC = const(3)  # ... of V row 0's
G_PITCH = const(4)  # bytes from one row to the next
G_P = const(5)  # the cache's prefix slots (slot s is row s - P)
G_J = const(6)  # the scan's next index (att_fill_i8 moves it)
G_N = const(7)  # slots scanned, or entries listed
G_LISTED = const(8)  # 1: the slots are a list of G_N entries, 0: slot_pos scanned (free slots hold -1)
G_M = const(9)  # the running state: Attention.q8_save/q8_load at G_M (M, lsum, ws, evmax, first)
G_END = const(24)  # the fused kernels' scratch ends here; the query follows (D words), then the layer's bases
# the layer's bases, from G_END + D (kernels.viper_head.att_step_i8): KVCache.layer_geo fills LG_KROW..LG_SSTEP
LG_HEADS = const(0)
LG_GROUP = const(1)
LG_KROW = const(2)  # K row 0 of KV head 0 of the layer; KV head h at + h * LG_HSTEP
_LG_VROW = const(3)
_LG_KSC = const(4)  # K row 0's scale of KV head 0; KV head h at + h * LG_SSTEP
_LG_VSC = const(5)
_LG_HSTEP = const(6)
_LG_SSTEP = const(7)
LG_LAM = const(8)
LG_MODE = const(9)  # kernels.viper_tier.att_heads_i8: 1 start each head afresh, 2 finish each head (its output)
LG_WORDS = const(10)

# ---- q_mv's parameter block (array('i') of P_HDR + rows words: then one scale word per row) ----
P_WO = const(0)  # byte offset of the first row in w
P_ROWS = const(1)
P_COLS = const(2)
P_XM = const(3)  # input scale mantissa (< 2**15)
P_OS = const(4)  # extra right shift of every row (negative: left, saturating)
P_ADD = const(5)  # 1: add into out (the residual connection), 0: store
P_RO = const(6)  # first row: index into out and into the row words
P_SX = const(7)  # q_mv's scratch: kinds that read the int8 rows offset-binary keep 128 * sum(x) there
P_HDR = const(8)
# q_mv4's block (int4 rows, kvedge.model.checkpoint's layout): P_WO..P_RO as above, then these; no row words
P4_SO = const(7)  # byte offset in w of the first row's first f16 group scale (a row's G scales are adjacent)
P4_EG = const(8)  # the matrix's largest f16 exponent field over its scales: group g adds (d_g * m_g) >> (EG - e_g)
P4_HDR = const(9)
VMAX = const((1 << 29) - 1)  # the integer pass's residual saturates at +-VMAX

# ---- q_store's block (array('i') of S_WORDS): KVCache.q8_store_block and write_q8_at fill it ----
S_KVH = const(0)  # KV heads
S_D = const(1)  # head_dim
S_KROW = const(2)  # arena offset of KV head 0's K row of the token
S_VROW = const(3)
S_KSC = const(4)  # ... of its K scale
S_VSC = const(5)
S_HSTEP = const(6)  # bytes from one KV head's row to the next
S_SSTEP = const(7)  # ... from one KV head's scale to the next
S_KC = const(8)  # index of KV head 0's K codes in the codes buffer
S_VC = const(9)
S_KS = const(10)  # index of KV head 0's K scale in the scales buffer
S_VS = const(11)
S_WORDS = const(12)


def bitlen(a):
    """Number of bits of 0 <= a < 2**32 (0 for 0): int.bit_length, which MicroPython has not (the integer pass's
    set-up and the plain kernels' scalar steps; viper and asm kernels inline it)."""
    n = 0
    if a >> 16:
        a >>= 16
        n = 16
    if a >> 8:
        a >>= 8
        n += 8
    if a >> 4:
        a >>= 4
        n += 4
    if a >> 2:
        a >>= 2
        n += 2
    if a >> 1:
        a >>= 1
        n += 1
    return n + a
