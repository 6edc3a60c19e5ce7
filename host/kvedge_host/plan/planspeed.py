"""Speed in the plan: which forward pass a configuration runs on its board (kvedge.model.passes.choose, the device's
own rule), with which kernel kind, and what a token costs, bounded two ways:
- compute: the mean over positions 0..context-1 of the instructions the emulated Cortex-M3 counted for that pass,
  kernel kind and cache layout (forward_cost.py, written by tools/bench_plan_speed.py --save; a tiered cache adds
  its cold tokens from tiered_cost.py), times the board's own core against the M3 (cores.py: the same run on the
  chip's stand-in), at the profile's clock, one instruction a cycle;
- memory: the bytes a token reads from each memory (the weights once, the cache's attended rows, a tier's cold
  blocks; where the plan's placement puts them) over that memory's read rate (the profile's read_bytes_per_s, with
  its source; internal SRAM one 32-bit word a cycle).
tokens/s is the slower bound's, and the plan says which bound holds. Every figure says what it is: an estimate
from instruction counts of a stand-in and peak interface rates, which order configurations and boards; where a
figure was not measured (another kernel kind, cache dtype or layout, another model's shape) the nearest measured
row stands in, rounded to two significant digits and marked "estimated" with what it is from."""
from kvedge.model import passes

from . import account, cores

# the cache layout a plan kind runs (what the benchmark measured: slots 0..n-1, a ring with sinks, H2O)
LAYOUT = {"keep": "keep", "prefix": "keep", "shorter": "keep", "window": "ring", "sinks": "ring", "h2o": "h2o",
          "tiered": "ring"}


def measured():
    """The forward passes' measured table, or None when none was saved."""
    try:
        from .forward_cost import MEASURED
    except ImportError:
        return None
    return MEASURED


def clock(prof):
    """(clock_hz, its source) of a board profile; (None, None) without one."""
    hz = (prof or {}).get("clock_hz")
    src = next((s for s in (prof or {}).get("sources", []) if s.get("figure") == "clock_hz"), {})
    return hz, src.get("source")


def kernels_for(prof, kind=None):
    """The kernel kind the plan's figure is for: the measured runtime's, else the fastest the profile's runtime
    loads (asm on an Arm chip's MicroPython, viper elsewhere, plain on CircuitPython)."""
    if kind:
        return kind
    if (prof or {}).get("runtime") == "circuitpython":
        return "plain"
    if prof is None or str(prof.get("mpy_march", "")).startswith("armv"):
        return "asm"
    return "viper"


def forward_for(c, wdtype, kernels, prof):
    """The pass the board runs for candidate c: kvedge.model.passes.choose (ulab where the runtime is CircuitPython,
    whose builds carry it)."""
    cache, tier = c["cache"], c.get("tier") or {}
    return passes.choose(wdtype, cache["dtype"], kernels, c["kind"], tier.get("cold_dtype"), cache.get("prefix", 0),
                         stream=c["weights"]["place"] != "heap", policy=c["kind"] == "h2o",
                         ulab=(prof or {}).get("runtime") == "circuitpython")


def _sum_min(n, slots):
    """sum over p in 0..n-1 of min(p + 1, slots)."""
    if n <= slots:
        return n * (n + 1) // 2
    return slots * (slots + 1) // 2 + (n - slots) * slots


def _macs(p):
    """Multiply-accumulates of a token's matrices (kvedge.budget.llama_params' counts): the layers' and the
    classifier's (the embedding's when it is shared)."""
    return p["matrices"] + (p["classifier"] or p["embedding"])


def _sig2(x):
    return int(float("%.2g" % x))


def _row(table, forward, kernels, dtype, layout):
    """(row, what stood in for the exact one or None): the exact measured row, else the nearest: the same kernels
    and dtype in another layout; else the base (the matrices: the kernel kind decides it) from these kernels'
    row of another dtype and the cost per cached token (the attention: the dtype decides it) from the asm row of
    this dtype; else the nearest row at all."""
    rows = table["rows"]

    def find(f, k, d, lay):
        return next((r for r in rows if (r["forward"], r["kernels"], r["dtype"], r["kind"]) == (f, k, d, lay)), None)
    r = find(forward, kernels, dtype, layout)
    if r is not None:
        return r, None
    r = find(forward, kernels, dtype, "keep")
    if r is not None:
        return r, r["name"]
    near = "i4" if dtype == "i2" else dtype
    if "/" in dtype:  # K and V apart (the float pass only): the costlier half's rows stand in
        halves = dtype.split("/")
        near = next((d for d in ("i4", "i8", "f16") if d in halves or (d == "i4" and "i2" in halves)), "f32")
    same_kernels = find(forward, kernels, "f32", "keep") or next(
        (x for x in rows if (x["forward"], x["kernels"], x["kind"]) == (forward, kernels, "keep")), None)
    same_dtype = find(forward, "asm", near, layout) or find(forward, "asm", near, "keep")
    if same_kernels is not None and same_dtype is not None and same_kernels is not same_dtype:
        return ({"name": same_kernels["name"], "base": same_kernels["base"], "per_token": same_dtype["per_token"],
                 "kind": same_dtype["kind"], "evict": same_dtype.get("evict", 0)},
                "base from %s, per cached token from %s" % (same_kernels["name"], same_dtype["name"]))
    for t in ((forward, "asm", near, layout), (forward, "asm", near, "keep"), (forward, kernels, "f32", "keep"),
              (forward, "asm", "f32", "keep")):
        r = find(*t)
        if r is not None:
            return r, r["name"]
    return None, None


def cost(c, spec, wdtype, kernels, forward, table=None, tier_cost=None):
    """{"instructions_per_token", "estimated", "from", "measured"} for candidate c (its tokens, layout, context)
    on `forward` with `kernels`, or None when nothing was measured. The mean over positions 0..context-1 of
    base + per cached token x the tokens the step attends (+ H2O's eviction, + a tier's cold tokens)."""
    table = table if table is not None else measured()
    if not table:
        return None
    lay = LAYOUT[c["kind"]]
    dtype = c["cache"]["dtype"]
    fw = "float" if forward == passes.ULAB else forward  # ulab: not measured on the M3; the float pass bounds it
    row, stand = _row(table, fw, "plain" if forward == passes.ULAB else kernels, dtype, lay)
    if row is None:
        return None
    why = []
    if stand:
        why.append("%s pass, %s kernels, %s %s not measured: from %s" % (forward, kernels, dtype, lay, stand))
    if forward == passes.ULAB:
        why.append("the ulab pass is not measured on the M3: the float pass with plain kernels bounds it")
    h2o_extra = None
    if lay == "h2o" and row["kind"] != "h2o":  # H2O's own cost, measured on the int pass, added to this row
        h = next((r for r in table["rows"] if r["kind"] == "h2o"), None)
        k = next((r for r in table["rows"] if r["kind"] == "keep" and (r["forward"], r["kernels"], r["dtype"]) ==
                  ((h or {}).get("forward"), (h or {}).get("kernels"), (h or {}).get("dtype"))), None)
        if h and k:
            h2o_extra = (h["base"] - k["base"], h["per_token"] - k["per_token"], h.get("evict", 0))
            why.append("H2O's scoring from %s" % h["name"])
    if c["weights"]["place"] == "flash":
        why.append("weights read from flash a chunk at a time: not measured (the figure is for weights in RAM)")
    if wdtype != "i8":
        why.append("measured with int8 weights, these are %s" % wdtype)
    sh = table.get("shape") or {}
    fb = fp = 1.0
    if sh and (_macs(sh["params"]), sh["layers"] * sh["heads"] * sh["head_dim"]) != (
            _macs(account.params(spec)), spec.layers * spec.heads * spec.head_dim):
        fb = _macs(account.params(spec)) / float(_macs(sh["params"]))
        fp = spec.layers * spec.heads * spec.head_dim / float(sh["layers"] * sh["heads"] * sh["head_dim"])
        why.append("scaled from %s (base by multiply-accumulates per token %.3g, per cached token by layers x "
                   "heads x head_dim %.3g)" % (table.get("model"), fb, fp))
    C = max(1, c["context"])
    base, per, evict = row["base"] * fb, row["per_token"] * fp, row.get("evict", 0) * fp
    if h2o_extra:
        base += h2o_extra[0] * fb
        per += h2o_extra[1] * fp
        evict += h2o_extra[2] * fp
    tier = c.get("tier") or {}
    slots = c["cache"]["window"] + c["cache"]["sinks"] if tier else c["tokens_kept"]
    if lay == "h2o":
        slots = c["policy"]["budget"]
    total = base * C + per * _sum_min(C, slots)
    if lay == "h2o" and C > slots:
        total += evict * (C - slots)
    out = {"measured": "%s on %s, `%s`" % (table.get("unit", "instructions"), table.get("machine"),
                                          table.get("command"))}
    if tier:
        k = tier_cost
        if not k:
            return None
        cold = C - slots
        if cold > 0:
            total += k["instructions_per_cold_token"] * cold * (cold + 1) / 2.0 + \
                k["demote_instructions_per_token"] * cold
        if k.get("scaled") or kernels != k.get("kernels", kernels):
            why.append("cold tokens: %s" % (k.get("scaled") or "measured with %s kernels" % k.get("kernels")))
        out["measured"] += "; cold tokens: " + k["measured"]
    n = total / C
    out["instructions_per_token"] = _sig2(n) if why else int(round(n))
    out["estimated"] = bool(why)
    if why:
        out["from"] = "; ".join(why)
    return out


def read_rates(prof):
    """{memory: (bytes/s, what it is)} of a profile: flash and PSRAM from its read_bytes_per_s (cited in its
    sources), internal SRAM one 32-bit word a cycle at its clock."""
    hz, _ = clock(prof)
    out = {}
    if hz:
        out["sram"] = (4 * hz, "one 32-bit word a cycle at %g MHz" % (hz / 1e6))
    for mem, n in sorted(((prof or {}).get("read_bytes_per_s") or {}).items()):
        src = next((s for s in (prof or {}).get("sources", []) if s.get("figure") == "read_bytes_per_s." + mem), {})
        out[mem] = (n, src.get("source") or "the profile's read_bytes_per_s")
    return out


def _memory_of(where):
    return "flash" if where.startswith("flash") else "psram" if where.startswith("slow") else "sram"


def traffic(c):
    """{memory: bytes read a token, mean over positions 0..context-1}: the weights once, the attended rows of the
    cache (or of a tier's hot ring) and a tier's cold blocks, from where the plan's placement puts them."""
    C = max(1, c["context"])
    tier = c.get("tier") or {}
    slots = c["cache"]["window"] + c["cache"]["sinks"] if tier else c["tokens_kept"]
    if c["kind"] == "h2o":
        slots = c["policy"]["budget"]
    slots = max(1, slots)
    out = {}
    for p in c.get("placement") or ():
        name = p["array"]
        if name == "weights":
            n = p["bytes"]
        elif name in ("kv cache", "kv hot ring"):
            n = p["bytes"] * _sum_min(C, slots) / float(C * slots)
        elif name == "cold KV store" and tier.get("cold_tokens"):
            cold = [min(q + 1, slots + tier["cold_tokens"]) - slots for q in range(C)]
            n = p["bytes"] / float(tier["cold_tokens"]) * sum(x for x in cold if x > 0) / float(C)
        else:
            continue  # activations, tables, buffers: small and in internal SRAM
        m = _memory_of(p["where"])
        out[m] = out.get(m, 0) + int(round(n))
    return out


def annotate(c, spec, wdtype, kernels, prof, table=None):
    """Add "forward", "kernels", "instructions_per_token" (this board's core: None when not measured),
    "tokens_per_s" (the slower of compute and memory; None without a clock) and "speed" (both bounds, which one
    holds, what each figure is and where it came from) to candidate c."""
    fw = c.get("forward") or forward_for(c, wdtype, kernels, prof)  # the planner's, when it sized the plan for one
    k = cost(c, spec, wdtype, kernels, fw, table, (c.get("tier") or {}).get("cost"))
    hz, src = clock(prof)
    core = cores.for_profile(prof, kernels)
    c["forward"] = fw
    c["kernels"] = kernels
    n = k["instructions_per_token"] * core["factor"] if k else None
    estimated = bool(k and (k["estimated"] or core["factor"] != 1.0))
    c["instructions_per_token"] = None if n is None else _sig2(n) if estimated else int(round(n))
    compute_s = n / float(hz) if (n and hz) else None
    rates = read_rates(prof)
    reads = traffic(c)
    memory_s = sum(b / float(rates[m][0]) for m, b in reads.items() if m in rates) if hz else None
    unknown = sorted(m for m in reads if m not in rates)
    slower = max(compute_s or 0.0, memory_s or 0.0)
    t = 1.0 / slower if (compute_s and slower) else None
    c["tokens_per_s"] = None if t is None else float("%.2g" % t) if estimated else round(t, 3)
    bound = None if t is None else ("memory" if (memory_s or 0.0) > compute_s else "compute")
    base = dict(k or {"estimated": True, "from": "not measured"})
    if "instructions_per_token" in base:  # the Cortex-M3's count, before the board's core
        base["m3_instructions_per_token"] = base.pop("instructions_per_token")
    if k and core["factor"] != 1.0:
        base["from"] = "; ".join([x for x in (base.get("from"),) if x] + [
            "the Cortex-M3's count x %.3g, %s (%s) against the M3 on one run" % (
                core["factor"], core["core"].split(" (")[0], core["stands_for"])] + (
            [core["note"]] if core.get("note") else []))
    c["speed"] = dict(base, clock_hz=hz, clock_source=src,
                      bound=bound, core=core,
                      compute_tokens_per_s=float("%.3g" % (1.0 / compute_s)) if compute_s else None,
                      memory_tokens_per_s=float("%.3g" % (1.0 / memory_s)) if memory_s else None,
                      reads_per_token=reads, read_rates={m: {"bytes_per_s": r[0], "source": r[1]}
                                                         for m, r in rates.items() if m in reads},
                      proxy="instructions of the board's stand-in core (%s) at one a cycle; memory at peak "
                            "read rates: an estimate that orders configurations and boards" % core["core"])
    if k:
        c["speed"]["estimated"] = estimated
    if unknown:
        c["speed"]["memory_unknown"] = "no read rate for %s in the profile" % ", ".join(unknown)
    return c
