#!/usr/bin/env python3
"""How precise are `kvedge eval`'s KIVI figures, and what does the key group size change?

Teacher-forces the written corpus (tests/corpus) and the sampled texts (as `kvedge eval`: 512 tokens, seeds
42, 43, ...) through stories260K with kvedge's own i4/i2 KIVI cache at each group size G (the residual R fixed),
and prints per kind of text, pooled over its texts: the scored positions, perplexity vs f32, mean KL to the f32
cache and top-1 agreement, each with a 95 % interval from a bootstrap over the texts (2,000 resamples, seed 0),
the top-1 flips (positions whose best token differs from f32's) and how many of them sit where f32's two best
logits are within 0.1 of each other (a near tie, which any small change may flip), and the arena bytes.

  tools/eval_top1_noise.py [--dtype i4 --dtype i2] [--group 32 --group 16 ...] [--residual 32] [--samples 3]"""
import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "host"), os.path.join(ROOT, "device")]

from kvedge_host.ref import quality  # noqa: E402
from kvedge_host.paths import SHARED_MODELS  # noqa: E402

NEAR_TIE = 0.1
RESAMPLES = 2000


def interval(parts, stat):
    """95 % bootstrap interval of stat(pooled positions) over resampled texts."""
    rng = np.random.default_rng(0)
    vals = []
    for _ in range(RESAMPLES):
        pick = rng.integers(0, len(parts), len(parts))
        vals.append(stat([np.concatenate([parts[i][j] for i in pick]) for j in range(len(parts[0]))]))
    return np.percentile(vals, [2.5, 97.5])


def ppl_pct(cols):
    return 100 * (np.exp(cols[0].mean() - cols[3].mean()) - 1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(SHARED_MODELS, "stories260K.bin"))
    ap.add_argument("--tokenizer", default=os.path.join(SHARED_MODELS, "tok512.bin"))
    ap.add_argument("--dtype", action="append", choices=("i4", "i2"))
    ap.add_argument("--group", action="append", type=int)
    ap.add_argument("--residual", type=int, default=32)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args(argv)
    if not (os.path.exists(a.model) and os.path.exists(a.tokenizer)):
        print("needs %s and %s" % (a.model, a.tokenizer), file=sys.stderr)
        return 2
    groups = a.group or [32, 16, 8]
    for g in groups:
        if g < 1 or a.residual % g:
            ap.error("--group %d: the residual %d must be a multiple of it" % (g, a.residual))
    kinds = [("written", [ids for _, ids in quality.written_texts(a.tokenizer, quality.CORPUS, 512, 512)]),
             ("sampled", [quality.sample_text(a.model, 512, a.seed + i) for i in range(a.samples)])]
    for kind, texts in kinds:
        bases = [quality.teacher_force(a.model, ids, {"dtype": "f32", "align": 0})[0] for ids in texts]
        gaps = [np.diff(np.sort(b, axis=1)[:, -2:], axis=1)[:, 0] for b in bases]
        n = sum(len(t) - 1 for t in texts)
        near = sum(int((gp < NEAR_TIE).sum()) for gp in gaps)
        print("%s: %d texts, %d tokens, %d scored positions (%d near ties: f32's two best logits within %.1f)"
              % (kind, len(texts), sum(len(t) for t in texts), n, near, NEAR_TIE), flush=True)
        for dt in a.dtype or ("i4", "i2"):
            for g in groups:
                kv = {"dtype": dt, "group": g, "residual": a.residual, "align": 0}
                parts = []
                for ids, base, gp in zip(texts, bases, gaps):
                    out, st = quality.teacher_force(a.model, ids, kv)
                    nll, kl, agree = quality.score(ids, out, base)
                    parts.append((nll, kl, agree.astype(float), quality.score(ids, base, base)[0], gp))
                cols = [np.concatenate([p[j] for p in parts]) for j in range(5)]
                flips = cols[2] == 0
                pl, ph = interval(parts, ppl_pct)
                kl_, kh = interval(parts, lambda c: c[1].mean())
                tl, th = interval(parts, lambda c: 100 * c[2].mean())
                print("  %s g%d R%d: perplexity %+.3f %% [%+.3f, %+.3f]  KL %.5f [%.5f, %.5f]  top-1 %.2f %% "
                      "[%.2f, %.2f]  flips %d (%d at near ties)  arena %s bytes (last text)" % (
                          dt, g, a.residual, ppl_pct(cols), pl, ph, cols[1].mean(), kl_, kh, 100 * cols[2].mean(),
                          tl, th, int(flips.sum()), int((flips & (cols[4] < NEAR_TIE)).sum()),
                          format(st["total_bytes"], ",")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
