"""Compress until it fits: the planning loop over KV dtype, window, sinks, H2O budget, a tiered cache (hot ring in
RAM, older tokens on flash) and context.

Start from the requested deployment (the whole context in --kv-dtype). If it does not fit the heap, try each
strategy, size it to the largest setting that fits (recomputing with kvedge.budget every time), and rank every
feasible configuration: by measured quality cost when a `kvedge eval --json` table is given (--quality), else by
a documented heuristic. Say where each array should live (fast internal SRAM, slow PSRAM, or flash row by row)
and write the chosen configuration as a device config JSON whose "cache" object CacheConfig.from_dict() takes
as is. Exit 0 with a plan, 1 when nothing fits, 2 on bad input."""
import json
import math
import os
import re

from kvedge import budget
from kvedge.model import streambytes
from kvedge.config import CacheConfig

from . import account, validate
from .cli import UserError
from .cmd_budget import add_model_arguments, load_inputs

FORMAT = "kvedge-plan/1"
DTYPES = (budget.F32, budget.F16, budget.I8, budget.I4, budget.I2)
SINKS = 4  # StreamingLLM keeps the first 4 tokens
MIN_WINDOW = 8  # a ring shorter than this is not worth offering
PREFIX_FRACTION = 0.05  # trap 5: the first ~5 % of the context at full precision
KIVI_MIN = 2 * budget.QK  # i4's default sliding residual (one group) and the group leaving it: the smallest ring
# heuristic quality order when no measured table is given (lower = closer to the full f32 cache)
KIND_GROUP = {"keep": 0, "prefix": 0, "h2o": 1, "sinks": 2, "tiered": 3, "window": 4, "shorter": 5}
TIER_BLOCK = 16  # tokens per cold block of a tiered cache (keys quantized per channel over it)
TIER_COLDS = (budget.I4, budget.I8)  # what cold blocks hold: i4 (KIVI, least flash) or i8 (cheaper to attend)
TIER_RINGS = (budget.F32, budget.F16, budget.I8)
DTYPE_RANK = {budget.F32: 0, budget.F16: 1, budget.I8: 2, budget.I4: 3, budget.I2: 4}
# the quality table `--quality` uses when given no file: `kvedge eval --json` on stories260K (the written corpus)
DEFAULT_QUALITY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "quality-stories260K.json")


def add_arguments(p):
    add_model_arguments(p)
    p.add_argument("--kv-dtype", default="f32", metavar="DTYPE",
                   help="the requested cache storage: f32, f16, i8, i4 (default f32: the exact cache, what compressions are measured against)")
    p.add_argument("--align", type=int, default=64,
                   help="row padding of the device cache (default 64, CacheConfig's default; 0 = none)")
    p.add_argument("--weights-in", default="auto", metavar="WHERE",
                   help="heap, flash (read row by row), rom (int8 weights in a ROMFS partition, rows read in place: "
                        "firmware with ROMFS) or auto: heap unless nothing then fits, then flash (default auto)")
    p.add_argument("--no-tiered", action="store_true",
                   help="leave out the tiered cache (sinks + hot ring in RAM, older tokens i4 on flash; offered on "
                        "every board with flash)")
    # before kvedge.tiered the flash tier was opt-in; it is offered by default now and the old flag does nothing
    p.add_argument("--flash-tier", action="store_true", help=__import__("argparse").SUPPRESS)
    p.add_argument("--kernels", default="auto", metavar="KIND",
                   help="asm, viper, native, plain or auto: the fastest kind with a measured footprint (kvedge footprint) "
                        "for which a configuration fits (default auto)")
    p.add_argument("--tokenizer", metavar="PATH",
                   help="tokenizer the runner loads, counted in the plan (default: tok512.bin or tokenizer.bin beside "
                        "a llama2.c model)")
    p.add_argument("--no-stats", action="store_true",
                   help="the run writes no stats stream: kvedge.telemetry is not counted")
    p.add_argument("--no-prompt", action="store_true",
                   help="the run encodes no prompt (generation from BOS): the tokenizer's sorted ids are not counted")
    p.add_argument("--margin", type=int, metavar="BYTES",
                   help="heap kept free beyond the plan (default with a measured footprint: the larger of 3%% of "
                        "the usable heap and 5,120 bytes; see kvedge_host.account)")
    p.add_argument("--quality", metavar="FILE.json", nargs="?", const=DEFAULT_QUALITY,
                   help="rank by a quality table written by `kvedge eval --json`; without FILE, the stories260K "
                        "table measured on the written corpus (kvedge_host/data/quality-stories260K.json)")
    p.add_argument("--out", metavar="FILE.json", help="write the chosen configuration as a device config JSON")
    p.add_argument("--pick", type=int, default=1, help="rank of the configuration --out writes (default 1)")
    p.add_argument("--top", type=int, default=12, help="ranked rows to print (default 12)")
    p.add_argument("--json", action="store_true", help="print the whole plan as JSON")


# ---- quality table (kvedge eval --json) ----

_METRICS = (("kl", ("mean_kl", "kl", "kl_mean", "kl_divergence")),
            ("ppl", ("ppl", "perplexity")),
            ("top1", ("top1", "top1_agreement", "top_1")))


def _norm(s):
    return re.sub(r"[\s_\-]+", "", str(s).lower())


def _row_kind(row, label):
    """(kind, dtype) a quality row measures: from its cache "config" (what `kvedge eval --json` writes) when
    present, else from explicit "kind"/"dtype" fields or its label ('i8 + f32 prefix 26', 'sinks 4 + window 124')."""
    n = _norm(row.get("kind") or label)
    cfg = row.get("config") if isinstance(row.get("config"), dict) else None
    if "h2o" in n:
        kind = "h2o"
    elif isinstance(row.get("tier"), dict) or "tiered" in n:
        kind = "tiered"  # kvedge.tiered: its config is the hot ring's
    elif cfg is not None:
        kind = ("sinks" if cfg.get("sinks") else "window" if cfg.get("window") else
                "prefix" if cfg.get("prefix") else "keep")
        if cfg.get("dtype") in budget.LOWBIT and cfg.get("residual") == 0:
            kind = "naive"  # per-token i4/i2 keys: not a layout the planner offers
    else:
        kind = ("sinks" if "sink" in n else "window" if "window" in n else "prefix" if "prefix" in n
                else "naive" if "pertoken" in n else "keep")
    dtype = (cfg or {}).get("dtype") or row.get("dtype")
    if dtype not in DTYPES:
        m = re.search(r"(f32|f16|i8|i4|i2|int8|int4|int2|fp16|fp32)", _norm(label))
        dtype = {"int8": "i8", "int4": "i4", "int2": "i2", "fp16": "f16", "fp32": "f32"}.get(m.group(1), m.group(1)) \
            if m else None
    if dtype is None and kind == "keep":
        dtype = budget.F32
    return kind, dtype


def load_quality(path):
    """Rows of a quality table: `kvedge eval --json` output ({"quality": {"rows": [...]}}), a list of rows,
    {"rows"|"results"|"strategies": [...]}, or {label: row}.
    A row names its strategy ("strategy", "name" or "label"; optional "kind" and "dtype") and carries any of
    mean KL (kl, mean_kl), perplexity (ppl, perplexity) and top-1 agreement (top1, top1_agreement)."""
    data = validate.load_json(path)
    if isinstance(data, dict) and isinstance(data.get("quality"), dict):
        data = data["quality"]  # `kvedge eval --json`: {"model", "quality": {"tokens", "seed", "rows"}, "long"}
    rows = data
    if isinstance(data, dict):
        for k in ("rows", "results", "strategies"):
            if isinstance(data.get(k), list):
                rows = data[k]
                break
        else:
            rows = [dict(v, strategy=k) for k, v in data.items() if isinstance(v, dict)]
    if not isinstance(rows, list) or not rows:
        raise UserError("%s: no quality rows found (expected a list of strategy rows)" % path)
    table = []
    for row in rows:
        if not isinstance(row, dict):
            raise UserError("%s: a quality row is not an object: %r" % (path, row))
        label = row.get("strategy") or row.get("name") or row.get("label")
        if not label:
            raise UserError("%s: a quality row has no strategy name: %s" % (path, _short(row)))
        if not isinstance(label, str):
            raise UserError("%s: a quality row's strategy name is %s, expected text" % (path, validate.show(label)))
        m = {}
        for key, names in _METRICS:
            for n in names:
                if n in row:
                    m[key] = _metric(path, label, n, row[n], key)
                    break
        if not m:
            continue
        kind, dtype = _row_kind(row, label)
        q = {"label": str(label), "kind": kind, "dtype": dtype, "metrics": m}
        cfg = row.get("config") if isinstance(row.get("config"), dict) else {}
        if cfg.get("window"):
            try:  # the ring size the row was measured at
                q["tokens"] = (validate.whole(None, "config.window", cfg["window"], 1, budget.LIMITS["window"])
                               + validate.whole(None, "config.sinks", cfg.get("sinks", 0), 0, budget.LIMITS["sinks"]))
            except validate.InputError as e:
                raise UserError("%s: row %s: %s" % (path, validate.show(label), e))
        elif kind == "h2o" and isinstance(cfg.get("max_tokens"), int) and cfg["max_tokens"] > 0:
            q["tokens"] = cfg["max_tokens"]  # the slots H2O kept
        if dtype in budget.LOWBIT and isinstance(cfg.get("residual"), int):
            q["residual"] = cfg["residual"]
        if kind == "tiered":
            tier = row.get("tier") if isinstance(row.get("tier"), dict) else {}
            q["cold"] = tier.get("cold_dtype") or next((d for d in TIER_COLDS if "cold" + d in _norm(label)), None)
        table.append(q)
    if not table:
        raise UserError("%s: no row has kl, ppl or top1 figures" % path)
    return table


# What a measured figure can be: KL divergence >= 0, perplexity >= 1, top-1 agreement a fraction.
_METRIC_RANGE = {"kl": (0.0, None), "ppl": (1.0, None), "top1": (0.0, 1.0)}


def _metric(path, label, name, v, key):
    """A quality figure: a finite number in its range, else an error naming the file and the row."""
    lo, hi = _METRIC_RANGE[key]
    try:
        return validate.real(None, name, v, lo, hi)
    except validate.InputError as e:
        raise UserError("%s: row %s: %s" % (path, validate.show(label), e))


def _short(row):
    s = json.dumps(row, default=str)
    return s if len(s) <= 80 else s[:77] + "..."


def match_quality(table, cand):
    """The measured row for a candidate, or None. Same kind and dtype first (KIVI: the same residual); an
    eviction strategy (H2O, sinks + window, window) takes the row measured at the most tokens it keeps too (the
    cost of keeping fewer tokens bounds its own), else the smallest measured size (uncertain), and a row
    measured in another dtype still tells its cost (the row's label says what was measured); a tiered cache
    takes the tiered row of its cold dtype measured with the largest ring not above its own (else the smallest),
    moved to its ring dtype like an eviction row when needed; the full f32 cache is the reference (cost 0)."""
    if table is None:
        return None
    kind, dtype = cand["kind"], cand["cache"]["dtype"]
    if kind == "shorter":
        return None
    if kind == "tiered":
        return _tiered_row(table, cand)
    if kind in ("h2o", "sinks", "window"):
        rows = [row for row in table if row["kind"] == kind and row["dtype"] == dtype] or \
            [row for row in table if row["kind"] == kind]
        row = _by_size(rows, cand["tokens_kept"])
        if row is None:
            return None
        return row if row["dtype"] == dtype else _other_dtype(table, row, dtype)
    same = [row for row in table if row["kind"] == kind and row["dtype"] == dtype]
    for row in same:  # KIVI: the row measured with the candidate's residual first
        if row.get("residual", cand["cache"].get("residual")) == cand["cache"].get("residual"):
            return row
    if same:
        return same[0]
    if kind == "keep" and dtype == budget.F32:
        return {"label": "f32 (reference)", "kind": "keep", "dtype": "f32", "metrics": {"kl": 0.0}}
    return None


def _tiered_row(table, cand):
    ring = cand["cache"]["window"] + cand["cache"]["sinks"]
    cold = cand["tier"]["cold_dtype"]
    rows = [r for r in table if r["kind"] == "tiered" and r.get("cold") in (cold, None)]
    if not rows and cold == budget.I8:  # an i8 store loses no more than an i4 one: its row bounds the cost
        rows = [dict(r, uncertain=True) for r in table if r["kind"] == "tiered" and r.get("cold") == budget.I4]
    if not rows:
        return None
    same = [r for r in rows if r["dtype"] == cand["cache"]["dtype"]] or rows
    below = [r for r in same if r.get("tokens", 0) <= ring]
    if below:
        row = max(below, key=lambda r: r.get("tokens", 0))
    else:  # every measured ring is larger than this one: more tokens are cold here, the cost may be higher
        row = dict(min(same, key=lambda r: r.get("tokens", 0)), uncertain=True)
    if row["dtype"] != cand["cache"]["dtype"]:
        moved = _other_dtype(table, row, cand["cache"]["dtype"])
        if row.get("uncertain"):
            moved["uncertain"] = True
        return moved
    return row


def _by_size(rows, tokens):
    """The row measured at the most tokens <= `tokens`; else the one at the fewest, marked uncertain."""
    sized = [r for r in rows if r.get("tokens")]
    if not sized:
        return rows[0] if rows else None
    below = [r for r in sized if r["tokens"] <= tokens]
    if below:
        return max(below, key=lambda r: r["tokens"])
    return dict(min(sized, key=lambda r: r["tokens"]), uncertain=True)


def _keep_kl(table, dtype):
    for row in table:
        if row["kind"] == "keep" and row["dtype"] == dtype and "kl" in row["metrics"]:
            return row["metrics"]["kl"]
    return 0.0 if dtype == budget.F32 else None


def _other_dtype(table, row, dtype):
    """An eviction row measured in another dtype, moved to `dtype` by adding the two dtypes' measured full-cache
    KL difference (eviction and quantization costs taken as additive); marked uncertain when that is unknown."""
    a, b = _keep_kl(table, dtype), _keep_kl(table, row["dtype"])
    if "kl" in row["metrics"] and a is not None and b is not None:
        kl = max(0.0, row["metrics"]["kl"] + a - b)
        q = {"label": "%s, moved to %s by the full-cache KL difference" % (row["label"], dtype),
             "kind": row["kind"], "dtype": dtype, "metrics": {"kl": kl}, "estimated": True}
        if "tokens" in row:
            q["tokens"] = row["tokens"]
        return q
    return dict(row, uncertain=True)


def quality_cost(q):
    """One number to rank by: mean KL, else perplexity, else 1 - top-1 agreement; two significant digits, so
    that differences below what one seeded run can tell apart rank by the heuristic instead."""
    m = q["metrics"]
    if "kl" in m:
        x = m["kl"]
    elif "ppl" in m:
        x = m["ppl"]
    else:
        x = 1.0 - m["top1"]
    return float("%.2g" % x)


# ---- what a tiered cache costs per token (measured on the emulated board) ----

def tier_cost(spec, ring_dtype, cold, cold_tokens, measured=None):
    """Instructions per token the cold tokens add (attention over them, flash reads included) and the demotion of
    blocks (spread over their tokens), as `tools/bench_tiered.py --save` measured them on the emulated Cortex-M3
    (kvedge_host/tiered_cost.py names its command and firmware). Measured for stories260K's attention shape;
    other shapes are scaled by layers x heads x head_dim (the work per cold token) and say so. None when no
    measurement is at hand."""
    if measured is None:
        try:
            from .tiered_cost import MEASURED as measured
        except ImportError:
            return None
    m = measured
    q8 = ring_dtype in (budget.I8, budget.I4) and cold in (budget.I8, budget.I4)
    rows = [r for r in m.get("rows", []) if r.get("path") == ("int" if q8 else "float") and r.get("cold") == cold]
    if not rows:
        return None
    r = rows[0]
    sh = m["shape"]
    f = (spec.layers * spec.heads * spec.head_dim) / float(sh["layers"] * sh["heads"] * sh["head_dim"])
    out = {"path": "integer (step_q8)" if q8 else "float (step)",
           "instructions_per_cold_token": int(r["per_cold_token"] * f),
           "cold_instructions_per_token": int(r["per_cold_token"] * f * cold_tokens),
           "demote_instructions_per_token": int(r["demote_per_token"] * f),
           "measured": "%s on %s (%s kernels), `%s`" % (m.get("unit", "instructions"), m.get("machine", "?"),
                                                       m.get("kernels", "?"), m.get("command", "?"))}
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

    def runner(self, cfg, h2o=False):
        """The runner's objects for this cache (32-bit word on a board) and, with H2O, its module and state."""
        if self.rt is None:
            return 0
        n = account.runner_objects(self.shape, cfg, self.word(), self.tile, self.rt.kind) * self.batch
        return n + (self.rt.evict + account.H2O_STATE_BYTES if h2o else 0)

    def word(self):
        return 4 if (self.prof.get("small_int_bits") or 31) <= 31 else 8

    def cfg(self, max_tokens, dtype, window=0, sinks=0, prefix=0):
        s = self.spec
        return CacheConfig(s.layers, s.heads, s.kv_heads, s.head_dim, max_tokens, dtype, window=window, sinks=sinks,
                           align=self.align, prefix=prefix)

    def weights_heap(self, place):
        """Weights held in RAM: all of them, or what the runner keeps when they stay on flash (norms, the row
        buffer, a chunk's scales: kvedge.model.streambytes.weights_stream_bytes)."""
        if place == "heap":
            return self.weights_bytes
        if place == "rom":  # read in place from the mapped ROMFS file: one row, as the port's plan counts it
            return budget.weights_row_buffer_bytes(self.spec.dim, self.spec.hidden_dim, budget.I8)
        return streambytes.weights_stream_bytes(account.params(self.spec), self.spec.dim, self.spec.hidden_dim,
                                           self._stream_dtype())

    def _stream_dtype(self):
        return self.weights_dtype if self.weights_dtype in budget.WEIGHT_DTYPES else budget.F16

    def flash_fs_bytes(self):
        """Flash a plan may use for files: the profile's flash_fs_bytes, else half the flash (firmware + fs)."""
        p = self.prof
        if p.get("flash_fs_bytes") is not None:
            return p["flash_fs_bytes"]
        return (p.get("flash_bytes") or 0) // 2

    def activations(self, place):
        """Activations, plus the runner's buffers (its matvec sums need a chunk's rows when weights stream)."""
        if self.rt is None:
            return self.act
        return self.act + account.runner_scratch(self.shape, self._stream_dtype(), place == "flash") * self.batch

    def total(self, cfg, place, scores=0, h2o=False):
        """scores: RAM each sequence needs beside its cache arena (H2O's arrays, a tiered cache's staging block
        and tables); h2o: the eviction module is loaded (counted with a measured runtime)."""
        return (self.weights_heap(place) + cfg.nbytes() * self.batch + scores * self.batch + self.activations(place)
                + self.ws + self.runner(cfg, h2o) + self.files(place))

    def files(self, place):
        """The filesystem's buffers of the files a run keeps open: the tokenizer's, and the weights' when they
        are read from flash."""
        if self.rt is None:
            return 0
        return self.rt.file * ((1 if self.tokenizer_bytes else 0) + (1 if place == "flash" else 0))

    def block_limit(self, h2o=False):
        return self.block if self.rt is None else self.rt.block_limit(h2o)

    def fits(self, cfg, place, scores=0, h2o=False):
        """Under the limit, and the arena (allocated first, straight after start-up) fits the largest block."""
        return self.total(cfg, place, scores, h2o) <= self.limit and cfg.nbytes() <= self.block_limit(h2o)

    def candidate(self, kind, name, cfg, place, tokens, context, policy=None, tier=None, scores=0):
        kv = cfg.nbytes()
        h2o = (policy or {}).get("kind") == "h2o"
        extra = scores + (tier["staging_bytes"] + tier["tables_bytes"] if tier else 0)
        total = self.total(cfg, place, extra, h2o)
        ws = self.ws + self.runner(cfg, h2o) + self.files(place)
        if cfg.align != self.base_align:
            name += ", align %d" % cfg.align
        c = {"kind": kind, "strategy": name, "cache": cfg.to_dict(), "kv_bytes": kv, "tokens_kept": tokens,
             "context": context, "batch": self.batch, "policy": policy, "tier": tier, "h2o_score_bytes": scores,
             "weights": {"bytes": self.weights_bytes, "dtype": self.weights_label, "place": place,
                         "heap_bytes": self.weights_heap(place)},
             "activation_bytes": self.activations(place), "workspace_bytes": ws, "total_bytes": total,
             "heap_bytes": self.heap, "headroom_bytes": self.heap - total,
             "fits": self.fits(cfg, place, extra, h2o)}
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

    # -- the strategies; each returns a candidate or None, and records what it tried --

    def _note(self, what, c):
        if c is None:
            self.trace.append({"try": what, "result": "does not fit at any setting"})
        else:
            t = {"try": what, "result": "fits" if c["fits"] else "does not fit", "total_bytes": c["total_bytes"],
                 "strategy": c["strategy"]}
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
        blocks of TIER_BLOCK tokens; i8) in a cold store on flash, all attended every step (kvedge.tiered). The
        ring is the largest that fits beside its staging block and tables; the store holds the rest of the
        context even right after a block left the ring (then the ring holds W - B + 1 tokens)."""
        if not self.tiered_ok or not self.prof.get("flash_bytes") or self.native_window:
            return None
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
            return self.fits(self.cfg(S + W, dtype, window=W, sinks=S, prefix=S), place, z["staging"] + z["tables"])
        W = _largest(ok, B, hi, B)
        if W is None:
            return None
        z = size(W)
        blocks = z["cold_tokens"] // B
        tier = {"kind": "tiered", "block": B, "cold_dtype": cold, "cold_blocks": blocks, "at_cap": "drop",
                "cold_align": 0, "ring_bytes": z["ring"], "staging_bytes": z["staging"], "tables_bytes": z["tables"],
                "ram_bytes": z["ram"], "cold_bytes": blocks * z["block"], "flash_bytes": z["flash"],
                "cold_tokens": z["cold_tokens"], "cost": tier_cost(self.spec, dtype, cold, z["cold_tokens"])}
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
            found.append(self._note("%s, keep all%s" % (dt, tag), self.keep(dt, place)))
        for dt in dts:
            if dt in (budget.I8,) + budget.LOWBIT:
                found.append(self._note("%s + f32 prefix%s" % (dt, tag), self.prefix(dt, place)))
        for dt in dts:
            if dt not in budget.LOWBIT:
                found.append(self._note("%s H2O%s" % (dt, tag), self.h2o(dt, place)))
            found.append(self._note("%s sinks + window%s" % (dt, tag), self.window(dt, place, SINKS)))
            found.append(self._note("%s window%s" % (dt, tag), self.window(dt, place, 0)))
        for dt in dts:
            if dt in TIER_RINGS and self.tiered_ok:
                for cold in TIER_COLDS:
                    found.append(self._note("%s hot ring + %s blocks on flash%s" % (dt, cold, tag),
                                            self.tiered(dt, place, cold)))
        for dt in dts:
            found.append(self._note("%s, shorter context%s" % (dt, tag), self.shorter(dt, place)))
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
            parts += [("boot", rt.boot), ("runtime code (%s kernels)" % rt.kind, rt.code),
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
        measured = (0, quality_cost(q), 1 if q.get("uncertain") else 0) if q else (1, 0.0, 0)
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


def run_all_boards(a):
    """--board all: for every board profile, how many tokens each strategy keeps and at what measured cost."""
    from . import boards
    import argparse
    if a.out:
        raise UserError("--out writes one board's plan: name the board instead of 'all'")
    table = load_quality(a.quality) if a.quality else None
    base = _base_ppl(table)
    doc = {"quality": a.quality, "boards": {}}
    for name in boards.names():
        b = argparse.Namespace(**vars(a))
        b.board = name
        spec, context, tgt = load_inputs(b)
        rts = runtimes(b, tgt)
        tok = tokenizer_for(b, spec) if rts else (0, None, False)
        ranked = []
        for rt in rts or [None]:  # the fastest kernels with which something fits, as for one board
            pl = Planner(spec, context, tgt, a.align, a.weights_dtype, a.batch, rt, tok[0])
            pl.tiered_ok = not a.no_tiered
            ranked = rank(pl.run(a.kv_dtype, a.weights_in), table)
            if ranked:
                break
        best = per_strategy(ranked)
        rows = []
        for c in best:
            q = c.get("quality") or {}
            m = q.get("metrics", {})
            rows.append({"strategy": c["strategy"], "kind": c["kind"], "dtype": c["cache"]["dtype"],
                         "tokens_kept": c["tokens_kept"], "kv_bytes": c["kv_bytes"], "weights": c["weights"]["place"],
                         "kl": m.get("kl"), "ppl": m.get("ppl"), "top1": m.get("top1"),
                         "ppl_vs_f32": (m["ppl"] / base - 1) if (base and "ppl" in m) else None,
                         "measured_at": q.get("tokens"), "estimated": bool(q.get("estimated") or q.get("uncertain"))})
        doc["model"], doc["context"] = spec.name, context
        doc["boards"][name] = {"heap_bytes": tgt["heap_bytes"], "strategies": rows}
    if a.json:
        print(json.dumps(doc, indent=2))
    else:
        print_all_boards(doc, a.top)
    return 0


def _fmt_cost(r):
    if r["kl"] is None and r["ppl"] is None:
        return "-", "-", "-"
    kl = "%.5f" % r["kl"] if r["kl"] is not None else "-"
    pp = "%+.2f %%" % (100 * r["ppl_vs_f32"]) if r["ppl_vs_f32"] is not None else "-"
    t1 = "%.1f %%" % (100 * r["top1"]) if r["top1"] is not None else "-"
    tail = (" (at %d)" % r["measured_at"]) if r["measured_at"] and r["measured_at"] != r["tokens_kept"] else ""
    if r["estimated"]:
        tail += " ~"
    return kl + tail, pp, t1


def print_all_boards(doc, top):
    """One markdown table per board (the form docs/quality.md keeps)."""
    print("%s, context %d; quality: %s" % (doc["model"], doc["context"], doc["quality"] or "none (heuristic order)"))
    for name, b in doc["boards"].items():
        print()
        print("### %s (heap %s bytes)" % (name, format(b["heap_bytes"], ",")))
        print()
        if not b["strategies"]:
            print("nothing fits")
            continue
        print("| # | strategy | tokens kept | KV bytes | mean KL to f32 | perplexity vs f32 | top-1 | weights |")
        print("|---:|---|---:|---:|---:|---:|---:|---|")
        for i, r in enumerate(b["strategies"][:top], 1):
            kl, pp, t1 = _fmt_cost(r)
            print("| %d | %s | %s | %s | %s | %s | %s | %s |" % (i, r["strategy"], format(r["tokens_kept"], ","),
                                                             format(r["kv_bytes"], ","), kl, pp, t1, r["weights"]))


def runtimes(a, tgt):
    """account.Runtime per kernel kind to plan with, fastest first; [] when the plan uses the flat workspace
    allowance (--workspace, --heap, or a profile without a measured footprint)."""
    prof = tgt["profile"]
    measured = account.kernel_kinds(prof)
    if a.kernels not in ("auto",) + account.KERNEL_KINDS:
        raise UserError("--kernels must be auto, %s; got %r" % (", ".join(account.KERNEL_KINDS), a.kernels))
    if a.margin is not None:
        account.check_size("--margin", a.margin, 0)
    if prof is None or a.workspace is not None or not measured:
        if a.kernels != "auto" or a.margin is not None:
            raise UserError("--kernels and --margin need a measured footprint (a board profile with one, no "
                            "--workspace): kvedge footprint --board %s --write" % (tgt["name"]))
        return []
    if a.kernels != "auto":
        if a.kernels not in measured:
            raise UserError("--kernels %s: %s has no measured %s footprint (measured: %s)"
                            % (a.kernels, tgt["name"], a.kernels, ", ".join(measured)))
        measured = [a.kernels]
    out = [account.Runtime(prof, k) for k in measured]
    for rt in out:
        if a.margin is not None:
            rt.margin = a.margin
        if a.no_stats:
            rt.telemetry = 0
        if a.no_prompt:
            rt.encode = 0
    return out


def tokenizer_for(a, spec):
    """(bytes the runner's tokenizer keeps, its path, whether a prompt is encoded) or (0, None, False):
    --tokenizer, else tok512.bin or tokenizer.bin beside a llama2.c .bin model when its size fits the model's
    vocabulary. The tokenizer stays in its file (kvedge.model.tokenizer.FileTokenizer); encoding a prompt sorts
    its ids once (2 bytes a token), which --no-prompt leaves out."""
    from kvedge.model.tokenizer import FileTokenizer as Tokenizer
    encode = not a.no_prompt
    path = a.tokenizer
    if path is None:
        if not (a.model and a.model.endswith(".bin") and os.path.isfile(a.model)):
            return 0, None, encode
        for name in ("tok512.bin", "tokenizer.bin"):
            p = os.path.join(os.path.dirname(os.path.abspath(a.model)), name)
            if os.path.isfile(p) and os.path.getsize(p) >= 4 + 8 * spec.vocab:
                return Tokenizer.nbytes(p, spec.vocab, encode), p, encode
        return 0, None, encode
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise UserError("%s: cannot read: %s" % (path, e.strerror or e))
    if size < 4 + 8 * spec.vocab:
        raise UserError("%s: %d bytes is too short for a tokenizer of %d tokens" % (path, size, spec.vocab))
    return Tokenizer.nbytes(path, spec.vocab, encode), path, encode


def runtime_info(rt, prof, tokenizer):
    """What the plan counted for the runtime, and where the figures come from."""
    if rt is None:
        return None
    src = next((s for s in prof.get("sources", []) if s["figure"] == "footprint.runtime_" + rt.kind), {})
    return {"source": "measured", "kernels": rt.kind, "tile": rt.tile, "heap_bytes": rt.heap, "heap_image": rt.image,
            "usable_heap": rt.usable, "boot_bytes": rt.boot, "code_bytes": rt.code,
            "telemetry_bytes": rt.telemetry, "evict_bytes": rt.evict, "encode_bytes": rt.encode, "loop_bytes": rt.loop,
            "file_bytes": rt.file,
            "largest_block_bytes": rt.largest, "margin_bytes": rt.margin, "stats": rt.telemetry > 0,
            "tokenizer_bytes": tokenizer[0],
            "tokenizer": tokenizer[1], "prompt": tokenizer[2], "command": src.get("command"),
            "firmware": src.get("firmware"), "date": src.get("date")}


def run(a):
    if a.kv_dtype not in DTYPES:
        raise UserError("unknown KV dtype %r for a device cache (choose from %s)" % (a.kv_dtype, ", ".join(DTYPES)))
    if a.weights_in not in ("auto", "heap", "flash", "rom"):
        raise UserError("--weights-in must be heap, flash, rom or auto, got %r" % a.weights_in)
    account.check_align("--align", a.align)
    account.check_size("--pick", a.pick)
    account.check_size("--top", a.top)
    if a.board == "all" and a.heap is None:
        return run_all_boards(a)
    if a.out:
        validate.out_folder("--out", a.out)
    table = load_quality(a.quality) if a.quality else None
    spec, context, tgt = load_inputs(a)
    rts = runtimes(a, tgt)
    prof = tgt["profile"]
    if not rts and prof and prof.get("footprint") and a.workspace is None:
        # measured, and no kernel kind ran even the tiny model: a flat allowance would promise a heap that is not there
        print("nothing fits %s: with no kernel kind did the runtime run even the project's tiny model on the emulated "
              "board (kvedge footprint --board %s)" % (tgt["name"], tgt["name"]))
        return 1
    tok = tokenizer_for(a, spec) if rts else (0, None, False)
    plans = []
    for rt in rts or [None]:
        pl = Planner(spec, context, tgt, a.align, a.weights_dtype, a.batch, rt, tok[0])
        if a.weights_in == "rom" and pl.weights_dtype != budget.I8:
            raise UserError("--weights-in rom: the device reads int8 weights in place (add --weights-dtype i8), "
                            "these are %s" % pl.weights_dtype)
        pl.tiered_ok = not a.no_tiered
        plans.append((rt, pl, rank(pl.run(a.kv_dtype, a.weights_in), table)))
    # the fastest kernels with which something fits (the leanest when nothing does: its numbers are the floor)
    rt, pl, ranked = next((p for p in plans if p[2]), plans[-1])
    notes = list(spec.notes)
    if pl.mixed_windows:
        notes.append("the model's per-layer sliding windows are not a single device ring: planned as all-global")
    if a.flash_tier:
        notes.append("--flash-tier is no longer needed: the tiered cache (kvedge.tiered) is offered on every board "
                     "with flash; --no-tiered leaves it out")
    if table is None:
        notes.append("no --quality table: ranked by the heuristic order (run `kvedge eval --json` to measure)")
    notes += _tier_notes(ranked[a.pick - 1] if ranked and a.pick <= len(ranked) else None, ranked)
    if rt is not None and tok[1] is None:
        notes.append("no tokenizer counted (--tokenizer): the runner loads one beside the model")
    others = [{"kernels": r.kind, "tokens_kept": rk[0]["tokens_kept"] if rk else 0,
               "strategy": rk[0]["strategy"] if rk else None} for r, _, rk in plans if r is not rt]
    result = {"model": spec.name, "board": tgt["name"], "heap_bytes": pl.heap, "context": context,
              "align": a.align, "batch": a.batch, "requested": pl.baseline, "trace": pl.trace,
              "configurations": ranked, "notes": notes,
              "flash_fs_bytes": pl.flash_fs_bytes() if tgt["profile"] else None,
              "runtime": runtime_info(rt, tgt["profile"], tok) or {"source": "allowance",
                                                                  "workspace_bytes": tgt["workspace_bytes"]},
              "other_kernels": others}
    if not ranked:
        result["floor"] = pl.floor()
    chosen = None
    if ranked:
        if a.pick > len(ranked):
            raise UserError("--pick %d: only %d feasible configurations" % (a.pick, len(ranked)))
        chosen = ranked[a.pick - 1]
        result["chosen"] = a.pick
    if a.out and chosen:
        doc = device_config(chosen, spec, tgt, runtime_info(rt, tgt["profile"], tok))
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        result["out"] = a.out
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        print_plan(spec, tgt, result, chosen, a.top)
    return 0 if ranked else 1


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


def _b(n):
    from .cmd_budget import _b as fmt
    return fmt(n)


def _print_runtime(c, r):
    rt = r["runtime"]
    if rt["source"] != "measured":
        c.print("workspace: a flat %s-byte allowance for the runtime (no measured footprint: kvedge footprint "
                "--board B --write, or --workspace was given)" % "{:,}".format(rt["workspace_bytes"]),
                highlight=False)
        return
    scaled = "" if rt["heap_image"] == rt["heap_bytes"] else (
        ", scaled from the %s-byte image it was measured on" % "{:,}".format(rt["heap_image"]))
    c.print("runtime, measured on the emulated board (%s, %s): %s kernels; usable heap %s of %s%s; boot %s + code "
            "%s + stats %s + prompt encoder %s + loop %s; tokenizer %s; largest free block after start-up %s; "
            "margin %s kept free" % (rt["command"], rt["date"], rt["kernels"], "{:,}".format(rt["usable_heap"]),
               "{:,}".format(rt["heap_bytes"]), scaled, "{:,}".format(rt["boot_bytes"]),
               "{:,}".format(rt["code_bytes"]), "{:,}".format(rt["telemetry_bytes"]),
               "{:,}".format(rt.get("encode_bytes", 0)), "{:,}".format(rt["loop_bytes"]),
               "{:,}".format(rt["tokenizer_bytes"]), "{:,}".format(rt["largest_block_bytes"]),
               "{:,}".format(rt["margin_bytes"])), highlight=False, markup=False, soft_wrap=True)
    for o in r.get("other_kernels", []):
        c.print("  with %s kernels: %s" % (o["kernels"], ("%s tokens kept (%s)" % (o["tokens_kept"], o["strategy"]))
                                          if o["strategy"] else "nothing fits"), highlight=False, markup=False)


def print_plan(spec, tgt, r, chosen, top):
    from rich.console import Console
    from rich.table import Table
    c = Console()
    req = r["requested"]
    c.print("[bold]%s[/bold] on [bold]%s[/bold] (heap %s), context %d, batch %d, align %d"
            % (spec.name, tgt["name"], _b(tgt["heap_bytes"]), r["context"], r["batch"], r["align"]))
    c.print("%d layers, %d heads, %d KV heads: %s (query head h reads KV head h // %d), head_dim %d"
            % (spec.layers, spec.heads, spec.kv_heads, spec.attention, spec.heads // spec.kv_heads, spec.head_dim),
            highlight=False)
    _print_runtime(c, r)
    cands = r["configurations"]
    if not cands:  # say so up front, with the numbers; the loop that tried everything follows
        fl = r["floor"]
        c.print("[red]nothing fits[/red]: the least any configuration needs is %s, the plan may use %s (%s)"
                % ("{:,}".format(fl["total"]), "{:,}".format(fl["limit"]), "usable heap %s less a %s-byte margin"
                   % ("{:,}".format(fl["heap"]), "{:,}".format(fl["margin"])) if fl["margin"] else "the heap"),
                soft_wrap=True)
        for name, n in fl["parts"]:
            c.print("  %-28s %12s" % (name, "{:,}".format(n)), highlight=False, markup=False)
        if r.get("flash_fs_bytes") is not None and req["weights"]["bytes"] > r["flash_fs_bytes"]:
            c.print("the weights do not fit the flash either (%s usable)" % _b(r["flash_fs_bytes"]), highlight=False)
    if req["fits"]:
        c.print("requested %s: %s total, fits with %s to spare" % (req["strategy"], _b(req["total_bytes"]),
                                                                  _b(req["headroom_bytes"])), highlight=False)
    else:
        c.print("requested %s: needs %s, [red]over the heap by %s[/red]; trying strategies:"
                % (req["strategy"], _b(req["total_bytes"]), _b(-req["headroom_bytes"])), highlight=False)
        for t in r["trace"][1:]:
            tail = (": %s total %s" % (t.get("strategy", ""), _b(t["total_bytes"]))) if "total_bytes" in t else ""
            c.print("  %-34s %s%s" % (t["try"], t["result"], tail), highlight=False, markup=False)
    if not cands:
        for n in r["notes"]:
            c.print("note: " + n, highlight=False, markup=False)
        return
    t = Table(title="feasible configurations, best first")
    for col in ("#", "strategy", "tokens kept", "KV bytes", "total", "headroom", "quality", "weights"):
        t.add_column(col, justify="right" if col in ("#", "tokens kept", "KV bytes", "total", "headroom") else "left")
    for i, cd in enumerate(cands[:top], 1):
        q = cd.get("quality")
        qs = ", ".join("%s %.4g" % kv for kv in sorted(q["metrics"].items())) if q else "-"
        if q and q.get("tokens") and q["tokens"] != cd["tokens_kept"]:
            qs += " (at %d)" % q["tokens"]
        if q and (q.get("estimated") or q.get("uncertain")):
            qs += " ~"
        t.add_row(str(i), cd["strategy"], "{:,}".format(cd["tokens_kept"]), "{:,}".format(cd["kv_bytes"]),
                  "{:,}".format(cd["total_bytes"]), "{:,}".format(cd["headroom_bytes"]), qs, cd["weights"]["place"])
    c.print(t)
    if len(cands) > top:
        c.print("(%d more with --top %d or --json)" % (len(cands) - top, len(cands)))
    c.print("chosen #%d: %s" % (r["chosen"], chosen["strategy"]), highlight=False)
    for p in chosen["placement"]:
        c.print("  %-18s %14s  %s (%s)" % (p["array"], "{:,}".format(p["bytes"]), p["where"], p["why"]),
                highlight=False, markup=False)
    t = chosen.get("tier") or {}
    if t.get("cost"):
        k = t["cost"]
        c.print("  tiered, %s path: the %d cold tokens cost %s instructions per token (%s per cold token, flash "
                "reads included), moving blocks to flash %s per token; %s%s"
                % (k["path"], t["cold_tokens"], "{:,}".format(k["cold_instructions_per_token"]),
                   "{:,}".format(k["instructions_per_cold_token"]), "{:,}".format(k["demote_instructions_per_token"]),
                   k["measured"], "; scaled " + k["scaled"] if k.get("scaled") else ""), highlight=False, markup=False)
    if r.get("out"):
        c.print("device config written to %s" % r["out"], highlight=False)
    for n in r["notes"]:
        c.print("note: " + n, highlight=False, markup=False)
