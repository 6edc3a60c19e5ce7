"""KVCache's integer-path methods, in their own module so that a float-only run does not hold their bytecode (a
100 KB ESP32 heap ran stories260K with ~600 bytes to spare before they joined kvedge/cache.py; with them there,
nothing fitted). Importing this module adds them to KVCache (kvedge.attention, the integer attention, and
kvedge.model.intpath import it): q8_store_block() and write_q8_at(), the integer forward pass's row writes, and
i8_bases(), the bases the fused attention kernels read. They are the cache's own layout code: like cache.py they
read its region offsets (kvedge's one other owner of the arena's layout)."""
from . import check
from .cache import KVCache, K, V
from .sizes import I8


def q8_store_block(self, p, kc, vc, ks, vs, ncodes, nscales):
    """Set up p (array('i') of kvedge.layout.S_WORDS) for write_q8_at(): a caller's codes buffer of ncodes
    holds K's codes of every KV head from index kc and V's from vc (kv_heads * head_dim each), its scales
    buffer of nscales the f16 scale bits from ks and vs (kv_heads each). Checked here, once."""
    if self.cfg.dtype != I8:
        raise TypeError("write_q8_at needs an i8 cache, this one is %s" % self.cfg.dtype)
    from . import layout as lay  # the integer path's: loaded when a caller sets up a block, not by every cache
    check.out("p", p, lay.S_WORDS, -(1 << 30))
    n = self.H * self.D
    for at in (kc, vc, ks, vs, ncodes, nscales):
        check.index("a buffer index", at)
    if min(kc, vc, ks, vs) < 0 or max(kc, vc) + n > ncodes or max(ks, vs) + self.H > nscales:
        raise ValueError("codes or scales of the block pass the buffers' ends")
    p[lay.S_KVH] = self.H
    p[lay.S_D] = self.D
    p[lay.S_HSTEP] = self.B * self.prow
    p[lay.S_SSTEP] = 2 * self.B
    p[lay.S_KC] = kc
    p[lay.S_VC] = vc
    p[lay.S_KS] = ks
    p[lay.S_VS] = vs
    self._q8codes = max(kc, vc) + n
    self._q8scales = max(ks, vs) + self.H
    self._lay = lay

def write_q8_at(self, layer, codes, scales, p, store=None, slot=-1):
    """write_q8() of the current token's rows in `layer` from buffers laid out as q8_store_block() set p up:
    codes an array('b') (int8 by construction) of at least the block's ncodes, scales an array('H') of its
    nscales, each of this token's scales checked (0..0x7BFF) before a byte moves. store: a q_store kernel
    (kvedge.qkernels_*) to write the rows with, or None (this module's loop). slot >= 0: that live slot's rows
    instead of the current token's (a chunk of prompt tokens placed at once: kvedge.model.prefill). Allocates
    nothing."""
    lay = self._lay  # set by q8_store_block(), on i8 caches only
    if lay is None:
        raise ValueError("no block: call q8_store_block() first")
    cs = self.cur_slot if slot < 0 else slot  # beyond the slots: IndexError below, before a byte moves
    if type(layer) is not int or layer < 0 or layer >= self.L or cs < self.P or self.slot_pos[cs] < 0:
        self._check_layer(layer)
        self._check_current()
        raise ValueError("slot %d: an empty slot, or in the full-precision prefix (write() floats there)" % cs)
    if len(codes) < self._q8codes or len(scales) < self._q8scales:
        raise ValueError("codes or scales shorter than the block q8_store_block() set up")
    ks = p[lay.S_KS]
    vs = p[lay.S_VS]
    top = check.SCALE_MAX
    for i in range(self.H):
        sk = scales[ks + i]
        sv = scales[vs + i]
        if sk < 0 or sk > top or sv < 0 or sv > top:
            check.codes("scales", scales, len(scales), 0, top)
    kb = self.kbits  # the layer's largest K scale (the integer attention's range check), once all are checked
    for i in range(self.H):
        if scales[ks + i] > kb[layer]:
            kb[layer] = scales[ks + i]
    b = cs - self.P
    i = layer * 2 * self.H
    p[lay.S_KROW] = self.bases[i] + b * self.prow
    p[lay.S_VROW] = self.bases[i + self.H] + b * self.prow
    m = self.META + (i * self.B + b) * 2
    p[lay.S_KSC] = m
    p[lay.S_VSC] = m + 2 * self.H * self.B
    if store is None:
        self._put_q8(layer, K, b, codes, p[lay.S_KC], scales, ks)
        self._put_q8(layer, V, b, codes, p[lay.S_VC], scales, vs)
    else:
        store(self.arena, codes, scales, p)

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


KVCache.q8_store_block = q8_store_block
KVCache.write_q8_at = write_q8_at
KVCache.i8_bases = i8_bases
