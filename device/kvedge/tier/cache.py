# A tiered KV cache for ONE sequence (docs/tiered.md): the newest tokens in a hot ring in RAM, older
# ones re-quantized into blocks on flash, and attention over all of them in one online-softmax pass.
#
#   sinks   the first S tokens, kept in RAM for ever: at f32 (the ring's prefix = S) or in the ring's dtype
#           (prefix 0: faster on the integer path); also saved on flash once, with the first block
#   ring    the last W tokens in RAM (a KVCache with window W, any cache dtype)
#   cold    blocks of B older tokens in files, re-quantized to the cold dtype (i4 KIVI: keys per channel over the
#           block, values per token; i8; f16; f32), at most C blocks. When the ring is full and a token needs a
#           slot, the ring's oldest B tokens leave it together as one block (so the ring holds W-B+1..W tokens).
#   at cap  a full store either drops its oldest block ("drop": the stream goes on with a gap after the sinks)
#           or takes a reset point ("reset": everything is forgotten, positions start again at 0).
#
# Attention (step, step_q8): for each cold block, ONE preallocated staging block (a one-layer KVCache of B slots)
# is filled from flash with readinto and folded into every query head's running max/sum/output; then the
# ring's rows are folded and the heads finish. Equal to attention over the concatenated cache; the staging block
# is the only buffer, and the integer path allocates nothing (the running state lives in arrays made once).
#
# The blocks live in a ColdStore (kvedge.tier.store: the file format and its crash safety): a block is committed
# only after its bytes are on flash, and a reopened store is verified whole or refused. After a reboot the ring
# is empty (RAM is gone): the sinks come back from flash, and the sequence resumes at position resume_pos,
# right after the last committed block; tokens that were only in the ring must be fed again if they matter.
from kvedge import check
from kvedge.attention import Attention
from kvedge.sizes import F32, F16, I8, I4, LOWBIT, CACHE_DTYPES
from .sizes import tiered_bytes
from kvedge.cache import KVCache, POS_LIMIT
from .store import ColdStore
from kvedge.compat import float_array, zeros
from kvedge.config import CacheConfig
from .config import check as check_tier
from kvedge.errors import BudgetError
from kvedge.kernels.words import G_P, G_J, G_N, G_LISTED
from kvedge.model.passes import INT_COLD  # cold dtypes attended on the integer path (loaded by tierconf)
from kvedge import quant
from kvedge import kernels as _kernels

_vcold = []  # kvedge.kernels.viper_tier once fold_kernels() loaded it


def fold_kernels():
    """viper_tier (viper: a tier's i8 blocks folded into every query head in one call) where viper runs, else
    None; loaded once (an import allocates), by the integer pass at start-up, and counted in kvedge footprint's
    tiered_int_* figures."""
    if not _vcold and _kernels.runs_here("viper"):
        from kvedge.kernels import viper_tier
        _vcold.append(viper_tier)
    return _vcold[0] if _vcold else None


def _fused(k):
    """fold_kernels() where the kernel module k has the integer pass's fused drivers loaded (its att_preload), else
    None (the float pass, plain and native kinds, CPython, CircuitPython: a head at a time, the same integers)."""
    return fold_kernels() if getattr(k, "att_rows_i8", None) is not None else None


class TieredCache:
    """One sequence: sinks and a hot ring in RAM (`cfg`: a CacheConfig with window W, sinks S, prefix S or 0), older
    tokens in blocks of `block` on flash in the files `path`.* (`cold` dtype, at most `cold_blocks` blocks,
    `at_cap` policy).

    An existing store is reopened (validated whole) unless fresh=True. budget: BudgetError before allocating
    when the RAM formula exceeds it. arena: the ring's arena allocated earlier, exactly its bytes."""

    def __init__(self, cfg, path, block=16, cold=I4, cold_blocks=32, at_cap="drop", tile=16, cold_align=0,
                 budget=None, fresh=False, arena=None, q8=False):
        # q8: the ring takes int8 codes (kvedge.cacheq8.KVCacheQ8: the integer passes' store_q8)
        self._validate(cfg, block, cold, cold_blocks, at_cap, cold_align)
        if budget is not None:
            check.index("budget", budget)
        if not isinstance(path, str) or not path:
            raise TypeError("path must be a file name, got %s" % check.show(path))
        L, H, D, S, W = cfg.layers, cfg.kv_heads, cfg.head_dim, cfg.sinks, cfg.window
        size = tiered_bytes(L, cfg.heads, H, D, W, S, block, cold_blocks, cfg.dtype, cold, cfg.align, cold_align,
                            cfg.group, cfg.prefix == S, cfg.residual)
        if size["flash"] >= 1 << 30:
            raise ValueError("cold store of %d bytes: file offsets must stay below 2**30" % size["flash"])
        if budget is not None and size["ram"] > budget:
            raise BudgetError("tiered cache (ring %d + staging %d + tables %d)" % (
                size["ring"], size["staging"], size["tables"]), size["ram"], budget)
        self.cfg, self.path, self.size = cfg, path, size
        self.L, self.H, self.D, self.S, self.W, self.B, self.C = L, H, D, S, W, block, cold_blocks
        self.heads = cfg.heads
        self.group = cfg.heads // H
        self.cold, self.at_cap, self.cold_align = cold, at_cap, cold_align
        if q8:
            from kvedge.cacheq8 import KVCacheQ8 as Ring
        else:
            Ring = KVCache
        self.ring = Ring(cfg, arena=arena)  # arena: the ring's, allocated earlier (KVCache(arena=...))
        self.stg = KVCache(CacheConfig(1, cfg.heads, H, D, block, cold, align=cold_align, group=block))
        for _ in range(block):  # the staging block's slots are always live: each read refills all of them
            self.stg.start_token()
        self.rec = memoryview(self.stg.arena)[self.stg.base(0, 0, 0):]  # its rows and their metadata
        self.rb = len(self.rec)
        self.att = Attention(self.ring, tile)
        self.ring.attach(self.att)
        self.int_ok = self.att.int_ok and cold in INT_COLD
        if self.int_ok and cold == I4:
            self.att.need_conversion()
        # tables (counted by budget.tiered_bytes)
        self.kbuf = zeros("f", H * D)
        self.vbuf = zeros("f", H * D)
        self.fst = float_array(2 * cfg.heads)  # no 'd' on small CircuitPython builds
        self.facc = float_array(cfg.heads * D)
        if self.int_ok:
            self.ist = zeros("i", 5 * cfg.heads)
            self.iaccs = [zeros("i", D) for _ in range(cfg.heads)]
        self.q16 = quant.f16_bits_down(quant.F16_MAX / 127.0)  # i8 scales whose rows fit an f16/i4/i2 cold store
        self.clim = check.F32_MAX if cold == F32 else self.stg.vlim  # what a re-quantized row may hold
        self.closed = False
        self.demoted = self.drops = self.cap_resets = 0
        lay = (CACHE_DTYPES.index(cold), L, H, D, block, cold_blocks, S, cold_align, size["sink_row"] if S else 0)
        self.store = ColdStore(path, lay, size, self.rec, fresh)
        st = self.store
        r = self.ring
        if st.saved:  # a reopened store: the sinks come back, the sequence resumes after the last block
            st.load_sinks(self._sink_runs())
            for s in range(S):
                r._occupy(s, s)
        if st.count or st.k0:
            r.n_seen = S + (st.k0 + st.count) * block
            if r.kivi:  # KIVI's residual starts empty at the resume point (a block start: whole groups before it)
                g = r.n_seen - r.P - (r.n_seen - r.P) % r.G
                for layer in range(L):
                    r.res_lo[layer] = r.res_hi[layer] = g

    @staticmethod
    def _validate(cfg, block, cold, cold_blocks, at_cap, cold_align):
        if not isinstance(cfg, CacheConfig):
            raise TypeError("cfg must be a CacheConfig, got %s" % type(cfg).__name__)
        check_tier(cfg, block, cold, cold_blocks, at_cap, cold_align)

    @classmethod
    def from_plan(cls, doc, path, budget=None, fresh=False):
        """From a `kvedge plan --out` document whose kind is "tiered"."""
        if not isinstance(doc, dict):
            raise TypeError("plan must be a dict (a kvedge plan --out document), got %s" % check.show(doc))
        t = doc.get("tier") or {}
        if doc.get("kind") != "tiered" or t.get("kind") != "tiered":
            raise ValueError("plan kind is %r, not 'tiered'" % (doc.get("kind"),))
        return cls(CacheConfig.from_dict(doc["cache"]), path, t["block"], t["cold_dtype"], t["cold_blocks"],
                   t["at_cap"], cold_align=t.get("cold_align", 0), budget=budget, fresh=fresh)

    # ---- positions ----

    @property
    def resume_pos(self):
        """The next position this cache will give (after a reopen: right after the last committed block)."""
        return self.ring.n_seen

    def start_token(self):
        """Reserve the next position; when its ring slot is taken, the ring's oldest block goes to flash first
        (or, at the cold cap, the oldest cold block is dropped / a reset point is taken). Returns the position."""
        self._check_open()
        r = self.ring
        pos = r.n_seen
        if pos >= POS_LIMIT:  # the ring refuses it (counted): before a block moves to flash
            return r.start_token()
        if pos >= self.S:
            slot = self.S + (pos - self.S) % self.W
            if r.slot_pos[slot] >= 0:
                self._demote(slot)
        return r.start_token()

    def quiet(self):
        """Whether the next start_token() neither moves a block to flash (nor takes a reset point) nor raises, and
        its position is past an f32 prefix (whose writes allocate): a step that allocates nothing. The integer
        pass runs such steps with the heap locked (kvedge.model.pass_int.Forward.step)."""
        r = self.ring
        pos = r.n_seen
        if self.closed or pos >= POS_LIMIT or pos < r.P:
            return False
        return pos < self.S or r.slot_pos[self.S + (pos - self.S) % self.W] < 0

    def _demote(self, slot):
        r = self.ring
        B = self.B
        p0 = r.slot_pos[slot]
        k = (p0 - self.S) // B
        st = self.store
        if (p0 - self.S) % B or k != st.k0 + st.count:
            raise AssertionError("ring slot %d holds position %d, not the start of block %d"
                                 % (slot, p0, st.k0 + st.count))
        drop = 0
        if st.count == self.C:
            if self.at_cap == "reset":
                self.reset()
                self.cap_resets += 1
                return
            drop = 1  # the oldest block goes in the same commit that adds this one: a failure drops nothing
        try:
            for layer in range(self.L):
                self._encode(layer, p0)
                st.write_record(k, layer)
        finally:
            self._stage_ready()
        sinks = None
        if self.S and not st.saved:
            sinks = self._sink_runs()
        st.end_block(k, sinks)
        st.commit(st.k0 + drop, st.count + 1 - drop, st.saved or sinks is not None)
        self.drops += drop
        for t in range(B):
            r.release_slot(slot + t)
        self.demoted += B

    def _sink_runs(self):
        """The ring's bytes that hold the sinks, as memoryviews: its f32 prefix region, or (sinks in the ring's
        dtype) the first S rows of every layer, K|V and KV head, then their metadata: i8 scales; i4/i2 scales
        and zeros of the value rows, then of the key rows (per row) or of the sinks' key groups (KIVI: per
        channel). Their total is budget.tiered_bytes()'s sinks record without its tag."""
        r = self.ring
        mv = memoryview(r.arena)
        S = self.S
        L, H = r.L, r.H
        if r.P:  # the prefix region is [layer][K|V][kv_head][p < P = S]
            return [mv[r.prefix_at(0, 0, 0, 0):r.prefix_at(L - 1, 1, H - 1, S - 1) + r.f32_pitch()]]
        runs = []
        for i in range(2 * L * H):  # the rows of every (layer, K|V, KV head), in the arena's order
            layer, kv, h = i // (2 * H), (i // H) % 2, i % H
            runs.append(mv[r.row_at(layer, kv, h, 0):r.row_at(layer, kv, h, S)])
        if r.cfg.dtype == I8:  # their scales, in the same order
            for i in range(2 * L * H):
                layer, kv, h = i // (2 * H), (i // H) % 2, i % H
                runs.append(mv[r.scale_at(layer, kv, h, 0):r.scale_at(layer, kv, h, S)])
        elif r.lowbit:  # the value rows' scales and zeros, then the key rows' (KIVI: the sinks' whole key groups)
            for kv in (1, 0):
                for i in range(L * H):
                    runs.append(mv[r.scale_at(i // H, kv, i % H, 0):r.scale_at(i // H, kv, i % H, S)])
        return runs

    def _encode(self, layer, p0):
        """The staging block := tokens p0..p0+B-1 of `layer`, read from the ring and re-quantized (the staging
        KVCache's own write path; i4 then quantizes its one KIVI group of B tokens: quantize_residual). A cold
        store in the ring's own dtype (f32, f16, i8) takes the rows and scales verbatim instead."""
        r = self.ring
        st = self.stg
        st.reset()
        if self.cold == r.cfg.dtype and not r.lowbit:  # i4/i2 rings keep KIVI groups: re-quantized per block
            self._copy_rows(layer, p0)
            return
        D = self.D
        kb = self.kbuf
        vb = self.vbuf
        row = self.att.row
        for t in range(self.B):
            s = r.slot_of(p0 + t)
            for h in range(self.H):
                r.read_slot(layer, h, s, 0, row)
                self._clamp(row, kb, h * D)
                r.read_slot(layer, h, s, 1, row)
                self._clamp(row, vb, h * D)
            st.start_token()
            st.write(0, kb, vb)
        st.quantize_residual()

    def _copy_rows(self, layer, p0):
        """Rows (and i8 scales) of tokens p0.. of `layer` copied byte for byte from the ring into the staging
        block: no second rounding, and no float work. A block's tokens hold B adjacent ring slots (the window is
        whole blocks, tierconf), so each (K|V, KV head) is one run of rows (where both pad rows alike; else a row
        at a time) and one run of scales."""
        r = self.ring
        st = self.stg
        am = memoryview(r.arena)
        sm = memoryview(st.arena)
        B = self.B
        b0 = r.slot_of(p0) - r.P
        pitch = r.row_pitch()
        whole = pitch == st.row_pitch()
        n = B * pitch if whole else r.row
        for _ in range(B):
            st.start_token()
        for kv in (0, 1):
            for h in range(self.H):
                for t in range(1 if whole else B):
                    o = st.row_at(0, kv, h, t)
                    src = r.row_at(layer, kv, h, b0 + t)
                    sm[o:o + n] = am[src:src + n]
                if self.cold == I8:
                    o = st.scale_at(0, kv, h, 0)
                    src = r.scale_at(layer, kv, h, b0)
                    sm[o:o + 2 * B] = am[src:src + 2 * B]

    def _clamp(self, row, dst, o):
        """dst[o:o+D] = row, saturated at the cold range: a value that fit it when written can come back from an
        i8/i4/i2 ring a rounding step beyond it (65504 from an i8 row reads 65532), which the cold row then
        saturates instead of refusing the block half-way through a demotion."""
        lim = self.clim
        nlim = -lim
        for i in range(self.D):
            x = row[i]
            if x > lim:
                x = lim
            elif x < nlim:
                x = nlim
            dst[o + i] = x

    def _check_open(self):
        if self.closed:
            raise ValueError("tiered cache %r is closed" % (self.path,))

    def _stage_ready(self):
        st = self.stg
        if st.n_cached != self.B or st.res_hi[0] > st.res_lo[0]:  # an encode did not finish: a block again
            st.reset()
            for _ in range(self.B):
                st.start_token()

    def reset(self):
        """A reset point: forget every token, hot and cold (the empty state is committed to flash)."""
        self._check_open()
        self.store.commit(0, 0, False)
        self.ring.reset()

    # ---- writes ----

    def write(self, layer, k, v):
        """The current token's K and V for one layer (flat kv_heads*head_dim floats each). Values must also fit the
        cold dtype (checked now, not when the token leaves the ring)."""
        self._check_open()
        r = self.ring
        r._check_layer(layer)
        r._check_current()
        r._check_rows(k, v)
        if r.cur_slot >= self.S:
            self.stg._check_rows(k, v)
        r.write(layer, k, v)

    def write_q8(self, layer, k_codes, k_scales, v_codes, v_scales):
        """i8 rings: pre-quantized rows (see KVCache.write_q8). Allocates nothing."""
        self._check_open()
        r = self.ring
        r.check_write_q8(layer, k_codes, k_scales, v_codes, v_scales)
        if (self.cold == F16 or self.cold in LOWBIT) and r.cur_slot >= self.S:
            top = self.q16  # no tuple of the two scales' arrays: it would allocate (steps run heap-locked)
            for h in range(self.H):
                if k_scales[h] > top or v_scales[h] > top:
                    raise ValueError("scale bits %d: 127 * scale exceeds the f16 range of the %s cold store"
                                     % (max(k_scales[h], v_scales[h]), self.cold))
        r._write_q8(layer, k_codes, k_scales, v_codes, v_scales)

    def append(self, ks, vs):
        """A new token with K and V for every layer; every layer is validated before anything moves."""
        self._check_open()
        r = self.ring
        r._check_layers(ks, vs)
        if r.n_seen >= self.S:
            for layer in range(self.L):
                self.stg._check_rows(ks[layer], vs[layer])
        pos = self.start_token()
        for layer in range(self.L):
            r.write(layer, ks[layer], vs[layer])
        return pos

    # ---- reads ----

    def read(self, layer, head, pos, kv, out):
        """Dequantized K (kv=0) or V (kv=1) row of position pos, hot or cold, into out[0:head_dim]."""
        self._check_open()
        r = self.ring
        r._check_read(layer, head, kv, out)
        check.index("pos", pos)
        if pos < 0 or pos >= r.n_seen:
            raise IndexError("position %d out of range (0..%d)" % (pos, r.n_seen - 1))
        k = (pos - self.S) // self.B
        st = self.store
        if pos >= self.S and st.k0 <= k < st.k0 + st.count:
            st.load(k, layer)
            self.stg.read_slot(0, head, (pos - self.S) % self.B, kv, out)
            return
        r.read(layer, head, pos, kv, out)

    def positions(self, out):
        """The live positions in increasing order (sinks, cold blocks, ring) into out; returns their count."""
        r = self.ring
        check.out("out", out, r.n_cached + self.store.count * self.B, max(r.n_seen - 1, 0))
        hot = zeros("i", r.N)
        nh = r.positions(hot)
        n = 0
        j = 0
        while j < nh and hot[j] < self.S:
            out[n] = hot[j]
            n += 1
            j += 1
        p = self.S + self.store.k0 * self.B
        for i in range(self.store.count * self.B):
            out[n] = p + i
            n += 1
        while j < nh:
            out[n] = hot[j]
            n += 1
            j += 1
        return n

    # ---- the decode interface (kvedge.caches; docs/architecture.md): start_token, write, store_q8, attend,
    # attend_q8, quiet, reset, close ----

    chunks = False  # prompt tokens one at a time: any of them may move a block to flash

    def bind_query(self, qc, qs, oq, oe):
        """attend_q8()'s buffers, checked now (its steps check them again: they are cheap beside a tier's)."""
        if not self.int_ok:
            raise ValueError("the integer path needs an i8, i4 or i2 ring and an i8 or i4 cold store")
        self.att._check_q8(qc, qs, oq, oe)

    def bind_q8(self, p, kc, vc, ks, vs, codes, scales, q_store, qc, qs, oq, oe):
        """The integer pass's buffers (kvedge.q8rows.bind_q8). A cold store of i8 takes the ring's rows as a plain
        cache does (store_q8 is then the ring's own, bound here); into f16 or low-bit cold blocks they go through
        write_q8's checks (their scales must fit the cold range)."""
        if not self.int_ok:
            raise ValueError("the integer forward pass needs a tiered cache with i8 or i4 cold blocks")
        r = self.ring
        r.bind_q8(p, kc, vc, ks, vs, codes, scales, q_store, qc, qs, oq, oe)
        n = self.H * self.D
        mc = memoryview(codes)
        ms = memoryview(scales)
        self._kc, self._vc = mc[kc:kc + n], mc[vc:vc + n]
        self._ks, self._vs = ms[ks:ks + self.H], ms[vs:vs + self.H]
        if self.cold == I8:
            self.store_q8 = r.store_q8  # the ring's own: no call between (bound once, here)
            fold_kernels()  # i8 cold blocks' fold: at start-up rather than at the first step

    def store_q8(self, layer, codes, scales, slot=-1):
        """This token's rows as int8 codes from the buffers bind_q8() set up, through write_q8's checks."""
        self.write_q8(layer, self._kc, self._ks, self._vc, self._vs)

    def q8_fits(self, layer, qs):
        return True  # step_q8 takes every query (its cold blocks are i8 or i4 KIVI rows)

    def attend(self, layer, q, out):
        self.step(layer, q, out)

    def attend_q8(self, layer, qc, qs, oq, oe, span=-1):
        self.step_q8(layer, qc, qs, oq, oe)

    # ---- attention ----

    def step(self, layer, q, out):
        """Float attention of one layer over sinks, cold blocks and ring: out as Attention.step."""
        self._check_open()
        att = self.att
        r = self.ring
        st = self.stg
        att._check(layer, q, out, self.heads * self.D)
        self._check_some()
        D = self.D
        B = self.B
        fst = self.fst
        facc = self.facc
        for h in range(self.heads):
            att.begin(fst, 2 * h, facc, h * D)
        cs = self.store
        reads = cs.reads
        try:
            for i in range(cs.count):
                cs.load(cs.k0 + i, layer)
                for h in range(self.heads):
                    att.fold_rows(st, 0, h // self.group, q, h * D, st.slot_pos, -1, B, fst, 2 * h, facc, h * D)
            for h in range(self.heads):
                att.fold_rows(r, layer, h // self.group, q, h * D, r.slot_pos, -1, r.N, fst, 2 * h, facc, h * D)
                att.finish(layer, fst, 2 * h, facc, h * D, out, h * D)
        except Exception:
            cs.reads = reads  # a refused step counts no reads (its blocks were only scratch)
            raise

    def step_q8(self, layer, qc, qs, out_q, out_exp):
        """Integer attention (i8/i4 ring, i8/i4 cold): out_q * 2**out_exp as Attention.step_q8. Each cold block
        is read once per layer, its rows converted once per KV head, and folded into every query head; allocates
        nothing; ints stay within +-2**30."""
        self._check_open()
        if not self.int_ok:
            raise ValueError("the integer path needs an i8, i4 or i2 ring and an i8 or i4 cold store")
        att = self.att
        r = self.ring
        r._check_layer(layer)
        att._check_q8(qc, qs, out_q, out_exp)
        self._check_some()
        ist = self.ist
        accs = self.iaccs
        D = self.D
        own = att.iacc
        cs = self.store
        reads = cs.reads
        ok = False
        try:
            # where the integer pass's fused drivers are loaded, and both tiers hold plain i8 rows: every query head
            # in one call a cold block, then the ring (viper_tier.att_fold_i8); else a head at a time
            v = _fused(att.k) if att.fused and self.cold == I8 and r.cfg.dtype == I8 and not r.P else None
            if v is not None:
                if cs.adler is not v.adler:
                    cs.adler = v.adler  # its blocks' checksums in viper too (the same sums)
                v.att_tier_i8(self, layer, qc, qs, out_q, out_exp)
                ok = True
                return
            for h in range(self.heads):
                att.q8_begin()
                att.q8_save(ist, 5 * h)
                a = accs[h]
                for i in range(D):
                    a[i] = 0
            for i in range(cs.count):
                cs.load(cs.k0 + i, layer)
                for kvh in range(self.H):
                    self._cold_q8(kvh, qc, qs)
            for h in range(self.heads):
                att.q8_head(h, qs)
                att.q8_load(ist, 5 * h)
                att.iacc = accs[h]
                att.q8_rows(r, layer, h // self.group, qc, r.slot_pos, -1, r.N)
                if att.lsum <= 0:
                    raise ValueError("no cached tokens to attend to in layer %d" % layer)
                att.q8_finish(h, out_q, out_exp)
            ok = True
        finally:
            att.iacc = own
            if not ok:
                cs.reads = reads  # a refused step counts no reads

    def _cold_q8(self, kvh, qc, qs):
        """Fold KV head kvh of the staging block into its query heads (without the fused kernels, and for i4
        blocks): each tile is gathered (i8: by the att_fill_i8 kernel; i4: pointed at and converted to int8
        codes) once, then folded for every query head that reads it."""
        att = self.att
        st = self.stg
        tile = att.tile
        if self.cold == I8:
            geo = att.geo
            att.head_geo(st, 0, kvh)
            geo[G_P] = 0
            geo[G_J] = 0
            geo[G_N] = self.B
            geo[G_LISTED] = 0
            while att.k.att_fill_i8(st.slot_pos, tile, geo):
                self._fold_q8(kvh, st.arena, qc, qs)
            return
        ts = att.tslot
        T = att.T
        t0 = 0
        while t0 < self.B:
            nt = self.B - t0
            if nt > T:
                nt = T
            for t in range(nt):
                ts[t] = t0 + t
            self._fold_q8(kvh, att._prep(st, 2, 0, kvh, nt), qc, qs)
            t0 += nt

    def _fold_q8(self, kvh, src, qc, qs):
        """The tile as it stands, into the running state of every query head reading KV head kvh."""
        att = self.att
        ist = self.ist
        g = self.group
        for h in range(kvh * g, kvh * g + g):
            att.q8_head(h, qs)
            att.q8_load(ist, 5 * h)
            att.iacc = self.iaccs[h]
            att._tile_q8(src, qc)
            att.q8_save(ist, 5 * h)

    def _check_some(self):
        if not self.ring.n_cached and not self.store.count:
            raise ValueError("no cached tokens to attend to")

    # ---- stats ----

    def ram_bytes(self):
        """RAM the tiered cache holds: ring + staging arenas + its tables (== budget.tiered_bytes()['ram'])."""
        n = len(self.ring.arena) + len(self.stg.arena) + 4 * (len(self.kbuf) + len(self.vbuf))
        n += 8 * (len(self.fst) + len(self.facc))
        if self.int_ok:
            n += 4 * (len(self.ist) + self.heads * self.D)
        return n

    def stats(self):
        r = self.ring
        st = self.store
        d = r.stats()
        d["total_bytes"] = self.size["ram"]
        d["tokens_cached"] = r.n_cached + st.count * self.B
        d["evictions"] = r.evictions + self.drops * self.B
        d["hot_tokens"] = r.n_cached
        d["cold_tokens"] = st.count * self.B
        d["cold_cap_tokens"] = self.C * self.B
        d["flash_bytes"] = st.used()
        d["flash_capacity"] = self.size["flash"]
        d["flash_reads"] = st.reads
        d["flash_writes"] = st.writes
        d["demoted"] = self.demoted
        d["cold_drops"] = self.drops
        d["cold_resets"] = self.cap_resets
        return d

    def stats_json(self):
        """The ring's stats line (totals for the whole cache) with the tiers' keys appended, fixed order."""
        r = self.ring
        st = self.store
        return ('{"total_bytes":%d,"used_bytes":%d,"peak_bytes":%d,"padding_bytes":%d,"tokens_seen":%d,'
                '"tokens_cached":%d,"evictions":%d,"alloc_failures":%d,"hot_tokens":%d,"cold_tokens":%d,'
                '"cold_cap_tokens":%d,"flash_bytes":%d,"flash_capacity":%d,"flash_reads":%d,"flash_writes":%d,'
                '"demoted":%d,"cold_drops":%d,"cold_resets":%d}' % (
                    self.size["ram"], r.used_bytes, r.peak_bytes, r.padding_bytes, r.n_seen,
                    r.n_cached + st.count * self.B, r.evictions + self.drops * self.B, r.alloc_failures,
                    r.n_cached, st.count * self.B, self.C * self.B, st.used(), self.size["flash"],
                    st.reads, st.writes, self.demoted, self.drops, self.cap_resets))

    def close(self):
        self.store.close()
        self.closed = True
