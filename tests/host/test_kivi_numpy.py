"""kvedge's i4/i2 KIVI rows against the numpy reference (kvedge_host.ref.kiviref): keys per channel over groups of G
tokens, values per token, zero and scale refined by least squares from min-max and stored as the nearest
halves, codes clamped; the newest R..R+G-1 tokens exact. The reference is written from the description, in numpy
(vectorized float64), and knows nothing of the arena."""
import os
from array import array

import numpy as np
import pytest

from kvedge.cache import KVCache
from kvedge.config import CacheConfig
from kvedge_host.ref import kiviref, quality
from kvedge_host.paths import SHARED_MODELS

STORIES = os.path.join(SHARED_MODELS, "stories260K.bin")
BITS = {"i4": 4, "i2": 2}


def _data(kind, n, H, D, seed):
    rng = np.random.default_rng(seed)
    shape = (n, H, D)
    if kind == "gauss":
        x = rng.standard_normal(shape)
    elif kind == "laplace":
        x = rng.laplace(size=shape) * 3.0
    elif kind == "offset":  # far from 0: the fit's sums must not cancel
        x = 1000.0 + rng.standard_normal(shape) * 0.01
    else:
        x = rng.uniform(-5, 7, shape)
    return x.astype(np.float32).astype(np.float64)


def _expected(dt, K, V, G, R):
    n = len(K)
    lo = kiviref.residual_lo(n, G, R)
    k, v = K.copy(), V.copy()
    for g in range(0, lo, G):
        k[g:g + G] = kiviref.quant_keys(K[g:g + G], BITS[dt], kiviref.DEVICE)
        v[g:g + G] = kiviref.quant_values(V[g:g + G], BITS[dt], kiviref.DEVICE)
    return k, v, lo


@pytest.mark.parametrize("dt", ["i4", "i2"])
@pytest.mark.parametrize("kind", ["gauss", "laplace", "offset", "uniform"])
def test_kivi_rows_equal_the_numpy_reference(dt, kind):
    H, D, G, R, n = 2, 8, 32, 32, 32 * 4 + 17
    K = _data(kind, n, H, D, 1)
    V = _data(kind, n, H, D, 2)
    c = KVCache(CacheConfig(1, 2, H, D, 32 * 5, dt, group=G, residual=R, align=0))
    for t in range(n):
        c.append([array("f", K[t].reshape(-1))], [array("f", V[t].reshape(-1))])
    k, v, lo = _expected(dt, K, V, G, R)
    assert lo == 96  # three groups left the residual
    out = array("d", [0.0] * D)
    for t in range(n):
        for h in range(H):
            c.read(0, h, t, 0, out)
            assert list(out) == list(k[t, h]), (t, h)
            c.read(0, h, t, 1, out)
            assert list(out) == list(v[t, h]), (t, h)


@pytest.mark.parametrize("dt", ["i4", "i2"])
def test_refined_groups_beat_min_max(dt):
    """The point of the refinement: on bell-shaped data the stored keys' squared error is well below plain
    min-max codes' (ideal float64 min-max, the reference's IDEAL), most at 4 levels."""
    H, D, G, R, n = 2, 8, 32, 32, 32 * 9
    K = _data("gauss", n, H, D, 3)
    V = _data("laplace", n, H, D, 4)
    k, v, lo = _expected(dt, K, V, G, R)
    mm = np.concatenate([kiviref.quant_keys(K[g:g + G], BITS[dt], kiviref.IDEAL) for g in range(0, lo, G)])
    mine = ((k[:lo] - K[:lo]) ** 2).sum()
    ideal = ((mm - K[:lo]) ** 2).sum()
    assert mine < (0.7 if dt == "i2" else 0.95) * ideal, (mine, ideal)


@pytest.mark.skipif(not os.path.exists(STORIES), reason="../shared/models/stories260K.bin is absent")
@pytest.mark.parametrize("dt", ["i4", "i2"])
def test_model_through_the_cache_equals_the_numpy_reference(dt):
    """stories260K teacher-forced through a real i4/i2 KVCache and through the numpy reference: the same logits."""
    ids = quality.sample_text(STORIES, 100, 7)
    kv = {"dtype": dt, "group": 32, "residual": 32, "align": 0}
    dev, _ = quality.teacher_force(STORIES, ids, kv)
    ref, _ = quality.teacher_force(STORIES, ids, dict(kv, numpy=kiviref.DEVICE))
    assert np.array_equal(dev, ref)


def test_sparse_outliers_keep_the_farthest_values_and_shrink_the_rest():
    """The dense-and-sparse reference (tools/eval_kivi_keys.py): in each channel the n values farthest from the
    median come back as f16, and the other values' error is bounded by half a step of their own range, far
    below what one planted outlier costs plain KIVI."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((32, 2, 8))
    x[5, 0, 3] = 40.0
    x[9, 1, 6] = -35.0
    y = kiviref.quant_keys(x, 4, kiviref.IDEAL, outliers=1)
    assert y[5, 0, 3] == np.float16(40.0) and y[9, 1, 6] == np.float16(-35.0)
    for h, d, far in ((0, 3, 5), (1, 6, 9)):
        rest = np.delete(x[:, h, d], far)
        step = (rest.max() - rest.min()) / 15
        assert np.abs(np.delete(y[:, h, d], far) - rest).max() <= step / 2 + 1e-12
    plain = kiviref.quant_keys(x, 4, kiviref.IDEAL)
    assert np.abs(plain[:, 0, 3] - x[:, 0, 3]).mean() > 4 * np.abs(y[:, 0, 3] - x[:, 0, 3]).mean()
    assert np.array_equal(kiviref.quant_keys(x, 4, kiviref.IDEAL, outliers=0), plain)
