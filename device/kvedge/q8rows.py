"""The i8 cache's rows written as int8 codes with f16 scale bits, from a caller's block of codes: the code of
kvedge.cacheq8.KVCacheQ8's methods (the checked writes of one token's codes are kvedge.q8writes'), in a module of its own so that a run that writes floats does not hold its bytecode (a 100 KB ESP32 heap
ran stories260K with ~600 bytes to spare before these joined kvedge/cache.py; with them there, nothing fitted).
Each function takes the cache as `self`: it is the cache's own layout code, reading its region offsets like
cache.py (kvedge's one other owner of the arena's layout). It imports nothing of kvedge.cache."""
from . import check
from .sizes import I8, K, V


def q8_store_block(self, p, kc, vc, ks, vs, ncodes, nscales):
    """Set up p (array('i') of kvedge.kernels.words.S_WORDS) for write_q8_at(): a caller's codes buffer of ncodes
    holds K's codes of every KV head from index kc and V's from vc (kv_heads * head_dim each), its scales
    buffer of nscales the f16 scale bits from ks and vs (kv_heads each). Checked here, once."""
    if self.cfg.dtype != I8:
        raise TypeError("write_q8_at needs an i8 cache, this one is %s" % self.cfg.dtype)
    from .kernels import words as lay  # the integer path's: loaded when a caller sets up a block, not by every cache
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

def write_q8_at(self, layer, codes, scales, slot=-1, p=None, store=None):
    """write_q8() of the current token's rows in `layer` from buffers laid out as q8_store_block() set p up:
    codes an array('b') (int8 by construction) of at least the block's ncodes, scales an array('H') of its
    nscales, each of this token's scales checked (0..0x7BFF) before a byte moves. store: a q_store kernel
    (kvedge.qkernels_*) to write the rows with, or None (this module's loop); p None: the block and kernel
    bind_q8() bound. slot >= 0: that live slot's rows instead of the current token's (a chunk of prompt tokens
    placed at once: kvedge.model.prefill). Allocates nothing."""
    if p is None:
        p = self._sp
        store = self._q_store
    lay = self._lay  # set by q8_store_block(), on i8 caches only
    if lay is None or p is None:
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

def bind_query(self, qc, qs, oq, oe):
    """attend_q8()'s buffers, checked once here (its steps then skip the checks): int8 query codes, their f16
    scale bits per head, the output's ints and exponents per head. Where the attention has the interface's
    attend_q8 (kvedge.attention.Attention), it becomes this cache's (bound once, here: no call between)."""
    self.att.check_step_q8(0, qc, qs, oq, oe, self.scores)
    self._qc, self._qs, self._oq, self._oe = qc, qs, oq, oe
    fast = getattr(self.att, "attend_q8", None)
    if fast is not None:
        self.attend_q8 = fast


def attend_q8(self, layer, qc, qs, oq, oe, span=-1):
    """Integer attention (out = oq * 2**oe per head) of int8 query codes; span >= 0: the slots below it only
    (a chunk's token attends to the tokens before it). Buffers other than those bind_query() checked are checked
    here (a caller's attention without attend_q8 runs its q8_step)."""
    if qc is not self._qc or qs is not self._qs or oq is not self._oq or oe is not self._oe:
        self.att.check_step_q8(layer, qc, qs, oq, oe, self.scores)
    if type(layer) is not int or layer < 0 or layer >= self.L:
        self._check_layer(layer)
    self.att.q8_step(layer, qc, qs, oq, oe, self.scores, None, -1, self.span if span < 0 else span)


def q8_fits(self, layer, qs):
    """Whether attend_q8 takes a query of f16 scale bits qs in `layer` (its attention's range,
    kvedge.attention.Q8_RANGE; an attention without one takes every query)."""
    fits = getattr(self.att, "q8_fits", None)
    return True if fits is None else fits(layer, qs)


def store_q8(self, layer, codes, scales, slot=-1):
    """The decode interface's int8 write (docs/architecture.md): this token's K and V rows of `layer` from the
    buffers bind_q8() checked (the block in self._sp, stored by its q_store kernel). A position in the f32 prefix
    takes the codes dequantized (allocates: such a step is never heap-locked). slot >= 0: that live slot's rows
    (kvedge.model.prefill)."""
    cs = self.cur_slot if slot < 0 else slot
    if cs < self.P and cs >= 0:
        from . import q8prefix  # only while the prefix fills (those steps allocate: never heap-locked)
        q8prefix.store(self, layer, codes, scales)
        return
    self.write_q8_at(layer, codes, scales, slot)


def bind_q8(self, p, kc, vc, ks, vs, codes, scales, q_store, qc, qs, oq, oe):
    """The integer pass's buffers, checked once: its codes and scales (K's codes from index kc, V's from vc; their
    scales from ks and vs) go through p (array('i') of kvedge.kernels.words.S_WORDS) and the kernel q_store; the query's
    codes qc and scales qs and the output oq, oe are attend_q8()'s. Loads what the steps will call (they may run
    heap-locked)."""
    self.q8_store_block(p, kc, vc, ks, vs, len(codes), len(scales))
    self._sp = p
    self._q_store = q_store
    if not self.P:  # no prefix to write in floats: store_q8 is write_q8_at itself (bound once: no call between)
        self.store_q8 = self.write_q8_at
    self.bind_query(qc, qs, oq, oe)
    # the attention's fused kernels (viper and asm kinds): loaded now, before the heap fragments (the float pass
    # leaves them out: their code costs a few KB)
    pre = getattr(self.att.k, "att_preload", None)
    if pre is not None:
        pre(self.att.k)
