"""Independent numpy reference for decode-step attention over a KV cache, and the metrics `kvedge check` uses.

Nothing here imports the device package: which positions a cache keeps, the GQA head mapping and the softmax
are computed from their definitions (docs/device-api.md), in float64, with the full score vector."""
import numpy as np


def gqa_mapping(heads, kv_heads):
    """Query head h reads KV head h // (heads // kv_heads) (MHA: itself, MQA: 0)."""
    if kv_heads <= 0 or heads % kv_heads:
        raise ValueError("heads (%d) must be a multiple of kv_heads (%d)" % (heads, kv_heads))
    return np.arange(heads) // (heads // kv_heads)


def wrong_mapping(heads, kv_heads):
    """A plausible but wrong mapping (h % kv_heads, interleaved), to prove the check catches trap 1
    (docs/architecture.md)."""
    return np.arange(heads) % kv_heads


def live_positions(tokens, window=0, sinks=0):
    """Logical positions a cache holds after `tokens` appends: all of them without a window; with a window W
    and S sinks, the first S positions for ever plus the last W."""
    if not window:
        return np.arange(tokens)
    head = np.arange(min(sinks, tokens))
    tail = np.arange(max(sinks, tokens - window), tokens)
    return np.concatenate([head, tail])


def tiered_live_positions(tokens, window, sinks, block, cold_blocks):
    """Logical positions a tiered cache (kvedge.tier.cache) holds after `tokens` appends: the first `sinks` for ever;
    the ring of `window` sends its oldest `block` positions to flash whenever a position finds its slot taken
    (positions sinks + window, + block, + 2 block, ...); flash keeps the newest `cold_blocks` blocks."""
    if tokens <= sinks + window:
        return np.arange(tokens)
    sent = (tokens - 1 - (sinks + window)) // block + 1  # blocks that left the ring
    first = sinks + max(0, sent - cold_blocks) * block
    return np.concatenate([np.arange(sinks), np.arange(first, tokens)])


def attention(q, K, V, heads, kv_heads, mapping=None):
    """out[h] = softmax(q[h] . K[:, kv(h)] / sqrt(D)) V[:, kv(h)].

    q: (heads, D); K, V: (tokens, kv_heads, D) for the live tokens only; returns (heads, D) float64."""
    q = np.asarray(q, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    D = q.shape[-1]
    kv = gqa_mapping(heads, kv_heads) if mapping is None else np.asarray(mapping)
    Kh = K[:, kv, :]  # (tokens, heads, D): the KV head each query head reads
    Vh = V[:, kv, :]
    s = np.einsum("hd,thd->ht", q, Kh) / np.sqrt(D)
    s -= s.max(axis=1, keepdims=True)
    w = np.exp(s)
    w /= w.sum(axis=1, keepdims=True)
    return np.einsum("ht,thd->hd", w, Vh)


def max_abs_err(out, ref):
    return float(np.max(np.abs(np.asarray(out, np.float64) - ref)))


def max_rel_err(out, ref):
    """Largest absolute error relative to the largest reference magnitude (a per-element ratio would be
    dominated by outputs that happen to be near zero)."""
    return max_abs_err(out, ref) / float(np.max(np.abs(ref)))


def cosine(out, ref):
    a = np.asarray(out, np.float64).ravel()
    b = np.asarray(ref, np.float64).ravel()
    return float(a @ b / np.sqrt((a @ a) * (b @ b)))
