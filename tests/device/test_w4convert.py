# kvedge's int4 converter (kvedge.model.convert4) on a small random f32 model, checked from the int4 layout alone
# (the tests' reader _w4ref dequantizes it): the file is as long as it says, the norms are copied bit for bit, the
# padding past a row's last column is code 0, and each group's codes and f16 scale rebuild the group's weights no
# worse than the plain absmax / 7 scale does (the converter searches scales by least squares: better overall).
import gc
import struct

from _model_support import tmp_path
from _support import need

GROUP = 32


def _naive_err(w, o, n):
    """Squared error of weights w[o:o+n] at the scale amax / 7 (codes rounded, within -8..7): the baseline."""
    import _w4ref
    amax = 0.0
    for i in range(o, o + n):
        amax = max(amax, abs(w[i]))
    if amax == 0.0:
        return 0.0
    s = _w4ref._f16(_w4ref.f16_bits(amax / 7.0))
    err = 0.0
    for i in range(o, o + n):
        c = w[i] / s
        c = int(c + 0.5) if c >= 0 else -int(0.5 - c)
        c = 7 if c > 7 else (-8 if c < -8 else c)
        err += (c * s - w[i]) ** 2
    return err


def test_the_converter_beats_absmax_scales_and_keeps_the_norms_and_the_padding():
    need("fs")
    import os
    import _w4ref
    from kvedge.model import tiny
    from kvedge.model.convert4 import convert_to_i4
    src, dst, deq = tmp_path("kvedge_w4c_f32.bin"), tmp_path("kvedge_w4c_i4.bin"), tmp_path("kvedge_w4c_deq.bin")
    d, h, V = 32, 72, 48
    s = tiny.write_checkpoint(src, seed=5, dim=d, hidden_dim=h, vocab_size=V)
    n = convert_to_i4(src, dst)[1]
    assert os.stat(dst)[6] == n
    pad = []
    _w4ref.dequantize(dst, deq, pad)
    assert pad == [0], pad
    gc.collect()
    L, kv = s["n_layers"], s["n_kv_heads"] * (d // s["n_heads"])
    # llama2.c's order: embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final (the RoPE tables after)
    tensors = [(V, d)] + [(1, d)] * L
    for rows, cols in ((d, d), (kv, d), (kv, d), (d, d)):
        tensors += [(rows, cols)] * L
    tensors += [(1, d)] * L
    for rows, cols in ((h, d), (d, h), (h, d)):
        tensors += [(rows, cols)] * L
    tensors.append((1, d))
    worse = 0
    total = base = 0.0
    with open(src, "rb") as a, open(deq, "rb") as b:
        assert a.read(28) == b.read(28)
        for i, (rows, cols) in enumerate(tensors):
            norm = rows == 1
            for r in range(rows):
                ra, rb = a.read(4 * cols), b.read(4 * cols)
                if norm:
                    assert ra == rb, i  # norms stay f32, bit for bit
                    continue
                w = struct.unpack("<%df" % cols, ra)
                q = struct.unpack("<%df" % cols, rb)
                for o in range(0, cols, GROUP):
                    m = min(GROUP, cols - o)
                    err = 0.0
                    for j in range(o, o + m):
                        err += (q[j] - w[j]) ** 2
                    ref = _naive_err(w, o, m)
                    total += err
                    base += ref
                    worse += err > ref * 1.01 + 1e-12
    os.remove(src)
    os.remove(dst)
    os.remove(deq)
    assert worse == 0, worse
    assert total < 0.9 * base, (total, base)
