"""The planner as a library: compress until it fits, then weigh speed. The planning loop over KV dtype, window,
sinks, H2O budget, a tiered cache (hot ring in RAM, older tokens on flash) and context, for a model on a board.

Start from the requested deployment (the whole context in `kv_dtype`). If it does not fit the heap, try each
strategy, size it to the largest setting that fits (recomputing with kvedge.budget every time), and rank every
feasible configuration: by measured quality cost (a `kvedge eval --json` table; for stories260K the shipped one by
default), else by a documented heuristic, and by speed (kvedge_host.plan.planspeed: the forward pass the board runs and
its instructions per token measured on the emulated Cortex-M3) as the objective says. Say where each array should
live (fast internal SRAM, slow PSRAM, or flash row by row); the chosen configuration's device config ("cache" goes
to kvedge.kvsplit.from_dict() as is: CacheConfig.from_dict(), or SplitConfig's for K and V apart) is what `kvedge plan --out` writes.

    from kvedge_host import planner
    spec, context, tgt = planner.inputs(model="m.i8.bin", board="rp2040")
    p = planner.plan(spec, context, tgt, kv_dtype="i8", weights_dtype="i8", align=0)
    p.document        # the chosen configuration as a plan document (None when nothing fits)
    p.result          # what `kvedge plan --json` prints: every ranked configuration, the trace, the notes

Bad input raises kvedge_host.cli.UserError (or models.ModelError / ValueError, one line each).

This module drives the planner and holds its inputs (model, board, runtime, tokenizer) and the weight-format search;
its parts are rooms of their own: the search over cache strategies (kvedge_host.plan.search.Planner), the ranking
(kvedge_host.plan.rank) and what the answer says (kvedge_host.plan.notes: the verdict and the notes)."""
import json

from kvedge import budget
from kvedge.model import passes
from kvedge.model.plandoc import ENCODER, STATS

from . import account, planspeed
from .. import profiles, models
from ..errors import UserError
from .planquality import DTYPES
from .search import Planner, TIERED_FILES, TIERED_LOOP_BYTES
from .rank import DEFAULT_OBJECTIVE, base_ppl, check_choices, order, per_strategy, quality_table, rank
from .notes import WEIGHT_NAMES, more_tokens_notes, speed_notes, tier_notes

FORMAT = "kvedge-plan/1"


def without(rts, prompt, encoder, stats):
    """The plan document's "without" (kvedge.model.plandoc.LEAN): the board-side parts a measured runtime's plan
    left out; [] for a plan on the flat workspace allowance (it counts no part)."""
    if not rts:
        return []
    return ([ENCODER] if prompt and not encoder else []) + ([] if stats else [STATS])


def device_config(c, spec, tgt, runtime=None, without=()):
    """The --out document: "cache" goes to kvedge.kvsplit.from_dict() unchanged; "budget_bytes" to KVCache(...);
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
        "speed": c.get("speed"), "without": list(without),
    } if not c.get("pool") else dict(device_config(dict(c, pool=None), spec, tgt, runtime, without), pool=c["pool"])


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


def runtimes(tgt, kernels="auto", margin=None, workspace=None, stats=True, prompt=True, forward="auto", encoder=True):
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
        if not (prompt and encoder):
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


def tokenizer_for(spec, model=None, tokenizer=None, prompt=True, encoder=True):
    """(bytes the runner's tokenizer keeps, its path, whether a prompt is encoded, where it was found): `tokenizer`
    ("given"), else tok512.bin or tokenizer.bin beside a llama2.c .bin model when its size fits the model's
    vocabulary ("beside the model"), else the one `kvedge fetch` keeps for the model's vocabulary ("the fetch
    cache"); when none is known, the largest a tokenizer of its vocabulary keeps is reserved (path None,
    "reserved"). The tokenizer stays in its file (kvedge.model.tokenizer.FileTokenizer); encoding a prompt sorts
    its ids once (2 bytes a token), which prompt=False leaves out, and encoder=False (the host encodes it). The
    third figure is whether the run is fed a prompt at all."""
    import os
    from kvedge.model.tokenizer import FileTokenizer as Tokenizer
    fed = bool(prompt)
    encode = fed and encoder
    path = tokenizer
    if path is None:
        if model and model.endswith(".bin") and os.path.isfile(model):
            for name in ("tok512.bin", "tokenizer.bin"):
                p = os.path.join(os.path.dirname(os.path.abspath(model)), name)
                if os.path.isfile(p) and os.path.getsize(p) >= 4 + 8 * spec.vocab:
                    return Tokenizer.nbytes(p, spec.vocab, encode), p, fed, "beside the model"
        p = _fetched_tokenizer(spec)
        if p is not None and os.path.getsize(p) >= 4 + 8 * spec.vocab:
            return Tokenizer.nbytes(p, spec.vocab, encode), p, fed, "the fetch cache"
        return reserved_tokenizer_bytes(spec.vocab, encode), None, fed, "reserved"
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise UserError("%s: cannot read: %s" % (path, e.strerror or e))
    if size < 4 + 8 * spec.vocab:
        raise UserError("%s: %d bytes is too short for a tokenizer of %d tokens" % (path, size, spec.vocab))
    return Tokenizer.nbytes(path, spec.vocab, encode), path, fed, "given"


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


def lean_levels(prompt=True, stats=True, encoder=True):
    """The board-side parts to leave out, one list a try, in the order plan() tries them: none; then the prompt's
    encoder (when the run is fed a prompt: the host encodes it); then the stats stream too (when the run has one).
    kvedge.model.plandoc.LEAN is the order."""
    levels = [[]]
    if prompt and encoder:
        levels.append([ENCODER])
    if stats:
        levels.append(levels[-1] + [STATS])
    return levels


def plan(spec, context, tgt, kv_dtype="f32", weights_dtype=None, align=64, batch=1, weights_in="auto",
         tiered=True, kernels="auto", margin=None, workspace=None, model=None, tokenizer=None, stats=True,
         prompt=True, quality=None, objective=DEFAULT_OBJECTIVE, min_tokens_per_s=None, kind=None, pick=1,
         flash_tier=False, forward="auto", suggest=True, fit_weights=True, encoder=True, lean=True, pool=None):
    """plan_fit() with the full runtime; when nothing fits that way (and lean), again without the board's prompt
    encoder (the host encodes the prompt), then without the stats stream too (lean_levels()): the plan keeps
    the first that fits, its document's "without" names what it left out, result["lean"] what that saved and
    why. A runtime measured on the board is needed for this (else the flat workspace allowance is all)."""
    args = dict(kv_dtype=kv_dtype, weights_dtype=weights_dtype, align=align, batch=batch, weights_in=weights_in,
                tiered=tiered, kernels=kernels, margin=margin, workspace=workspace, model=model, tokenizer=tokenizer,
                prompt=prompt, quality=quality, objective=objective, min_tokens_per_s=min_tokens_per_s, kind=kind,
                pick=pick, flash_tier=flash_tier, forward=forward, suggest=suggest, fit_weights=fit_weights)
    if pool is not None:  # a pool's run (kvedge.model.runpool) writes no stats stream: not counted
        check_pool(pool, kv_dtype, spec, context)
        args["pool"] = pool
        stats = False
    measured = (tgt.get("profile") or {}).get("footprint") and workspace is None
    levels = lean_levels(prompt, stats, encoder) if lean and measured else [[]]
    first = None
    for i, drop in enumerate(levels):
        last = i == len(levels) - 1
        try:
            p = plan_fit(spec, context, tgt, stats=stats and STATS not in drop,
                         encoder=encoder and ENCODER not in drop, near=last, **args)
        except NothingFits:
            if last:
                raise
            continue
        if first is None:
            first = p
        if p.chosen is not None or last:
            break
    if drop and p.chosen is not None:
        lean = p.result["lean"] = lean_note(spec, model, tokenizer, tgt, p, drop, first)
        p.result["notes"].insert(0, lean_line(lean))
    return p


LEAN_SAID = {ENCODER: "the board's prompt encoder (kvedge.model.bpe and the tokenizer's sorted ids: the host "
                      "encodes the prompt and the board is given token ids)",
             STATS: "the stats stream (kvedge.telemetry: no KVSTATS lines for kvedge monitor)"}


def lean_line(lean):
    """kvedge plan's line for result["lean"]: what the plan left out, the bytes each saved, and why."""
    parts = ["%s, %s bytes" % (LEAN_SAID[k], format(lean["saved_bytes"][k], ",")) for k in lean["without"]]
    return "left out to fit: %s; why: %s (the plan's \"without\": %s)" % (
        " and ".join(parts), lean["why"], ", ".join(lean["without"]))


def lean_note(spec, model, tokenizer, tgt, p, drop, first):
    """What leaving `drop` out saved (bytes a part, from the chosen runtime's measured footprint and the
    tokenizer's sorted ids) and why: the full runtime's floor against its limit (first: the full runtime's plan,
    None when no kernel kind's runtime fit at all)."""
    rt = p.document["runtime"]
    fp = tgt["profile"]["footprint"]
    key = account.footprint_key(rt["kernels"], rt["forward"])
    full = tokenizer_for(spec, model, tokenizer, True, True)[0]
    saved = {ENCODER: fp.get("encode_bytes", 0) + full - tokenizer_for(spec, model, tokenizer, True, False)[0],
             STATS: fp.get("telemetry_bytes", 0)}
    fl = (first.result.get("floor") if first is not None else None) or {}
    short = fl.get("total", 0) - fl.get("limit", 0)
    why = ("with the full runtime nothing fits: a one-token cache is %s bytes over the limit" % format(short, ",")
           if short > 0 else "with the full runtime nothing fits")
    if STATS in drop:
        why += "; without the prompt's encoder still nothing does" if ENCODER in drop else ""
    return {"without": list(drop), "saved_bytes": {k: saved[k] for k in drop}, "kernels": key, "why": why}


def plan_fit(spec, context, tgt, kv_dtype="f32", weights_dtype=None, align=64, batch=1, weights_in="auto",
             tiered=True, kernels="auto", margin=None, workspace=None, model=None, tokenizer=None, stats=True,
             prompt=True, quality=None, objective=DEFAULT_OBJECTIVE, min_tokens_per_s=None, kind=None, pick=1,
             flash_tier=False, forward="auto", suggest=True, fit_weights=True, encoder=True, near=True, pool=None):
    """plan_one() for the weights as given; without weights_dtype (and fit_weights) the weights are fitted too:
    the source's own format when it keeps the whole context, else the format of WEIGHT_SEARCH (smaller than the
    source's) whose plan keeps the most tokens, the better-quality format on a tie (result["weights_fit"] says
    what each format came to and why one was chosen). When nothing fits (and near), result["nearest"] names the
    nearest thing that would: another weight format (when the weights were pinned), then a board."""
    args = dict(kv_dtype=kv_dtype, align=align, batch=batch, weights_in=weights_in, tiered=tiered, kernels=kernels,
                margin=margin, workspace=workspace, model=model, tokenizer=tokenizer, stats=stats, prompt=prompt,
                quality=quality, objective=objective, min_tokens_per_s=min_tokens_per_s, kind=kind, pick=pick,
                flash_tier=flash_tier, forward=forward, encoder=encoder, pool=pool)
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
    if p.chosen is None and near:
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
             flash_tier=False, forward="auto", suggest=True, encoder=True, pool=None):
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
    model that does (result["fits_instead"]); encoder: the board encodes the prompt (False: the host does, and
    the board keeps neither kvedge.model.bpe nor the tokenizer's sorted ids); pool: {"sessions", "block",
    "shared_prompt"}: plan a PagedPool of that many conversations (check_pool), the context per session searched.
    Returns a Plan."""
    if kv_dtype not in DTYPES:
        raise UserError("unknown KV dtype %r for a device cache (choose from %s)" % (kv_dtype, ", ".join(DTYPES)))
    if weights_in not in ("auto", "heap", "flash", "rom"):
        raise UserError("--weights-in must be heap, flash, rom or auto, got %r" % weights_in)
    account.check_align("--align", align)
    account.check_size("--pick", pick)
    check_choices(objective, kind, min_tokens_per_s)
    table, table_path, qnote = quality_table(spec, quality)
    rts = runtimes(tgt, kernels, margin, workspace, stats, prompt, forward, encoder)
    prof = tgt["profile"]
    if not rts and prof and prof.get("footprint") and workspace is None:
        # measured, and no kernel kind ran even the tiny model: a flat allowance would promise a heap that is not there
        raise NothingFits("nothing fits %s: with no kernel kind did the runtime run even the project's tiny model on "
                          "the emulated board (kvedge footprint --board %s)" % (tgt["name"], tgt["name"]))
    if pool is not None and rts and all(r.pool is None for r in rts):
        raise NothingFits("nothing fits %s as a pool: its footprint has no measured figure for the pool's code "
                          "(kvedge.paged, kvedge.pooled, kvedge.model.runpool): kvedge footprint --board %s --write"
                          % (tgt["name"], tgt["name"]))
    tok = tokenizer_for(spec, model, tokenizer, prompt, encoder) if rts else (0, None, False, None)
    plans = []
    other_kind = None
    for rt in rts or [None]:
        pl = Planner(spec, context, tgt, align, weights_dtype, batch, rt, tok[0])
        pl.prompt = prompt
        pl.pool = pool
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
        if pool is not None:  # a pool's first figure is each conversation's context; then as plans rank
            ranked.sort(key=lambda c: -c["tokens_kept"])
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
    notes += speed_notes(ranked, dropped, objective, min_tokens_per_s, kind,
                          ranked[pick - 1] if ranked and pick <= len(ranked) else None)
    notes += tier_notes(ranked[pick - 1] if ranked and pick <= len(ranked) else None, ranked)
    notes += more_tokens_notes(rt, plans, ranked[pick - 1] if ranked and pick <= len(ranked) else None)
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
        ri = runtime_info(rt, tgt["profile"], tok, pl.weights_dtype)
        if pool is not None and ri is not None:  # the pool's modules it counted (a plain plan's runtime unchanged)
            ri["pool_bytes"] = rt.pool
        doc = device_config(chosen, spec, tgt, ri, without(rts, prompt, encoder, stats))
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
            # as kvedge plan would plan it: the board's encoder, then the stats stream, left out when nothing fits
            p = plan(other, ctx, tgt, kv_dtype=budget.I8, weights_dtype=budget.I8, align=0, workspace=workspace,
                     quality=False, suggest=False, fit_weights=False)
        except UserError:
            continue
        if p.chosen is not None:
            return {"preset": name, "context": ctx, "strategy": p.chosen["strategy"],
                    "tokens_kept": p.chosen["tokens_kept"]}
    return None


def check_pool(pool, kv_dtype, spec, context):
    """kvedge plan --sessions N --block B --shared-prompt P, checked as kvedge budget checks them
    (account.check_pool), and what a plan needs more: each session's context whole blocks (B divides the
    context), a token of its own past the shared prompt, a cache dtype a pool runs (no KIVI residual)."""
    account.check_pool({"sessions": pool["sessions"], "block": pool["block"], "shared": pool["shared_prompt"]},
                       kv_dtype, 0, spec.windows(), context)
    if context % pool["block"]:
        raise UserError("--block %d: does not divide the context %d (a session's context is whole blocks: "
                        "--context a multiple of --block)" % (pool["block"], context))
    if pool["shared_prompt"] >= context:
        raise UserError("--shared-prompt %d: leaves the sessions no token of their own in a context of %d"
                        % (pool["shared_prompt"], context))
    if kv_dtype in budget.LOWBIT:
        raise UserError("--sessions with --kv-dtype %s: a pool plans f32, f16 or i8 blocks (KIVI's key groups "
                        "span one sequence)" % kv_dtype)
    if pool["sessions"] + (1 if pool["shared_prompt"] else 0) > 0x7FFF:
        raise UserError("--sessions %d: with the shared prompt's holder more than 32,767 sessions"
                        % pool["sessions"])


class NothingFits(UserError):
    """No kernel kind's runtime fits the board at all (its footprint says so): exit 1, not 2."""


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
            base = base_ppl(table)
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
