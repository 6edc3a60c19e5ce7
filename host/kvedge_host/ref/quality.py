"""What each KV-cache strategy costs in model quality, measured on a real checkpoint.

The numpy reference forward pass (llama_ref) runs the model; its attention reads K/V back from a real device
KVCache (kvedge.cache, on CPython) configured with the strategy, so every quantization, prefix, ring and sink
effect is exactly the device's. Rows are read with cache.read() into a mirror as they are written (and, for
KIVI, again when their group leaves the f32 residual), so a 512-token run takes seconds, not minutes.

Teacher forcing: a text is fed token by token; at each position we record the log-probability of the next
token, the logits' KL divergence from the full f32 cache, and whether the top-1 token agrees with it. Two kinds
of text: stories sampled from the model itself (temperature 1: they flatter every strategy, the model finds its
own text easy) and the written corpus in tests/corpus (short children's stories written for this project in
the style the model was trained on, text it never saw)."""
import os
import shutil
import tempfile
from array import array

import numpy as np

from kvedge.cache import KVCache
from kvedge.config import CacheConfig
from kvedge.kvsplit import SplitCache, SplitConfig
from ..plan.planquality import SPLITS, split_fields, split_name
from kvedge.model.sampler import Sampler

from . import kiviref
from .llama_ref import RefModel
from ..paths import ROOT, SHARED_MODELS

BOS = 1
CORPUS = os.path.join(ROOT, "tests", "corpus")
TOKENIZER = os.path.join(SHARED_MODELS, "tok512.bin")


class CachedRef(RefModel):
    """RefModel whose attention goes through a device KVCache built from `kv` (CacheConfig policy fields)."""

    def __init__(self, path, kv, tokens, policy=None):
        RefModel.__init__(self, path)
        c = self.cfg
        d = dict(kv)
        if "max_tokens" not in d:
            d["max_tokens"] = tokens
            kd = d.get("k_dtype", d.get("dtype"))
            if (d.get("residual") if kd == "i8" else kd in ("i4", "i2") and d.get("residual", 1)) \
                    and not d.get("window"):
                # KIVI key groups must tile the slots after the prefix (round the cap up to whole groups), and
                # hold at least the residual and one group
                g, pre = d.get("group", 32), d.get("prefix", 0)
                r = d.get("residual", g)
                d["max_tokens"] = pre + max(r + g, -(-(tokens - pre) // g) * g)
        if "k_dtype" in d:  # K and V apart: kvedge.kvsplit's config and cache
            self.ccfg = SplitConfig(c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, **d)
            self.cache = SplitCache(self.ccfg)
        else:
            self.ccfg = CacheConfig(c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, **d)
            self.cache = KVCache(self.ccfg)
        self.policy = policy(self.cache) if policy is not None else None
        self.capacity = tokens
        shape = (c.n_layers, tokens, c.n_kv_heads, c.head_dim)
        self.mk = np.zeros(shape)
        self.mv = np.zeros(shape)
        self.live = array("i", [0] * self.ccfg.slots)
        self.n_live = 0
        self.row = array("f", [0.0] * c.head_dim)
        self.kbuf = array("f", [0.0] * c.kv_dim)
        self.vbuf = array("f", [0.0] * c.kv_dim)
        # rows that change after they are written: a KIVI group quantized as it leaves the f32 residual (the
        # cache's res_lo moves past it), re-read then
        self.kivi = self.cache.kivi

    def reset(self):
        RefModel.reset(self)
        if hasattr(self, "cache"):
            self.cache.reset()

    def _started(self):
        """Positions whose stored rows changed when this token started (a tiered cache's block left the ring)."""
        return ()

    def close(self):
        pass

    def _mirror(self, layer, pos):
        c, row = self.cfg, self.row
        for h in range(c.n_kv_heads):
            self.cache.read(layer, h, pos, 0, row)
            self.mk[layer, pos, h] = row
            self.cache.read(layer, h, pos, 1, row)
            self.mv[layer, pos, h] = row

    def attend(self, layer, q, k, v, pos):
        cache = self.cache
        if layer == 0:
            p = cache.start_token()
            if p != pos:
                raise AssertionError("cache position %d != model position %d" % (p, pos))
            if pos >= self.capacity:
                raise ValueError("run longer than the %d tokens it was sized for" % self.capacity)
            self.moved = self._started()
        for i in range(len(k)):
            self.kbuf[i] = k[i]
            self.vbuf[i] = v[i]
        lo = cache.res_lo[layer] if self.kivi else 0
        cache.write(layer, self.kbuf, self.vbuf)
        if layer == 0:
            self.n_live = cache.positions(self.live)
        live = np.frombuffer(self.live, dtype=np.int32, count=self.n_live)
        self._mirror(layer, pos)  # the row just written
        if self.kivi:
            for s in range(lo, cache.res_lo[layer]):  # a group that left the residual: quantized now
                self._mirror(layer, cache.P + s)
        for p in self.moved:  # a tiered cache's block that just went cold: re-read as stored
            self._mirror(layer, p)
        if self.policy is None:
            return self.attention(q, self.mk[layer, live], self.mv[layer, live])
        out = self._attend_scored(q, self.mk[layer, live], self.mv[layer, live], live)
        if layer == self.cfg.n_layers - 1:
            self.policy.observe()
        return out

    def _attend_scored(self, q, K, V, live):
        """Attention that also adds each token's probability (Q16, summed over query heads) into the eviction
        policy's per-slot scores, as kvedge.attention's step(scores=...) does on the device."""
        c = self.cfg
        g = c.n_heads // c.n_kv_heads
        qh = q.reshape(c.n_heads, c.head_dim)
        out = np.empty((c.n_heads, c.head_dim))
        tot = np.zeros(len(live))
        for h in range(c.n_heads):
            sc = K[:, h // g, :] @ qh[h] / np.sqrt(c.head_dim)
            sc = np.exp(sc - sc.max())
            p = sc / sc.sum()
            out[h] = p @ V[:, h // g, :]
            tot += np.floor(p * 65536 + 0.5)
        slots = self.policy.scores
        for j, pos in enumerate(live):
            slots[self.cache.slot_of(int(pos))] += int(tot[j])
        return out.reshape(-1)


class TieredRef(CachedRef):
    """RefModel whose attention reads a kvedge.tier.cache.TieredCache: sinks + a hot ring in RAM, older tokens
    re-quantized in blocks on flash (a temporary folder here). `tier`: dtype (the ring's), window, sinks, block,
    cold, cold_blocks, at_cap ("drop": positions keep counting, so the model's positions stay the cache's)."""

    def __init__(self, path, tier, tokens):
        from kvedge.tier.cache import TieredCache
        RefModel.__init__(self, path)
        c = self.cfg
        S, W = tier.get("sinks", 0), tier["window"]
        self.ccfg = CacheConfig(c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, S + W, tier.get("dtype", "f32"),
                                window=W, sinks=S, prefix=S, align=tier.get("align", 0))
        self.tmp = tempfile.mkdtemp(prefix="kvedge-eval-")
        self.cache = TieredCache(self.ccfg, os.path.join(self.tmp, "cold"), tier["block"], tier["cold"],
                                 tier["cold_blocks"], tier.get("at_cap", "drop"), fresh=True)
        self.policy = None
        self.capacity = tokens
        shape = (c.n_layers, tokens, c.n_kv_heads, c.head_dim)
        self.mk = np.zeros(shape)
        self.mv = np.zeros(shape)
        self.live = array("i", [0] * self.cache.size["tokens"])
        self.n_live = 0
        self.row = array("f", [0.0] * c.head_dim)
        self.kbuf = array("f", [0.0] * c.kv_dim)
        self.vbuf = array("f", [0.0] * c.kv_dim)
        self.kivi = False  # the ring's rows change only when their block goes cold (_started)
        if self.cache.ring.kivi:
            raise ValueError("a KIVI ring's rows change after they are written: the eval's tiered rows use an "
                             "f32, f16 or i8 ring")
        self.demoted = 0

    def _started(self):
        tc = self.cache
        if tc.demoted == self.demoted:
            return ()
        self.demoted = tc.demoted
        first = tc.S + (tc.store.k0 + tc.store.count - 1) * tc.B  # the block that just went cold
        return range(first, first + tc.B)

    def stats(self):
        st = self.cache.stats()
        z = self.cache.size
        st["peak_bytes"] += z["staging"] + z["tables"]  # RAM at the peak: the ring's, and what sits beside it
        st["flash_bytes"] = z["flash"]
        return st

    def close(self):
        self.cache.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


class NumpyKivi(RefModel):
    """RefModel whose attention reads K/V through the numpy KIVI reference (kvedge_host.ref.kiviref), not a device
    cache: the same residual rule with float64 (or any chosen) arithmetic, to measure what the device's storage
    costs against the ideal. Tokens enter as f32, as they enter the device cache."""

    def __init__(self, path, kv, tokens):
        RefModel.__init__(self, path)
        c = self.cfg
        self.bits = {"i4": 4, "i2": 2}[kv["dtype"]]
        self.G = kv.get("group", 32)
        self.R = kv.get("residual", self.G)
        self.arith = tuple(kv["numpy"])
        self.capacity = tokens
        shape = (c.n_layers, tokens, c.n_kv_heads, c.head_dim)
        self.mk = np.zeros(shape)
        self.mv = np.zeros(shape)
        self.lo = [0] * c.n_layers
        # key variants beyond KIVI, measured by tools/eval_kivi_keys.py: sparse f16 outliers per channel and
        # group, or keys quantized before RoPE (and turned again when read)
        self.outliers = kv.get("outliers", 0)
        self.prerope = kv.get("prerope", False)
        self.pk = np.zeros(shape) if self.prerope else None

    def attend(self, layer, q, k, v, pos):
        c = self.cfg
        if pos >= self.capacity:
            raise ValueError("run longer than the %d tokens it was sized for" % self.capacity)
        shape = (c.n_kv_heads, c.head_dim)
        self.mk[layer, pos] = np.float32(k).reshape(shape)
        self.mv[layer, pos] = np.float32(v).reshape(shape)
        if self.prerope:  # the key as it was before RoPE turned it by pos
            self.pk[layer, pos] = self.rope(self.mk[layer, pos].reshape(-1).copy(), -pos).reshape(shape)
        lo = kiviref.residual_lo(pos + 1, self.G, self.R)
        for g in range(self.lo[layer], lo, self.G):  # a group leaves the residual
            sl = slice(g, g + self.G)
            keys = self.pk if self.prerope else self.mk
            keys[layer, sl] = kiviref.quant_keys(keys[layer, sl], self.bits, self.arith, self.outliers)
            self.mv[layer, sl] = kiviref.quant_values(self.mv[layer, sl], self.bits, self.arith)
            for p in range(g, g + self.G) if self.prerope else ():  # turned by each token's own position again
                self.mk[layer, p] = self.rope(self.pk[layer, p].reshape(-1).copy(), p).reshape(shape)
        self.lo[layer] = lo
        return self.attention(q, self.mk[layer, :pos + 1], self.mv[layer, :pos + 1])


def log_softmax(x):
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def sample_text(path, tokens, seed, stories=False, temperature=1.0):
    """`tokens` ids sampled from the model (numpy reference, f32, llama2.c's sampler and seed), starting with
    BOS. stories=True restarts the context at every BOS (or at the trained context), so a stream longer than
    the context is made of stories the model wrote within its context, joined by BOS."""
    m = RefModel(path)
    s = Sampler(m.cfg.vocab_size, temperature, seed)
    out = [BOS]
    tok = BOS
    while len(out) < tokens:
        if stories and m.pos >= m.cfg.seq_len:
            m.reset()
            tok = BOS
            out.append(BOS)
            continue
        logits = array("f", m.forward(tok))
        tok = s.sample(logits)
        out.append(tok)
        if stories and tok == BOS:
            m.reset()
    return out[:tokens]


class StoryError(ValueError):
    """A story of the written corpus cannot be used; the message starts with the story file's path."""


def written_texts(tokenizer=TOKENIZER, folder=CORPUS, vocab_size=512, limit=None):
    """[(name, ids)] of every story in `folder` (*.txt, by name), encoded as llama2.c does (BOS first). A story
    longer than `limit` tokens (the model's trained context) is refused: cut it, do not truncate silently.
    A story that is not UTF-8 text, too long or outside the vocabulary: StoryError naming its file; a tokenizer
    that does not fit: TokenizerError (both ValueErrors)."""
    from kvedge.model.tokenizer import Tokenizer
    tok = Tokenizer.load(tokenizer, vocab_size)  # raises TokenizerError (a ValueError) when the sizes disagree
    out = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".txt"):
            continue
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read().strip()
        except UnicodeDecodeError as e:
            raise StoryError("%s: not UTF-8 text (byte 0x%02x at offset %d)" % (path, e.object[e.start], e.start))
        ids = tok.encode(text)
        if limit and len(ids) > limit:
            raise StoryError("%s: %d tokens, more than the model's %d-token context" % (path, len(ids), limit))
        if max(ids) >= vocab_size:
            raise StoryError("%s: token %d is outside the model's %d-token vocabulary" % (path, max(ids), vocab_size))
        out.append((name[:-4], ids))
    if not out:
        raise StoryError("%s: no .txt stories" % folder)
    return out


def teacher_force(path, ids, kv, policy=None):
    """Logits (float64, [len(ids) - 1, vocab]) predicting ids[1:], and the cache's stats, for one strategy
    (kv: CacheConfig fields, or {"tiered": TieredRef's tier dict}). A kv with "numpy" (an arithmetic of
    kvedge_host.ref.kiviref) runs the numpy KIVI reference instead of a cache."""
    if "numpy" in kv:
        m = NumpyKivi(path, kv, len(ids))
        out = np.empty((len(ids) - 1, m.cfg.vocab_size))
        for i in range(len(ids) - 1):
            out[i] = m.forward(ids[i])
        return out, {"config": dict(kv, numpy=list(kv["numpy"]))}
    m = TieredRef(path, kv["tiered"], len(ids)) if "tiered" in kv else CachedRef(path, kv, len(ids), policy)
    try:
        out = np.empty((len(ids) - 1, m.cfg.vocab_size))
        for i in range(len(ids) - 1):
            out[i] = m.forward(ids[i])
        st = m.stats() if isinstance(m, TieredRef) else m.cache.stats()
    finally:
        m.close()
    st["config"] = m.ccfg.to_dict()
    if "tiered" in kv:
        st["tier"] = dict(kv["tiered"], kind="tiered", cold_dtype=kv["tiered"]["cold"])
    return out, st


TIER_BLOCK = 16


def tiered(ring, cold="i4", sinks=0, tokens=None, block=TIER_BLOCK, dtype="f32", stream=4096):
    """(name, kv) of a tiered row: a hot ring of `ring` tokens (plus `sinks` f32 sinks) in RAM, older tokens
    `cold` in blocks on flash, at most `tokens` held in all (the oldest blocks past that are dropped; None: every
    token of a `stream`)."""
    block = min(block, ring)
    if ring % block:
        raise ValueError("ring %d is not a multiple of block %d" % (ring, block))
    if tokens is None:
        blocks = -(-stream // block)
        held = "all"
    else:
        blocks = (tokens - sinks - ring) // block
        held = "%d" % (sinks + blocks * block + ring)
    name = "tiered: %sring %d + cold %s (b%d, %s held)" % ("sinks %d + " % sinks if sinks else "", ring, cold,
                                                           block, held)
    return name, {"tiered": {"dtype": dtype, "window": ring, "sinks": sinks, "block": block, "cold": cold,
                             "cold_blocks": blocks, "at_cap": "drop"}}


def score(ids, logits, base):
    """Per-position NLL of the next token, KL(base || logits), top-1 agreement with base."""
    target = np.asarray(ids[1:])
    lp = np.apply_along_axis(log_softmax, 1, logits)
    lb = np.apply_along_axis(log_softmax, 1, base)
    nll = -lp[np.arange(len(target)), target]
    kl = (np.exp(lb) * (lb - lp)).sum(axis=1)
    agree = logits.argmax(axis=1) == base.argmax(axis=1)
    return nll, kl, agree


def summarize(nll, kl, agree, sl=slice(None)):
    return {"ppl": float(np.exp(nll[sl].mean())), "kl": float(kl[sl].mean()), "top1": float(agree[sl].mean())}


def _sizes(window):
    return (window,) if isinstance(window, int) else tuple(window)


def strategies(tokens, window=128, sinks=4, prefix=None, group=32):
    """(name, kv dict) of the quality table; every one is sized for `tokens` positions. KIVI rows: keys per
    channel over groups of `group`, values per token, the newest R..R+G-1 tokens at f32 (residual R). `window`:
    the ring size of the eviction rows, or several (each is measured)."""
    if prefix is None:
        prefix = max(1, (tokens * 5 + 99) // 100)  # the first ~5 % (trap 5, docs/architecture.md)
    rows = [
        ("f32", {"dtype": "f32"}),
        ("f16", {"dtype": "f16"}),
        ("i8", {"dtype": "i8"}),
        ("i8 + f32 prefix %d" % prefix, {"dtype": "i8", "prefix": prefix}),
    ]
    for dt in ("i4", "i2"):
        for r in (group, 2 * group):
            rows.append(("%s KIVI (g%d, R%d)" % (dt, group, r), {"dtype": dt, "group": group, "residual": r}))
        rows.append(("%s per-token keys" % dt, {"dtype": dt, "group": group, "residual": 0}))
    rows += split_strategies(group)
    for w in _sizes(window):
        rows.append(("window %d" % w, {"dtype": "f32", "window": w, "max_tokens": w}))
        rows.append(("sinks %d + window %d" % (sinks, w - sinks),
                     {"dtype": "f32", "window": w - sinks, "sinks": sinks, "max_tokens": w}))
    rings = tier_rings(_sizes(window), tokens)  # tiered: a ring of each in RAM, every older token on flash
    rows += [tiered(r, stream=tokens) for r in rings] + [tiered(rings[-1], "i8", stream=tokens)]
    return rows


def split_strategies(group=32):
    """(name, kv dict) of K and V in formats of their own (CacheConfig's k_dtype, v_dtype): the planner's
    planquality.SPLITS, keys per channel (KIVI, residual of one group) or per token, values per token."""
    return [(split_name(k, v, pc, group), split_fields(k, v, pc, group)) for k, v, pc in SPLITS]


def tier_rings(windows, context):
    """The two hot-ring sizes of the tiered rows: the two smallest windows below the context (one window: half
    of it and itself), each a multiple of the block when it is larger."""
    small = sorted(w for w in windows if w < context)[:2] or [min(windows)]
    rings = small if len(small) == 2 else [max(1, small[0] // 2), small[0]]
    return [r - r % TIER_BLOCK if r > TIER_BLOCK else r for r in rings]


def h2o_policy(slots, recent=None, sinks=0):
    """Factory attaching kvedge's heavy-hitter policy (kvedge.evict.H2O, issue 5) to a cache: hold `slots`
    tokens, the newest `recent` (default half) never evicted. None when this kvedge has no H2O."""
    try:
        from kvedge.evict import H2O
    except ImportError:
        return None
    if recent is None:
        recent = slots // 2
    return lambda cache: H2O(cache, budget=slots, recent=recent, sinks=sinks)


FORWARDS = ("float", "int")


def forward_logits(i8path, ids, forward, kv):
    """Logits (float64, [len(ids) - 1, vocab]) of the device model itself (kvedge.model.llama.Llama on CPython,
    plain kernels) on an int8 file, teacher-forced through its own cache, and the cache's stats: the forward
    pass `forward` ("float": float activations between int8 matvecs; "int": kvedge.model.pass_int)."""
    from kvedge.model.llama import Llama
    m = Llama(i8path, kv=dict(kv, max_tokens=len(ids)), forward=forward)
    out = np.empty((len(ids) - 1, m.cfg.vocab_size))
    for i in range(len(ids) - 1):
        lg = m.forward(ids[i])
        row = np.array(lg, dtype=np.float64)
        out[i] = row * 2.0 ** m.intp.exp_logits if forward == "int" else row
    st = m.cache.stats()
    st["config"] = m.cache.cfg.to_dict()
    m.close()
    return out, st


def forward_rows(path, texts, bases, forwards, kv=None, progress=None, weights=("i8",)):
    """Quality rows of the device's forward passes (FORWARDS) on the model converted to each of `weights` (int8,
    int4: the integer pass only), scored against `bases` (the f32 reference's logits per text)."""
    import os
    import tempfile
    from kvedge.model.checkpoint import convert_to_i8
    from kvedge.model.convert4 import convert_to_i4
    kv = dict(kv or {"dtype": "i8", "align": 0})
    rows = []
    with tempfile.TemporaryDirectory(prefix="kvedge-eval-") as tmp:
        for wd in weights:
            if wd not in ("i8", "i4"):
                raise ValueError("weights must be i8 or i4, got %r" % (wd,))
            conv = os.path.join(tmp, "model.%s.bin" % wd)
            (convert_to_i8 if wd == "i8" else convert_to_i4)(path, conv)
            for fw in forwards:
                if fw not in FORWARDS:
                    raise ValueError("forward must be one of %s, got %r" % (", ".join(FORWARDS), fw))
                if wd == "i4" and fw != "int":
                    continue  # int4 rows run on the integer pass only
                name = "%s forward pass, %s weights, %s cache (device)" % (fw, wd, kv["dtype"])
                if progress:
                    progress(name)
                parts = []
                for ids, base in zip(texts, bases):
                    logits, st = forward_logits(conv, ids, fw, kv)
                    parts.append(score(ids, logits, base))
                r = summarize(*[np.concatenate([p[j] for p in parts]) for j in range(3)])
                r.update(name=name, forward=fw, weights=wd, peak_bytes=st["peak_bytes"],
                         arena_bytes=st["total_bytes"], evictions=st["evictions"], config=st["config"])
                rows.append(r)
    return rows


def evaluate(path, tokens=512, seed=42, window=128, sinks=4, only=None, align=0, progress=None, samples=1,
             texts=None, forwards=(), weights=("i8",)):
    """The quality table: rows (dict: name, ppl, kl, top1, peak_bytes, arena_bytes, config). The texts are
    `texts` (lists of token ids, BOS first) or, when None, `samples` texts of `tokens` tokens sampled from the
    model with seeds seed, seed+1, ...; every text is teacher-forced and their positions pooled (one perplexity
    over every predicted token), which steadies figures that one 512-token text leaves noisy. forwards: rows of
    the device's own forward passes on int8 (and, in `weights`, int4) weights (forward_rows)."""
    if texts is None:
        texts = [sample_text(path, tokens, seed + i) for i in range(samples)]
    tokens = max(len(t) for t in texts)
    rows = []
    todo = strategies(tokens, window, sinks)
    for w in _sizes(window):
        todo.append(("H2O %d slots (%d recent)" % (w, w // 2), w))
    bases = []
    for name, kv in todo:
        if only and not any(o in name for o in only) and name != "f32":
            continue
        if isinstance(kv, int):
            pol = h2o_policy(kv)
            if pol is None:
                rows.append({"name": name, "missing": "needs kvedge's H2O policy (issue 5)"})
                continue
            kv = {"dtype": "f32", "max_tokens": kv}  # an arena of the same budget; H2O chooses who stays
        else:
            pol = None
        kv = dict(kv, align=align) if "tiered" not in kv else kv
        if progress:
            progress(name)
        parts = []
        for i, ids in enumerate(texts):
            logits, st = teacher_force(path, ids, kv, pol)
            if len(bases) <= i:
                bases.append(logits)
            parts.append(score(ids, logits, bases[i]))
        r = summarize(*[np.concatenate([p[j] for p in parts]) for j in range(3)])
        r.update(name=name, peak_bytes=st["peak_bytes"], arena_bytes=st["total_bytes"],
                 evictions=st["evictions"], config=st["config"])
        if "tier" in st:
            r.update(tier=st["tier"], flash_bytes=st["flash_bytes"])
        rows.append(r)
    if forwards:
        rows += forward_rows(path, texts, bases, forwards, {"dtype": "i8", "align": align}, progress, weights)
    return {"tokens": tokens, "seed": seed, "samples": len(texts), "text_tokens": sum(len(t) for t in texts),
            "rows": rows}


def evaluate_long(path, contexts=3, seed=42, windows=(128, 512), sinks=4, align=0, progress=None, only=None):
    """Long stream past the trained context: `contexts` x seq_len tokens of stories joined by BOS, through a
    full cache (positions run past the trained context), a window, sinks + window, H2O, and tiered caches (a
    ring of 64 or 128 tokens in RAM, older tokens i4 on flash: holding a trained context's worth, or everything).
    Perplexity per trained-context segment shows where each one breaks down."""
    m = RefModel(path)
    ctx = m.cfg.seq_len
    n = contexts * ctx
    ids = sample_text(path, n, seed, stories=True)
    todo = [("full f32 cache (%d)" % n, {"dtype": "f32"})]
    for w in windows:
        todo.append(("window %d" % w, {"dtype": "f32", "window": w, "max_tokens": w}))
        todo.append(("sinks %d + window %d" % (sinks, w - sinks),
                     {"dtype": "f32", "window": w - sinks, "sinks": sinks, "max_tokens": w}))
    w = windows[0]
    todo.append(("H2O %d slots (%d recent)" % (w, w // 2), None))
    rings = tier_rings(windows, ctx)
    todo += [tiered(r, tokens=ctx) for r in rings]
    todo += [tiered(rings[-1], sinks=sinks, tokens=ctx), tiered(rings[-1], stream=n)]
    rows = []
    base = None
    for name, kv in todo:
        if only and not any(o in name for o in only) and base is not None:
            continue
        pol = None
        if kv is None:
            pol = h2o_policy(w)
            if pol is None:
                continue
            kv = {"dtype": "f32", "max_tokens": w}
        if progress:
            progress(name)
        logits, st = teacher_force(path, ids, dict(kv, align=align) if "tiered" not in kv else kv, pol)
        if base is None:
            base = logits
        nll, kl, agree = score(ids, logits, base)
        r = {"name": name, "peak_bytes": st["peak_bytes"], "evictions": st["evictions"], "segments": []}
        if "tier" in st:
            r.update(tier=st["tier"], flash_bytes=st["flash_bytes"])
        r.update(summarize(nll, kl, agree))
        for s in range(contexts):
            seg = slice(s * ctx, min((s + 1) * ctx, len(nll)))
            r["segments"].append(summarize(nll, kl, agree, seg))
        rows.append(r)
    return {"tokens": n, "seed": seed, "context": ctx, "rows": rows}
