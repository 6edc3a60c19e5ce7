"""A board that runs on its own: the cache of a `kvedge plan --out` document on its filesystem, options from
settings.toml (what code.py on a CircuitPython board runs). Apart from kvedge.model.run, so that a generation
started from the host does not compile this into a board's heap.

The rule "plan document -> the runner's arguments" is written here once (doc_args): the board's own reading
(plan_args) and the host's (kvedge_host.boards.planrun.runner_args, kvedge demo) both take it from here."""
from kvedge import kernels
from kvedge.sizes import INT_CODES
from kvedge.model.run import RUN_OVERHEAD, main

PLAN = "kvedge_plan.json"
_SHAPE = ("layers", "heads", "kv_heads", "head_dim")
_STREAM = {"heap": False, "flash": True, "rom": "rom"}
# The pass of a plan that names none: kvedge plan counted the float pass's buffers (kvedge.model.sizes.float_scratch_bytes)
# until plans named theirs; run with "auto", such a plan took the integer pass's larger buffers and ran out of heap
# on the emulated rp2040 (MemoryError in pass_int's set-up). A plan's "forward" says otherwise.
UNNAMED = "float"
_WDTYPES = ("f32", "i8")  # what a checkpoint file holds (kvedge.model.header.read_config)


def doc_args(doc):
    """What a run takes from a plan document as it stands (not checked here: plan_args checks it first): kv (the
    cache fields; the checkpoint gives the shape), h2o (H2O's token budget, 0 without H2O), stream (where the
    weights live: heap False, flash True, rom "rom"), tier (None, or a tiered plan's block, cold_dtype,
    cold_blocks, at_cap, cold_align), forward (the plan's pass; UNNAMED, the float pass it was counted for, when
    it names none), kv_bytes (the arena main() allocates before it imports anything) and, when the plan reads
    prompts in chunks, prefill (else main()'s default, one token at a time)."""
    from kvedge.model.plandoc import encodes, tier_of
    kv = {}
    for k in doc["cache"]:
        if k not in _SHAPE:
            kv[k] = doc["cache"][k]
    pol = doc.get("policy") or {}
    out = {"kv": kv, "h2o": pol.get("budget", 0) if pol.get("kind") == "h2o" else 0,
           "stream": _STREAM[doc["weights"]["place"]], "tier": tier_of(doc), "forward": doc.get("forward") or UNNAMED,
           "kv_bytes": _arena_bytes(doc)}
    if (doc.get("prefill") or 1) != 1:
        out["prefill"] = doc["prefill"]
    if not encodes(doc):
        out["encode"] = False  # the plan left the board's encoder out: prompts come as ids (prompt_args)
    if doc.get("pool") is not None:
        out["pool"] = doc["pool"]  # its conversations run by kvedge.model.runpool.main (entry())
    return out


def entry(args):
    """The runner of a plan's arguments: kvedge.model.runpool.main for a pool plan, else kvedge.model.run.main."""
    if args.get("pool") is not None:
        from kvedge.model.runpool import main as pooled
        return pooled
    return main


def prompt_args(doc, prompt, tokenizer, vocab_size):
    """main()'s prompt arguments for this plan: {"prompt": text} when the board encodes it; for a plan without
    the board's encoder (plandoc's "without"), the text encoded here, by the same encoder the board would run
    (on the host: CPython runs this package), as {"prompt": "", "ids": [...]}; no text: {"prompt": ""}."""
    from kvedge.model.plandoc import encodes
    if not len(prompt) or encodes(doc):
        return {"prompt": prompt}
    from kvedge.model.tokenizer import Tokenizer
    return {"prompt": "", "ids": Tokenizer.load(tokenizer, vocab_size).encode(prompt)}


def _arena_bytes(doc):
    """The arena main() allocates first, while the heap is one free block: the plan's kv_bytes when it is the
    cache's own (a tier's ring) and the plan runs one sequence (a batch's caches come from the pool); else 0 (the
    cache allocates its arena itself, after the imports)."""
    n = doc.get("kv_bytes")
    if doc.get("batch", 1) != 1 or not n:
        return 0
    from kvedge.model.plandoc import cache_config
    return n if cache_config(doc["cache"]).nbytes() == n else 0


def plan_args(doc, model=None, tokenizer=None, heap=None):
    """main()'s cache and memory arguments from a `kvedge plan --out` document, checked whole first
    (kvedge.model.plandoc.check: PlanError naming the field, before anything is allocated; heap: the bytes the
    run has, default this runtime's): doc_args' (cache fields, H2O's token budget, where the weights live, the
    tier, the forward pass, prefill), the heap the plan was made for (budget), the plan's kind, the attention
    path of the plan's kernels (int_attention) and the workspace: with the model and tokenizer files, what the
    plan's total leaves beyond the run's own account (weights as held, cache, buffers, Python objects,
    tokenizer, loop), i.e. the runtime's share; negative when the plan cannot hold this run (plan it with that
    much more workspace). Without them, the plan's workspace_bytes. With the model, a plan made for another
    shape or another weights dtype is a PlanError too."""
    from kvedge.model.plandoc import check
    from kvedge.model.passes import INT_COLD
    check(doc, heap)
    out = doc_args(doc)
    kv, h2o, tier, stream, fwd = out["kv"], out["h2o"], out["tier"], out["stream"], out["forward"]
    ws = doc["workspace_bytes"]
    # the attention path of the plan's kernels (asm/viper: the integer one), whatever kernels run it here: a
    # host run of a board's plan (plain kernels) computes what the board does, bit for bit
    # (the board's "auto": an i8/i4/i2 cache, a tier's cold store i8 or i4: kvedge.tier.cache's int_ok)
    rk = (doc.get("runtime") or {}).get("kernels")
    iatt = "auto" if rk is None else (rk in kernels.FAST and doc["cache"].get("dtype", "f32") in INT_CODES and
                                      (tier or {}).get("cold_dtype", "i8") in INT_COLD)
    if model is not None:
        from kvedge.errors import PlanError
        from kvedge.model import llama
        from kvedge.model.header import read_config, weights_place
        from kvedge.model.tokenizer import Tokenizer
        cfg, wdtype = read_config(model)
        for k, v in zip(_SHAPE, (cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim)):
            if doc["cache"][k] != v:
                raise PlanError("cache.%s: the plan is for %d, the model file has %d" % (k, doc["cache"][k], v))
        want = doc["weights"]["dtype"]
        if want in _WDTYPES and want != wdtype:
            raise PlanError("weights.dtype: the plan is for %s weights, the model file holds %s" % (want, wdtype))
        rt = doc.get("runtime") or {}
        if tokenizer is not None and rt.get("source") == "measured":
            # a plan made from the board's measured footprint counts the tokenizer the run keeps (kvedge plan
            # --tokenizer): one made without it leaves that heap out, and the run fails in the middle
            from kvedge.model.pieces import FileTokenizer
            from kvedge.model.plandoc import encodes
            need = FileTokenizer.nbytes(tokenizer, cfg.vocab_size, rt.get("prompt", True) is not False and
                                        encodes(doc))
            if (rt.get("tokenizer_bytes") or 0) < need:
                raise PlanError("runtime.tokenizer_bytes: the plan counted %d bytes for the tokenizer, this run's "
                                "keeps %d (and its open file): plan again with --tokenizer" % (
                                    rt.get("tokenizer_bytes") or 0, need))
        ccfg = llama.cache_config(cfg, kv)
        own = Tokenizer.nbytes(tokenizer, cfg.vocab_size) + RUN_OVERHEAD
        if out.get("pool") is not None:  # the pool's bookkeeping and objects beside its arena
            from kvedge.model.runpool import run_bytes
            own += run_bytes(out["pool"], llama.WORD)
        if (doc.get("prefill") or 1) != 1:  # prompts in chunks: main() counts their buffers in its workspace
            from kvedge.model.prefill import account
            own += account(cfg, doc["prefill"], fwd)
        try:  # the runner's own check (the pass and the tier against this file and cache) and its account
            p = llama.check(model, kv, None, own, stream, 32, h2o > 0, fwd, None, llama.integer_path(kv, iatt),
                            tier)[3]
        except ImportError:  # the pass's module does not load on this runtime (ulab on the host): the board's
            p = llama.plan(cfg, wdtype, ccfg, weights_place(model, stream), 32,
                           own + ((8 * ccfg.slots + 256) if h2o else 0))
        except ValueError as e:
            raise PlanError("forward: the %s pass cannot run this model file and plan: %s" % (fwd, e))
        ws = doc["total_bytes"] - p["total"]
    out.update(budget=doc["heap_bytes"], workspace=ws, kind=doc["kind"], int_attention=iatt)
    return out


def run_args(args):
    """plan_args()'s result as main() takes it: without "kind"; "forward" only when the plan names a pass
    (else main()'s own default chooses)."""
    kw = dict(args)
    kw.pop("kind", None)
    if kw.get("forward") == "auto":
        kw.pop("forward")
    return kw


def _setting(get, name, default, conv):
    v = get("KVEDGE_" + name)
    return default if v is None else conv(v)


def from_settings(getenv=None):
    """Generate as settings.toml says (CircuitPython's os.getenv reads it; MicroPython ports have no os.getenv and
    take the defaults): KVEDGE_PLAN (default kvedge_plan.json), KVEDGE_MODEL, KVEDGE_TOKENIZER, KVEDGE_PROMPT,
    KVEDGE_STEPS, KVEDGE_TEMPERATURE (a string: settings.toml holds strings and integers), KVEDGE_SEED,
    KVEDGE_STATS_MS. What code.py on a CircuitPython board runs."""
    import json
    if getenv is None:
        import os
        getenv = getattr(os, "getenv", None) or (lambda k: None)
    from kvedge.errors import BudgetError, PlanError
    with open(_setting(getenv, "PLAN", PLAN, str)) as f:
        doc = json.load(f)
    model = _setting(getenv, "MODEL", "model.bin", str)
    tok = _setting(getenv, "TOKENIZER", "tokenizer.bin", str)
    args = plan_args(doc, model, tok)
    from kvedge.model.plandoc import streams_stats
    stats_ms = _setting(getenv, "STATS_MS", 1000 if streams_stats(doc) else 0, int)
    if stats_ms > 0 and not streams_stats(doc):
        raise PlanError("without: the plan leaves out the stats stream: KVEDGE_STATS_MS must be 0")
    prompt = _setting(getenv, "PROMPT", "", str)
    if len(prompt) and not args.get("encode", True):
        raise PlanError("without: the plan leaves out the board's encoder: no KVEDGE_PROMPT on the board (the host "
                        "encodes prompts: kvedge generate --port --plan)")
    if args["workspace"] < 0:
        raise BudgetError("the plan leaves no room for this run's own objects", doc["total_bytes"] -
                          args["workspace"], doc["total_bytes"])
    return entry(args)(model, tok,
                prompt=prompt, steps=_setting(getenv, "STEPS", 64, int),
                temperature=_setting(getenv, "TEMPERATURE", 0.0, float), seed=_setting(getenv, "SEED", 1, int),
                stats_ms=stats_ms, **run_args(args))
