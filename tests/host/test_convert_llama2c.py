"""`kvedge convert` on llama2.c export.py's "ak42" files (version 1 f32, version 2 int8 Q8_0 groups), written by
tests/host/_hfmodels.py from the documented layout, against the numpy forward pass of the Hugging Face layout;
and v0 (today's file) converted to the same bytes whichever way it comes.

Tolerances: v1 -> f32 file 1e-4 absolute; v2 (int8 groups of 32) -> f32 file against the float reference
within 5 % of the largest logit (measured worst 3.7 %), and against the reference of its own dequantized
groups within 1e-4."""
import os
import struct

import numpy as np
import pytest

import _hfmodels as hm
from kvedge_host.cli import main as cli

STEPS = 24


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def model(request, tmp_path_factory):
    return hm.seeded(request, tmp_path_factory, {False: 32, True: 31}, "ak42")


def _q80(t, cfg, group=32):
    """The HF tensors as export.py's Q8_0 stores them (2-D tensors, in Meta's order, grouped), dequantized."""
    out = {}
    for k, a in t.items():
        if a.ndim == 1:
            out[k] = a
            continue
        heads = cfg["num_attention_heads"] if "q_proj" in k else cfg["num_key_value_heads"] if "k_proj" in k else 0
        m = hm.hf_to_meta(a, heads) if heads else a
        g = m.reshape(-1, group).astype(np.float32)
        s = (np.abs(g).max(axis=1) / np.float32(127.0)).astype(np.float32)
        m = (np.round(g / s[:, None]) * s[:, None]).reshape(a.shape).astype(np.float32)
        out[k] = hm.meta_to_hf(m, heads) if heads else m
    return out


def test_v1_matches_the_reference_and_v0(model):
    cfg, t, tmp = model
    src = hm.write_ak42(str(tmp / "v1.bin"), t, cfg, 1)
    toks, ref = hm.reference_greedy(t, cfg, STEPS)
    out = hm.convert(src, str(tmp / "v1.f32.bin"))
    got, logits = hm.device_run(out, STEPS, toks)
    assert got == toks and np.abs(logits - ref).max() < 1e-4
    # v0 written from v1, converted again: the same bytes (v0 is what the device reads)
    again = hm.convert(out, str(tmp / "v0again.f32.bin"))
    assert open(again, "rb").read() == open(out, "rb").read()
    i8a = hm.convert(src, str(tmp / "v1.i8.bin"), "i8")
    i8b = hm.convert(out, str(tmp / "v0.i8.bin"), "i8")
    assert open(i8a, "rb").read() == open(i8b, "rb").read()


def test_v2_q80_groups(model):
    cfg, t, tmp = model
    src = hm.write_ak42(str(tmp / "v2.bin"), t, cfg, 2, group=32)
    stored = _q80(t, cfg)
    toks, ref = hm.reference_greedy(stored, cfg, STEPS)
    got, logits = hm.device_run(hm.convert(src, str(tmp / "v2.f32.bin")), STEPS, toks)
    assert got == toks and np.abs(logits - ref).max() < 1e-4
    fref = hm.reference_logits(t, cfg, toks)
    assert np.abs(logits - fref).max() < 0.05 * np.abs(fref).max()


def test_hostile_ak42_files(model, tmp_path, capsys):
    cfg, t, _ = model
    raw = open(hm.write_ak42(str(tmp_path / "v2.bin"), t, cfg, 2), "rb").read()
    cases = [("short", raw[:-1], "bytes, the header needs"), ("long", raw + b"\0" * 4, "bytes, the header needs"),
             ("head", raw[:100], "truncated header (100 of 256 bytes)"),
             ("version", raw[:4] + struct.pack("<i", 3) + raw[8:], "export version 3"),
             ("group", raw[:37] + struct.pack("<i", 0) + raw[41:], "group_size 0"),
             ("group24", raw[:37] + struct.pack("<i", 24) + raw[41:], "not a multiple of group_size 24"),
             ("flag", raw[:36] + b"\x07" + raw[37:], "shared_classifier flag is 7"),
             ("heads", raw[:20] + struct.pack("<i", 5) + raw[24:], "not a multiple of n_heads 5"),
             ("vocab", raw[:28] + struct.pack("<i", -96) + raw[32:], "vocab_size -96")]
    for name, data, words in cases:
        p = tmp_path / (name + ".bin")
        p.write_bytes(data)
        hm.refused(capsys, str(p), str(tmp_path / "o.bin"), str(p), words)
