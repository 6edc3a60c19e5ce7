"""The planner's search: each cache strategy (KV dtype, f32 prefix, H2O budget, sinks + window, a tiered cache with
its hot ring in RAM and older tokens on flash, a shorter context) sized to the largest setting that fits the board
(kvedge.budget's formulas recomputed every time), each fit a candidate with its account, speed and placement
(Planner); what a tiered cache costs per token (tier_cost). kvedge_host.plan.planner drives it; rank orders
what it finds."""
import json
import math

from kvedge import budget
from kvedge.model import passes, sizes as msizes
from kvedge.config import CacheConfig
from kvedge.kvsplit import SplitConfig

from . import account, planspeed
from .. import profiles
from .planquality import DTYPES, SPLITS, TIER_COLDS, split_fields, split_name

SINKS = 4  # StreamingLLM keeps the first 4 tokens
MIN_WINDOW = 8  # a ring shorter than this is not worth offering
PREFIX_FRACTION = 0.05  # trap 5: the first ~5 % of the context at full precision (traps: docs/architecture.md)
KIVI_MIN = 2 * budget.QK  # i4's default sliding residual (one group) and the group leaving it: the smallest ring
# what a tiered run's loop adds beyond the measured loop (kvedge footprint runs an H2O cache, not a tier): moving a
# block to flash packs tags and commits headers (the filesystem's transient objects). Measured on the emulated
# rp2040 (tests/host/test_plan_flow_m3.py, a tiered stories260K plan with a prompt and the stats stream): with
# 1,024 the run ran out of heap in the stats stream; with 2,048 it held, but the board's peak passed the plan by
# 240 bytes (kvedge demo --board rp2040 --sim m3 --plan P, P = kvedge plan --kind tiered, i8 ring 96 + 4 sinks,
# i8 cold, the float pass with asm kernels, 116 steps, context 512 and 1024: 2026-12-03); 2,560 covers it. The
# files a commit opens mid-run take the place of the store's spare (kvedge.tier.store.ColdStore._hold), one of the
# TIERED_FILES it keeps open beside its two segments.
TIERED_LOOP_BYTES = 2560
# and into i4 cold blocks a block is re-quantized through floats (kvedge.tier.cache._demote): measured on the emulated
# rp2040 (kvedge demo --board rp2040 --sim m3 --plan P, P = kvedge plan --kind tiered, i8 ring 80 + 4 sinks, i4
# cold, the float pass, 104 steps: 2026-12-02), the peak passed the plan by 5,008 bytes at the first demotion
# (with the default margin the run ran out of heap there)
TIER_I4_DEMOTE_BYTES = 6144
TIERED_FILES = 3
TIER_BLOCK = 16  # tokens per cold block of a tiered cache (keys quantized per channel over it)
TIER_RINGS = (budget.F32, budget.F16, budget.I8)


# ---- what a tiered cache costs per token (measured on the emulated board) ----

def tier_cost(spec, ring_dtype, cold, cold_tokens, measured=None, forward=passes.INT):
    """Instructions per token the cold tokens add (attention over them, flash reads included) and the demotion of
    blocks (spread over their tokens), as `tools/bench_tiered.py --save` measured them on the emulated Cortex-M3
    (kvedge_host/plan/tiered_cost.py names its command and firmware). Measured for stories260K's attention shape;
    other shapes are scaled by layers x heads x head_dim (the work per cold token) and say so. forward: the plan's
    pass; an i8/i4 ring is attended by the integer attention on both, with the integer pass's fused kernels
    (row "int") or, on the float pass, a tile loop (row "int-tiles"). None when no measurement is at hand."""
    if measured is None:
        try:
            from .tiered_cost import MEASURED as measured
        except ImportError:
            return None
    m = measured
    q8 = ring_dtype in (budget.I8, budget.I4) and cold in (budget.I8, budget.I4)
    path = ("int" if forward == passes.INT else "int-tiles") if q8 else "float"
    rows = [r for r in m.get("rows", []) if r.get("path") == path and r.get("cold") == cold]
    if not rows:
        return None
    r = rows[0]
    sh = m["shape"]
    f = (spec.layers * spec.heads * spec.head_dim) / float(sh["layers"] * sh["heads"] * sh["head_dim"])
    out = {"path": ("integer (step_q8, %s)" % ("fused kernels" if path == "int" else "tile loop")) if q8 else
           "float (step)",
           "instructions_per_cold_token": int(r["per_cold_token"] * f),
           "cold_instructions_per_token": int(r["per_cold_token"] * f * cold_tokens),
           "demote_instructions_per_token": int(r["demote_per_token"] * f),
           "measured": "%s on %s (%s kernels), `%s`" % (m.get("unit", "instructions"), m.get("machine", "?"),
                                                       m.get("kernels", "?"), m.get("command", "?")),
           "kernels": m.get("kernels")}
    if abs(f - 1.0) > 1e-9:
        out["scaled"] = "from %d layers x %d heads x head_dim %d, by %.3g" % (sh["layers"], sh["heads"],
                                                                          sh["head_dim"], f)
    return out


# ---- sizing ----

def _largest(fits, lo, hi, step=1):
    """Largest n in lo, lo+step, ... <= hi with fits(n), or None (fits is monotone: true then false)."""
    if hi < lo or not fits(lo):
        return None
    a, b = 0, (hi - lo) // step
    while a < b:
        m = (a + b + 1) // 2
        if fits(lo + m * step):
            a = m
        else:
            b = m - 1
    return lo + a * step


# prompt chunks a plan may take (kvedge.model.prefill), largest first: a 64-token prompt with weights streamed from
# littlefs on the emulated Cortex-M3 cost 33.7 % of 64 decode tokens' instructions in chunks of 8, 30.5 % in 16,
# 98.6 % a token at a time (tools/bench_prefill.py --runtime m3 --heap 2097152)
PREFILL_CHUNKS = (16, 8, 4, 2)

class Planner:
    def __init__(self, spec, context, tgt, align, weights_dtype, batch, runtime=None, tokenizer_bytes=0):
        self.tile = runtime.tile if runtime is not None else 32
        self.spec, self.context, self.tgt, self.align, self.batch = spec, context, tgt, align, batch
        self.base_align = align
        self.tiered_ok = True
        self.prof = tgt["profile"] or {}
        self.weights_bytes, self.weights_label = account.weights(spec, weights_dtype)
        self.weights_dtype = weights_dtype or spec.weights_dtype
        self.act = account.activations(spec, batch, self.tile)
        self.ws = tgt["workspace_bytes"]
        # the runtime's measured footprint (account.Runtime), when the profile has one: the usable heap less a
        # margin is the limit, the largest free block bounds the arena, and the runner's own parts are counted
        self.rt = runtime
        self.heap = tgt["heap_bytes"]
        self.limit = self.block = self.heap
        self.tokenizer_bytes = tokenizer_bytes
        self.prompt = True  # the run encodes a prompt (plan(prompt=False): none, so no chunks for it)
        self.kernels = planspeed.kernels_for(self.prof, runtime.kind if runtime is not None else None)
        if runtime is not None:
            self.heap = runtime.usable
            self.limit, self.block = runtime.limit(), runtime.block_limit()
            self.shape = account.runner_shape(spec)
            self.ws = runtime.fixed() + tokenizer_bytes
        self.trace = []
        self.pool = None  # {"sessions", "block", "shared_prompt"}: plan a PagedPool of conversations (_pools)
        w = spec.windows()
        # a model whose every layer has the same window (Mistral) keeps only that many tokens: the device ring
        # does the same. Mixed patterns (Gemma) cannot be one CacheConfig: planned as all-global (an upper bound).
        self.native_window = w[0] if w and w[0] and len(set(w)) == 1 and w[0] < context else 0
        self.mixed_windows = bool(any(w) and len(set(w)) > 1)

    def runner(self, cfg, h2o=False, cold=None):
        """The runner's objects for this cache (32-bit word on a board) and, with H2O, its module and state; with
        a tiered cache (cold: its cold dtype), its modules (measured: footprint tiered_bytes), the files it keeps
        open and what moving a block to flash takes."""
        if self.rt is None:
            return 0
        n = account.runner_objects(self.shape, cfg, self.word(), self.tile, self.rt.kind) * self.batch
        if account.loads_floats({"prefix": cfg.prefix, "dtype": cfg.dtype}, self.rt.forward):
            n += self.rt.floats  # (0 on the float pass: its measured code holds them)
        if self.weights_dtype == budget.I4:
            # int4 rows' modules (measured: footprint int4_bytes); where they were not measured no int4 plan fits
            n += self.rt.int4 if self.rt.int4 is not None else self.rt.usable
        if "/" in cfg.dtype:  # K and V apart: kvedge.kvsplit's code (measured: footprint split_bytes); where it was
            # not measured no split plan fits (a plan is a promise: the board must hold the module)
            n += self.rt.split if self.rt.split is not None else self.rt.usable
        if cold is not None:
            n += (self.rt.tiered or 0) + TIERED_FILES * self.rt.file + TIERED_LOOP_BYTES
            if cold == budget.I4:
                n += TIER_I4_DEMOTE_BYTES
        if self.pool:  # a pool plan's runner and the pool's modules (measured: footprint pool_bytes)
            n += self.rt.pool or 0
        return n + (self.rt.evict + account.H2O_STATE_BYTES if h2o else 0)

    def word(self):
        return 4 if (self.prof.get("small_int_bits") or 31) <= 31 else 8

    def cfg(self, max_tokens, dtype, window=0, sinks=0, prefix=0):
        s = self.spec
        return CacheConfig(s.layers, s.heads, s.kv_heads, s.head_dim, max_tokens, dtype, window=window, sinks=sinks,
                           align=self.align, prefix=prefix)

    def forward(self, cfg, place, h2o=False, cold=None):
        """The pass the plan names and counts (the board runs it: kvedge.model.runplan): on a runtime measured
        with the integer pass (account.Runtime.forward, kvedge footprint's int_ figures) the fastest pass by
        kvedge.model.passes (the runner's own rule) where it is the integer one, else the float pass, whose
        footprint that runtime's figures are not; with a flat workspace, the float pass."""
        if self.rt is None or self.rt.forward != passes.INT:
            return passes.FLOAT
        fw = self.fastest(cfg, place, h2o, cold)
        return fw if fw == passes.INT else passes.FLOAT

    def fastest(self, cfg, place, h2o=False, cold=None):
        """kvedge.model.passes.choose for this cache: the pass a run without a plan takes (forward="auto")."""
        kind = "tiered" if cold else ("h2o" if h2o else ("sinks" if cfg.sinks else ("window" if cfg.window else
                                                                                   "keep")))
        return passes.choose(self.weights_dtype, cfg.dtype, self.kernels, kind, cold, cfg.prefix, place != "heap",
                             h2o, ulab=self.prof.get("runtime") == "circuitpython")

    def weights_heap(self, place, fw="float"):
        """Weights held in RAM: all of them, or what the runner keeps when they stay on flash (norms, the row
        buffer, a chunk's scales: kvedge.model.sizes.weights_stream_bytes). The integer pass keeps every
        norm and reads rows in place from a mapped ROMFS file; the ulab pass streams them even from there
        (kvedge.model.llama.check)."""
        if place == "heap":
            return self.weights_bytes
        if place == "rom" and fw == passes.INT:  # the norms alone (kvedge.model.header.resident_bytes)
            return 4 * account.params(self.spec)["norms"]
        if fw != passes.FLOAT:
            return msizes.weights_stream_bytes(account.params(self.spec), self.spec.dim, self.spec.hidden_dim,
                                                    self._stream_dtype(), norms=True)
        if place == "rom":  # read in place from the mapped ROMFS file: one row, as the port's plan counts it
            return budget.weights_row_buffer_bytes(self.spec.dim, self.spec.hidden_dim, budget.I8)
        return msizes.weights_stream_bytes(account.params(self.spec), self.spec.dim, self.spec.hidden_dim,
                                           self._stream_dtype())

    def _stream_dtype(self):
        return self.weights_dtype if self.weights_dtype in budget.WEIGHT_DTYPES else budget.F16

    def flash_fs_bytes(self):
        """Flash a plan may use for files (kvedge_host.profiles.flash_fs_bytes)."""
        return profiles.flash_fs_bytes(self.prof)

    def activations(self, place, fw="float"):
        """Activations, plus the runner's buffers (its matvec sums need a chunk's rows when weights stream; the
        integer and ulab passes' own buffers: kvedge.model.llama.plan)."""
        if self.rt is None:
            return self.act
        if fw != passes.FLOAT:
            from kvedge.model import llama
            own = llama._path(fw, self.weights_dtype)  # the pass's module for these weights (int4 rows: pass_int4)
            return self.act + own.scratch_bytes(self.shape, place != "heap") * self.batch
        return self.act + account.runner_scratch(self.shape, self._stream_dtype(), place == "flash") * self.batch

    def total(self, cfg, place, scores=0, h2o=False, cold=None, pool=None):
        """scores: RAM each sequence needs beside its cache arena (H2O's arrays, a tiered cache's staging block
        and tables, a pool's bookkeeping); h2o: the eviction module is loaded (counted with a measured runtime);
        cold: a tiered cache's cold dtype (the pass it runs on); pool: a pool plan's "pool" (its run's objects,
        kvedge.model.runpool.object_bytes, counted with the runtime's)."""
        fw = self.forward(cfg, place, h2o, cold)
        return (self.weights_heap(place, fw) + cfg.nbytes() * self.batch + scores * self.batch
                + self.activations(place, fw) + self.ws + self.runner(cfg, h2o, cold) + self.files(place)
                + (pool["objects_bytes"] if pool else 0))

    def files(self, place):
        """The filesystem's buffers of the files a run keeps open: the tokenizer's, and the weights' when they
        are read from flash."""
        if self.rt is None:
            return 0
        return self.rt.file * ((1 if self.tokenizer_bytes else 0) + (1 if place == "flash" else 0))

    def block_limit(self, h2o=False):
        return self.block if self.rt is None else self.rt.block_limit(h2o)

    def fits(self, cfg, place, scores=0, h2o=False, cold=None, pool=None):
        """Under the limit, and the arena (allocated first, straight after start-up) fits the largest block."""
        return self.total(cfg, place, scores, h2o, cold, pool) <= self.limit and \
            cfg.nbytes() <= self.block_limit(h2o)

    def candidate(self, kind, name, cfg, place, tokens, context, policy=None, tier=None, scores=0, pool=None):
        kv = cfg.nbytes()
        h2o = (policy or {}).get("kind") == "h2o"
        extra = scores + (tier["staging_bytes"] + tier["tables_bytes"] if tier else 0) + (
            pool["meta_bytes"] if pool else 0)
        cold = tier["cold_dtype"] if tier else None
        fw = self.forward(cfg, place, h2o, cold)
        total = self.total(cfg, place, extra, h2o, cold, pool)
        chunk, chunk_bytes = self.prefill(fw, "tiered" if tier else ("h2o" if h2o else kind), total)
        total += chunk_bytes
        ws = self.ws + self.runner(cfg, h2o, cold) + self.files(place) + (pool["objects_bytes"] if pool else 0)
        if cfg.align != self.base_align:
            name += ", align %d" % cfg.align
        c = {"kind": kind, "strategy": name, "forward": fw, "cache": cfg.to_dict(), "kv_bytes": kv,
             "tokens_kept": tokens,
             "context": context, "batch": self.batch, "policy": policy, "tier": tier, "h2o_score_bytes": scores,
             "weights": {"bytes": self.weights_bytes, "dtype": self.weights_label, "place": place,
                         "heap_bytes": self.weights_heap(place, fw)},
             "activation_bytes": self.activations(place, fw) + chunk_bytes, "workspace_bytes": ws,
             "total_bytes": total, "prefill": chunk,
             "heap_bytes": self.heap, "headroom_bytes": self.heap - total,
             "fits": self.fits(cfg, place, extra, h2o, cold, pool)}
        if pool:
            c["pool"] = pool
        if self.rt is not None:
            c["margin_bytes"] = self.rt.margin
            c["largest_block_bytes"] = self.rt.largest
            c["kernels"] = self.rt.kind
            if kv > self.block_limit(h2o) and total <= self.limit:
                c["why_not"] = "the %d-byte arena exceeds the largest free block less the margin (%d)" % (
                    kv, self.block_limit(h2o))
        # what each sequence's KVCache(cfg, budget=...) (TieredCache: its ring, staging and tables) may use: the
        # limit minus everything else, per sequence
        own = tier["ram_bytes"] if tier else kv
        c["budget_bytes"] = (self.limit - (total - own * self.batch)) // self.batch
        c["placement"] = self.placement(c)
        return self._flash_check(c) if place in ("flash", "rom") or tier else c

    def prefill(self, fw, kind, total):
        """(prompt tokens a chunk, their bytes) in what the heap leaves beside a plan of `total` bytes: the
        largest of PREFILL_CHUNKS whose buffers (kvedge.model.prefill.chunk_bytes, a 32-bit board's) fit under
        the limit; (1, 0) when none does, or the pass or the kind takes no chunks (kvedge.model.passes), or
        several sequences share the heap, or the run has no prompt. The cache comes first: a chunk takes only
        what its plan left."""
        if fw not in passes.PREFILL_FORWARDS or kind not in passes.PREFILL_KINDS or self.batch != 1 or \
                not self.prompt or self.pool:
            return 1, 0
        from kvedge.model.prefill import chunk_bytes
        for n in PREFILL_CHUNKS:
            b = chunk_bytes(self.shape, n, 4, self.weights_dtype)
            if total + b <= self.limit:
                return n, b
        return 1, 0

    # -- the strategies; each returns a candidate or None, and records what it tried --

    def _note(self, what, c, kind):
        """Record what a strategy of `kind` came to in the trace (kind: the plan kind it tries, for --kind's
        verdict)."""
        if c is None:
            self.trace.append({"try": what, "kind": kind, "result": "does not fit at any setting"})
        else:
            t = {"try": what, "kind": kind, "result": "fits" if c["fits"] else "does not fit",
                 "total_bytes": c["total_bytes"], "strategy": c["strategy"]}
            if c.get("why_not"):
                t["result"] += " (%s)" % c["why_not"]
            self.trace.append(t)
        return c

    def _i4_tokens(self, n, prefix=0):
        """KIVI slots for n tokens: whole key groups after the prefix, at least the residual and one group."""
        return prefix + max(KIVI_MIN, -(-(n - prefix) // budget.QK) * budget.QK)

    def keep(self, dtype, place):
        C = self.context
        W = self.native_window
        if W and dtype in budget.LOWBIT:
            W = self._i4_tokens(W)  # i4 key groups tile the ring: whole groups, at least the model's window
        if W and W <= C:
            name = "%s, model window %d" % (dtype, self.native_window)
            if W != self.native_window:
                name += " (ring %d: whole key groups)" % W
            return self.candidate("keep", name, self.cfg(C, dtype, window=W), place, W, C, policy={"kind": "ring"})
        n = self._i4_tokens(C) if dtype in budget.LOWBIT else C
        return self.candidate("keep", "%s, keep all %d" % (dtype, n), self.cfg(n, dtype), place, n, n)

    def keep_split(self, split, place):
        """Every token of the context, K and V in formats of their own (planquality.SPLITS): keys per channel keep
        whole key groups, as i4 does."""
        if self.native_window:
            return None  # a ring of split rows is not offered (no measured row)
        C = self.context
        fields = split_fields(*split)
        n = self._i4_tokens(C) if fields["residual"] else C
        s = self.spec
        cfg = SplitConfig(s.layers, s.heads, s.kv_heads, s.head_dim, n, align=self.align, **fields)
        return self.candidate("keep", "%s, keep all %d" % (split_name(*split), n), cfg, place, n, n)

    def prefix(self, dtype, place):
        if self.native_window:
            return None
        C = self.context
        P = max(1, int(math.ceil(C * PREFIX_FRACTION)))
        if dtype in budget.LOWBIT and C - P >= KIVI_MIN:
            P = C - (C - P) // budget.QK * budget.QK  # whole key groups after the prefix, the context unchanged
        n = self._i4_tokens(C, P) if dtype in budget.LOWBIT else C
        return self.candidate("prefix", "%s + f32 prefix %d, keep all %d" % (dtype, P, n),
                              self.cfg(n, dtype, prefix=P), place, n, n)

    def _fit(self, make, lo, hi, step, place, scores=None):
        def ok(n):
            return self.fits(make(n), place, scores(n) if scores else 0, scores is not None)
        return _largest(ok, lo, hi, step)

    def window(self, dtype, place, sinks):
        C = self.context
        step = budget.QK if dtype in budget.LOWBIT else 1
        prefix = sinks if dtype in budget.LOWBIT else 0  # i4/i2 keep sinks at f32 (whole key groups in the ring)
        lo = KIVI_MIN if dtype in budget.LOWBIT else MIN_WINDOW
        hi = min(C - sinks - 1, (self.native_window or C) - 1)

        def make(W):
            return self.cfg(C, dtype, window=W, sinks=sinks, prefix=prefix)
        W = self._fit(make, lo, hi, step, place)
        if W is None:
            return None
        kind = "sinks" if sinks else "window"
        name = "%s, %d sinks + window %d" % (dtype, sinks, W) if sinks else "%s, window %d" % (dtype, W)
        return self.candidate(kind, name, make(W), place, sinks + W, C, policy={"kind": "ring"})

    def h2o(self, dtype, place):
        if dtype in budget.LOWBIT:
            return None  # evicting single tokens would break KIVI's per-channel key groups
        C = self.context
        step = budget.QK if dtype in budget.LOWBIT else 1
        lo = -(-max(2 * MIN_WINDOW, step) // step) * step
        hi = min(C - 1, (self.native_window or C) - 1)

        def scores(B):
            return budget.h2o_score_bytes(B)

        def make(B):
            return self.cfg(B, dtype)
        B = self._fit(make, lo, hi, step, place, scores)
        if B is None:
            return None
        recent = B // 2  # H2O's split: half heavy hitters, half recent tokens
        return self.candidate("h2o", "%s, H2O %d slots (%d heavy + %d recent)" % (dtype, B, B - recent, recent),
                              make(B), place, B, C, policy={"kind": "h2o", "budget": B, "recent": recent},
                              scores=scores(B))

    def tiered(self, dtype, place, cold):
        """Sinks and a hot ring of `dtype` in RAM, every older token of the context in `cold` (i4: KIVI over
        blocks of TIER_BLOCK tokens; i8) in a cold store on flash, all attended every step (kvedge.tier.cache). The
        ring is the largest that fits beside its staging block and tables; the store holds the rest of the
        context even right after a block left the ring (then the ring holds W - B + 1 tokens)."""
        if not self.tiered_ok or not self.prof.get("flash_bytes") or self.native_window:
            return None
        if self.rt is not None and self.rt.tiered is None:
            return None  # the board's footprint has no measured figure for the tiered cache's code
        C, S, B = self.context, SINKS, TIER_BLOCK
        hi = (C - S - B) // B * B  # at least one block is cold
        if hi < B:
            return None

        def size(W):
            return budget.tiered_bytes(self.spec.layers, self.spec.heads, self.spec.kv_heads, self.spec.head_dim,
                                       W, S, B, -(-(C - S - W + B - 1) // B), dtype, cold, self.align, 0,
                                       f32_sinks=False)

        def ok(W):
            z = size(W)
            return self.fits(self.cfg(S + W, dtype, window=W, sinks=S), place, z["staging"] + z["tables"], cold=cold)
        W = _largest(ok, B, hi, B)
        if W is None:
            return None
        z = size(W)
        blocks = z["cold_tokens"] // B
        tier = {"kind": "tiered", "block": B, "cold_dtype": cold, "cold_blocks": blocks, "at_cap": "drop",
                "cold_align": 0, "ring_bytes": z["ring"], "staging_bytes": z["staging"], "tables_bytes": z["tables"],
                "ram_bytes": z["ram"], "cold_bytes": blocks * z["block"], "flash_bytes": z["flash"],
                "cold_tokens": z["cold_tokens"],
                "cost": tier_cost(self.spec, dtype, cold, z["cold_tokens"],
                                  forward=self.forward(self.cfg(S + W, dtype, window=W, sinks=S), place, False, cold))}
        name = "%s hot ring %d + %d sinks, older %d tokens %s on flash" % (dtype, W, S, z["cold_tokens"], cold)
        return self.candidate("tiered", name, self.cfg(S + W, dtype, window=W, sinks=S), place, C, C,
                              policy={"kind": "tiered"}, tier=tier)

    # -- a pool of conversations (kvedge plan --sessions: kvedge.paged, kvedge.model.runpool) --

    def pool_at(self, dtype, place, T):
        """A pool of self.pool's conversations of T positions each in `dtype` blocks (kvedge.poolsizes.pool_bytes:
        its blocks, arena and bookkeeping; the run's objects: kvedge.model.runpool.object_bytes), as a candidate
        of kind keep (every token of a session kept) with the plan's "pool"."""
        from kvedge.model import runpool
        p = self.pool
        n, B, S = p["sessions"], p["block"], p["shared_prompt"]
        z = budget.pool_bytes(self.spec.layers, self.spec.kv_heads, self.spec.head_dim, B, dtype, self.align, n, T,
                              S)
        cfg = self.cfg(z["blocks"] * B, dtype)
        pool = {"sessions": n, "block": B, "shared_prompt": S, "tokens": T, "blocks": z["blocks"],
                "handles": z["handles"], "arena_bytes": z["arena"], "meta_bytes": z["meta"]}
        pool["objects_bytes"] = runpool.object_bytes(pool, self.word())
        assert cfg.nbytes() == z["arena"] and runpool.meta_bytes(pool) == z["meta"], (cfg.nbytes(), z)
        name = "%s pool of %d sessions x %d tokens%s, %d blocks of %d" % (
            dtype, n, T, (" (%d-token prompt shared)" % S) if S else "", z["blocks"], B)
        return self.candidate("keep", name, cfg, place, T, T, pool=pool)

    def pooled(self, dtype, place):
        """The longest context per session (whole blocks, past the shared prompt) whose pool fits."""
        B, S = self.pool["block"], self.pool["shared_prompt"]

        def ok(T):
            return self.pool_at(dtype, place, T)["fits"]
        T = _largest(ok, (S // B + 1) * B, self.context, B)
        return None if T is None else self.pool_at(dtype, place, T)

    def _pools(self, start_dtype, places):
        """run() for a pool plan: the requested pool (every session the whole context) and, per dtype a pool runs
        (no KIVI residual: kvedge.paged) and place, the pool with the longest context per session that fits."""
        self.baseline = self.pool_at(start_dtype, places[0], self.context)
        if self.rt is not None and self.rt.pool is None:  # no figure for the pool's code: nothing counted fits
            self.trace.append({"try": "a pool on %s kernels, %s pass" % (self.rt.kind, self.rt.forward), "kind": "keep",
                               "result": "the footprint has no measured figure for the pool's modules "
                                         "(kvedge footprint --board %s --write)" % self.tgt["name"]})
            return []
        self.trace.append({"try": "requested: " + self.baseline["strategy"],
                           "result": "fits" if self.baseline["fits"] else "does not fit",
                           "total_bytes": self.baseline["total_bytes"]})
        found = []
        for place in places:
            for dt in DTYPES:
                if dt in budget.LOWBIT:
                    continue
                aligns = [self.base_align] + ([0] if self.base_align > 1 and self._padded(dt) else [])
                for al in aligns:  # trap 7: padded rows beside unpadded ones, as run() offers them
                    self.align = al
                    found.append(self._note("%s pool%s, weights %s" % (dt, "" if al == self.base_align else
                                                                       ", align %d" % al, place),
                                            self.pooled(dt, place), "keep"))
                self.align = self.base_align
        found = [c for c in found if c is not None and c["fits"]]
        if self.rt is not None and self.rt.forward == passes.INT or self.weights_dtype in passes.INT_ONLY_WEIGHTS:
            found = [c for c in found if c["forward"] == passes.INT]
        return found

    def _flash_check(self, c):
        """Weights kept on flash and a cold KV tier must fit the flash a plan may use (flash_fs_bytes)."""
        need = (self.weights_bytes if c["weights"]["place"] in ("flash", "rom") else 0) + \
            (c["tier"] or {}).get("flash_bytes", 0)
        c["flash_bytes"] = need
        room = self.flash_fs_bytes()
        if need > room:
            c["fits"] = False
            c["why_not"] = "needs %d bytes of flash, %d available" % (need, room)
        return c

    def shorter(self, dtype, place):
        step = budget.QK if dtype in budget.LOWBIT else 1
        hi = self.context - 1

        def make(T):
            return self.cfg(T, dtype)
        T = self._fit(make, KIVI_MIN if dtype in budget.LOWBIT else 1, hi, step, place)
        if T is None:
            return None
        return self.candidate("shorter", "%s, keep all, context cut to %d" % (dtype, T), make(T), place, T, T)

    def _padded(self, dtype):
        return budget.padded_row_bytes(self.spec.head_dim, dtype, self.base_align) != budget.row_bytes(
            self.spec.head_dim, dtype)

    def _pass(self, place, dts, splits=()):
        found = []
        tag = "" if self.align == self.base_align else ", align %d" % self.align
        for dt in dts:
            found.append(self._note("%s, keep all%s" % (dt, tag), self.keep(dt, place), "keep"))
        for sp in splits:  # K and V apart: the formats measured (the float pass reads them)
            found.append(self._note("%s, keep all%s" % (split_name(*sp), tag), self.keep_split(sp, place),
                                    "keep"))
        for dt in dts:
            if dt in (budget.I8,) + budget.LOWBIT:
                found.append(self._note("%s + f32 prefix%s" % (dt, tag), self.prefix(dt, place), "prefix"))
        for dt in dts:
            if dt not in budget.LOWBIT:
                found.append(self._note("%s H2O%s" % (dt, tag), self.h2o(dt, place), "h2o"))
            found.append(self._note("%s sinks + window%s" % (dt, tag), self.window(dt, place, SINKS),
                                    "sinks"))
            found.append(self._note("%s window%s" % (dt, tag), self.window(dt, place, 0), "window"))
        for dt in dts:
            if dt in TIER_RINGS and self.tiered_ok:
                for cold in TIER_COLDS:
                    found.append(self._note("%s hot ring + %s blocks on flash%s" % (dt, cold, tag),
                                            self.tiered(dt, place, cold), "tiered"))
        for dt in dts:
            found.append(self._note("%s, shorter context%s" % (dt, tag), self.shorter(dt, place),
                                    "shorter"))
        return found

    def run(self, start_dtype, weights_in):
        """Every strategy with the weights in RAM and, when the board has flash, read from flash: both are ranked
        together (rank()), so streamed weights win wherever they leave the cache more tokens."""
        places = ["heap", "flash"] if weights_in == "auto" else [weights_in]
        if weights_in == "auto" and not self.prof.get("flash_bytes"):
            places = ["heap"]
        if self.pool:
            return self._pools(start_dtype, places)
        self.baseline = self.keep(start_dtype, places[0])
        self.trace.append({"try": "requested: " + self.baseline["strategy"],
                           "result": "fits" if self.baseline["fits"] else "does not fit",
                           "total_bytes": self.baseline["total_bytes"]})
        found = []
        for place in places:
            if place == "flash" and len(places) > 1:
                self.trace.append({"try": "weights on flash, read a chunk of rows at a time (%d bytes off the heap)"
                                   % (self.weights_bytes - self.weights_heap("flash")),
                                   "result": "every strategy again"})
            self.align = self.base_align
            found += self._pass(place, DTYPES, SPLITS)
            padded = [d for d in DTYPES if self.base_align > 1 and self._padded(d)]
            padded_splits = [sp for sp in SPLITS if self.base_align > 1 and (self._padded(sp[0]) or
                                                                               self._padded(sp[1]))]
            if padded or padded_splits:  # trap 7: padding has a cost; offer the unpadded layout beside it
                self.align = 0
                found += self._pass(place, padded, padded_splits)
                self.align = self.base_align
            found = [c for c in found if c is not None and c["fits"]]
        if self.rt is not None and self.rt.forward == passes.INT:
            # the integer pass's runtime: only what that pass runs (other caches are planned on the float pass's
            # runtime, whose footprint is theirs)
            found = [c for c in found if c["forward"] == passes.INT]
        if self.weights_dtype in passes.INT_ONLY_WEIGHTS:
            # weights only the integer pass reads (int4): a plan on another pass could not run them
            found = [c for c in found if c["forward"] == passes.INT]
        seen = set()
        unique = []
        for c in found:
            key = (json.dumps(c["cache"], sort_keys=True), c["kind"], c["weights"]["place"],
                   (c["tier"] or {}).get("cold_dtype"))
            if key not in seen:
                seen.add(key)
                unique.append(c)
        return unique

    def floor(self):
        """The least any configuration needs: weights where they take least RAM and a one-token cache, part by
        part, against the limit (what a plan may reach)."""
        place = "flash" if self.prof.get("flash_bytes") and self.weights_heap("flash") < self.weights_bytes \
            else "heap"
        cfg = self.cfg(1, budget.I8)
        parts = [("weights (%s)" % ("on flash" if place == "flash" else "in RAM"), self.weights_heap(place)),
                 ("activations", self.activations(place))]
        if self.rt is not None:
            rt = self.rt
            parts += [("boot", rt.boot), ("runtime code (%s kernels, %s pass)" % (rt.kind, rt.forward), rt.code),
                      ("stats stream", rt.telemetry), ("prompt encoder", rt.encode), ("generation loop", rt.loop),
                      ("tokenizer", self.tokenizer_bytes), ("the runner's objects", self.runner(cfg, False)),
                      ("open files' buffers", self.files(place))]
        else:
            parts.append(("workspace", self.ws))
        parts.append(("KV cache, 1 token", cfg.nbytes() * self.batch))
        return {"parts": parts, "total": sum(n for _, n in parts), "limit": self.limit, "heap": self.heap,
                "margin": self.rt.margin if self.rt else 0}

    # -- trap 6: which memory each array belongs in --

    def placement(self, c):
        """Hottest arrays first into fast internal SRAM; the rest into slow memory (PSRAM) when the board has
        it; weights that stay on flash are read row by row into a small buffer."""
        fast = (self.prof.get("fast_memory") or {}).get("bytes", self.heap)
        slow = self.prof.get("slow_memory")
        tier = c.get("tier") or {}
        items = [("activations", c["activation_bytes"], "read and written many times per token"),
                 ("workspace", self.ws, "runtime"),
                 ("h2o scores", c["h2o_score_bytes"] * self.batch, "updated every token"),
                 ("pool bookkeeping", (c.get("pool") or {}).get("meta_bytes", 0),
                  "block tables and per-session arrays, read every token"),
                 ("tiered staging block", tier.get("staging_bytes", 0) * self.batch,
                  "every cold block passes through it each token: keep it in fast memory even when the ring "
                  "cannot be"),
                 ("tiered tables", tier.get("tables_bytes", 0) * self.batch, "running softmax state per head"),
                 ("kv hot ring" if tier else "kv cache", c["kv_bytes"] * self.batch, "written and read every token"),
                 ("weights", c["weights"]["heap_bytes"], "read once per token")]
        out = []
        left = fast
        for name, n, why in items:
            if n == 0:
                continue
            if name == "weights" and c["weights"]["place"] == "flash":
                out.append({"array": "weights", "bytes": self.weights_bytes,
                            "where": "flash, read a chunk of rows at a time",
                            "why": "in RAM they would leave the cache fewer tokens, or not fit"})
                name, why = "weights streaming", "norms, one chunk of rows and its scales"
            elif name == "weights" and c["weights"]["place"] == "rom" and c.get("forward") == passes.ULAB:
                out.append({"array": "weights", "bytes": self.weights_bytes,
                            "where": "flash (ROMFS), read a chunk of rows at a time",
                            "why": "the %s pass streams its rows even from the mapped file" % c["forward"]})
                name, why = "weights streaming", "norms, one chunk of rows and its scales"
            elif name == "weights" and c["weights"]["place"] == "rom":
                out.append({"array": "weights", "bytes": self.weights_bytes, "where": "flash (ROMFS), read in place",
                            "why": "memory-mapped: a row is read where it lies, never copied"})
                name, why = "weights (RAM)", "at most one row's worth (norms; nothing per row)"
            if n <= left:
                where = "fast: " + ((self.prof.get("fast_memory") or {}).get("kind") or "heap")
                left -= n
            elif slow:
                where = "slow: " + slow.get("kind", "PSRAM")
            else:
                where = "fast: " + ((self.prof.get("fast_memory") or {}).get("kind") or "heap")
            out.append({"array": name, "bytes": n, "where": where, "why": why})
        if tier:
            out.append({"array": "cold KV store", "bytes": tier["flash_bytes"] * self.batch,
                        "where": "flash files (%d blocks of %d tokens, %s)" % (tier["cold_blocks"], tier["block"],
                                                                               tier["cold_dtype"]),
                        "why": "older tokens, re-quantized; every block is read back once per layer and token"})
        return out
