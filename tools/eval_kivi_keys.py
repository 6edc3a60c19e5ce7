#!/usr/bin/env python3
"""What would lift i4's top-1 agreement on the written corpus: key treatments beyond KIVI, measured.

Teacher-forces the written corpus (tests/corpus) and the sampled texts (as `kvedge eval`: 512 tokens, seeds 42,
43, 44) through stories260K with kvedge's own i4 KIVI cache and through the numpy reference
(kvedge_host.ref.kiviref, kvedge's arithmetic: kiviref.DEVICE) with each key treatment, and prints per kind of text,
pooled over its texts: perplexity vs f32, mean KL to the f32 cache, top-1 agreement and flips, and the arena
bytes the treatment would take at the last text's length.

  kivi            KIVI as kvedge stores it (keys per channel over groups of G, values per token)
  f32 prefix P    kvedge's cache with the first P tokens (BOS, the attention sinks) kept at f32
  pre-rope        keys quantized before RoPE (KVQuant), turned by their position again when read: every read
                  of a key costs a rotation, which kvedge's integer kernels cannot do
  outliers N      in each channel of each key group, the N values farthest from the median kept apart as f16
                  beside a one-byte index (KVQuant's dense-and-sparse split): N * 3 more bytes per channel and
                  group, and a correction per outlier in every score

  tools/eval_kivi_keys.py [--dtype i4] [--group 32] [--residual 32] [--samples 3] [--prefix 1 --prefix 4] [--outliers 1 --outliers 2]"""
import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "host"), os.path.join(ROOT, "device")]

from kvedge_host.ref import kiviref, quality  # noqa: E402
from kvedge_host.paths import SHARED_MODELS  # noqa: E402

OUTLIER_BYTES = 3  # an f16 value and the token's index in its group


def pooled(model, texts, bases, kv):
    """Pooled (nll, kl, agree) and the last text's cache stats (None for the numpy reference)."""
    parts = []
    for ids, base in zip(texts, bases):
        out, st = quality.teacher_force(model, ids, kv)
        parts.append(quality.score(ids, out, base))
    return [np.concatenate([p[j] for p in parts]) for j in range(3)], st.get("total_bytes")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(SHARED_MODELS, "stories260K.bin"))
    ap.add_argument("--tokenizer", default=os.path.join(SHARED_MODELS, "tok512.bin"))
    ap.add_argument("--dtype", default="i4", choices=("i4", "i2"))
    ap.add_argument("--group", type=int, default=32)
    ap.add_argument("--residual", type=int, default=32)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--prefix", action="append", type=int)
    ap.add_argument("--outliers", action="append", type=int)
    a = ap.parse_args(argv)
    if a.group < 1 or a.residual % a.group:
        ap.error("--group %d: the residual %d must be a multiple of it" % (a.group, a.residual))
    if not (os.path.exists(a.model) and os.path.exists(a.tokenizer)):
        print("needs %s and %s" % (a.model, a.tokenizer), file=sys.stderr)
        return 2
    outliers = a.outliers or [1, 2]
    prefixes = a.prefix or [1, 4]
    if min(prefixes) < 1:
        ap.error("--prefix must be >= 1")
    if min(outliers) < 1 or max(outliers) >= a.group:
        ap.error("--outliers must be 1..%d" % (a.group - 1))
    kv = {"dtype": a.dtype, "group": a.group, "residual": a.residual, "align": 0}
    todo = [("kivi (kvedge cache)", kv, 0), ("kivi (numpy)", dict(kv, numpy=kiviref.DEVICE), 0)]
    todo += [("f32 prefix %d (kvedge cache)" % p, dict(kv, prefix=p), 0) for p in prefixes]
    todo += [("pre-rope (numpy)", dict(kv, numpy=kiviref.DEVICE, prerope=True), 0)]
    todo += [("outliers %d (numpy)" % n, dict(kv, numpy=kiviref.DEVICE, outliers=n), n) for n in outliers]
    kinds = [("written", [ids for _, ids in quality.written_texts(a.tokenizer, quality.CORPUS, 512, 512)]),
             ("sampled", [quality.sample_text(a.model, 512, a.seed + i) for i in range(a.samples)])]
    for kind, texts in kinds:
        bases = [quality.teacher_force(a.model, ids, {"dtype": "f32", "align": 0})[0] for ids in texts]
        nll0 = np.concatenate([quality.score(ids, b, b)[0] for ids, b in zip(texts, bases)])
        cache = quality.CachedRef(a.model, kv, len(texts[-1])).cache  # as sized for the last text
        arena = len(cache.arena)
        channels = cache.L * cache.H * cache.NG * cache.D  # key channels of every group
        print("%s: %d texts, %d scored positions; %s g%d R%d" % (kind, len(texts), len(nll0), a.dtype, a.group,
                                                                 a.residual), flush=True)
        for name, k, n in todo:
            (nll, kl, agree), total = pooled(a.model, texts, bases, k)
            print("  %-28s perplexity %+.3f %%  mean KL %.5f  top-1 %.2f %% (%d flips)  arena %s bytes" % (
                name, 100 * (np.exp(nll.mean() - nll0.mean()) - 1), kl.mean(), 100 * agree.mean(),
                int((~agree).sum()), format(total or arena + n * OUTLIER_BYTES * channels, ",")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
