"""The planner's ranking: candidates ordered by measured quality cost (a `kvedge eval --json` table; for
stories260K the shipped one by default), else by a documented heuristic (KIND_GROUP, DTYPE_RANK), and by speed as
the objective says (balanced, quality, speed)."""
import math

from kvedge import budget

from ..errors import UserError
from .planquality import (DEFAULT_QUALITY, DEFAULT_QUALITY_MODEL, load_quality, match_quality, quality_cost,
    default_table_for, table_warning)

# heuristic quality order when no measured table is given (lower = closer to the full f32 cache)
KIND_GROUP = {"keep": 0, "prefix": 0, "h2o": 1, "sinks": 2, "tiered": 3, "window": 4, "shorter": 5}
DTYPE_RANK = {budget.F32: 0, budget.F16: 1, budget.I8: 2, budget.I4: 3, budget.I2: 4}


def dtype_rank(dtype):
    """DTYPE_RANK of a storage name; K and V apart ("K/V"): between its halves' (keys weigh as much as values)."""
    if dtype in DTYPE_RANK:
        return DTYPE_RANK[dtype]
    k, v = dtype.split("/")
    return (DTYPE_RANK[k] + DTYPE_RANK[v]) / 2.0

KINDS = tuple(KIND_GROUP)  # what --kind restricts the search to
OBJECTIVES = ("balanced", "quality", "speed")
DEFAULT_OBJECTIVE = "balanced"
SLOWER = 2.0  # balanced: no plan more than this many times slower than the fastest keeping as many tokens


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
        dt = dtype_rank(c["cache"]["dtype"])
        if c["cache"]["dtype"] == budget.I2 and c["kind"] != "shorter":
            grp = KIND_GROUP["window"] + 0.5
        place = 0 if c["weights"]["place"] == "heap" else 1  # equal tokens: weights in RAM are faster
        if grp == 0:
            h = (grp, dt, 0 if c["kind"] == "prefix" else 1, place)
        else:
            h = (grp, -c["tokens_kept"], dt, place)
        return measured + h + (c["total_bytes"],)
    return sorted(cands, key=key)


def base_ppl(table):
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
