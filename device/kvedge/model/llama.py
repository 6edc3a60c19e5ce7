# The Llama-2 forward pass of llama2.c checkpoints on the kvedge cache, one token at a time.
#
# RMSNorm (eps 1e-5), RoPE on pairs (2i, 2i+1) with freq 10000^(-(i*2 % head_dim)/head_dim), grouped-query
# attention through kvedge's KVCache and its tiled attention loop, SwiGLU FFN w2(silu(w1 x) * w3 x), and a
# classifier that shares the embedding when the header's vocab_size is positive.
#
# Every activation lives in an array('f') allocated once here; forward() allocates no buffers (on
# MicroPython float arithmetic still boxes each intermediate float; int8 matvecs through viper box none).
# The whole run's memory - resident weights, the KV cache arena, activations and the runtime workspace - is
# computed with kvedge.budget's formulas and checked against the budget before anything large is allocated.
import gc
import math
import sys

from kvedge import sizes as _sizes
from kvedge.compat import HAS_HEAP_LOCK
from kvedge import kernels
from kvedge import caches as _caches
from kvedge.config import CacheConfig
from kvedge.errors import BudgetError
from kvedge.model.header import read_config, resident_bytes, weights_place, zeros

BOS = 1
COLD_PATH = _caches.COLD_PATH  # a tiered cache's files (COLD_PATH.*) in the current folder, unless the caller names others
_SHAPE = ("layers", "heads", "kv_heads", "head_dim")
WORD = 8 if sys.maxsize > 0x7FFFFFFF else 4  # bytes of a pointer: objects on a 32-bit board are half the size


def cache_config(cfg, kv=None):
    """CacheConfig for a model: kv holds the policy fields (dtype, max_tokens, window, sinks, prefix, align,
    group, residual); max_tokens defaults to the model's trained context."""
    d = dict(kv or {})
    for k in _SHAPE:
        if k in d:
            raise ValueError("cache field %r comes from the checkpoint, not from the caller" % k)
    d.setdefault("max_tokens", cfg.seq_len)
    return CacheConfig(cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, **d)


def acc_rows(cfg, stream=False):
    """Rows of int32 sums a matvec needs at once: the tallest matrix, or with weights streamed from flash one
    chunk of rows (each chunk is scaled out before the next is read)."""
    if stream and stream != "rom":  # rows read in place from ROMFS are summed all at once
        from kvedge.model import streambytes as _sb
        buf = _sb.stream_buffer_bytes(cfg.dim, cfg.hidden_dim, "i8")
        return _sb.stream_scale_slots(cfg.dim, cfg.hidden_dim, "i8", buf)
    return max(cfg.dim, cfg.hidden_dim, cfg.vocab_size)


def scratch_bytes(cfg, wdtype, stream=False):
    """Model buffers beyond kvedge.budget.activation_bytes: K and V of the current token (kv_dim f32 each),
    RoPE frequencies and this position's cos/sin (head_dim/2 f32 each), and for int8 weights the int8 codes
    of a matvec input (the widest input) and its int32 row sums (acc_rows); the integer attention path's query
    codes, scales and output (counted always: a few hundred bytes)."""
    n = 2 * cfg.kv_dim * 4 + 3 * (cfg.head_dim // 2) * 4
    n += cfg.dim + 2 * cfg.n_heads + 4 * cfg.dim + 4 * cfg.n_heads  # integer attention: query codes, output
    if wdtype == "i8":
        n += max(cfg.dim, cfg.hidden_dim) + 4 * acc_rows(cfg, stream)
    return n


def integer_bytes(cfg, tile=32):
    """The integer attention path's scratch in kvedge.attention beyond its tile state: the tile header and
    columns (16 + 7 per token, int32), its geometry and a head's state (about 24 + head_dim int32), the
    accumulators (head_dim int32) and the 2**x table (257 uint16); with the arrays' headers."""
    return 4 * (16 + 7 * tile) + 4 * (24 + cfg.head_dim) + 4 * cfg.head_dim + 2 * 257 + 4 * 32


def object_bytes(cfg, ccfg, tile=32, word=WORD, integer=False):
    """Heap beside the formula-sized buffers: the Python objects (model, weights, cache, attention, one per
    weight matrix and their lists), the cache's slot table (4 bytes a slot) and the attention loop's tile
    state beyond budget.activation_bytes. word: the runtime's pointer size (default this runtime's). Measured
    after a first run (the first one also interns names and builds tables: the runtime's footprint, counted
    by the caller's workspace), stories260K streamed at tile 32: 5,752-6,696 bytes on the 32-bit Cortex-M3
    board (plain and viper kernels); about 320 bytes a matrix on the 64-bit unix port. Rounded up; 512 bytes
    more since the model keeps its cache kind and pass (the emulated boards peaked up to 424 bytes over plans
    without them)."""
    # rows the int8 kernels cannot read in place (an f32 prefix, i4, i2) are converted a tile at a time
    conv = 2 * tile * cfg.head_dim + 4 * tile + 8 * cfg.head_dim + 64 if ccfg.prefix or ccfg.dtype in ("i4", "i2") \
        else 0
    if integer:  # kvedge.attention's integer path runs (viper or asm kernels and an i8/i4/i2 cache)
        conv += integer_bytes(cfg, tile)
    if word == 4:
        return 5120 + 40 * (7 * cfg.n_layers + 2) + 4 * ccfg.slots + 16 * tile + conv
    return 2048 + 320 * (7 * cfg.n_layers + 2) + 4 * ccfg.slots + 256 * tile + conv


def plan(cfg, wdtype, ccfg, stream=False, tile=32, workspace=0, forward="float", word=WORD, integer=False,
         tier=None):
    """The run's memory account (kvedge.budget.deployment_bytes): weights resident in RAM, KV cache (the arena,
    or a tiered cache's ring + staging block + tables), activations + model scratch (the forward pass's own:
    _path(forward).scratch_bytes for the others), and workspace = the runtime's share (caller) + this run's
    Python objects (object_bytes for a runtime with `word`-byte pointers: the host plans a 32-bit board with
    word=4)."""
    act = _sizes.activation_bytes(cfg.dim, cfg.hidden_dim, cfg.n_heads, cfg.vocab_size, tile,
                                   head_dim=cfg.head_dim)
    if forward == "float":
        scratch = scratch_bytes(cfg, wdtype, stream)
    else:
        scratch = _path(forward, wdtype).scratch_bytes(cfg, stream)
    if tier is None:
        kv = ccfg.nbytes()
    else:
        from kvedge import tierconf
        kv = tierconf.ram_bytes(ccfg, tier)["ram"]
    # the float pass reads streamed norms from the file; the others keep theirs
    return _sizes.deployment_bytes(resident_bytes(cfg, wdtype, stream, norms=forward != "float"), kv,
                                   act + scratch, workspace + object_bytes(cfg, ccfg, tile, word, integer))


def plan_kind(ccfg, tier=None, policy=False):
    """The plan kind (kvedge.model.passes) of a cache: tiered, h2o, sinks, window, prefix (every token, the first
    ones at f32) or keep."""
    if tier is not None:
        return "tiered"
    if policy:
        return "h2o"
    if ccfg.sinks:
        return "sinks"
    if ccfg.window:
        return "window"
    return "prefix" if ccfg.prefix else "keep"


def resolve_forward(forward, wdtype, ccfg, tier=None, stream=False, policy=False, attention=None):
    """forward="auto": the fastest pass that runs this model and cache with the kernels selected here
    (kvedge.model.passes.choose); any other value is returned as it is (checked by check())."""
    from kvedge.model import passes as _passes  # here: a run that names its pass does not load the rule
    if forward != _passes.AUTO:
        return forward
    if attention is not None:  # a caller's attention runs on the float pass
        return _passes.FLOAT
    cold = tier["cold_dtype"] if tier is not None else None
    return _passes.choose(wdtype, ccfg.dtype, kernels.kind(), plan_kind(ccfg, tier, policy), cold, ccfg.prefix,
                          bool(stream), policy, _passes.has_ulab())


def _path(forward, wdtype="i8"):
    """The module of a forward pass other than the float one: "int" (kvedge.model.intpath; int4 weights:
    kvedge.model.int4rows, its Weights and Forward over intpath's), "ulab" (kvedge.model.ulabpath, where ulab
    imports)."""
    if forward == "int":
        if wdtype == "i4":
            from kvedge.model import int4rows
            return int4rows
        from kvedge.model import intpath
        return intpath
    if forward == "ulab":
        from kvedge.model import ulabpath
        return ulabpath
    raise ValueError("forward must be 'float', 'int' or 'ulab', got %r" % (forward,))


def check(path, kv=None, budget=None, workspace=0, stream=False, tile=32, policy=False, forward="float",
          attention=None, integer=False, tier=None, word=WORD):
    """(model config, weights dtype, cache config, plan) of a run of this checkpoint; ValueError when the forward
    pass cannot run it, BudgetError when the plan is over `budget`. Reads the header only: nothing is allocated
    (Llama() checks first, and so can a caller that allocates other things first, e.g. the tokenizer).
    forward: "float", "int" or "ulab" (resolve_forward gives "auto"'s choice); tier: a tiered cache's fields;
    word: bytes of a pointer on the runtime that runs it (a host checks a 32-bit board's run with 4)."""
    cfg, wdtype = read_config(path)
    ccfg = cache_config(cfg, kv)
    if wdtype == "i4" and forward != "int":
        raise ValueError("int4 weights: forward 'int' only")
    if tier is not None:
        from kvedge import tierconf
        tierconf.check_run(tier, forward, policy)
    if forward != "float":
        _path(forward, wdtype).check(wdtype, ccfg, attention, bool(stream), policy)
    # every pass but ulab's reads rows in place where the file is mapped (ROMFS); ulab's copies them to RAM
    stream = weights_place(path, stream) if forward != "ulab" else bool(stream)
    if policy:
        workspace += 8 * ccfg.slots + 256  # a policy's per-slot scores and accumulators
    p = plan(cfg, wdtype, ccfg, stream, tile, workspace, forward, word, integer, tier)
    if budget is not None and p["total"] > budget:
        raise BudgetError("model run (weights %d + kv %d + activations %d + workspace %d)" % (
            p["weights"], p["kv"], p["activations"], p["workspace"]), p["total"], budget)
    return cfg, wdtype, ccfg, p


def integer_path(kv, int_attention="auto", attention=None):
    """Whether kvedge.attention's integer path will run: an i8/i4/i2 cache and (auto) viper or asm kernels."""
    if attention is not None or not int_attention:
        return False
    dtype = (kv or {}).get("dtype", "f32")
    if int_attention == "auto":
        return dtype in _sizes.INT_CODES and kernels.kind() in kernels.FAST
    return dtype in _sizes.INT_CODES


class Llama:
    """A checkpoint ready to run: weights, KV cache, attention loop and activation buffers.

    path       llama2.c .bin (f32) or kvedge int8 file (`kvedge convert`)
    kv         cache policy dict (see cache_config), default f32 over the trained context
    budget     bytes the whole run may use (None = no check); BudgetError before allocating when over
    workspace  bytes set aside for the runtime itself (interpreter, stacks, the code), counted in the plan
    stream     leave weight matrices in the file and read them row block by row block (when they do not fit);
               "rom": read int8 rows in place where the file is memory-mapped (ROMFS), else stream them
    attention  factory(cache, tile=...) -> object with step(layer, q, out); default kvedge.attention
    int_attention  "auto" (integer path of kvedge.attention for i8/i4/i2 caches when viper or asm kernels run
               it), True (integer path whenever the cache is i8/i4/i2) or False (float path always)
    policy     eviction policy factory(cache) -> object with `scores` (array('i') per slot, filled by the
               attention step) and observe() (called once per token), e.g.
               lambda c: kvedge.evict.H2O(c, budget=128, recent=64); counted in the plan as 8 bytes a slot
    forward    "float" (this module's float pass), "int" (kvedge.model.intpath: int8 weights, i8 cache, no
               float and no allocation per token; forward() then returns integer logits, value
               logits[i] * 2**intp.exp_logits) or "ulab" (kvedge.model.ulabpath: float32 through ulab arrays,
               for CircuitPython boards; int8 weights in RAM, i8 cache)
    arena      the cache's arena allocated earlier (KVCache(arena=...)): a bytearray of exactly its bytes
    cache      a caller's cache kind: factory(ccfg, q8) -> an object with the decode interface (kvedge.caches:
               start_token, write, store_q8, attend, attend_q8, bind_q8, bind_query, quiet, reset, close, and att,
               int_ok, chunks); q8: the run writes int8 codes. Counted in the plan as ccfg's arena
    """

    def __init__(self, path, kv=None, budget=None, workspace=0, stream=False, tile=32, attention=None,
                 int_attention="auto", policy=None, forward="auto", arena=None, tier=None, cold_path=COLD_PATH,
                 cache=None):
        if forward == "auto":  # kvedge.model.passes.AUTO
            cfg, wdtype = read_config(path)
            forward = resolve_forward(forward, wdtype, cache_config(cfg, kv), tier, stream, policy is not None,
                                      attention)
        # "rom" only where the file is mapped (every pass but ulab's reads it in place; check() makes it True for
        # ulab's)
        stream = weights_place(path, stream)
        cfg, wdtype, ccfg, self.plan = check(path, kv, budget, workspace, stream, tile, policy is not None,
                                             forward, attention, integer_path(kv, int_attention, attention), tier)
        alt = None if forward == "float" else _path(forward, wdtype)
        self.cfg = cfg
        self.wdtype = wdtype
        self.k = kernels.get()
        self.forward_kind = forward
        self.kind = plan_kind(ccfg, tier, policy is not None)
        self.intp = None  # the other forward pass, when it runs
        # the integer pass's steps run with the heap locked once two steps in a row allocated nothing
        # (kvedge.model.intpath.Forward.step)
        self._lockable = False
        # largest first: the arena, then the buffers, then the many small objects (weights, policy, attention),
        # which fill whatever holes are left rather than leave the buffers none big enough; garbage is collected
        # between the steps, so each one starts filling from the lowest hole (on a 32-bit board's nearly full heap
        # this decides whether a run that fits by its account also finds its blocks)
        # the cache the plan names (a ring in RAM and older tokens on flash for a tier; a generation starts afresh);
        # the passes other than the float one, and the float pass's integer attention, write int8 codes
        quantized = ccfg.dtype in _sizes.INT_CODES
        if int_attention == "auto":
            want = quantized and kernels.kind() in kernels.FAST
        else:
            want = bool(int_attention)
        if alt is not None:
            want = True
        q8 = alt is not None or (want and quantized)
        if cache is not None:  # a caller's cache kind: any object with the decode interface (kvedge.caches)
            self.cache = cache(ccfg, q8)
        else:
            self.cache = _caches.build(ccfg, tier, cold_path, tile, arena, q8=q8)
        gc.collect()
        if alt is None:
            self._buffers(cfg, wdtype, stream)
            gc.collect()
        # the integer pass's buffers (its logits are its largest: 4 bytes a vocabulary entry) before the weights'
        # many small objects and their load's garbage: after them, on the emulated rp2040's nearly full heap, no
        # 2 KB block was left for the logits though the plan's account held
        early = forward == "int"
        if not early:
            self._weights(alt, path, stream)
        self.policy = policy(self.cache) if policy is not None else None
        self.scores = self.policy.scores if self.policy is not None else None
        gc.collect()
        # its attention (a tiered cache attends its tiers itself); the integer path only where it runs
        runs = _caches.attach(self.cache, tile, want and quantized, attention, self.scores)
        if want and not runs and int_attention != "auto" and alt is None:
            raise ValueError("the integer attention path needs an i8, i4 or i2 cache and kvedge.attention")
        self.int_attention = runs
        if early:
            self.intp = alt.Forward(self, None)
            gc.collect()
            self._weights(alt, path, stream)
            self.intp.take(self.w)
            self.logits = self.intp.logits
            self._lockable = HAS_HEAP_LOCK and hasattr(gc, "mem_alloc")
            return
        if alt is not None:
            self.intp = alt.Forward(self, self.w)
            self.logits = self.intp.logits
            # steps are locked where the cache says they allocate nothing (Forward.step)
            self._lockable = HAS_HEAP_LOCK and hasattr(gc, "mem_alloc")
            return
        if self.int_attention:
            from kvedge.attention import quantize_query, dequantize_output
            self._qquery, self._dqout = quantize_query, dequantize_output
            self.qc = zeros("b", cfg.dim)
            self.qs = zeros("H", cfg.n_heads)
            self.oq = zeros("i", cfg.dim)
            self.oe = zeros("i", cfg.n_heads)
            self.cache.bind_query(self.qc, self.qs, self.oq, self.oe)

    def _weights(self, alt, path, stream):
        """The weights: the float pass's loader, or the other pass's own (it never loads the float one's)."""
        if alt is None:
            from kvedge.model.checkpoint import Weights
            self.w = Weights(path, stream)
        else:
            self.w = alt.Weights(path, stream)
        gc.collect()

    def _buffers(self, cfg, wdtype, stream):
        """The float pass's activations, largest first."""
        d, h, kvd, hd = cfg.dim, cfg.hidden_dim, cfg.kv_dim, cfg.head_dim
        if wdtype == "i8":
            self.acc = zeros("i", acc_rows(cfg, stream))
            self.xq = zeros("b", max(d, h))
        else:
            self.xq = None
            self.acc = None
        self.logits = zeros("f", cfg.vocab_size)
        self.hb = zeros("f", h)
        self.hb2 = zeros("f", h)
        self.x = zeros("f", d)
        self.xb = zeros("f", d)
        self.xb2 = zeros("f", d)
        self.q = zeros("f", d)
        self.kk = zeros("f", kvd)
        self.vv = zeros("f", kvd)
        half = hd // 2
        self.freq = zeros("f", half)  # f32 like llama2.c's freq, so angles round the same way
        for i in range(half):
            self.freq[i] = 1.0 / math.pow(10000.0, (2 * i) / hd)
        self.cos = zeros("f", half)
        self.sin = zeros("f", half)
        self.xs = 0.0

    def close(self):
        self.w.close()
        self.cache.close()

    def reset(self):
        """Forget the sequence (a new conversation): empties the cache, keeps every buffer."""
        self.cache.reset()

    # ---- pieces of the forward pass ----

    def _attend(self, layer, q, out):
        # The one seam between the model and the cache's attention (its decode interface: kvedge.caches). A query
        # beyond the integer step's range in this layer (q8_fits: kvedge.attention.Q8_RANGE) takes the float step.
        if self.int_attention:
            h = self.cfg.n_heads
            self._qquery(q, self.qc, self.qs, h)
            if self.cache.q8_fits(layer, self.qs):
                self.cache.attend_q8(layer, self.qc, self.qs, self.oq, self.oe)
                self._dqout(self.oq, self.oe, out, h)
                return
        self.cache.attend(layer, q, out)

    def _mv(self, mat, x, out):
        mat.mv(self.k, x, self.xq, self.xs, self.acc, out)

    def _prep(self, x, n):
        # int8 weights multiply int8 codes of the input; quantize it once for every matrix that reads it
        if self.xq is not None:
            self.xs = self.k.mv_quant(x, n, self.xq)

    def _rope_angles(self, pos):
        for i in range(len(self.freq)):
            a = pos * self.freq[i]
            self.cos[i] = math.cos(a)
            self.sin[i] = math.sin(a)

    def _rope(self, v, n):
        # rotate pairs (2i, 2i+1) of every head in v[0:n]; pair i of a head uses freq[i]
        half = len(self.freq)
        cs, sn = self.cos, self.sin
        j = 0
        i = 0
        while j < n:
            c = cs[i]
            s = sn[i]
            v0 = v[j]
            v1 = v[j + 1]
            v[j] = v0 * c - v1 * s
            v[j + 1] = v0 * s + v1 * c
            j += 2
            i += 1
            if i == half:
                i = 0

    def _rmsnorm(self, out, x, w, n):
        self.k.mv_rmsnorm(out, x, w, n)  # eps 1e-5

    def forward(self, token):
        """Run one token at the cache's next position; returns the logits buffer (overwritten by the next
        call). Raises CacheFullError (nothing changed) when the cache has no room and no window."""
        cfg = self.cfg
        check_token(token, cfg.vocab_size)  # before the cache gives a position
        if self.intp is not None:
            return self.intp.step(token) if self._lockable else self.intp.forward(token)
        w = self.w
        k = self.k
        d, h, kvd = cfg.dim, cfg.hidden_dim, cfg.kv_dim
        x, xb, xb2, q, hb, hb2 = self.x, self.xb, self.xb2, self.q, self.hb, self.hb2
        pos = self.cache.start_token()
        w.embedding.row(token, x)
        self._rope_angles(pos)
        for l in range(cfg.n_layers):
            self._rmsnorm(xb, x, w.norm(w.rms_att[l]), d)
            self._prep(xb, d)
            self._mv(w.wq[l], xb, q)
            self._mv(w.wk[l], xb, self.kk)
            self._mv(w.wv[l], xb, self.vv)
            self._rope(q, d)
            self._rope(self.kk, kvd)
            self.cache.write(l, self.kk, self.vv)
            self._attend(l, q, xb2)
            self._prep(xb2, d)
            self._mv(w.wo[l], xb2, xb)
            k.mv_add(x, xb, d)
            self._rmsnorm(xb, x, w.norm(w.rms_ffn[l]), d)
            self._prep(xb, d)
            self._mv(w.w1[l], xb, hb)
            self._mv(w.w3[l], xb, hb2)
            k.mv_swiglu(hb, hb2, h)
            self._prep(hb, h)
            self._mv(w.w2[l], hb, xb)
            k.mv_add(x, xb, d)
        if self.policy is not None:
            self.policy.observe()
        self._rmsnorm(x, x, w.norm(w.rms_final), d)
        self._prep(x, d)
        self._mv(w.wcls, x, self.logits)
        return self.logits


def check_token(token, vocab):
    """A token id: an int (not a bool, a float or NaN) within 0..vocab-1; TypeError / ValueError naming it."""
    if not isinstance(token, int) or isinstance(token, bool):
        raise TypeError("token must be an int, got %s" % type(token).__name__)
    if token < 0 or token >= vocab:
        raise ValueError("token %d outside the vocabulary of %d" % (token, vocab))


def generate(model, tokenizer, sampler, prompt_ids, steps, emit=None, keep=True):
    """llama2.c's generation loop: feed the prompt, then sample until `steps` positions, a BOS, or a full
    cache. emit(piece_bytes) gets each new piece. Returns the list of generated token ids, or with keep=False
    only how many there were (nothing then grows with the length of an endless stream). Every prompt id is
    checked before the first one is fed."""
    from kvedge.errors import CacheFullError
    if not prompt_ids:
        raise ValueError("prompt_ids must hold at least one token (BOS)")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ValueError("steps must be an int >= 0, got %r" % (steps,))
    for t in prompt_ids:
        check_token(t, model.cfg.vocab_size)
    flogits = None
    if getattr(model, "intp", None) is not None and sampler.temperature:
        flogits = zeros("f", model.cfg.vocab_size)  # sampling with a temperature needs float logits
    out = []
    n = 0
    token = prompt_ids[0]
    pos = 0
    while pos < steps:
        try:
            logits = model.forward(token)
        except CacheFullError:
            break
        if pos < len(prompt_ids) - 1:
            nxt = prompt_ids[pos + 1]
        elif flogits is not None:
            nxt = sampler.sample(model.intp.float_logits(flogits))
        else:
            nxt = sampler.sample(logits)
        pos += 1
        if nxt == BOS:
            break
        if pos >= len(prompt_ids):
            if keep:
                out.append(nxt)
            else:
                n += 1
        if emit is not None:
            emit(tokenizer.piece(token, nxt))
        token = nxt
    return out if keep else n
