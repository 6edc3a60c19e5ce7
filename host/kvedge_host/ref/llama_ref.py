"""numpy reference of the llama2.c forward pass, written independently of the device code, to cross-check it.

Reads a llama2.c checkpoint (or a kvedge int8 file, dequantized) with numpy, computes in float64 and keeps
its own full-precision K/V. The attention of one layer is one overridable method (`attend`), so the quality
evaluation can route K/V through a device cache while everything else stays this reference."""
import struct

import numpy as np

HEADER = struct.Struct("<7i")


class RefConfig:
    def __init__(self, dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len):
        self.dim, self.hidden_dim, self.n_layers = dim, hidden_dim, n_layers
        self.n_heads, self.n_kv_heads, self.seq_len = n_heads, n_kv_heads, seq_len
        self.shared = vocab_size > 0
        self.vocab_size = abs(vocab_size)
        self.head_dim = dim // n_heads
        self.kv_dim = n_kv_heads * self.head_dim


def _read_f32(raw, cfg):
    """Tensors of a llama2.c file as float64 arrays."""
    buf = np.frombuffer(raw, dtype="<f4", offset=HEADER.size).astype(np.float64)
    at = [0]

    def take(*shape):
        n = int(np.prod(shape))
        if at[0] + n > len(buf):
            raise ValueError("checkpoint is truncated: %d floats, the header needs more" % len(buf))
        a = buf[at[0]:at[0] + n].reshape(shape)
        at[0] += n
        return a
    c = cfg
    L, d, h, kv = c.n_layers, c.dim, c.hidden_dim, c.kv_dim
    t = {"emb": take(c.vocab_size, d), "rms_att": take(L, d), "wq": take(L, d, d), "wk": take(L, kv, d),
         "wv": take(L, kv, d), "wo": take(L, d, d), "rms_ffn": take(L, d), "w1": take(L, h, d),
         "w2": take(L, d, h), "w3": take(L, h, d), "rms_final": take(d)}
    take(c.seq_len * c.head_dim)  # legacy RoPE tables
    t["wcls"] = t["emb"] if c.shared else take(c.vocab_size, d)
    if at[0] != len(buf):  # llama2.c writes nothing after the last tensor
        raise ValueError("checkpoint has %d floats after its last tensor" % (len(buf) - at[0]))
    return t


def _read_i8(raw, cfg):
    """Tensors of a kvedge int8 file, dequantized (codes * per-row scale) to float64."""
    at = [4 + 4 + HEADER.size]

    def vec(n):
        a = np.frombuffer(raw, dtype="<f4", count=n, offset=at[0]).astype(np.float64)
        at[0] += 4 * n
        return a

    def mat(rows, cols):
        s = vec(rows)
        codes = np.frombuffer(raw, dtype=np.int8, count=rows * cols, offset=at[0]).reshape(rows, cols)
        at[0] += (rows * cols + 3) & ~3
        return codes.astype(np.float64) * s[:, None]
    c = cfg
    L, d, h, kv = c.n_layers, c.dim, c.hidden_dim, c.kv_dim
    t = {"emb": mat(c.vocab_size, d)}
    t["rms_att"] = np.stack([vec(d) for _ in range(L)])
    for name, r, k in (("wq", d, d), ("wk", kv, d), ("wv", kv, d), ("wo", d, d)):
        t[name] = np.stack([mat(r, k) for _ in range(L)])
    t["rms_ffn"] = np.stack([vec(d) for _ in range(L)])
    for name, r, k in (("w1", h, d), ("w2", d, h), ("w3", h, d)):
        t[name] = np.stack([mat(r, k) for _ in range(L)])
    t["rms_final"] = vec(d)
    t["wcls"] = t["emb"] if c.shared else mat(c.vocab_size, d)
    return t


def load(path):
    """(RefConfig, tensors) of a checkpoint; a ValueError naming the file when it is not what its header says."""
    try:
        return _load(path)
    except ValueError as e:
        raise ValueError("%s: %s" % (path, e))


def _load(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < HEADER.size:
        raise ValueError("truncated header: %d of %d bytes" % (len(raw), HEADER.size))
    if raw[:4] == b"KVW8":
        cfg = RefConfig(*HEADER.unpack_from(raw, 8))
        return cfg, _read_i8(raw, cfg)
    cfg = RefConfig(*HEADER.unpack_from(raw, 0))
    return cfg, _read_f32(raw, cfg)


def rmsnorm(x, w):
    return w * (x / np.sqrt(np.mean(x * x) + 1e-5))


class RefModel:
    """forward(token) -> float64 logits at the next position; reset() starts a new sequence."""

    def __init__(self, path):
        self.cfg, self.t = load(path)
        c = self.cfg
        half = c.head_dim // 2
        # f32 frequencies, as llama2.c computes them (the device stores them the same way)
        self.freq = (1.0 / np.power(np.float32(10000.0), np.arange(half, dtype=np.float32) * 2 / np.float32(
            c.head_dim))).astype(np.float32).astype(np.float64)
        self.reset()

    def reset(self):
        c = self.cfg
        self.pos = 0
        self.keys = [[] for _ in range(c.n_layers)]
        self.values = [[] for _ in range(c.n_layers)]

    def rope(self, v, pos):
        a = pos * self.freq
        cos, sin = np.cos(a), np.sin(a)
        p = v.reshape(-1, len(self.freq), 2)
        v0, v1 = p[..., 0].copy(), p[..., 1].copy()
        p[..., 0] = v0 * cos - v1 * sin
        p[..., 1] = v0 * sin + v1 * cos
        return p.reshape(-1)

    def attend(self, layer, q, k, v, pos):
        """Append this token's k, v (kv_dim) and return the attention output (dim) for q."""
        c = self.cfg
        self.keys[layer].append(k)
        self.values[layer].append(v)
        K = np.array(self.keys[layer]).reshape(-1, c.n_kv_heads, c.head_dim)
        V = np.array(self.values[layer]).reshape(-1, c.n_kv_heads, c.head_dim)
        return self.attention(q, K, V)

    def attention(self, q, K, V):
        """Softmax attention of q over K, V [tokens, kv_heads, head_dim], GQA head h -> h // group."""
        c = self.cfg
        g = c.n_heads // c.n_kv_heads
        qh = q.reshape(c.n_heads, c.head_dim)
        out = np.empty((c.n_heads, c.head_dim))
        for h in range(c.n_heads):
            s = K[:, h // g, :] @ qh[h] / np.sqrt(c.head_dim)
            s = np.exp(s - s.max())
            out[h] = (s / s.sum()) @ V[:, h // g, :]
        return out.reshape(-1)

    def forward(self, token):
        c, t = self.cfg, self.t
        pos = self.pos
        x = t["emb"][token].copy()
        for l in range(c.n_layers):
            xb = rmsnorm(x, t["rms_att"][l])
            q = self.rope(t["wq"][l] @ xb, pos)
            k = self.rope(t["wk"][l] @ xb, pos)
            v = t["wv"][l] @ xb
            x = x + t["wo"][l] @ self.attend(l, q, k, v, pos)
            xb = rmsnorm(x, t["rms_ffn"][l])
            a = t["w1"][l] @ xb
            x = x + t["w2"][l] @ (a / (1.0 + np.exp(-a)) * (t["w3"][l] @ xb))
        self.pos += 1
        return t["wcls"] @ rmsnorm(x, t["rms_final"])


def greedy(model, steps, first=1):
    """Greedy tokens from `first` (BOS) for up to `steps` positions, stopping at BOS as llama2.c does."""
    model.reset()
    tok, out = first, []
    for _ in range(steps):
        nxt = int(np.argmax(model.forward(tok)))
        if nxt == 1:
            break
        out.append(nxt)
        tok = nxt
    return out
