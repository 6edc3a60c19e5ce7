# int4 weights (kvedge convert --weights-dtype i4) on the integer forward pass: the file is exactly its formula,
# runs close to the float pass on the same weights dequantized by the tests' own reader (_w4ref), allocates nothing
# per token, and refuses damaged files (the same bits in RAM, streamed and with every kernel kind: test_w4kinds).
import gc

import _intmodel
_intmodel.preload()  # compiled first, on a collected heap
_intmodel.preload4(every_kind=False)
from _intmodel import TOKENS  # noqa: E402
from _support import need, raises, under_heap_lock  # noqa: E402
from _model_support import argmax, logit_gap, tmp_path  # noqa: E402
from _w4model import KV, files as _files, model as _model  # noqa: E402
from kvedge import kernels  # noqa: E402
from kvedge.model import header  # noqa: E402

def _logits(m, tokens=TOKENS):
    out = []
    for t in tokens:
        x = m.forward(t)
        out.append(([x[i] for i in range(len(x))], m.intp.exp_logits if m.intp is not None else 0))
    m.close()
    del m
    gc.collect()
    return out


def test_the_int4_file_is_its_formula_and_its_header():
    import os
    import _w4ref
    f = _files()
    cfg, dtype = header.read_config(f["i4"])
    assert dtype == "i4"
    ver, group, hdr = _w4ref.header(f["i4"])
    assert (ver, group) == (1, 32) and hdr[0] == 32 and hdr[1] == 72
    size = os.stat(f["i4"])[6]
    assert size == header.file_bytes(cfg, "i4")
    from kvedge.sizes import weights_bytes
    assert size == 40 + weights_bytes(cfg.params(), "i4")
    # by hand: per matrix rows * groups * (2 bytes of scale + 16 of codes), scales padded to 4; norms f32
    d, h, L, V, kvd = 32, 72, 2, 48, 16

    def m(rows, cols):
        g = (cols + 31) // 32
        return ((2 * rows * g + 3) // 4) * 4 + 16 * rows * g
    want = 40 + m(V, d) + L * (m(d, d) + 2 * m(kvd, d) + m(d, d) + 2 * m(h, d) + m(d, h)) + 4 * (2 * L * d + d)
    assert size == want, (size, want)


def test_int4_weights_run_close_to_the_float_pass_on_their_dequantized_values():
    f = _files()
    kernels.select("plain")
    # the float reference first, its weights streamed (a 215 KB heap holds no second model beside the int one)
    ref = _logits(_model(f["deq"], "float", True, {"dtype": "f32", "align": 0, "max_tokens": len(TOKENS)}))
    kernels.select()  # the int4 model on the kernels compiled at import (the same bits from every kind: test_w4kinds)
    b = _model(f["i4"], stream=True)  # the same bits as in RAM (test_w4kinds)
    worst = 0.0
    agree = 0
    for tok, (y, _) in zip(TOKENS, ref):
        x = b.forward(tok)
        e = b.intp.exp_logits
        x = [x[i] for i in range(len(x))]
        worst = max(worst, logit_gap(x, y, e))
        agree += argmax(x) == argmax(y)
    b.close()
    del b
    gc.collect()
    assert worst < 0.03, worst  # measured 0.6 % (the i8 file: 0.8 %)
    assert agree >= len(TOKENS) - 1, agree


def test_int4_steps_allocate_nothing_with_the_heap_locked():
    need("heap_lock")
    f = _files()
    for stream in (False, True):
        m = _model(f["i4"], stream=stream)
        for t in TOKENS[:3]:
            m.forward(t)
        for i in range(4):
            under_heap_lock(m.forward, TOKENS[3 + i])
        m.close()
        del m
        gc.collect()


def test_damaged_int4_files_are_refused_before_a_run():
    f = _files()
    from kvedge.model.llama import Llama
    bad = tmp_path("kvedge_w4_bad.bin")

    def refused(at, byte, stream=False, extra=b""):
        """The run of a copy of the file with byte `at` set to `byte` (and `extra` appended): its message."""
        buf = bytearray(512)  # copied a piece at a time: a board's heap holds no second file
        with open(f["i4"], "rb") as src, open(bad, "wb") as out:
            while True:
                n = src.readinto(buf)
                if not n:
                    break
                out.write(buf[:n] if n < len(buf) else buf)
            out.write(extra)
        with open(bad, "r+b") as out:
            out.seek(at)
            out.write(bytes([byte]))
        gc.collect()
        e = raises(header.CheckpointError, Llama, bad, KV, None, 0, stream, 8, None, "auto", None, "int")
        return str(e)

    with open(f["i4"], "rb") as src:
        src.seek(41)
        high = src.read(1)[0]  # the embedding's first group scale's high byte
    assert "negative" in refused(41, high | 0x80)
    assert "negative" in refused(41, high | 0x80, stream=True)
    assert "infinite" in refused(41, 0x7C)
    assert "groups of 64" in refused(8, 64)
    assert "version 9" in refused(4, 9)
    assert "bytes" in refused(4, 1, extra=b"\0")
    # the float pass cannot read int4 rows: refused by name
    e = raises(ValueError, Llama, f["i4"], KV, None, 0, False, 8, None, "auto", None, "float")
    assert "int4" in str(e)
    import os
    os.remove(bad)

