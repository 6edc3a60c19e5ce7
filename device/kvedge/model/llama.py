# The model runner of llama2.c checkpoints on the kvedge cache, one token at a time: the run's memory account
# (resident weights, the KV cache arena, activations and the runtime workspace, computed with kvedge.budget's
# formulas and checked against the budget before anything large is allocated), the cache the plan names, and the
# forward pass that runs it, each in a module of its own named alike: kvedge.model.pass_float (f32 or int8
# weights, float activations), pass_int (int8 weights, integer activations), pass_int4 (int4 weights on the
# integer pass), pass_ulab (ulab arrays). Each pass module holds Weights (its loader) and Forward (its buffers,
# allocated once, and forward(token)).
import gc
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
    C = CacheConfig
    if "k_dtype" in d:  # K and V apart: kvedge.kvsplit's config (loaded by split plans only)
        from kvedge.kvsplit import SplitConfig as C
    return C(cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, **d)


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
    kvedge.model.sizes.float_scratch_bytes, or the pass's scratch_bytes), and workspace = the runtime's share (caller) + this run's
    Python objects (object_bytes for a runtime with `word`-byte pointers: the host plans a 32-bit board with
    word=4)."""
    act = _sizes.activation_bytes(cfg.dim, cfg.hidden_dim, cfg.n_heads, cfg.vocab_size, tile,
                                   head_dim=cfg.head_dim)
    if forward == "float":  # the float pass's formula without its code (kvedge.model.sizes)
        from kvedge.model.sizes import float_scratch_bytes
        scratch = float_scratch_bytes(cfg, wdtype, stream)
    else:
        scratch = _path(forward, wdtype).scratch_bytes(cfg, stream)
    if tier is None:
        kv = ccfg.nbytes()
    else:
        from kvedge.tier import config as tierconf
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
    """The module of a forward pass: "float" (kvedge.model.pass_float), "int" (kvedge.model.pass_int; int4
    weights: kvedge.model.pass_int4, its Weights and Forward over pass_int's), "ulab" (kvedge.model.pass_ulab,
    where ulab imports)."""
    if forward == "float":
        from kvedge.model import pass_float
        return pass_float
    if forward == "int":
        if wdtype == "i4":
            from kvedge.model import pass_int4
            return pass_int4
        from kvedge.model import pass_int
        return pass_int
    if forward == "ulab":
        from kvedge.model import pass_ulab
        return pass_ulab
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
        from kvedge.tier import config as tierconf
        tierconf.check_run(tier, forward, policy)
    if forward != "float":  # the float pass runs every model and cache this far
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
    forward    "float" (kvedge.model.pass_float), "int" (kvedge.model.pass_int: int8 weights, i8 cache, no
               float and no allocation per token; forward() then returns integer logits, value
               logits[i] * 2**intp.exp_logits) or "ulab" (kvedge.model.pass_ulab: float32 through ulab arrays,
               for CircuitPython boards; int8 weights in RAM, i8 cache)
    arena      the cache's arena allocated earlier (KVCache(arena=...)): a bytearray of exactly its bytes
    cache      a caller's cache kind: factory(ccfg, q8) -> an object with the decode interface (kvedge.caches:
               start_token, write, store_q8, attend, attend_q8, bind_q8, bind_query, quiet, reset, close, and att,
               int_ok, chunks); q8: the run writes int8 codes. Counted in the plan as ccfg's arena. A session of a
               paged pool (kvedge.pooled.PoolSession) is one: several conversations on one board, use() switches
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
        fp = _path(forward, wdtype)  # the pass's module: its Weights and Forward
        self.cfg = cfg
        self.wdtype = wdtype
        self.k = kernels.get()
        self.forward_kind = forward
        self.kind = plan_kind(ccfg, tier, policy is not None)
        self.fwd = None  # the forward pass (kvedge.model.pass_*.Forward); intp: the same when not the float one
        # the integer pass's steps run with the heap locked once two steps in a row allocated nothing
        # (kvedge.model.pass_int.Forward.step)
        self._lockable = False
        # largest first: the arena, then the buffers, then the many small objects (weights, policy, attention),
        # which fill whatever holes are left rather than leave the buffers none big enough; garbage is collected
        # between the steps, so each one starts filling from the lowest hole (on a 32-bit board's nearly full heap
        # this decides whether a run that fits by its account also finds its blocks)
        # the cache the plan names (a ring in RAM and older tokens on flash for a tier; a generation starts afresh);
        # the passes other than the float one, and the float pass's integer attention, write int8 codes
        floats = forward == "float"
        quantized = ccfg.dtype in _sizes.INT_CODES
        if int_attention == "auto":
            want = quantized and kernels.kind() in kernels.FAST
        else:
            want = bool(int_attention)
        if not floats:
            want = True
        q8 = not floats or (want and quantized)
        if cache is not None:  # a caller's cache kind: any object with the decode interface (kvedge.caches)
            self.cache = cache(ccfg, q8)
        else:
            self.cache = _caches.build(ccfg, tier, cold_path, tile, arena, q8=q8)
        gc.collect()
        # the pass's buffers before the weights' many small objects and their load's garbage (the integer pass's
        # logits are its largest: 4 bytes a vocabulary entry; after the weights, on the emulated rp2040's nearly
        # full heap, no 2 KB block was left for them though the plan's account held). The integer pass builds
        # its buffers once the cache's attention is attached (below), the ulab pass once its weights are in.
        if floats:
            self.fwd = fp.Forward(self, None, stream)
            gc.collect()
        early = forward == "int"
        if not early:
            self._weights(fp, path, stream)
        self.policy = policy(self.cache) if policy is not None else None
        self.scores = self.policy.scores if self.policy is not None else None
        gc.collect()
        # its attention (a tiered cache attends its tiers itself); the integer path only where it runs
        runs = _caches.attach(self.cache, tile, want and quantized, attention, self.scores)
        if want and not runs and int_attention != "auto" and floats:
            raise ValueError("the integer attention path needs an i8, i4 or i2 cache and kvedge.attention")
        self.int_attention = runs
        if early:
            self.fwd = fp.Forward(self, None)
            gc.collect()
            self._weights(fp, path, stream)
            self.fwd.take(self.w)
        elif floats:
            self.fwd.take(self.w)  # and the integer attention's query buffers, where it runs
        else:
            self.fwd = fp.Forward(self, self.w)
        self.logits = self.fwd.logits
        if not floats:
            # steps are locked where the cache says they allocate nothing (Forward.step)
            self._lockable = HAS_HEAP_LOCK and hasattr(gc, "mem_alloc")

    @property
    def intp(self):
        """The forward pass when it is not the float one (its integer logits' exponent, its prefill), else None."""
        return None if self.forward_kind == "float" else self.fwd

    def _weights(self, fp, path, stream):
        """The weights, by the pass's own loader (the integer pass never loads the float one's)."""
        self.w = fp.Weights(path, stream)
        gc.collect()

    def close(self):
        self.w.close()
        self.cache.close()

    def use(self, cache):
        """Run the next steps on another cache that shares this one's attention and so its bound buffers: another
        session of the same pool (kvedge.pooled), e.g. a second conversation on one board. Returns the one left."""
        if getattr(cache, "att", None) is not self.cache.att:
            raise ValueError("use() takes a cache sharing this model's attention (a session of the same pool), "
                             "got %s" % type(cache).__name__)
        old = self.cache
        self.cache = cache
        return old

    def reset(self):
        """Forget the sequence (a new conversation): empties the cache, keeps every buffer."""
        self.cache.reset()

    def forward(self, token):
        """Run one token at the cache's next position; returns the logits buffer (overwritten by the next
        call). Raises CacheFullError (nothing changed) when the cache has no room and no window."""
        check_token(token, self.cfg.vocab_size)  # before the cache gives a position
        if self._lockable:
            return self.fwd.step(token)
        return self.fwd.forward(token)


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
