"""The checked writes of one token's int8 codes and f16 scale bits into an i8 cache: the code of KVCache's write_q8,
check_write_q8, write_slot_q8 and _write_q8 (each imports this module on a call), and its read of a row's codes
(read_codes), in a module of its own so that a
run that writes floats, or the integer pass's block writes (kvedge.q8rows), does not hold its bytecode. Each
function takes the cache as `self`. It imports nothing of kvedge.cache."""
from . import check
from .sizes import I8, K, V


def write_slot_q8(self, slot, layer, k_codes, k_scales, v_codes, v_scales):
    """write_q8() into an explicit live slot. Allocates nothing."""
    self._check_live_slot(slot)
    cur = self.cur_slot
    self.cur_slot = slot
    try:
        self.write_q8(layer, k_codes, k_scales, v_codes, v_scales)
    finally:
        self.cur_slot = cur


def write_q8(self, layer, k_codes, k_scales, v_codes, v_scales):
    """i8 caches: store pre-quantized rows: int8 codes (-128..127, kv_heads*head_dim each) and f16 scale bits
    per KV head (finite, >= 0: 0..0x7BFF). Allocates nothing; everything is checked before a byte moves."""
    self.check_write_q8(layer, k_codes, k_scales, v_codes, v_scales)
    self._write_q8(layer, k_codes, k_scales, v_codes, v_scales)


def check_write_q8(self, layer, k_codes, k_scales, v_codes, v_scales):
    """write_q8()'s checks, without writing (a tiered cache adds its own before the write)."""
    if self.cfg.dtype != I8:
        raise TypeError("write_q8 needs an i8 cache, this one is %s" % self.cfg.dtype)
    self._check_layer(layer)
    self._check_current()
    if self.cur_slot < self.P:
        raise ValueError("position in the full-precision prefix: use write() with floats")
    n = self.H * self.D
    # no tuples or floats here: this path must allocate nothing
    check.length("k_codes", k_codes, n)
    check.length("v_codes", v_codes, n)
    check.length("k_scales", k_scales, self.H)
    check.length("v_scales", v_scales, self.H)
    check.codes("k_codes", k_codes, n, -128, 127)
    check.codes("v_codes", v_codes, n, -128, 127)
    check.codes("k_scales", k_scales, self.H, 0, check.SCALE_MAX)
    check.codes("v_scales", v_scales, self.H, 0, check.SCALE_MAX)


def _write_q8(self, layer, k_codes, k_scales, v_codes, v_scales):
    b = self.cur_slot - self.P
    kb = self.kbits
    for h in range(self.H):  # the layer's largest K scale (the integer attention's range check)
        if k_scales[h] > kb[layer]:
            kb[layer] = k_scales[h]
    self._put_q8(layer, K, b, k_codes, 0, k_scales, 0)
    self._put_q8(layer, V, b, v_codes, 0, v_scales, 0)



def read_codes(self, layer, head, pos, kv, out):
    """i8 caches: the int8 codes of a row into out (array('b')); returns its f16 scale bits. No allocation."""
    if self.cfg.dtype != I8:
        raise TypeError("read_codes needs an i8 cache, this one is %s" % self.cfg.dtype)
    self._check_read(layer, head, kv, out, True)
    slot = self.slot_of(pos)
    if slot < self.P:
        raise ValueError("position %d is in the f32 prefix: use read()" % pos)
    ri = self._rowidx(layer, kv, head, self.B, slot - self.P)
    off = self.DATA + ri * self.prow
    a = self.arena
    for i in range(self.D):
        c = a[off + i]
        out[i] = c - 256 if c > 127 else c
    m = self.META + ri * 2
    return a[m] | (a[m + 1] << 8)
