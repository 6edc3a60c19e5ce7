"""Speed in the plan: which forward pass a configuration runs on its board (kvedge.model.passes.choose, the device's
own rule), with which kernel kind, and what a token costs: the mean over positions 0..context-1 of the
instructions the emulated Cortex-M3 counted for that pass, kernel kind and cache layout (forward_cost.py, written
by tools/bench_plan_speed.py --save; a tiered cache adds its cold tokens from tiered_cost.py), and tokens/s at the
profile's clock.

The figures are instruction counts of a Cortex-M3; a board's own core differs (an RP2040's Cortex-M0+ has no
32-bit multiply-accumulate in one instruction, an ESP32's Xtensa LX6 is not an Arm at all): tokens/s is the
clock over the M3's count, a proxy that orders configurations and boards rather than a promise. Where a figure was
not measured (another kernel kind, cache dtype or layout, weights read from flash, another model's shape) the
nearest measured row stands in, rounded to two significant digits and marked "estimated" with what it is from."""
from kvedge.model import passes

from . import account

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


def annotate(c, spec, wdtype, kernels, prof, table=None):
    """Add "forward", "kernels", "instructions_per_token" (None when not measured), "tokens_per_s" (at the
    profile's clock; None without one) and "speed" (what the figure is, where it came from) to candidate c."""
    fw = c.get("forward") or forward_for(c, wdtype, kernels, prof)  # the planner's, when it sized the plan for one
    k = cost(c, spec, wdtype, kernels, fw, table, (c.get("tier") or {}).get("cost"))
    hz, src = clock(prof)
    c["forward"] = fw
    c["kernels"] = kernels
    c["instructions_per_token"] = k["instructions_per_token"] if k else None
    t = hz / float(k["instructions_per_token"]) if (k and hz) else None
    c["tokens_per_s"] = None if t is None else float("%.2g" % t) if k["estimated"] else round(t, 3)
    c["speed"] = dict(k or {"estimated": True, "from": "not measured"}, clock_hz=hz, clock_source=src,
                      proxy="instructions of the emulated Cortex-M3 at one a cycle" + (
                          "; the ESP32's Xtensa is not an Arm: the M3's count is a proxy"
                          if str((prof or {}).get("chip", "")).startswith("esp32") else ""))
    return c
