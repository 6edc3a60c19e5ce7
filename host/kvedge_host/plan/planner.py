"""The planner as a library: compress until it fits, then weigh speed. The planning loop over KV dtype, window,
sinks, H2O budget, a tiered cache (hot ring in RAM, older tokens on flash) and context, for a model on a board.

Start from the requested deployment (the whole context in `kv_dtype`). If it does not fit the heap, try each
strategy, size it to the largest setting that fits (recomputing with kvedge.budget every time), and rank every
feasible configuration: by measured quality cost (a `kvedge eval --json` table; for stories260K the shipped one by
default), else by a documented heuristic, and by speed (kvedge_host.plan.planspeed: the forward pass the board runs and
its instructions per token measured on the emulated Cortex-M3) as the objective says. Say where each array should
live (fast internal SRAM, slow PSRAM, or flash row by row); the chosen configuration's device config ("cache" goes
to CacheConfig.from_dict() as is) is what `kvedge plan --out` writes.

    from kvedge_host import planner
    spec, context, tgt = planner.inputs(model="m.i8.bin", board="rp2040")
    p = planner.plan(spec, context, tgt, kv_dtype="i8", weights_dtype="i8", align=0)
    p.document        # the chosen configuration as a plan document (None when nothing fits)
    p.result          # what `kvedge plan --json` prints: every ranked configuration, the trace, the notes

Bad input raises kvedge_host.cli.UserError (or models.ModelError / ValueError, one line each)."""
import json
import math

from kvedge import budget
from kvedge.model import passes, sizes as msizes
from kvedge.config import CacheConfig

from . import account, planspeed
from .. import profiles, models
from ..errors import UserError
from .planquality import (DEFAULT_QUALITY, DEFAULT_QUALITY_MODEL, DTYPES, TIER_COLDS, load_quality, match_quality,
    quality_cost, default_table_for, table_warning)

FORMAT = "kvedge-plan/1"
SINKS = 4  # StreamingLLM keeps the first 4 tokens
MIN_WINDOW = 8  # a ring shorter than this is not worth offering
PREFIX_FRACTION = 0.05  # trap 5: the first ~5 % of the context at full precision (traps: docs/architecture.md)
KIVI_MIN = 2 * budget.QK  # i4's default sliding residual (one group) and the group leaving it: the smallest ring
# heuristic quality order when no measured table is given (lower = closer to the full f32 cache)
KIND_GROUP = {"keep": 0, "prefix": 0, "h2o": 1, "sinks": 2, "tiered": 3, "window": 4, "shorter": 5}
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
DTYPE_RANK = {budget.F32: 0, budget.F16: 1, budget.I8: 2, budget.I4: 3, budget.I2: 4}

KINDS = tuple(KIND_GROUP)  # what --kind restricts the search to
OBJECTIVES = ("balanced", "quality", "speed")
DEFAULT_OBJECTIVE = "balanced"
SLOWER = 2.0  # balanced: no plan more than this many times slower than the fastest keeping as many tokens


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
        if cold is not None:
            n += (self.rt.tiered or 0) + TIERED_FILES * self.rt.file + TIERED_LOOP_BYTES
            if cold == budget.I4:
                n += TIER_I4_DEMOTE_BYTES
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

    def total(self, cfg, place, scores=0, h2o=False, cold=None):
        """scores: RAM each sequence needs beside its cache arena (H2O's arrays, a tiered cache's staging block
        and tables); h2o: the eviction module is loaded (counted with a measured runtime); cold: a tiered cache's
        cold dtype (the pass it runs on)."""
        fw = self.forward(cfg, place, h2o, cold)
        return (self.weights_heap(place, fw) + cfg.nbytes() * self.batch + scores * self.batch
                + self.activations(place, fw) + self.ws + self.runner(cfg, h2o, cold) + self.files(place))

    def files(self, place):
        """The filesystem's buffers of the files a run keeps open: the tokenizer's, and the weights' when they
        are read from flash."""
        if self.rt is None:
            return 0
        return self.rt.file * ((1 if self.tokenizer_bytes else 0) + (1 if place == "flash" else 0))

    def block_limit(self, h2o=False):
        return self.block if self.rt is None else self.rt.block_limit(h2o)

    def fits(self, cfg, place, scores=0, h2o=False, cold=None):
        """Under the limit, and the arena (allocated first, straight after start-up) fits the largest block."""
        return self.total(cfg, place, scores, h2o, cold) <= self.limit and cfg.nbytes() <= self.block_limit(h2o)

    def candidate(self, kind, name, cfg, place, tokens, context, policy=None, tier=None, scores=0):
        kv = cfg.nbytes()
        h2o = (policy or {}).get("kind") == "h2o"
        extra = scores + (tier["staging_bytes"] + tier["tables_bytes"] if tier else 0)
        cold = tier["cold_dtype"] if tier else None
        fw = self.forward(cfg, place, h2o, cold)
        total = self.total(cfg, place, extra, h2o, cold)
        chunk, chunk_bytes = self.prefill(fw, "tiered" if tier else ("h2o" if h2o else kind), total)
        total += chunk_bytes
        ws = self.ws + self.runner(cfg, h2o, cold) + self.files(place)
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
             "fits": self.fits(cfg, place, extra, h2o, cold)}
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
                not self.prompt:
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

    def _pass(self, place, dts):
        found = []
        tag = "" if self.align == self.base_align else ", align %d" % self.align
        for dt in dts:
            found.append(self._note("%s, keep all%s" % (dt, tag), self.keep(dt, place), "keep"))
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
            found += self._pass(place, DTYPES)
            padded = [d for d in DTYPES if self.base_align > 1 and self._padded(d)]
            if padded:  # trap 7: padding has a cost; offer the unpadded layout beside it
                self.align = 0
                found += self._pass(place, padded)
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


def rank(cands, table):
    """Measured cost first when a quality table is given; else (and for unmeasured rows) the heuristic: full
    cache by precision (f32, f16, i8 + prefix, i8, i4 + prefix, i4), then H2O, sinks + window, a tiered cache
    (every token, the older ones i4 and read back from flash: slower), window (more tokens kept first within
    each), then any i2 cache (2-bit values cost more than evicting tokens on the measured model:
    docs/quality.md), then a shorter context; with as many tokens kept, weights in RAM (faster) before weights
    read from flash; less memory breaks ties."""
    for c in cands:
        c["quality"] = match_quality(table, c)

    def key(c):
        q = c["quality"]
        # a row measured at more tokens than the candidate keeps ("fewer") only bounds its cost from below: after
        # every candidate whose row bounds its cost from above
        measured = (0, 1 if q.get("fewer") else 0, quality_cost(q), 1 if q.get("uncertain") else 0) if q else \
            (1, 0, 0.0, 0)
        grp = KIND_GROUP[c["kind"]]
        dt = DTYPE_RANK[c["cache"]["dtype"]]
        if c["cache"]["dtype"] == budget.I2 and c["kind"] != "shorter":
            grp = KIND_GROUP["window"] + 0.5
        place = 0 if c["weights"]["place"] == "heap" else 1  # equal tokens: weights in RAM are faster
        if grp == 0:
            h = (grp, dt, 0 if c["kind"] == "prefix" else 1, place)
        else:
            h = (grp, -c["tokens_kept"], dt, place)
        return measured + h + (c["total_bytes"],)
    return sorted(cands, key=key)


def device_config(c, spec, tgt, runtime=None):
    """The --out document: "cache" goes to CacheConfig.from_dict() unchanged; "budget_bytes" to KVCache(...);
    "runtime" (with a measured footprint) says which kernels the plan counted and what the runner must be told."""
    return {
        "format": FORMAT, "model": spec.name, "board": tgt["name"], "strategy": c["strategy"], "kind": c["kind"],
        "cache": c["cache"], "kv_bytes": c["kv_bytes"], "batch": c["batch"], "budget_bytes": c["budget_bytes"],
        "policy": c["policy"], "tier": c["tier"], "h2o_score_bytes": c["h2o_score_bytes"], "weights": c["weights"],
        "activation_bytes": c["activation_bytes"], "workspace_bytes": c["workspace_bytes"],
        "total_bytes": c["total_bytes"], "heap_bytes": c["heap_bytes"], "headroom_bytes": c["headroom_bytes"],
        "context": c["context"], "tokens_kept": c["tokens_kept"], "placement": c["placement"],
        "quality": c.get("quality"), "runtime": runtime,
        "forward": c.get("forward"), "prefill": c.get("prefill", 1), "kernels": c.get("kernels"),
        "instructions_per_token": c.get("instructions_per_token"), "tokens_per_s": c.get("tokens_per_s"),
        "speed": c.get("speed"),
    }


def _base_ppl(table):
    for row in table or ():
        if row["kind"] == "keep" and row["dtype"] == budget.F32 and "ppl" in row["metrics"]:
            return row["metrics"]["ppl"]
    return None


def per_strategy(ranked):
    """The best-ranked configuration of each strategy (kind and dtype), in rank order."""
    seen = set()
    out = []
    for c in ranked:
        key = (c["kind"], c["cache"]["dtype"])
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def inputs(model=None, preset=None, context=None, board=None, heap=None, workspace=None, batch=1,
           weights_dtype=None):
    """(spec, context, target): the model (a file or a preset), its context, and the board (kvedge_host.plan.account
    .target), with one-line errors for bad values (checked before the model file is read)."""
    if context is not None:
        account.check_size("--context", context)
    account.check_size("--batch", batch)
    account.check_weights_dtype(weights_dtype)
    if heap is not None:
        account.check_size("--heap", heap)
    if workspace is not None:
        account.check_size("--workspace", workspace, 0)
    spec = models.load(model, preset)
    context = context or spec.context
    if not context:
        raise models.ModelError("%s: the model does not say its context length (no %s); give --context"
                                % (model or preset, spec.context_key))
    return spec, context, account.target(board, heap, workspace)


FORWARDS = ("auto", passes.INT, passes.FLOAT)  # what --forward takes: auto = the integer pass where it runs


def runtimes(tgt, kernels="auto", margin=None, workspace=None, stats=True, prompt=True, forward="auto"):
    """account.Runtime per kernel kind and pass to plan with, fastest first (the integer pass's, where measured,
    before the float pass's; forward: only that pass's); [] when the plan uses the flat workspace allowance (a
    workspace given, --heap, or a profile without a measured footprint)."""
    prof = tgt["profile"]
    measured = account.kernel_kinds(prof)
    if kernels not in ("auto",) + account.KERNEL_KINDS:
        raise UserError("--kernels must be auto, %s; got %r" % (", ".join(account.KERNEL_KINDS), kernels))
    if forward not in FORWARDS:
        raise UserError("--forward must be %s; got %r" % (", ".join(FORWARDS), forward))
    if margin is not None:
        account.check_size("--margin", margin, 0)
    if prof is None or workspace is not None or not measured:
        if kernels != "auto" or margin is not None or forward == passes.INT:
            raise UserError("--kernels, --margin and --forward int need a measured footprint (a board profile with "
                            "one, no --workspace): kvedge footprint --board %s --write" % (tgt["name"]))
        return []
    if kernels != "auto":
        if kernels not in measured:
            raise UserError("--kernels %s: %s has no measured %s footprint (measured: %s)"
                            % (kernels, tgt["name"], kernels, ", ".join(measured)))
        measured = [kernels]
    # the integer pass first where it was measured (the fastest pass: kvedge.model.passes), then the float pass
    ints = [k for k in account.int_measured(prof) if k in measured] if forward != passes.FLOAT else []
    if forward == passes.INT and not ints:
        raise UserError("--forward int: %s has no measured integer-pass footprint with %s kernels (the pass runs "
                        "with asm or viper kernels: kvedge footprint --board %s --write)"
                        % (tgt["name"], "/".join(measured), tgt["name"]))
    out = [account.Runtime(prof, k, forward=passes.INT) for k in ints]
    if forward != passes.INT:
        out += [account.Runtime(prof, k) for k in measured]
    for rt in out:
        if margin is not None:
            rt.margin = margin
        if not stats:
            rt.telemetry = 0
        if not prompt:
            rt.encode = 0
    return out


def reserved_tokenizer_bytes(vocab, encode=True):
    """The most a tokenizer of `vocab` tokens keeps (kvedge.model.pieces.FileTokenizer.nbytes with 4-byte
    offsets, the wide file's): what a plan reserves when it knows no tokenizer file."""
    return 4 * (vocab + 1) + ((2 if vocab <= 65535 else 4) * vocab if encode else 0) + 512


def _fetched_tokenizer(spec):
    """The tokenizer `kvedge fetch` keeps (or ../shared/models holds) for this model's vocabulary, or None."""
    import os
    from ..paths import TOKENIZER_VOCAB, model_file
    for name, vocab in sorted(TOKENIZER_VOCAB.items()):
        if vocab == spec.vocab:
            p = model_file(name)
            if os.path.isfile(p):
                return p
    return None


def tokenizer_for(spec, model=None, tokenizer=None, prompt=True):
    """(bytes the runner's tokenizer keeps, its path, whether a prompt is encoded, where it was found): `tokenizer`
    ("given"), else tok512.bin or tokenizer.bin beside a llama2.c .bin model when its size fits the model's
    vocabulary ("beside the model"), else the one `kvedge fetch` keeps for the model's vocabulary ("the fetch
    cache"); when none is known, the largest a tokenizer of its vocabulary keeps is reserved (path None,
    "reserved"). The tokenizer stays in its file (kvedge.model.tokenizer.FileTokenizer); encoding a prompt sorts
    its ids once (2 bytes a token), which prompt=False leaves out."""
    import os
    from kvedge.model.tokenizer import FileTokenizer as Tokenizer
    encode = bool(prompt)
    path = tokenizer
    if path is None:
        if model and model.endswith(".bin") and os.path.isfile(model):
            for name in ("tok512.bin", "tokenizer.bin"):
                p = os.path.join(os.path.dirname(os.path.abspath(model)), name)
                if os.path.isfile(p) and os.path.getsize(p) >= 4 + 8 * spec.vocab:
                    return Tokenizer.nbytes(p, spec.vocab, encode), p, encode, "beside the model"
        p = _fetched_tokenizer(spec)
        if p is not None and os.path.getsize(p) >= 4 + 8 * spec.vocab:
            return Tokenizer.nbytes(p, spec.vocab, encode), p, encode, "the fetch cache"
        return reserved_tokenizer_bytes(spec.vocab, encode), None, encode, "reserved"
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise UserError("%s: cannot read: %s" % (path, e.strerror or e))
    if size < 4 + 8 * spec.vocab:
        raise UserError("%s: %d bytes is too short for a tokenizer of %d tokens" % (path, size, spec.vocab))
    return Tokenizer.nbytes(path, spec.vocab, encode), path, encode, "given"


def runtime_info(rt, prof, tokenizer, weights_dtype=None):
    """What the plan counted for the runtime, and where the figures come from (int4_bytes: int4 rows' modules,
    counted for int4 weights only)."""
    if rt is None:
        return None
    key = account.footprint_key(rt.kind, rt.forward)
    src = next((s for s in prof.get("sources", []) if s["figure"] == "footprint.runtime_" + key), {})
    return {"source": "measured", "kernels": rt.kind, "forward": rt.forward, "tile": rt.tile, "heap_bytes": rt.heap, "heap_image": rt.image,
            "usable_heap": rt.usable, "boot_bytes": rt.boot, "code_bytes": rt.code,
            "telemetry_bytes": rt.telemetry, "evict_bytes": rt.evict, "encode_bytes": rt.encode, "loop_bytes": rt.loop,
            "file_bytes": rt.file, "layout_bytes": rt.layout, "tiered_bytes": (rt.tiered or 0) + TIERED_FILES * rt.file + TIERED_LOOP_BYTES,
            "floats_bytes": rt.floats, "int4_bytes": (rt.int4 or 0) if weights_dtype == budget.I4 else 0,
            "largest_block_bytes": rt.largest, "margin_bytes": rt.margin, "stats": rt.telemetry > 0,
            "tokenizer_bytes": tokenizer[0],
            "tokenizer": tokenizer[1], "tokenizer_from": tokenizer[3], "prompt": tokenizer[2], "command": src.get("command"),
            "firmware": src.get("firmware"), "date": src.get("date")}


def quality_table(spec, quality=None):
    """(rows, what ranks, note): `quality` a `kvedge eval --json` file; None: the shipped stories260K table when the
    model is stories260K's shape (default_table_for), else none; False: none (the heuristic order)."""
    if quality:
        return load_quality(quality), quality, table_warning(quality, spec)
    if quality is None and default_table_for(spec):
        return load_quality(DEFAULT_QUALITY), DEFAULT_QUALITY, (
            "ranked by the shipped quality table measured on %s (kvedge_host/data/quality-stories260K.json, the "
            "written corpus): this model has its shape; --quality FILE ranks by another" % DEFAULT_QUALITY_MODEL)
    return None, None, "no quality table: ranked by the heuristic order (run `kvedge eval --json` to measure)"


def check_choices(objective, kind, min_tokens_per_s):
    if objective not in OBJECTIVES:
        raise UserError("--objective must be %s; got %r" % (", ".join(OBJECTIVES), objective))
    if kind is not None and kind not in KINDS:
        raise UserError("--kind must be one of %s; got %r" % (", ".join(KINDS), kind))
    if min_tokens_per_s is not None and not (isinstance(min_tokens_per_s, (int, float)) and
                                             math.isfinite(min_tokens_per_s) and min_tokens_per_s > 0):
        raise UserError("--min-tokens-per-s must be a positive number; got %r" % (min_tokens_per_s,))


def order(ranked, objective=DEFAULT_OBJECTIVE, min_tokens_per_s=None):
    """The quality order (rank()) steered by speed. quality: as is. balanced: a configuration more than SLOWER
    times slower than the fastest one keeping at least as many tokens goes after every one that is not (its
    "slower" field says how much). speed: fastest first (quality breaks ties). min_tokens_per_s: configurations
    below it (or without a figure) are left out. Returns (ordered, left out)."""
    out = []
    dropped = []
    for c in ranked:
        t = c.get("tokens_per_s")
        if min_tokens_per_s is not None and (t is None or t < min_tokens_per_s):
            dropped.append(c)
        else:
            out.append(c)
    for c in out:
        best = max((d["tokens_per_s"] for d in out if d["tokens_kept"] >= c["tokens_kept"] and
                    d.get("tokens_per_s")), default=None)
        c["slower"] = round(best / c["tokens_per_s"], 2) if best and c.get("tokens_per_s") else None
    if objective == "speed":
        out = sorted(out, key=lambda c: -(c.get("tokens_per_s") or 0.0))
    elif objective == "balanced":
        out = [c for c in out if (c["slower"] or 1.0) <= SLOWER] + [c for c in out if (c["slower"] or 1.0) > SLOWER]
    return out, dropped


class Plan:
    """A planning run: `result` (what `kvedge plan --json` prints), `chosen` (the configuration picked, or None
    when nothing fits), `document` (its plan document, what `--out` writes) and `spec`, `target`."""

    def __init__(self, spec, target, result, chosen, document):
        self.spec, self.target, self.result, self.chosen, self.document = spec, target, result, chosen, document

    @property
    def fits(self):
        return bool(self.result["configurations"])


# the weight formats the device runs (kvedge.model: f32 rows, int8 rows, int4 rows), best quality first: the ones a
# plan without --weights-dtype searches beside the source's own
WEIGHT_SEARCH = (budget.F32, budget.I8, budget.I4)
WEIGHT_NAMES = {budget.F32: "f32", budget.F16: "f16", budget.I8: "int8", budget.I4: "int4"}


def weight_formats(spec):
    """The formats a plan without --weights-dtype tries, in order: the source's own, then each of WEIGHT_SEARCH
    that takes fewer bytes a parameter (a checkpoint is converted down, never up; a quantized kvedge file is not
    converted again: `kvedge convert` reads float checkpoints)."""
    src = spec.weights_dtype
    if src in (budget.I8, budget.I4):
        return [None]
    own = account.weights(spec, src)[0] if src in budget.WEIGHT_DTYPES else None
    out = [None]
    for d in WEIGHT_SEARCH:
        if d != src and (own is None or account.weights(spec, d)[0] < own):
            out.append(d)
    return out


def plan(spec, context, tgt, kv_dtype="f32", weights_dtype=None, align=64, batch=1, weights_in="auto",
         tiered=True, kernels="auto", margin=None, workspace=None, model=None, tokenizer=None, stats=True,
         prompt=True, quality=None, objective=DEFAULT_OBJECTIVE, min_tokens_per_s=None, kind=None, pick=1,
         flash_tier=False, forward="auto", suggest=True, fit_weights=True):
    """plan_one() for the weights as given; without weights_dtype (and fit_weights) the weights are fitted too:
    the source's own format when it keeps the whole context, else the format of WEIGHT_SEARCH (smaller than the
    source's) whose plan keeps the most tokens, the better-quality format on a tie (result["weights_fit"] says
    what each format came to and why one was chosen). When nothing fits, result["nearest"] names the nearest
    thing that would: another weight format (when the weights were pinned), then a board."""
    args = dict(kv_dtype=kv_dtype, align=align, batch=batch, weights_in=weights_in, tiered=tiered, kernels=kernels,
                margin=margin, workspace=workspace, model=model, tokenizer=tokenizer, stats=stats, prompt=prompt,
                quality=quality, objective=objective, min_tokens_per_s=min_tokens_per_s, kind=kind, pick=pick,
                flash_tier=flash_tier, forward=forward)
    search = weights_dtype is None and fit_weights and weights_in != "rom"
    formats = weight_formats(spec) if search else [weights_dtype]
    tried = []
    best = last = refused = None
    for d in formats:
        try:
            p = plan_one(spec, context, tgt, weights_dtype=d, suggest=False, **args)
        except NothingFits as e:
            refused = e
            tried.append({"dtype": d or spec.weights_dtype, "tokens_kept": 0, "strategy": None})
            continue
        c = p.chosen
        tried.append({"dtype": d or spec.weights_dtype, "tokens_kept": c["tokens_kept"] if c else 0,
                      "strategy": c["strategy"] if c else None})
        last = p
        if c is not None and (best is None or min(c["tokens_kept"], context) > min(best.chosen["tokens_kept"],
                                                                                   context)):
            best = p
        if c is not None and c["tokens_kept"] >= context:
            break  # the whole context at the best weights that keep it
    p = best or last  # nothing fits: the smallest weights tried are the nearest miss
    if p is None:
        raise refused
    r = p.result
    if search:
        chosen = r["requested"]["weights"].get("dtype")
        src = spec.weights_dtype
        d = src if chosen == "file" else chosen
        fit = {"searched": [t["dtype"] for t in tried], "tried": tried, "dtype": d, "source": src,
               "converted": d != src}
        if p.chosen is not None and d != src:
            said = []
            for t in tried:
                if t["dtype"] == d:
                    break
                said.append("%s weights %s" % (WEIGHT_NAMES.get(t["dtype"], t["dtype"]), (
                    "keep %s of %s tokens (%s)" % (format(t["tokens_kept"], ","), format(context, ","), t["strategy"])
                    if t["tokens_kept"] else "fit nothing")))
            fit["why"] = ", ".join(said)
            if model:
                import os
                base = os.path.splitext(os.path.basename(model))[0]
                fit["convert"] = "kvedge convert %s --weights-dtype %s -o %s" % (
                    model, d, os.path.join(os.path.dirname(model), "%s.%s.bin" % (base, d)))
        r["weights_fit"] = fit
    if p.chosen is None:
        r["nearest"] = nearest(spec, context, tgt, weights_dtype, formats, args)
        if suggest and not r["nearest"]:
            r["fits_instead"] = fits_instead(spec, context, tgt, workspace)
    return p


def nearest(spec, context, tgt, weights_dtype, tried, args):
    """What would fit when nothing does, nearest first: (a smaller context is no help: every strategy was sized
    down to a one-token cache) another weight format than the pinned one, else another board (the one keeping
    the most of the context, the smallest heap on a tie). None when neither does."""
    if weights_dtype is not None:
        for d in WEIGHT_SEARCH:
            if d in tried:
                continue
            try:
                p = plan_one(spec, context, tgt, weights_dtype=d, suggest=False, **args)
            except (NothingFits, UserError):
                continue
            if p.chosen is not None:
                return {"what": "weights", "dtype": d, "strategy": p.chosen["strategy"],
                        "tokens_kept": p.chosen["tokens_kept"]}
    if tgt.get("profile") is None or args.get("workspace") is not None:
        return None
    found = []
    for name in profiles.names():
        if name == tgt["name"]:
            continue
        try:
            other = account.target(name)
        except (UserError, profiles.BoardError):
            continue  # a profile that does not load is no suggestion (the board asked for loaded whole)
        b = dict(args, kernels="auto", margin=None, forward="auto")
        for d in ([weights_dtype] + [w for w in WEIGHT_SEARCH if w != weights_dtype] if weights_dtype is not None
                  else weight_formats(spec)):
            room = max(other["heap_bytes"], profiles.flash_fs_bytes(other["profile"]) or 0)
            if account.weights(spec, d)[0] > room:
                continue  # the weights alone are more than the board's flash and heap: no plan to make
            try:
                p = plan_one(spec, context, other, weights_dtype=d, suggest=False, **b)
            except (NothingFits, UserError):
                continue
            if p.chosen is not None:
                found.append((-min(p.chosen["tokens_kept"], context), other["heap_bytes"], name, d, p.chosen))
                break
    if not found:
        return None
    _, _, name, d, c = min(found, key=lambda x: x[:2])
    return {"what": "board", "board": name, "dtype": d or spec.weights_dtype, "strategy": c["strategy"],
            "tokens_kept": c["tokens_kept"]}


def plan_one(spec, context, tgt, kv_dtype="f32", weights_dtype=None, align=64, batch=1, weights_in="auto",
             tiered=True, kernels="auto", margin=None, workspace=None, model=None, tokenizer=None, stats=True,
             prompt=True, quality=None, objective=DEFAULT_OBJECTIVE, min_tokens_per_s=None, kind=None, pick=1,
             flash_tier=False, forward="auto", suggest=True):
    """Plan `spec` (models.load) at `context` tokens on `tgt` (account.target; inputs() makes all three).

    kv_dtype: the requested cache to start from; weights_dtype: their storage (None: the source's); align: row
    padding (0 = none); weights_in: heap, flash, rom or auto; tiered: offer the tiered cache; kernels: auto or a
    kind with a measured footprint; margin: heap kept free (default account's); workspace: a flat runtime
    allowance instead of the measured footprint (as `tgt` was made with); model / tokenizer: paths, for the
    tokenizer counted; stats / prompt: the run writes a stats stream / encodes a prompt; quality: a quality
    table file, None (the shipped one for stories260K) or False (the heuristic order); objective: balanced,
    quality or speed (order()); min_tokens_per_s: leave slower ones out; kind: search that kind only; pick: the
    rank the document is made of; forward: auto (the integer pass wherever its runtime fits something, else the
    float pass), int or float (that pass's runtimes only); suggest: when nothing fits, find the largest built-in
    model that does (result["fits_instead"]). Returns a Plan."""
    if kv_dtype not in DTYPES:
        raise UserError("unknown KV dtype %r for a device cache (choose from %s)" % (kv_dtype, ", ".join(DTYPES)))
    if weights_in not in ("auto", "heap", "flash", "rom"):
        raise UserError("--weights-in must be heap, flash, rom or auto, got %r" % weights_in)
    account.check_align("--align", align)
    account.check_size("--pick", pick)
    check_choices(objective, kind, min_tokens_per_s)
    table, table_path, qnote = quality_table(spec, quality)
    rts = runtimes(tgt, kernels, margin, workspace, stats, prompt, forward)
    prof = tgt["profile"]
    if not rts and prof and prof.get("footprint") and workspace is None:
        # measured, and no kernel kind ran even the tiny model: a flat allowance would promise a heap that is not there
        raise NothingFits("nothing fits %s: with no kernel kind did the runtime run even the project's tiny model on "
                          "the emulated board (kvedge footprint --board %s)" % (tgt["name"], tgt["name"]))
    tok = tokenizer_for(spec, model, tokenizer, prompt) if rts else (0, None, False, None)
    plans = []
    other_kind = None
    for rt in rts or [None]:
        pl = Planner(spec, context, tgt, align, weights_dtype, batch, rt, tok[0])
        pl.prompt = prompt
        if weights_in == "rom" and pl.weights_dtype != budget.I8:
            raise UserError("--weights-in rom: the device reads int8 weights in place (add --weights-dtype i8), "
                            "these are %s" % pl.weights_dtype)
        pl.tiered_ok = tiered and kind in (None, "tiered")
        every = pl.run(kv_dtype, weights_in)
        cands = [c for c in every if kind is None or c["kind"] == kind]
        ks = planspeed.kernels_for(prof, rt.kind if rt else None)
        for c in cands:
            planspeed.annotate(c, spec, pl.weights_dtype, ks, prof)
        ranked, dropped = order(rank(cands, table), objective, min_tokens_per_s)
        plans.append((rt, pl, ranked, dropped))
        if kind is not None and every and other_kind is None:  # what fits without --kind (the verdict's "instead")
            c = max(every, key=lambda c: (c["tokens_kept"], -c["total_bytes"]))
            other_kind = {"kind": c["kind"], "strategy": c["strategy"], "tokens_kept": c["tokens_kept"],
                          "forward": c["forward"]}
    # the fastest kernels with which something fits (the leanest when nothing does: its numbers are the floor)
    rt, pl, ranked, dropped = next((p for p in plans if p[2]), plans[-1])
    notes = list(spec.notes)
    if pl.mixed_windows:
        notes.append("the model's per-layer sliding windows are not a single device ring: planned as all-global")
    if flash_tier:
        notes.append("--flash-tier is no longer needed: the tiered cache (kvedge.tier.cache) is offered on every board "
                     "with flash; --no-tiered leaves it out")
    if qnote:
        notes.append(qnote)
    notes += _speed_notes(ranked, dropped, objective, min_tokens_per_s, kind,
                          ranked[pick - 1] if ranked and pick <= len(ranked) else None)
    notes += _tier_notes(ranked[pick - 1] if ranked and pick <= len(ranked) else None, ranked)
    notes += _more_tokens_notes(rt, plans, ranked[pick - 1] if ranked and pick <= len(ranked) else None)
    if rt is not None and tok[3] == "reserved":
        notes.append("no tokenizer known (--tokenizer, one beside the model, or the fetch cache's): %s bytes "
                     "reserved, the most a tokenizer of %s tokens keeps" % (format(tok[0], ","),
                                                                          format(spec.vocab, ",")))
    if kv_dtype in budget.LOWBIT and pl.baseline.get("cache"):  # the requested cache, keep-all, as the device sizes it
        c = pl.baseline["cache"]
        windows = [c.get("window", 0)] * spec.layers
        kv = budget.kv_bytes_layers(windows, spec.kv_heads, spec.head_dim, c["max_tokens"], kv_dtype, c["align"],
                                    batch, residual=c.get("residual"), detail=True)
        notes += ["warning: " + w for w in account.lowbit_warnings(kv_dtype, kv, windows, spec, c["max_tokens"],
                                                                   c["align"], batch, residual_flag=False)]
    others = [{"kernels": r.kind, "forward": r.forward, "tokens_kept": rk[0]["tokens_kept"] if rk else 0,
               "strategy": rk[0]["strategy"] if rk else None} for r, _, rk, _ in plans if r is not rt]
    hz, hz_src = planspeed.clock(prof)
    result = {"model": spec.name, "board": tgt["name"], "heap_bytes": pl.heap, "context": context,
              "align": align, "batch": batch, "requested": pl.baseline, "trace": pl.trace,
              "objective": objective, "min_tokens_per_s": min_tokens_per_s, "kind": kind, "quality": table_path,
              "clock_hz": hz, "clock_source": hz_src,
              "configurations": ranked, "notes": notes,
              "flash_fs_bytes": pl.flash_fs_bytes() if tgt["profile"] else None,
              "runtime": runtime_info(rt, tgt["profile"], tok, pl.weights_dtype) or {"source": "allowance",
                                                                  "workspace_bytes": tgt["workspace_bytes"]},
              "other_kernels": others}
    if not ranked:
        result["floor"] = pl.floor()
        if kind is not None and other_kind is not None:
            tried = [t for t in pl.trace if t.get("kind") == kind and t.get("total_bytes")]
            least = min(tried, key=lambda t: t["total_bytes"]) if tried else None
            result["kind_refused"] = {"kind": kind, "limit": pl.limit, "instead": other_kind,
                                      "least": {"strategy": least["strategy"], "total_bytes": least["total_bytes"]}
                                      if least else None}
        if suggest:
            result["fits_instead"] = fits_instead(spec, context, tgt, workspace)
    chosen = doc = None
    if ranked:
        if pick > len(ranked):
            raise UserError("--pick %d: only %d feasible configurations" % (pick, len(ranked)))
        chosen = ranked[pick - 1]
        result["chosen"] = pick
        doc = device_config(chosen, spec, tgt, runtime_info(rt, tgt["profile"], tok, pl.weights_dtype))
    return Plan(spec, tgt, result, chosen, doc)


_FITS_INSTEAD = {}  # (the presets left out, context, board, workspace) -> fits_instead's answer


def fits_instead(spec, context, tgt, workspace=None):
    """The largest built-in model (models.PRESETS, by parameters) that fits this board with int8 weights and an
    int8 cache at this context (or its own, when shorter): {"preset", "context", "strategy", "tokens_kept"}; None
    when none does. Plans up to a dozen presets: remembered per process for what it depends on (a process that
    plans many models for one board, as the CLI fuzzer does, asks again and again)."""
    presets = [(name, models.preset(name)) for name in models.PRESETS]
    own = [name for name, o in presets if (o.dim, o.layers, o.vocab) == (spec.dim, spec.layers, spec.vocab)]
    longest = max([o.context or 0 for _, o in presets] + [0])
    if all(o.context for _, o in presets):
        context = min(context, longest)  # a longer context plans every preset at its own: the same answer
    key = (tuple(own), context, workspace, json.dumps(tgt, sort_keys=True, default=repr))
    if key not in _FITS_INSTEAD:
        if len(_FITS_INSTEAD) > 256:
            _FITS_INSTEAD.clear()
        _FITS_INSTEAD[key] = _fits_instead([(n, o) for n, o in presets if n not in own], context, tgt, workspace)
    found = _FITS_INSTEAD[key]
    return dict(found) if found else found


def _fits_instead(presets, context, tgt, workspace):
    found = []
    for name, other in presets:  # the model being planned left out
        n = account.params(other)
        found.append((n["embedding"] + n["matrices"] + n["norms"] + n["classifier"], name, other))
    for _, name, other in sorted(found, key=lambda x: -x[0]):
        ctx = min(context, other.context or context)
        try:
            p = plan_one(other, ctx, tgt, kv_dtype=budget.I8, weights_dtype=budget.I8, align=0, workspace=workspace,
                     quality=False, suggest=False)
        except UserError:
            continue
        if p.chosen is not None:
            return {"preset": name, "context": ctx, "strategy": p.chosen["strategy"],
                    "tokens_kept": p.chosen["tokens_kept"]}
    return None


def verdict(result):
    """The plan's verdict in two lines: whether anything fits the board and the one reason (what is chosen and how
    much of the context it keeps; or, when nothing fits, the part that rules it out: the weights against the
    flash, a single part against the heap, or the fixed parts leaving no room for a cache), then what would fit."""
    board = result["board"]
    ranked = result["configurations"]
    if ranked:
        c = ranked[(result.get("chosen") or 1) - 1]
        speed = (", %.3g tokens/s" % c["tokens_per_s"]) if c.get("tokens_per_s") else ""
        wf = result.get("weights_fit") or {}
        conv = " with %s weights" % WEIGHT_NAMES.get(wf["dtype"], wf["dtype"]) if wf.get("converted") else ""
        first = "verdict: fits %s%s: %s, %s of %s tokens kept (%s pass%s)" % (
            board, conv, c["strategy"], format(c["tokens_kept"], ","), format(result["context"], ","), c["forward"],
            speed)
        if c["tokens_kept"] >= result["context"]:
            second = "the whole context fits: %s of the %s bytes a plan may use" % (
                format(c["total_bytes"], ","), format(c["total_bytes"] + c["headroom_bytes"] - c.get(
                    "margin_bytes", 0), ","))
        else:
            second = "the context does not fit whole: the heap leaves the cache %s bytes (%s); a context of " \
                "%s or less keeps every token" % (format(c["kv_bytes"], ","), c["kind"],
                                                  format(c["tokens_kept"], ","))
        if not conv:
            return first, second
        return first, second, "weights: %s, chosen because %s%s" % (
            WEIGHT_NAMES.get(wf["dtype"], wf["dtype"]), wf.get("why", "they keep the most tokens"),
            ("; convert first: " + wf["convert"]) if wf.get("convert") else " (--weights-dtype pins a format)")
    kr = result.get("kind_refused")
    if kr:  # --kind: that kind fits at no setting, though others do; the board is not what rules it out
        lim = format(kr["limit"], ",")
        if kr["least"]:
            why = "its smallest setting (%s) needs %s bytes, the plan may use %s" % (
                kr["least"]["strategy"], format(kr["least"]["total_bytes"], ","), lim)
        else:
            why = "no setting of it fits within the %s bytes a plan may use" % lim
        o = kr["instead"]
        return ("verdict: nothing fits %s as --kind %s: %s" % (board, kr["kind"], why),
                "what would fit: another kind, e.g. %s (%s, %s of %s tokens kept, %s pass): kvedge plan without "
                "--kind" % (o["strategy"], o["kind"], format(o["tokens_kept"], ","), format(result["context"], ","),
                            o["forward"]))
    fl = result.get("floor") or {}
    limit = fl.get("limit", result["heap_bytes"])
    weights = (result.get("requested") or {}).get("weights") or {}
    flash = result.get("flash_fs_bytes")
    parts = [(n, b) for n, b in fl.get("parts", []) if not n.startswith("KV cache")]
    too_big = flash is not None and weights.get("bytes", 0) > max(flash, limit)
    if too_big and not flash:  # a board with no flash to stream from (the unix profile): the heap is all
        reason = "the weights (%s bytes as %s) are more than the %s bytes a plan may use, and it has no flash to " \
            "read them from" % (format(weights["bytes"], ","), weights.get("dtype", "?"), format(limit, ","))
    elif too_big:
        reason = "the weights (%s bytes as %s) fit neither the flash (%s bytes usable) nor the heap" % (
            format(weights["bytes"], ","), weights.get("dtype", "?"), format(flash, ","))
    elif parts and max(b for _, b in parts) > limit:
        name, b = max(parts, key=lambda x: x[1])
        reason = "its %s alone (%s bytes) are more than the %s bytes a plan may use" % (
            name, format(b, ","), format(limit, ","))
    else:
        reason = "its fixed parts (%s bytes: weights held, activations, runtime) leave no room for a one-token " \
            "cache within %s bytes" % (format(sum(b for _, b in parts), ","), format(limit, ","))
    first = "verdict: nothing fits %s: %s" % (board, reason)
    over = fl.get("total", 0) - limit
    want = []
    if too_big and flash:
        want.append("weights of at most %s bytes (about %s parameters as int8)" % (format(flash, ","),
                                                                                 format(flash, ",")))
    if over > 0:
        want.append("%s bytes less RAM at its smallest (a smaller vocabulary, dim or hidden_dim)" % format(over, ","))
    near = result.get("nearest")
    if near:
        tokens = "%s of %s tokens kept" % (format(near["tokens_kept"], ","), format(result["context"], ","))
        if near["what"] == "weights":
            return first, "what would fit: %s weights (--weights-dtype %s): %s, %s" % (
                WEIGHT_NAMES.get(near["dtype"], near["dtype"]), near["dtype"], near["strategy"], tokens)
        return first, "what would fit: another board, %s, with %s weights (--board %s --weights-dtype %s): %s, %s" % (
            near["board"], WEIGHT_NAMES.get(near["dtype"], near["dtype"]), near["board"], near["dtype"],
            near["strategy"], tokens)
    alt = result.get("fits_instead")
    example = ("; for example --preset %s --weights-dtype i8 --context %d fits (%s)" % (
        alt["preset"], alt["context"], alt["strategy"])) if alt else ""
    return first, "what would fit: a model with %s%s, or a board with more (kvedge plan --board all)" % (
        " and ".join(want) or "a smaller footprint", example)


class NothingFits(UserError):
    """No kernel kind's runtime fits the board at all (its footprint says so): exit 1, not 2."""


def _speed_notes(ranked, dropped, objective, min_tps, kind, chosen):
    out = []
    if dropped:
        out.append("%d configuration(s) below %s tokens/s left out (--min-tokens-per-s)" % (len(dropped), min_tps)
                   + ("" if ranked else "; the fastest reaches %s" % max((c.get("tokens_per_s") or 0)
                                                                         for c in dropped)))
    if kind and not ranked and not dropped:
        out.append("no %s configuration fits (--kind %s)" % (kind, kind))
    if objective == "balanced":
        slow = [c for c in ranked if (c.get("slower") or 1.0) > SLOWER]
        if slow:
            out.append("objective balanced (the default): %d configuration(s) more than %gx slower than the fastest "
                       "keeping as many tokens ranked after the rest (--objective quality ranks by quality alone)"
                       % (len(slow), SLOWER))
    if chosen and chosen.get("speed", {}).get("estimated"):
        out.append("the chosen speed is estimated: %s" % chosen["speed"].get("from", "not measured"))
    return out


def _more_tokens_notes(rt, plans, chosen):
    """The plan takes the fastest pass and kernels with which something fits: say when a slower runtime would
    keep more of the context, and how to ask for it."""
    if rt is None or chosen is None:
        return []
    more = [(r, rk[0]) for r, _, rk, _ in plans if r is not rt and rk and rk[0]["tokens_kept"] > chosen["tokens_kept"]]
    if not more:
        return []
    r, c = max(more, key=lambda x: x[1]["tokens_kept"])  # the fastest of those keeping the most (max keeps the first)
    speed = (" at %.3g tokens/s" % c["tokens_per_s"]) if c.get("tokens_per_s") else ""
    return ["the %s pass with %s kernels keeps %s tokens (%s)%s, against %s here at %s: --forward %s --kernels %s"
            % (r.forward, r.kind, format(c["tokens_kept"], ","), c["strategy"], speed,
               format(chosen["tokens_kept"], ","), "%.3g tokens/s" % chosen["tokens_per_s"]
               if chosen.get("tokens_per_s") else "an unmeasured speed", r.forward, r.kind)]


def _tier_notes(chosen, ranked):
    """A tiered choice on the float path: say which tiered configuration takes the integer path, and its cost."""
    k = ((chosen or {}).get("tier") or {}).get("cost")
    if not k or not k["path"].startswith("float"):
        return []
    for i, c in enumerate(ranked, 1):
        kc = (c.get("tier") or {}).get("cost")
        if c["kind"] == "tiered" and kc and kc["path"].startswith("integer"):
            return ["the chosen tiered cache runs the float path (%s instructions per token for its cold tokens on "
                    "the emulated board); #%d (%s) takes the integer path at %s: --pick %d"
                    % ("{:,}".format(k["cold_instructions_per_token"]), i, c["strategy"],
                       "{:,}".format(kc["cold_instructions_per_token"]), i)]
    return []


def all_boards(model=None, preset=None, context=None, weights_dtype=None, workspace=None, batch=1, kv_dtype="f32",
               align=64, weights_in="auto", tiered=True, kernels="auto", margin=None, tokenizer=None, stats=True,
               prompt=True, quality=None, objective=DEFAULT_OBJECTIVE, kind=None, forward="auto"):
    """Every board profile: how many tokens each strategy keeps, at what measured cost and speed (the best-ranked
    configuration of each strategy, as plan() ranks them for that board)."""
    from .. import profiles
    doc = {"quality": None, "boards": {}}
    base = None
    for name in profiles.names():
        spec, ctx, tgt = inputs(model, preset, context, name, None, workspace, batch, weights_dtype)
        try:
            p = plan(spec, ctx, tgt, kv_dtype, weights_dtype, align, batch, weights_in, tiered, kernels, margin,
                     workspace, model, tokenizer, stats, prompt, quality, objective, None, kind, forward=forward)
        except NothingFits:
            doc["boards"][name] = {"heap_bytes": tgt["heap_bytes"], "strategies": []}
            continue
        doc["quality"] = p.result["quality"]
        if base is None:
            table, _, _ = quality_table(spec, quality)
            base = _base_ppl(table)
        rows = []
        for c in per_strategy(p.result["configurations"]):
            q = c.get("quality") or {}
            m = q.get("metrics", {})
            rows.append({"strategy": c["strategy"], "kind": c["kind"], "dtype": c["cache"]["dtype"],
                         "tokens_kept": c["tokens_kept"], "kv_bytes": c["kv_bytes"], "weights": c["weights"]["place"],
                         "kl": m.get("kl"), "ppl": m.get("ppl"), "top1": m.get("top1"),
                         "ppl_vs_f32": (m["ppl"] / base - 1) if (base and "ppl" in m) else None,
                         "measured_at": q.get("tokens"), "estimated": bool(q.get("estimated") or q.get("uncertain")),
                         "forward": c["forward"], "tokens_per_s": c["tokens_per_s"]})
        doc["model"], doc["context"] = spec.name, ctx
        doc["boards"][name] = {"heap_bytes": tgt["heap_bytes"], "strategies": rows}
    return doc
