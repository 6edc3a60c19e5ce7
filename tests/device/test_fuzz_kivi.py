# Device-API fuzzer, the KIVI family (issue 46): i4 and i2 caches with windows, sinks and an f32 prefix, key groups
# of 2-32, residuals from 0 to three groups, head_dim 2-16, keys and values of magnitude 1e-3 to 6e4 (and queries
# of 1e-3 to 1e3), filled by whole tokens or layer by layer with quantize_residual() and reset() between; each
# step checked against plain softmax over the rows KVCache.read returns (_kiviref): the float step to 1e-4
# relative plus its bounded float32 arithmetic, the integer step to a cosine of 0.99 where Attention.q8_fits
# takes the query, a refusal where it does not. tools/fuzz.py -k test_fuzz_kivi runs it longer, with any seed.
import gc
import math

from kvedge.attention import Attention, Q8_RANGE, quantize_query  # noqa: F401 (largest modules first)
from kvedge.cache import KVCache
from kvedge.compat import zeros
from kvedge.config import CacheConfig
from _fuzzkit import Lcg, SEED, _scale
from _kiviref import Ref, worst, cosine

GROUPS = (2, 4, 8, 16, 32)


def _mag(rng, lo, hi):
    """10**x for x uniform in [lo, hi] (decades)."""
    return 10.0 ** (lo + (hi - lo) * (rng.next() >> 10) / 1048576.0)


def _cfg(rng):
    while True:
        dt = rng.pick(("i4", "i2"))
        G = rng.pick(GROUPS)
        D = (4 if dt == "i2" else 2) * (1 + rng.below(4 if dt == "i2" else 8))
        kvh = 1 + rng.below(2)
        heads = kvh * (1 + rng.below(2))
        L = 1 + rng.below(2)
        residual = G * rng.below(4)  # 0 (per-token keys) .. three groups
        window = sinks = prefix = 0
        if rng.below(3):
            window = G * (1 + rng.below(4)) + residual
            sinks = rng.below(2 * G + 1)
            prefix = sinks - G * rng.below(sinks // G + 1) if rng.below(2) else rng.below(sinks + 1)
            mt = window + sinks
        else:
            mt = G * (1 + rng.below(4)) + rng.below(2 * G)
        if mt > 48:
            continue
        try:
            cfg = CacheConfig(L, heads, kvh, D, mt, dt, window=window, sinks=sinks, prefix=prefix, group=G,
                              residual=residual, align=rng.pick((0, 0, 8)))
        except ValueError:
            continue
        if cfg.nbytes() <= 8192:  # an arena the unix port's 215,040-byte heap holds beside the rest, fragmented
            return cfg


def _row(rng, r, n, mag, outliers):
    for i in range(n):
        r[i] = mag * rng.real()
    if outliers:  # an outlier channel, within the rows' f16 limit
        i = rng.below(n)
        r[i] = max(-65000.0, min(65000.0, 8.0 * r[i]))


def _check(st, layer):
    """One float step and one integer step of `layer` against the reference; returns 1 if step_q8 ran, 0 if it
    refused (beyond Q8_RANGE)."""
    c, att, ref, rng = st["c"], st["att"], st["ref"], st["rng"]
    H, D = st["H"], c.D
    q, out = st["q"], st["out"]
    _row(rng, q, H * D, st["qmag"], rng.below(4) == 0)
    att.step(layer, q, out)
    ref.run(layer, q)
    e, at = worst(out, ref)
    assert e <= 1.0, ("step", st["cfg"], st["seed"], layer, at, out[at], ref.out[at], ref.tol[at])
    n = H * D
    qc, qs, oq, oe, g = st["qc"], st["qs"], st["oq"], st["oe"], st["g"]
    quantize_query(q, qc, qs, H)
    if not att.q8_fits(layer, qs):
        try:
            att.step_q8(layer, qc, qs, oq, oe)
        except ValueError as ex:
            assert "beyond the integer step's range" in str(ex), ex
            return 0
        raise AssertionError("step_q8 took a query q8_fits refused")
    att.step_q8(layer, qc, qs, oq, oe)
    for i in range(n):
        g[i] = oq[i] * 2.0 ** oe[i // D]
    for h in range(H):
        lo, hi = h * D, (h + 1) * D
        big = 0.0
        for i in range(lo, hi):
            big = max(big, abs(ref.out[i]))
        cs = cosine(g, ref.out, lo, hi)
        # an output that cancels to a small average of its values has a noisy direction: its cosine is asked
        # where it is >= 0.1 of the values' magnitude, its error everywhere (6 % of max|v|: kvedge.attention.Q8_RANGE)
        assert cs >= 0.99 or big < 0.1 * ref.vmax[h], ("step_q8", st["cfg"], st["seed"], layer, h, cs)
        for i in range(lo, hi):
            assert abs(g[i] - ref.out[i]) <= 0.06 * ref.vmax[h], ("step_q8", st["cfg"], st["seed"], layer, i)
    return 1


def test_fuzz_kivi():
    rng = Lcg(SEED * 31 + 7)
    budget = _scale() // 5
    steps = q8 = refused = caches = 0
    while steps < budget:
        st = None
        gc.collect()
        cfg = _cfg(rng)
        c = KVCache(cfg)
        H = cfg.heads
        n = H * cfg.head_dim
        kmag = _mag(rng, -3, 4.78)  # up to 6e4 (f16's 65504 is the rows' limit)
        st = {"cfg": cfg, "c": c, "att": Attention(c, 1 + rng.below(8)), "ref": Ref(c, H), "rng": rng, "H": H,
              "seed": SEED, "qmag": _mag(rng, -3, 3), "vmag": _mag(rng, -3, 4.78), "q": zeros("f", n),
              "out": zeros("f", n), "qc": zeros("b", n), "qs": zeros("H", H), "oq": zeros("i", n),
              "oe": zeros("i", H), "g": zeros("f", n)}
        if rng.below(2):  # half the caches with queries in Q8_RANGE's order (|q| x |k| x sqrt(D) ~ 2 .. 120)
            st["qmag"] = _mag(rng, 0.3, 2.1) / (kmag * math.sqrt(cfg.head_dim))
        caches += 1
        kv = cfg.kv_heads * cfg.head_dim
        ks = [zeros("f", kv) for _ in range(cfg.layers)]
        vs = [zeros("f", kv) for _ in range(cfg.layers)]
        for _ in range(2 * cfg.slots + 8):
            op = rng.below(12)
            if op == 0:
                c.reset()
                continue
            if op == 1:
                c.quantize_residual()
            if not c.has_room():
                if c.n_cached:
                    for layer in range(cfg.layers):
                        q8 += _check(st, layer)
                        steps += 1
                break
            for layer in range(cfg.layers):
                _row(rng, ks[layer], kv, kmag, rng.below(3) == 0)
                _row(rng, vs[layer], kv, st["vmag"], False)
            if op < 8:
                c.append(ks, vs)
            else:  # layer by layer, each attended as it is written
                c.start_token()
                for layer in range(cfg.layers):
                    c.write(layer, ks[layer], vs[layer])
                    q8 += _check(st, layer)
                    steps += 1
            if rng.below(3) == 0:
                layer = rng.below(cfg.layers)
                q8 += _check(st, layer)
                steps += 1
        refused = steps - q8
    assert q8 > 0 and refused > 0, (q8, refused)
    print("fuzz kivi: %d steps on %d caches (%d integer steps, %d refused beyond Q8_RANGE %d), seed %d"
          % (steps, caches, q8, refused, Q8_RANGE, SEED))
