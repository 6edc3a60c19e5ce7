"""The quality table a plan ranks by: rows of `kvedge eval --json` (or a hand-written list of strategies with mean
KL, perplexity or top-1 agreement), matched to the planner's candidates. Bad tables are refused, one line naming
the file: not JSON, no rows, a row that is not an object, without a strategy name, with a name another row has,
with a key no table writes, or with a figure out of its range."""
import json
import os
import re

from kvedge import budget

from .. import validate
from ..paths import HOST_PKG
from ..errors import UserError

DTYPES = budget.CACHE_DTYPES
# K and V in formats of their own (CacheConfig's k_dtype, v_dtype) that `kvedge eval` measures and the planner offers:
# (k_dtype, v_dtype, keys per channel: KIVI's residual of one group). Keys are the sensitive half (docs/quality.md).
SPLITS = (("i8", "i8", True), ("i8", "i4", True), ("i8", "i4", False), ("i4", "i8", True), ("f16", "i4", False),
          ("f16", "i8", False))


def split_fields(k_dtype, v_dtype, per_channel, group=budget.QK):
    """A split format's CacheConfig fields."""
    return {"k_dtype": k_dtype, "v_dtype": v_dtype, "group": group, "residual": group if per_channel else 0}


def split_name(k_dtype, v_dtype, per_channel, group=budget.QK):
    """Its strategy name, as `kvedge eval` rows and plans print it."""
    keys = "k %s" % k_dtype
    if per_channel:
        keys += " %s (g%d, R%d)" % ("KIVI" if k_dtype in budget.LOWBIT else "per channel", group, group)
    return "%s + v %s" % (keys, v_dtype)


def is_split(dtype):
    """Whether a storage name is a split config's "K/V" (CacheConfig.dtype)."""
    return isinstance(dtype, str) and dtype.count("/") == 1 and all(d in DTYPES for d in dtype.split("/"))
TIER_COLDS = (budget.I4, budget.I8)  # what cold blocks hold: i4 (KIVI, least flash) or i8 (cheaper to attend)
# the quality table measured on stories260K (the written corpus): `kvedge eval --json`
DEFAULT_QUALITY = os.path.join(HOST_PKG, "data", "quality-stories260K.json")
# the model that table was measured on: without --quality, a plan for it ranks by the table
DEFAULT_QUALITY_MODEL = "stories260K"

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
        kind = "tiered"  # kvedge.tier.cache: its config is the hot ring's
    elif cfg is not None:
        kind = ("sinks" if cfg.get("sinks") else "window" if cfg.get("window") else
                "prefix" if cfg.get("prefix") else "keep")
        if cfg.get("dtype") in budget.LOWBIT and cfg.get("residual") == 0:
            kind = "naive"  # per-token i4/i2 keys: not a layout the planner offers
    else:
        kind = ("sinks" if "sink" in n else "window" if "window" in n else "prefix" if "prefix" in n
                else "naive" if "pertoken" in n else "keep")
    dtype = (cfg or {}).get("dtype") or row.get("dtype")
    if cfg is not None and cfg.get("k_dtype") in DTYPES and cfg.get("v_dtype") in DTYPES and not is_split(dtype):
        dtype = None  # a split row without its "K/V" name: named below from its halves
        if cfg["k_dtype"] != cfg["v_dtype"] or cfg.get("residual"):
            dtype = "%s/%s" % (cfg["k_dtype"], cfg["v_dtype"])
    if dtype not in DTYPES and not is_split(dtype):
        m = re.search(r"(f32|f16|i8|i4|i2|int8|int4|int2|fp16|fp32)", _norm(label))
        dtype = {"int8": "i8", "int4": "i4", "int2": "i2", "fp16": "f16", "fp32": "f32"}.get(m.group(1), m.group(1)) \
            if m else None
    if dtype is None and kind == "keep":
        dtype = budget.F32
    return kind, dtype


# every key a row may carry: its name, what it measured (kind, dtype, the cache config, a tier), its figures, and
# what `kvedge eval --json` writes beside them (kvedge_host.ref.quality: memory, evictions, the forward pass, a note)
ROW_KEYS = frozenset(("strategy", "name", "label", "kind", "dtype", "config", "tier", "forward", "peak_bytes",
                      "arena_bytes", "flash_bytes", "evictions", "segments", "missing", "note", "notes")
                     + tuple(n for _, names in _METRICS for n in names))


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
    seen = set()
    for row in rows:
        if not isinstance(row, dict):
            raise UserError("%s: a quality row is not an object: %r" % (path, row))
        label = row.get("strategy") or row.get("name") or row.get("label")
        if not label:
            raise UserError("%s: a quality row has no strategy name: %s" % (path, _short(row)))
        if not isinstance(label, str):
            raise UserError("%s: a quality row's strategy name is %s, expected text" % (path, validate.show(label)))
        if label in seen:
            raise UserError("%s: two quality rows are named %s: which one a plan ranks by would be a guess"
                            % (path, validate.show(label)))
        seen.add(label)
        unknown = sorted(str(k) for k in row if k not in ROW_KEYS)
        if unknown:
            raise UserError("%s: row %s: unknown key %s (a row names its strategy, carries kl, ppl or top1, and "
                            "what kvedge eval --json writes beside them)" % (path, validate.show(label),
                                                                             validate.show(unknown[0])))
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
        elif kind == "keep" and isinstance(cfg.get("max_tokens"), int) and cfg["max_tokens"] > 0:
            q["length"] = cfg["max_tokens"]  # the tokens it measured over (the full cache keeps them all)
        if (dtype in budget.LOWBIT or is_split(dtype)) and isinstance(cfg.get("residual"), int):
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
    eviction strategy (H2O, sinks + window, window) takes what its rows at other sizes tell of its own
    (_by_size: the row at its size, else interpolated between two sizes, else a bound), and a row
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
        row = _by_size(rows, cand["tokens_kept"], table)
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


def _by_size(rows, tokens, table=None):
    """What the rows measured at other sizes tell of a cache keeping `tokens`: the row measured at that size; else,
    between two measured sizes, each figure interpolated linearly in the tokens kept ("interpolated": the two
    sizes, estimated); above the largest size, interpolated towards the full cache of the same dtype at the length
    the table was measured over (nothing is evicted from there on), or, without that length, the largest row's
    figure as a bound from above ("bound": "upper", uncertain); below the smallest size, the smallest row's figure
    as a bound from below ("bound": "lower", uncertain and "fewer": it ranks after every candidate whose row bounds
    its cost). A figure measured at one size is never shown as another size's."""
    sized = sorted((r for r in rows if r.get("tokens")), key=lambda r: r["tokens"])
    if not sized:
        return rows[0] if rows else None
    same = [r for r in sized if r["tokens"] == tokens]
    if same:
        return same[0]
    below = [r for r in sized if r["tokens"] < tokens]
    above = [r for r in sized if r["tokens"] > tokens]
    if below and above:
        return _between(below[-1], above[0], tokens)
    if not below:
        return dict(above[0], uncertain=True, fewer=True, bound="lower")
    a = below[-1]
    full = _full_cache(table, a["dtype"]) if table is not None else None
    if full is not None and full.get("length") and full["length"] > a["tokens"]:
        if tokens >= full["length"]:
            return dict(full, label="%s: keeps the %d tokens measured, as the full %s cache" % (
                a["label"], full["length"], a["dtype"]), kind=a["kind"], tokens=tokens, estimated=True)
        return _between(a, dict(full, tokens=full["length"]), tokens)
    return dict(a, uncertain=True, bound="upper")


def _between(a, b, tokens):
    """Row a (measured at fewer tokens) and b (at more), each common figure interpolated at `tokens`."""
    f = (tokens - a["tokens"]) / float(b["tokens"] - a["tokens"])
    m = {k: a["metrics"][k] + f * (b["metrics"][k] - a["metrics"][k]) for k in a["metrics"] if k in b["metrics"]}
    q = {"label": "interpolated between %s (at %d) and %s (at %d)" % (a["label"], a["tokens"], b["label"],
                                                                       b["tokens"]),
         "kind": a["kind"], "dtype": a["dtype"], "metrics": m, "tokens": tokens, "estimated": True,
         "interpolated": [a["tokens"], b["tokens"]]}
    for k in ("residual",):
        if k in a:
            q[k] = a[k]
    return q


def _full_cache(table, dtype):
    for row in table:
        if row["kind"] == "keep" and row["dtype"] == dtype:
            return row
    return None


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
        for k in ("tokens", "interpolated", "bound"):
            if k in row:
                q[k] = row[k]
        if row.get("fewer"):
            q["fewer"] = q["uncertain"] = True
        if row.get("uncertain"):
            q["uncertain"] = True
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



# stories260K's shape (layers, heads, KV heads, head_dim, vocabulary, dim, hidden_dim): the model the shipped table
# measured (its file, converted or not, a config.json of it, or a preset of the same shape)
DEFAULT_QUALITY_SHAPE = (5, 8, 4, 8, 512, 64, 172)


def shape_of(spec):
    """A model's shape as quality tables record it (DEFAULT_QUALITY_SHAPE's order)."""
    return (spec.layers, spec.heads, spec.kv_heads, spec.head_dim, spec.vocab, spec.dim, spec.hidden_dim)


def default_table_for(spec):
    """Whether the shipped quality table was measured on this model (stories260K's shape)."""
    return shape_of(spec) == DEFAULT_QUALITY_SHAPE


def table_model(path):
    """(model name, shape tuple or None) a quality table says it was measured on: `kvedge eval --json` writes
    both ("model", "shape"); the shipped table is stories260K's; a hand-made list of rows says neither."""
    if os.path.abspath(path) == os.path.abspath(DEFAULT_QUALITY):
        return DEFAULT_QUALITY_MODEL, DEFAULT_QUALITY_SHAPE
    data = validate.load_json(path)
    if not isinstance(data, dict):
        return None, None
    name = data.get("model") if isinstance(data.get("model"), str) else None
    shape = data.get("shape")
    ok = isinstance(shape, list) and len(shape) == len(DEFAULT_QUALITY_SHAPE) and \
        all(isinstance(v, int) and not isinstance(v, bool) for v in shape)
    return name, tuple(shape) if ok else None


def table_warning(path, spec):
    """None when the quality table at `path` was measured on this model's shape; else the one-line warning a plan
    prints (its ranking is then another model's losses, or a table's that does not say whose)."""
    name, shape = table_model(path)
    if shape == shape_of(spec):
        return None
    if shape is None:
        return ("warning: the quality table %s does not say which model's shape it was measured on%s (kvedge eval "
                "--json records it): its ranking may be another model's" % (path, " (its model: %s)" % name
                                                                           if name else ""))
    return ("warning: the quality table %s was measured on %s (layers, heads, KV heads, head_dim, vocabulary, dim, "
            "hidden: %s), not on this model (%s): its ranking is that model's losses" % (
                path, name or "another model", ", ".join(map(str, shape)), ", ".join(map(str, shape_of(spec)))))
