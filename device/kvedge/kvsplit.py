# K and V in formats of their own (issue 45 item 5; llama.cpp's -ctk / -ctv): a config (SplitConfig), its arena
# formula (split_bytes) and its cache (SplitCache). Only a split cache imports this module: a run of a shared
# format loads none of it (the core's cache, config and sizes do not know splits exist; kvedge footprint).
#
# Keys are the sensitive half (docs/quality.md): keys may be quantized per channel over groups of G tokens behind
# KIVI's f32 residual (i8: 8-bit asymmetric codes 0..255; i4, i2: as kvedge.kivi's), values per token.
#
# Arena layout (len(arena) == split_bytes(...) exactly):
#
#   PREFIX    f32 rows of the first P positions      [layer][K|V][kv_head][p < P]        padded to align
#   RESIDUAL  f32 ring of the keys' residual         [layer][K|V][kv_head][r < R+G-1]    padded to align
#   DATA      rows, each half in its own format      [layer][K|V][kv_head][b < B]        each half's padded row
#   KMETA     keys per token: i8 f16 scale, i4/i2 f16 scale+zero, per row   [layer][kv_head][b]     2 | 4 bytes
#             keys per channel: f16 scale+zero per channel and group       [layer][kv_head][g][ch] 4 bytes
#   VMETA     values: i8 f16 scale, i4/i2 f16 scale+zero, per row          [layer][kv_head][b]     2 | 4 bytes
#
# f32 and f16 halves have no metadata. Slots, windows, sinks and the residual's rule are kvedge.cache's.

from . import check, quant
from .cache import KVCache
from .config import CacheConfig
from .errors import BudgetError
from .kivi import asym_code, asym_params, close_keys, decode_row, put_meta
from .sizes import (CACHE_DTYPES, CODE_BITS, F16, F32, FULL, I8, INT_CODES, LOWBIT, META_BYTES, QK, K, V, align_up,
                    cache_slots, check_dtype, check_int, residual_rows, row_bytes)
from .compat import zeros

_FIELDS = ("layers", "heads", "kv_heads", "head_dim", "max_tokens", "k_dtype", "v_dtype", "window", "sinks", "align",
           "group", "residual", "prefix")


def half_layout(head_dim, dtype, align, per_channel):
    """One half (K or V): (row bytes, padded row bytes, metadata bytes per row, metadata bytes per channel and
    group). i8 rows per token: an f16 scale (symmetric codes); i4/i2 per token: f16 scale and zero (asymmetric);
    keys per channel (i8/i4/i2): an f16 scale and zero per channel and group instead; f32, f16: none."""
    row = row_bytes(head_dim, dtype)
    if per_channel:
        return row, align_up(row, align), 0, 2 * META_BYTES
    meta = META_BYTES if dtype == I8 else (2 * META_BYTES if dtype in LOWBIT else 0)
    return row, align_up(row, align), meta, 0


def split_bytes(layers, kv_heads, head_dim, tokens, k_dtype, v_dtype, align=64, group=QK, residual=0, prefix=0,
                detail=False):
    """Exact bytes of a split cache holding `tokens` slots per layer: keys in k_dtype (residual R > 0: per channel
    over groups of `group` slots behind an f32 ring of min(R + G - 1, slots) rows of K and V), values in v_dtype,
    `prefix` slots at f32. detail=True: a dict of data, meta, prefix, residual, padding, k, v, total."""
    slots = tokens - prefix
    pairs = layers * kv_heads
    krow, kpad, kmr, kmc = half_layout(head_dim, k_dtype, align, residual > 0)
    vrow, vpad, vmr, _ = half_layout(head_dim, v_dtype, align, False)
    frow = row_bytes(head_dim, FULL)
    pfrow = align_up(frow, align)
    res_rows = residual_rows(group, residual, slots)
    k_meta = pairs * slots * kmr + pairs * ((slots + group - 1) // group) * head_dim * kmc
    v_meta = pairs * slots * vmr
    full = pairs * (prefix + res_rows) * pfrow  # one half's f32 rows
    total = pairs * slots * (kpad + vpad) + k_meta + v_meta + 2 * full
    if not detail:
        return total
    return {"data": pairs * slots * (kpad + vpad), "meta": k_meta + v_meta, "prefix": 2 * pairs * prefix * pfrow,
            "residual": 2 * pairs * res_rows * pfrow,
            "padding": pairs * slots * (kpad - krow + vpad - vrow) + 2 * pairs * (prefix + res_rows) * (pfrow - frow),
            "k": pairs * slots * kpad + full + k_meta, "v": pairs * slots * vpad + full + v_meta, "total": total}


def split_name(k_dtype, v_dtype):
    """A split config's dtype: "K/V" (what plans, rows and the stats print; no shared format is named so)."""
    return "%s/%s" % (k_dtype, v_dtype)


class SplitConfig(CacheConfig):
    """A CacheConfig whose keys and values have formats of their own: k_dtype, v_dtype (f32, f16, i8, i4, i2).
    residual R > 0 (i8, i4, i2 keys; default: group for i4/i2 keys, else 0) quantizes keys per channel over groups
    of `group` tokens behind an f32 residual, as KIVI does; values are per token. A pair the shared formats already
    name (e.g. i4 keys and values) is refused: CacheConfig(dtype=...) builds it. dtype is "K/V" (split_name); a
    `dtype` argument, when given (from_dict of to_dict), must be that name."""

    split = True

    def __init__(self, layers, heads, kv_heads, head_dim, max_tokens, k_dtype=I8, v_dtype=I8, window=0, sinks=0,
                 align=64, group=QK, residual=None, prefix=0, dtype=None):
        check_dtype(k_dtype, CACHE_DTYPES, "k_dtype")
        check_dtype(v_dtype, CACHE_DTYPES, "v_dtype")
        # shape, window, sinks, prefix, align, group: the shared rules (an f32 config of the same shape)
        CacheConfig.__init__(self, layers, heads, kv_heads, head_dim, max_tokens, F32, window, sinks, align, group,
                             0, prefix)
        row_bytes(head_dim, k_dtype)  # raises if head_dim does not pack into whole bytes
        row_bytes(head_dim, v_dtype)
        if residual is None:
            residual = group if k_dtype in LOWBIT else 0
        check_int("residual", residual, 0)
        if residual:
            if k_dtype not in INT_CODES:
                raise ValueError("residual (keys per channel) applies to i8, i4 and i2 keys, got %d for %s keys"
                                 % (residual, k_dtype))
            if residual % group:
                raise ValueError("residual must be 0 or a multiple of group (%d), got %d" % (group, residual))
            try:  # the key groups' tiling: the shared KIVI rule, written once in kvedge.config (head_dim aside)
                CacheConfig(layers, heads, kv_heads, 4, max_tokens, LOWBIT[0], window, sinks, align, group,
                            residual, prefix)
            except ValueError as e:
                raise ValueError(str(e).replace("for i4", "for %s keys per channel" % k_dtype))
        if k_dtype == v_dtype and not (k_dtype == I8 and residual):
            raise ValueError("k_dtype and v_dtype are both %s%s: a shared cache, CacheConfig(dtype=%r)"
                             % (k_dtype, " (keys per channel)" if residual else "", k_dtype))
        name = split_name(k_dtype, v_dtype)
        if dtype is not None and dtype != name:
            raise ValueError("dtype %r does not name k_dtype/v_dtype (%s)" % (dtype, name))
        self.k_dtype = k_dtype
        self.v_dtype = v_dtype
        self.dtype = name
        self.residual = residual
        # session fingerprints: 5 + 5 x K's index + V's (a shared dtype is its index, 0..4)
        self.code = 5 + 5 * CACHE_DTYPES.index(k_dtype) + CACHE_DTYPES.index(v_dtype)

    def nbytes(self, detail=False):
        return split_bytes(self.layers, self.kv_heads, self.head_dim,
                           cache_slots(self.max_tokens, self.window, self.sinks), self.k_dtype, self.v_dtype,
                           self.align, self.group, self.residual, self.prefix, detail)

    def to_dict(self):
        """The shared fields (dtype: the "K/V" name) and k_dtype, v_dtype."""
        d = CacheConfig.to_dict(self)
        d["k_dtype"] = self.k_dtype
        d["v_dtype"] = self.v_dtype
        return d

    @classmethod
    def from_dict(cls, d):
        """Build from to_dict()'s dict (a plan's "cache"); unknown or missing keys are an error."""
        if not isinstance(d, dict):
            raise ValueError("cache config must be a JSON object, got %r" % (d,))
        for k in d:
            if k not in _FIELDS and k != "dtype":
                raise ValueError("unknown cache config field %r" % (k,))
        for k in ("layers", "heads", "kv_heads", "head_dim", "max_tokens", "k_dtype", "v_dtype"):
            if k not in d:
                raise ValueError("cache config is missing %r" % k)
        return cls(**d)

    def __repr__(self):
        return "SplitConfig(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in _FIELDS)


def is_split(d):
    """Whether a cache dict (a plan's "cache") names K and V apart: k_dtype or v_dtype given, or a "K/V" dtype."""
    return "k_dtype" in d or "v_dtype" in d or "/" in str(d.get("dtype", ""))


def from_dict(d):
    """The config of a cache dict, split or shared (a plan's "cache": what plandoc and the host read)."""
    if isinstance(d, dict) and is_split(d):
        return SplitConfig.from_dict(d)
    return CacheConfig.from_dict(d)


def build(cfg, tier=None, q8=False, budget=None, arena=None):
    """kvedge.caches.build's cache for a SplitConfig: a SplitCache. What no split supports is refused here, before
    anything is allocated: a tier (its cold blocks hold one format) and int8-code writes (the integer passes)."""
    if tier is not None:
        raise ValueError("a tiered cache holds one format: K and V apart (%s) need tier None" % cfg.dtype)
    if q8:
        raise ValueError("the integer passes write i8 caches: K and V apart (%s) run the float pass" % cfg.dtype)
    return SplitCache(cfg, budget, arena)


class SplitCache(KVCache):
    """A KVCache whose keys and values each have their own format (a SplitConfig). The decode interface, slots,
    windows, sinks, the f32 prefix, an H2O policy (keys per token only) and sessions are KVCache's; the float
    attention reads it (its rows through _read_slot); the integer path does not (int_ok False)."""

    def __init__(self, cfg, budget=None, arena=None):
        if not isinstance(cfg, SplitConfig):
            raise TypeError("cfg must be a SplitConfig, got %s" % check.show(cfg))
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
        self.dts = (cfg.k_dtype, cfg.v_dtype)
        self.kivi = cfg.residual > 0  # keys per channel behind the f32 residual
        self.lowbit = False  # no shared i4/i2 rows (what the integer attention would convert)
        self.bits = 0
        # bits per asymmetric code, by K|V: i4/i2 rows, keys per channel (i8: 8); 0 for the others
        self.cbits = (8 if self.kivi and cfg.k_dtype == I8 else CODE_BITS.get(cfg.k_dtype, 0),
                      CODE_BITS.get(cfg.v_dtype, 0))
        self.R = residual_rows(G, cfg.residual, B) if self.kivi else 0
        self.NG = B // G if self.kivi else 0
        krow, kpad, kmr, kmc = half_layout(D, cfg.k_dtype, cfg.align, self.kivi)
        vrow, vpad, vmr, _ = half_layout(D, cfg.v_dtype, cfg.align, False)
        self.prows = (kpad, vpad)
        self.metas = (kmr, vmr)
        self.row, self.prow = krow, kpad  # KVCache's names: the keys' row
        self.frow = align_up(row_bytes(D, FULL), cfg.align)
        self.PRE = 0
        self.RES = self.PRE + 2 * L * H * P * self.frow
        self.DATA = self.RES + 2 * L * H * self.R * self.frow
        self.META = self.DATA + L * H * B * (kpad + vpad)
        self.VMETA = self.META + L * H * (self.NG * D * kmc + B * kmr)
        end = self.VMETA + L * H * B * vmr
        if end != need:  # the layout and the formula must agree to the byte
            raise AssertionError("layout %d != formula %d" % (end, need))
        self.arena = arena if arena is not None else bytearray(need)
        self.bases = zeros("i", 2 * L * H)
        off = self.DATA
        for i in range(2 * L * H):
            self.bases[i] = off
            off += B * self.prows[(i // H) & 1]
        self.slot_pos = zeros("i", N)
        self._low = None
        self.res_lo = zeros("i", L)
        self.res_hi = zeros("i", L)
        self.kbits = zeros("H", L)  # stays 0: no integer attention reads a split cache
        self._kmax = False
        self.group_live = zeros("H", self.NG)
        self._f32 = "<%df" % D
        # largest |value| each half may hold: float32, an i8 row's f16 scale, else the f16 range (f16 rows, and
        # the asymmetric codes' f16 zero, keys per channel included)
        self.vlims = (self._vlim(cfg.k_dtype, self.kivi), self._vlim(cfg.v_dtype, False))
        self.vlim = min(self.vlims)
        self.int_ok = False
        self._scratch = zeros("f", max(D, G) if self.kivi else D)
        self._policy = None
        self._lay = None
        self._q8codes = self._q8scales = 0
        self.att = None
        self.scores = None
        self.pre_slot_bytes = 2 * L * H * self.frow
        self.main_slot_bytes = L * H * (kpad + vpad + kmr + vmr)
        self.group_bytes = L * H * D * kmc if self.kivi else 0
        self.padding_bytes = cfg.nbytes(True)["padding"]
        self.evictions = 0
        self.alloc_failures = 0
        self.peak_bytes = 0
        self.reset()

    @staticmethod
    def _vlim(dt, per_channel):
        if dt == F32:
            return check.F32_MAX
        return check.I8_MAX if dt == I8 and not per_channel else check.F16_MAX

    # an eviction policy places single tokens: not into key groups that share per-channel scales
    @property
    def policy(self):
        return self._policy

    @policy.setter
    def policy(self, p):
        if p is not None and self.kivi:
            raise ValueError("H2O cannot evict single tokens from %s keys per channel (groups of %d tokens share "
                             "scales): use residual=0" % (self.cfg.k_dtype, self.G))
        self._policy = p

    # ---- layout ----

    def row_at(self, layer, kv, kvh, b):
        return self.bases[(layer * 2 + kv) * self.H + kvh] + b * self.prows[kv]

    def scale_at(self, layer, kv, kvh, b):
        """Arena offset of DATA row b's metadata: a value row's or a per-token key row's; keys per channel: that of
        channel 0 of the row's group (4 bytes a channel)."""
        if kv == V:
            return self.VMETA + ((layer * self.H + kvh) * self.B + b) * self.metas[V]
        if self.kivi:
            return self.META + ((layer * self.H + kvh) * self.NG + b // self.G) * self.D * 4
        return self.META + ((layer * self.H + kvh) * self.B + b) * self.metas[K]

    # ---- writes ----

    def _check_rows(self, k, v):
        n = self.H * self.D
        check.length("k", k, n)
        check.length("v", v, n)
        check.floats("k", k, n, self.vlims[K])
        check.floats("v", v, n, self.vlims[V])

    def write(self, layer, k, v):
        """Store the current token's K and V for one layer (flat kv_heads*head_dim floats each), each half in its
        format; everything checked first."""
        self._check_layer(layer)
        self._check_current()
        self._check_rows(k, v)
        slot = self.cur_slot
        D = self.D
        if slot < self.P:
            for h in range(self.H):
                self._put_f32(self.prefix_at(layer, K, h, slot), k, h * D)
                self._put_f32(self.prefix_at(layer, V, h, slot), v, h * D)
            return
        if self.kivi:
            self._write_residual(layer, self.slot_pos[slot] - self.P, k, v)
            return
        b = slot - self.P
        for h in range(self.H):
            self.put_row(layer, K, h, b, k, h * D)
            self.put_row(layer, V, h, b, v, h * D)

    def put_row(self, layer, kv, h, b, x, src):
        """x[src:src+D] into DATA row b of (layer, K|V, KV head h), quantized per token in that half's format."""
        off = self.row_at(layer, kv, h, b)
        dt = self.dts[kv]
        if dt == F32:
            self._put_f32(off, x, src)
        elif dt == F16:
            self._put_f16(off, x, src)
        elif dt == I8:
            self._put_i8(off, self.scale_at(layer, kv, h, b), x, src)
        else:  # i4 / i2: asymmetric codes with the row's scale and zero (kvedge.kivi's)
            bits = self.cbits[kv]
            top = (1 << bits) - 1
            sb, zb = asym_params(x, src, self.D, top)
            a = self.arena
            put_meta(a, self.scale_at(layer, kv, h, b), sb, zb)
            s = quant.f16_value(sb)
            z = quant.f16_value(zb)
            inv = 1.0 / s if s else 0.0
            per = 8 // bits
            i = 0
            for j in range(self.D // per):
                byte = 0
                for t in range(per):
                    byte |= asym_code(x[src + i], z, inv, top) << (bits * t)
                    i += 1
                a[off + j] = byte

    def _write_residual(self, layer, s, k, v):
        """Token s (= pos - P) into the f32 residual ring; first the group that leaves it is quantized."""
        lo = self.res_lo
        if s >= self.res_hi[layer]:
            while s - lo[layer] >= self.R:
                self._close_group(layer, lo[layer])
                lo[layer] += self.G
            self.res_hi[layer] = s + 1
        r = s % self.R
        for h in range(self.H):
            self._put_f32(self.residual_at(layer, K, h, r), k, h * self.D)
            self._put_f32(self.residual_at(layer, V, h, r), v, h * self.D)

    def quantize_residual(self):
        """Every whole group waiting in the residual, in every layer, quantized; returns how many."""
        n = 0
        if self.kivi:
            for layer in range(self.L):
                while self.res_hi[layer] - self.res_lo[layer] >= self.G:
                    self._close_group(layer, self.res_lo[layer])
                    self.res_lo[layer] += self.G
                    n += 1
        return n

    def _close_group(self, layer, lo):
        """Residual tokens lo..lo+G-1 into their DATA slots: values per token in their format, keys per channel
        over the group (asymmetric codes of cbits[K] bits, an f16 scale and zero per channel: kivi.close_keys)."""
        G, R = self.G, self.R
        b0 = self._natural_slot(self.P + lo) - self.P  # groups tile the slots
        rowf = self._scratch
        for h in range(self.H):
            for r in range(G):
                self._get_f32(self.residual_at(layer, V, h, (lo + r) % R), rowf)
                self.put_row(layer, V, h, b0 + r, rowf, 0)
            close_keys(self, layer, h, lo, b0, rowf, self.frow, self.prows[K], self.cbits[K])

    # ---- reads ----

    def _read_slot(self, layer, head, slot, kv, out):
        """read() by slot, without checks (the float attention's access): each half decoded in its format."""
        if slot < self.P:
            self._get_f32(self.prefix_at(layer, kv, head, slot), out)
            return
        b = slot - self.P
        if self.kivi:
            s = self.slot_pos[slot] - self.P
            if self.res_lo[layer] <= s < self.res_hi[layer]:
                self._get_f32(self.residual_at(layer, kv, head, s % self.R), out)
                return
        off = self.row_at(layer, kv, head, b)
        dt = self.dts[kv]
        a = self.arena
        D = self.D
        if dt == F32:
            self._get_f32(off, out)
        elif dt == F16:
            for i in range(D):
                out[i] = quant.f16_value(a[off + 2 * i] | (a[off + 2 * i + 1] << 8))
        elif dt == I8 and not (kv == K and self.kivi):  # symmetric codes, the row's f16 scale
            m = self.scale_at(layer, kv, head, b)
            sc = quant.f16_value(a[m] | (a[m + 1] << 8))
            for i in range(D):
                c = a[off + i]
                out[i] = (c - 256 if c > 127 else c) * sc
        else:  # asymmetric codes: the row's scale and zero, or (keys per channel) each channel's in the group
            decode_row(a, self.scale_at(layer, kv, head, b), off, D, self.cbits[kv], 4 if kv == K and self.kivi else 0,
                       out)
