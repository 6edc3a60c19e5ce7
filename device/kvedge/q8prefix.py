"""An i8 cache's f32 prefix rows written from int8 codes (kvedge.q8rows.store_q8 while the prefix fills): in a
module of its own, loaded by a run whose cache has a prefix, at its first token."""


def store(self, layer, codes, scales):
    """An f32 prefix row from int8 codes: code * f16 scale, per KV head (floats: allocates)."""
    from .compat import zeros
    from .quant import f16_value
    p = self._sp
    lay = self._lay
    n = self.H * self.D
    kf = zeros("f", n)
    vf = zeros("f", n)
    kc, vc, ks, vs = p[lay.S_KC], p[lay.S_VC], p[lay.S_KS], p[lay.S_VS]
    D = self.D
    for i in range(n):
        kf[i] = codes[kc + i] * f16_value(scales[ks + i // D])
        vf[i] = codes[vc + i] * f16_value(scales[vs + i // D])
    self.write(layer, kf, vf)
