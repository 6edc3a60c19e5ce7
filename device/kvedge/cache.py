# The KV cache: one preallocated arena, rows addressed by (layer, K|V, KV head, slot).
#
# Arena layout (all sizes from kvedge.budget, so len(arena) == cfg.nbytes() exactly):
#
#   PREFIX    f32 rows of the first P positions      [layer][K|V][kv_head][p < P]       padded to align
#   RESIDUAL  f32 ring of KIVI's sliding residual    [layer][K|V][kv_head][r < R+G-1]   padded to align
#             (a cache of B < R+G-1 slots after the prefix: r < B)
#   DATA      rows in the cache dtype                [layer][K|V][kv_head][b < B]       padded to align
#   META      i8:  f16 scale per row                 [layer][K|V][kv_head][b]           2 bytes
#             i4:  K: f16 scale+zero per channel     [layer][kv_head][group][channel]   4 bytes
#                     (residual 0: per row           [layer][kv_head][b]                4 bytes)
#                  V: f16 scale+zero per row         [layer][kv_head][b]                4 bytes
#
# A slot is a token's place: slots 0..P-1 are the prefix rows, slot P+b is DATA row b. Without a window,
# position p lives in slot p. With a window W and S sinks, positions < S keep slots 0..S-1 for ever and later
# positions take slot S + (p - S) % W, overwriting (evicting) the token W positions older. slot_pos[slot] is
# the logical position a slot holds (-1: empty); it is the truth the attention loop iterates over.
# An eviction policy (kvedge.evict) may replace the placement; it evicts with evict_slot().
#
# KIVI (i4 with residual R > 0): the token at position p >= P is the s-th quantized-region token, s = p - P.
# Per layer, tokens res_lo <= s < res_hi are f32, in RESIDUAL row s % (R+G-1); res_lo is a multiple of G.
# Writing s when s - res_lo reaches R+G-1 first quantizes group [res_lo, res_lo+G) into its DATA slots (keys
# per channel over the group, values per token), so R..R+G-1 of the newest tokens stay exact. Groups line up
# with DATA slots because G divides the ring W and the sinks after the prefix; W >= R+G keeps a group's
# tokens cached until it is quantized. quantize_residual() quantizes every whole group still waiting (a cache
# that never holds R+G tokens quantizes only then).
import struct

from .compat import zeros
from .sizes import CODE_BITS, FULL, INT_CODES, LOWBIT, I8, F16, F32, K, V, align_up, residual_rows, row_bytes
from .config import CacheConfig
from .errors import BudgetError, CacheFullError
from . import check, quant

POS_LIMIT = (1 << 30) - 1  # logical positions stay small ints on 31-bit boards


_q8 = [None]  # kvedge.q8writes once a stub below loaded it (an import allocates: once)


def _q8writes():
    if _q8[0] is None:
        from . import q8writes
        _q8[0] = q8writes
    return _q8[0]


class KVCache:
    def __init__(self, cfg, budget=None, arena=None):
        # arena: a bytearray of exactly cfg.nbytes() allocated earlier, e.g. first thing at start-up while a
        # board's heap is still one free block (imports leave it fragmented); by default allocated here
        if not isinstance(cfg, CacheConfig):
            raise TypeError("cfg must be a CacheConfig, got %s" % check.show(cfg))
        if budget is not None:
            check.index("budget", budget)
        need = cfg.nbytes()
        if budget is not None and need > budget:
            raise BudgetError("KV cache (%s, %d slots)" % (cfg.dtype, cfg.slots), need, budget)
        if arena is not None and (not isinstance(arena, bytearray) or len(arena) != need):
            raise ValueError("arena must be a bytearray of exactly %d bytes (the config's nbytes), got %s of %d"
                             % (need, type(arena).__name__, len(arena) if hasattr(arena, "__len__") else -1))
        self.cfg = cfg
        L, H, D, P = cfg.layers, cfg.kv_heads, cfg.head_dim, cfg.prefix
        N = cfg.slots
        B = N - P
        G = cfg.group
        self.L, self.H, self.D, self.P, self.N, self.B, self.G = L, H, D, P, N, B, G
        self.S, self.W = cfg.sinks, cfg.window
        self.lowbit = cfg.dtype in LOWBIT
        self.bits = CODE_BITS.get(cfg.dtype, 0)  # bits per code of i4 / i2 rows
        self.kivi = self.lowbit and cfg.residual > 0
        self.R = residual_rows(G, cfg.residual, B) if self.kivi else 0  # rows of the f32 residual ring
        self.NG = B // G if self.kivi else 0
        self.row = row_bytes(D, cfg.dtype)
        self.prow = align_up(self.row, cfg.align)
        self.frow = align_up(row_bytes(D, FULL), cfg.align)
        # region offsets, in layout order
        self.PRE = 0
        self.RES = self.PRE + 2 * L * H * P * self.frow
        self.DATA = self.RES + 2 * L * H * self.R * self.frow
        self.META = self.DATA + 2 * L * H * B * self.prow
        if cfg.dtype == I8:
            self.VMETA = self.META
            end = self.META + 2 * L * H * B * 2
        elif self.lowbit:
            kmeta = L * H * (self.NG * D if self.kivi else B) * 4
            self.VMETA = self.META + kmeta
            end = self.VMETA + L * H * B * 4
        else:
            self.VMETA = end = self.META
        if end != need:  # the layout and the budget formula must agree to the byte
            raise AssertionError("layout %d != formula %d" % (end, need))
        self.arena = arena if arena is not None else bytearray(need)
        # the arena offset of DATA row 0 of every (layer, K|V, KV head), at (layer * 2 + kv) * H + kvh, computed
        # once: no module outside this one derives an offset from the regions above; they read base(), row_at(),
        # scale_at(), prefix_at(), residual_at() and the pitches (a run of rows b0..b0+n-1: from row_at(.., b0) to
        # row_at(.., b0 + n), likewise its metadata), and write_q8_at() fills q_store's block. Not in the arena:
        # bookkeeping, like slot_pos.
        self.bases = zeros("i", 2 * L * H)
        for i in range(2 * L * H):
            self.bases[i] = self.DATA + i * B * self.prow
        self.slot_pos = zeros("i", N)  # reset() fills it with -1
        self._low = None
        if self.lowbit:  # i4 / i2 rows: their code lives in kvedge.kivi, loaded only by caches that need it
            from . import kivi
            self._low = kivi
        self.res_lo = zeros("i", L)  # KIVI: first f32 residual token (s = pos - P), per layer
        self.res_hi = zeros("i", L)  # KIVI: one past the newest token written, per layer
        # per layer, the largest K scale written since reset(), as f16 bits (an i8 row's own; a float row's is
        # that of an i8 row of its values, amax / 127 rounded up): 128 times its value bounds every |k| the
        # layer has held, which the integer attention's range check reads (kvedge.attention, Q8_RANGE).
        # Evicted rows are not forgotten: conservative, and nothing to rescan. Only caches the integer path
        # reads (i8, i4, i2) keep it.
        self.kbits = zeros("H", L)
        self._kmax = cfg.dtype == I8 or self.lowbit
        self.group_live = zeros("H", self.NG)  # i4 KIVI: live tokens per group (for used_bytes)
        self._f32 = "<%df" % D
        # largest |value| a row may hold: float32 range, what an i8 row's f16 scale covers, the f16 range
        self.vlim = check.F32_MAX if cfg.dtype == F32 else (check.I8_MAX if cfg.dtype == I8 else check.F16_MAX)
        self.int_ok = cfg.dtype in INT_CODES and D <= 256  # its rows can go through the integer attention
        self._scratch = zeros("f", max(D, G) if self.kivi else D)  # one row (KIVI: or a group's key channel)
        self.policy = None
        self._lay = None  # kvedge.kernels.words, once q8_store_block() set up a block
        self._q8codes = self._q8scales = 0
        self.att = None  # the decode interface's attention (attach())
        self.scores = None
        # bytes one cached token occupies, by where it lives (for used_bytes)
        self.pre_slot_bytes = 2 * L * H * self.frow
        row_meta = 0
        if cfg.dtype == I8:
            row_meta = 2 * 2
        elif self.lowbit:
            row_meta = 4 if self.kivi else 8
        self.main_slot_bytes = L * H * (2 * self.prow + row_meta)
        self.group_bytes = L * H * D * 4 if self.kivi else 0
        self.padding_bytes = cfg.nbytes(True)["padding"]
        # lifetime counters: a reset starts a new sequence, the monitor keeps counting
        self.evictions = 0
        self.alloc_failures = 0
        self.peak_bytes = 0
        self.reset()

    # ---- positions ----

    def reset(self):
        """Forget every token (trap 2 in docs/architecture.md); the arena is kept, nothing is reallocated."""
        sp = self.slot_pos
        for i in range(self.N):
            sp[i] = -1
        for i in range(self.L):
            self.res_lo[i] = 0
            self.res_hi[i] = 0
            self.kbits[i] = 0
        for i in range(self.NG):
            self.group_live[i] = 0
        self.n_seen = 0
        self.n_cached = 0
        self.n_pre = 0
        self.live_groups = 0
        self.used_bytes = 0
        self.cur_slot = -1
        self.span = 0  # no slot from here on has held a token since the reset (the attention's scan stops there)

    def _natural_slot(self, pos):
        if self.W and pos >= self.S:
            return self.S + (pos - self.S) % self.W
        return pos

    def has_room(self):
        """Whether start_token() gives a position without raising (below the position limit, and a policy, a
        window or a free slot to take it)."""
        pos = self.n_seen
        return pos < POS_LIMIT and (self.policy is not None or self._natural_slot(pos) < self.N)

    def start_token(self):
        """Reserve the next logical position and its slot; returns the position.

        Without a window a full cache raises CacheFullError and nothing changes (never a silent overwrite)."""
        pos = self.n_seen
        if pos >= POS_LIMIT:
            self.alloc_failures += 1
            raise CacheFullError("position limit %d reached: reset the stream" % POS_LIMIT)
        if self.policy is not None:
            slot = self.policy.place(self, pos)
        else:
            slot = self._natural_slot(pos)
            if slot >= self.N:
                self.alloc_failures += 1
                raise CacheFullError("cache full: %d of %d tokens (max_tokens), no window to evict into"
                                     % (self.n_cached, self.N))
            if self.slot_pos[slot] >= 0:
                self.evict_slot(slot)
        self._occupy(slot, pos)
        self.n_seen = pos + 1
        self.cur_slot = slot
        return pos

    def _occupy(self, slot, pos):
        self.slot_pos[slot] = pos
        if slot >= self.span:
            self.span = slot + 1
        self.n_cached += 1
        if slot < self.P:
            self.n_pre += 1
            self.used_bytes += self.pre_slot_bytes
        else:
            self.used_bytes += self.main_slot_bytes
            if self.kivi:
                g = (slot - self.P) // self.G
                if self.group_live[g] == 0:
                    self.live_groups += 1
                    self.used_bytes += self.group_bytes
                self.group_live[g] += 1
        if self.used_bytes > self.peak_bytes:
            self.peak_bytes = self.used_bytes

    def evict_slot(self, slot):
        """Drop the token in `slot` (counted as an eviction)."""
        self.release_slot(slot)
        self.evictions += 1

    def release_slot(self, slot):
        """Empty `slot` without counting an eviction (a pool session closed or reset: nothing was evicted)."""
        check.index("slot", slot, self.N)
        if self.slot_pos[slot] < 0:
            raise IndexError("slot %d holds no token" % slot)
        self.slot_pos[slot] = -1
        self.n_cached -= 1
        if slot < self.P:
            self.n_pre -= 1
            self.used_bytes -= self.pre_slot_bytes
        else:
            self.used_bytes -= self.main_slot_bytes
            if self.kivi:
                g = (slot - self.P) // self.G
                self.group_live[g] -= 1
                if self.group_live[g] == 0:
                    self.live_groups -= 1
                    self.used_bytes -= self.group_bytes

    # ---- explicit placement (kvedge.paged: a pool places each session's tokens in its own blocks) ----

    def occupy_slot(self, slot, pos):
        """Mark the empty `slot` as holding logical position pos, outside start_token()'s placement.
        Not for KIVI i4 caches: their open group follows the position order of one sequence."""
        if self.kivi:
            raise TypeError("explicit slots need a cache without KIVI groups (i4 with residual=0)")
        check.index("slot", slot, self.N)
        check.index("pos", pos)
        if self.slot_pos[slot] >= 0:
            raise ValueError("slot %d already holds position %d" % (slot, self.slot_pos[slot]))
        if pos < 0 or pos >= POS_LIMIT:
            raise ValueError("position %d out of range (0..%d)" % (pos, POS_LIMIT - 1))
        self._occupy(slot, pos)

    def _check_live_slot(self, slot):
        check.index("slot", slot, self.N)
        if self.slot_pos[slot] < 0:
            raise IndexError("slot %d holds no token: occupy_slot() first" % slot)

    def write_slot(self, slot, layer, k, v):
        """write() into an explicit live slot instead of the current token's."""
        self._check_live_slot(slot)
        if self.kivi:
            raise TypeError("explicit slots need a cache without KIVI groups (i4 with residual=0)")
        cur = self.cur_slot
        self.cur_slot = slot
        try:
            self.write(layer, k, v)
        finally:
            self.cur_slot = cur

    def slot_of(self, pos):
        """Slot holding logical position pos; IndexError if it is not cached."""
        if type(pos) is not int:
            check.index("pos", pos)
        if pos < 0 or pos >= self.n_seen:
            raise IndexError("position %d out of range (0..%d)" % (pos, self.n_seen - 1))
        s = self._natural_slot(pos)
        if s < self.N and self.slot_pos[s] == pos:
            return s
        if self.policy is not None:
            sp = self.slot_pos
            for s in range(self.N):
                if sp[s] == pos:
                    return s
        raise IndexError("position %d is no longer cached" % pos)

    def positions(self, out):
        """Write the live logical positions, in increasing order, into out; return their count."""
        check.out("out", out, self.n_cached, self.n_seen - 1)
        sp = self.slot_pos
        n = 0
        for s in range(self.N):
            p = sp[s]
            if p >= 0:
                # insertion into the sorted prefix of out (slots are nearly in order already)
                j = n
                while j > 0 and out[j - 1] > p:
                    out[j] = out[j - 1]
                    j -= 1
                out[j] = p
                n += 1
        return n

    # ---- the layout, for the modules that read the arena (attention, kernels, tiers, the forward passes) ----

    def base(self, layer, kv, kvh):
        """Arena offset of DATA row 0 (slot P) of (layer, K|V, KV head)."""
        return self.bases[(layer * 2 + kv) * self.H + kvh]

    def row_at(self, layer, kv, kvh, b):
        """Arena offset of DATA row b (slot P + b) of (layer, K|V, KV head)."""
        return self.bases[(layer * 2 + kv) * self.H + kvh] + b * self.prow

    def row_pitch(self):
        """Bytes from one DATA row to the next (the row, padding included)."""
        return self.prow

    def f32_pitch(self):
        """Bytes from one f32 row (prefix, residual) to the next."""
        return self.frow

    def scale_at(self, layer, kv, kvh, b):
        """Arena offset of DATA row b's metadata: i8 its f16 scale; i4/i2 the f16 scale and zero of a value row
        or a per-row key; KIVI keys those of channel 0 of the row's group (4 bytes a channel)."""
        if self.cfg.dtype == I8:
            return self.META + (((layer * 2 + kv) * self.H + kvh) * self.B + b) * 2
        if kv == V:
            return self.VMETA + ((layer * self.H + kvh) * self.B + b) * 4
        if self.kivi:
            return self.META + ((layer * self.H + kvh) * self.NG + b // self.G) * self.D * 4
        return self.META + ((layer * self.H + kvh) * self.B + b) * 4

    def prefix_at(self, layer, kv, kvh, slot):
        """Arena offset of the f32 prefix row of `slot` (< P)."""
        return self.PRE + self._rowidx(layer, kv, kvh, self.P, slot) * self.frow

    def residual_at(self, layer, kv, kvh, r):
        """Arena offset of row r (< R) of KIVI's f32 residual ring."""
        return self.RES + self._rowidx(layer, kv, kvh, self.R, r) * self.frow

    # ---- writes ----

    def _check_layer(self, layer):
        if type(layer) is not int or layer < 0 or layer >= self.L:
            check.index("layer", layer, self.L)

    def _check_current(self):
        if self.cur_slot < 0:
            raise ValueError("no current token: call start_token() first")
        if self.slot_pos[self.cur_slot] < 0:
            raise ValueError("the current token's slot %d was released: call start_token()" % self.cur_slot)

    def _check_rows(self, k, v):
        """k and v: kv_heads*head_dim real numbers each, finite and within the storage type's range (a value
        that passes can always be stored: nothing is refused half-way through a row)."""
        n = self.H * self.D
        check.length("k", k, n)
        check.length("v", v, n)
        check.floats("k", k, n, self.vlim)
        check.floats("v", v, n, self.vlim)

    def _check_layers(self, ks, vs):
        """append(): one row of K and of V per layer, all checked before anything moves."""
        check.length("ks", ks, self.L)
        check.length("vs", vs, self.L)
        for layer in range(self.L):
            try:
                k = ks[layer]
                v = vs[layer]
            except check._BAD:
                raise TypeError("ks and vs must be indexed by layer")
            self._check_rows(k, v)

    def write(self, layer, k, v):
        """Store the current token's K and V for one layer (flat kv_heads*head_dim floats each)."""
        self._check_layer(layer)
        self._check_current()
        self._check_rows(k, v)
        if self._kmax:
            self._note_k(layer, k)
        slot = self.cur_slot
        dt = self.cfg.dtype
        if slot < self.P:
            for h in range(self.H):
                self._put_f32(self.prefix_at(layer, K, h, slot), k, h * self.D)
                self._put_f32(self.prefix_at(layer, V, h, slot), v, h * self.D)
            return
        b = slot - self.P
        if self.kivi:
            self._low.write_residual(self, layer, self.slot_pos[slot] - self.P, k, v)
            return
        for h in range(self.H):
            for kv, x in ((K, k), (V, v)):
                off = self.row_at(layer, kv, h, b)
                if dt == F32:
                    self._put_f32(off, x, h * self.D)
                elif dt == F16:
                    self._put_f16(off, x, h * self.D)
                elif dt == I8:
                    self._put_i8(off, self.scale_at(layer, kv, h, b), x, h * self.D)
                else:  # i4 without residual: per-row asymmetric for K and V
                    self._low.put_row(self, off, self.scale_at(layer, kv, h, b), x, h * self.D)

    def _note_k(self, layer, k):
        """kbits[layer] raised to the i8 scale bits of k's largest |value| (k checked: within I8_MAX)."""
        amax = 0.0
        for i in range(self.H * self.D):
            e = abs(k[i])
            if e > amax:
                amax = e
        sb = quant.i8_scale_bits(amax)
        if sb > self.kbits[layer]:
            self.kbits[layer] = sb

    def _put_q8(self, layer, kv, b, cs, co, sc, so):
        """Row b of (layer, kv) of every KV head: int8 codes cs[co + h*D ...], f16 scale bits sc[so + h]."""
        a = self.arena
        D = self.D
        i = (layer * 2 + kv) * self.H
        for h in range(self.H):
            off = self.bases[i + h] + b * self.prow
            src = co + h * D
            for j in range(D):
                a[off + j] = cs[src + j] & 0xFF
            m = self.META + ((i + h) * self.B + b) * 2
            s = sc[so + h]
            a[m] = s & 0xFF
            a[m + 1] = s >> 8

    def i8_bases(self, g, at, layer, kvh, steps=False):
        """An i8 cache: g[at:at+4] = the offsets of K row 0, V row 0, K row 0's scale and V row 0's of KV head kvh
        in `layer` (the rows of a head follow at row_pitch(), their scales 2 bytes apart); steps: g[at+4:at+6] =
        the steps from one KV head's rows, and scales, to the next's."""
        i = (layer * 2) * self.H + kvh
        g[at] = self.bases[i]
        g[at + 1] = self.bases[i + self.H]
        g[at + 2] = self.META + i * self.B * 2
        g[at + 3] = self.META + (i + self.H) * self.B * 2
        if steps:
            g[at + 4] = self.B * self.prow
            g[at + 5] = 2 * self.B

    # The i8 rows' int8-code writes: their code is kvedge.q8writes' and kvedge.q8rows' (a run that writes floats
    # loads neither). kvedge.cacheq8.KVCacheQ8, the cache the integer passes build, holds q8rows' as its methods;
    # on this class the four below load kvedge.q8writes on a first call.

    def write_q8(self, layer, k_codes, k_scales, v_codes, v_scales):
        """i8 caches: store pre-quantized rows: int8 codes (-128..127, kv_heads*head_dim each) and f16 scale bits
        per KV head (finite, >= 0: 0..0x7BFF). Allocates nothing; everything is checked before a byte moves."""
        _q8writes().write_q8(self, layer, k_codes, k_scales, v_codes, v_scales)

    def check_write_q8(self, layer, k_codes, k_scales, v_codes, v_scales):
        """write_q8()'s checks, without writing."""
        _q8writes().check_write_q8(self, layer, k_codes, k_scales, v_codes, v_scales)

    def write_slot_q8(self, slot, layer, k_codes, k_scales, v_codes, v_scales):
        """write_q8() into an explicit live slot."""
        _q8writes().write_slot_q8(self, slot, layer, k_codes, k_scales, v_codes, v_scales)

    def _write_q8(self, layer, k_codes, k_scales, v_codes, v_scales):
        _q8writes()._write_q8(self, layer, k_codes, k_scales, v_codes, v_scales)

    def append(self, ks, vs):
        """Convenience: a new token with K and V for every layer (ks[layer], vs[layer] flat sequences)."""
        self._check_layers(ks, vs)  # every layer before the position moves
        pos = self.start_token()
        for layer in range(self.L):
            self.write(layer, ks[layer], vs[layer])
        return pos

    def _rowidx(self, layer, kv, h, n, r):
        return ((layer * 2 + kv) * self.H + h) * n + r

    def _put_f32(self, off, x, src):
        pack = struct.pack_into
        for i in range(self.D):
            pack("<f", self.arena, off + 4 * i, x[src + i])

    def _put_f16(self, off, x, src):
        a = self.arena
        for i in range(self.D):
            h = quant.f16_bits(x[src + i])
            a[off + 2 * i] = h & 0xFF
            a[off + 2 * i + 1] = h >> 8

    def _put_i8(self, off, moff, x, src):
        D = self.D
        amax = 0.0
        for i in range(D):
            e = abs(x[src + i])
            if e > amax:
                amax = e
        sb = quant.i8_scale_bits(amax)
        s = quant.f16_value(sb)
        inv = 1.0 / s if s else 0.0
        a = self.arena
        for i in range(D):
            a[off + i] = quant.i8_code(x[src + i], inv) & 0xFF
        a[moff] = sb & 0xFF
        a[moff + 1] = sb >> 8

    def quantize_residual(self):
        """KIVI: quantize every whole group still waiting at f32 in the residual, in every layer (e.g. before a
        block's bytes are copied out); a part-filled newest group stays at f32. Returns the groups quantized."""
        return self._low.quantize_residual(self) if self.kivi else 0

    # ---- reads ----

    def _check_read(self, layer, head, kv, out, codes=False):
        # fast path first: reads are small, the checks must not cost more than the read
        if not (type(layer) is int and type(head) is int and type(kv) is int and 0 <= layer < self.L
                and 0 <= head < self.H and (kv == K or kv == V)):
            self._check_layer(layer)
            check.index("kv head", head, self.H)
            check.index("kv", kv)
            if kv != K and kv != V:
                raise ValueError("kv must be 0 (K) or 1 (V), got %r" % (kv,))
        check.out("out", out, self.D, -128 if codes else 0.5)

    def read(self, layer, head, pos, kv, out):
        """Dequantized K (kv=0) or V (kv=1) row of logical position pos into out[0:head_dim]."""
        self._check_read(layer, head, kv, out)
        self._read_slot(layer, head, self.slot_of(pos), kv, out)

    def read_slot(self, layer, head, slot, kv, out):
        """read() by slot: a live slot (IndexError otherwise)."""
        self._check_read(layer, head, kv, out)
        self._check_live_slot(slot)
        self._read_slot(layer, head, slot, kv, out)

    def _read_slot(self, layer, head, slot, kv, out):
        """read() by slot, without checks (the attention loop's access)."""
        if slot < self.P:
            self._get_f32(self.PRE + self._rowidx(layer, kv, head, self.P, slot) * self.frow, out)
            return
        b = slot - self.P
        if self.kivi:
            s = self.slot_pos[slot] - self.P
            if self.res_lo[layer] <= s < self.res_hi[layer]:
                self._get_f32(self.RES + self._rowidx(layer, kv, head, self.R, s % self.R) * self.frow, out)
                return
        off = self.DATA + self._rowidx(layer, kv, head, self.B, b) * self.prow
        dt = self.cfg.dtype
        a = self.arena
        D = self.D
        if dt == F32:
            self._get_f32(off, out)
        elif dt == F16:
            for i in range(D):
                out[i] = quant.f16_value(a[off + 2 * i] | (a[off + 2 * i + 1] << 8))
        elif dt == I8:
            m = self.META + self._rowidx(layer, kv, head, self.B, b) * 2
            s = quant.f16_value(a[m] | (a[m + 1] << 8))
            for i in range(D):
                c = a[off + i]
                out[i] = (c - 256 if c > 127 else c) * s
        else:
            self._low.read_row(self, layer, head, b, kv, off, out)

    def read_codes(self, layer, head, pos, kv, out):
        """i8 caches: the int8 codes of a row into out (array('b')); returns its f16 scale bits. No allocation
        (after a first call, which loads kvedge.q8writes, where its code lives)."""
        return _q8writes().read_codes(self, layer, head, pos, kv, out)

    def _get_f32(self, off, out):
        vals = struct.unpack_from(self._f32, self.arena, off)
        for i in range(self.D):
            out[i] = vals[i]

    # ---- the decode interface: what every forward pass calls, on every cache kind (docs/architecture.md) ----
    # start_token(), write() floats, attend() in floats, quiet() (may the step lock the heap), reset(), close(),
    # and on the caches the integer paths build (kvedge.cacheq8.KVCacheQ8) store_q8() of int8 codes, attend_q8() in
    # integers and their bind_q8() / bind_query(); `chunks` says whether prompts in chunks (kvedge.model.prefill)
    # may place their tokens here.

    chunks = True

    def attach(self, att, scores=None):
        """The attention loop attend() and attend_q8() run (kvedge.attention.Attention, kvedge.floatatt's, or a
        caller's with step(layer, q, out[, scores])) and an eviction policy's per-slot scores (or None)."""
        self.att = att
        self.scores = scores

    def attend(self, layer, q, out):
        """Float attention of `layer` for query q (heads*head_dim) into out, over every cached token."""
        if self.scores is None:
            self.att.step(layer, q, out)
        else:
            self.att.step(layer, q, out, self.scores)

    def quiet(self):
        """Whether the next token's step allocates nothing: past the f32 prefix (its writes allocate) and with
        room (start_token() will not raise: its exception must not become a MemoryError)."""
        return self.n_seen >= self.P and self.has_room()

    def close(self):
        """Nothing to release: the arena is RAM (a tiered cache closes its files)."""

    # ---- stats ----

    def stats(self):
        return {
            "total_bytes": len(self.arena),
            "used_bytes": self.used_bytes,
            "peak_bytes": self.peak_bytes,
            "padding_bytes": self.padding_bytes,
            "tokens_seen": self.n_seen,
            "tokens_cached": self.n_cached,
            "evictions": self.evictions,
            "alloc_failures": self.alloc_failures,
        }

    def stats_json(self):
        """One compact JSON object, keys in a fixed order (for the serial stats stream)."""
        return ('{"total_bytes":%d,"used_bytes":%d,"peak_bytes":%d,"padding_bytes":%d,"tokens_seen":%d,'
                '"tokens_cached":%d,"evictions":%d,"alloc_failures":%d}' % (
                    len(self.arena), self.used_bytes, self.peak_bytes, self.padding_bytes, self.n_seen,
                    self.n_cached, self.evictions, self.alloc_failures))
