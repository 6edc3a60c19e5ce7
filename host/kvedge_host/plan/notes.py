"""What the planner says about its answer: the verdict first (what was chosen and why, or why nothing fits), and
the notes beside the table (speed, more tokens, the tier)."""
from kvedge import budget

from .rank import SLOWER

WEIGHT_NAMES = {budget.F32: "f32", budget.F16: "f16", budget.I8: "int8", budget.I4: "int4"}


def pool_line(c, context):
    """What a pool plan chose: its conversations, each one's context (searched, whole blocks), its blocks and bytes."""
    p = c["pool"]
    return ("pool: %d sessions%s, each %s of the %s-token context (the longest in whole %d-token blocks that fits)"
            ": %d blocks, arena %s + bookkeeping %s + objects %s bytes" % (
                p["sessions"], (" forked from one %d-token prompt held once" % p["shared_prompt"]) if
                p["shared_prompt"] else "", format(p["tokens"], ","), format(context, ","), p["block"], p["blocks"],
                format(p["arena_bytes"], ","), format(p["meta_bytes"], ","), format(p["objects_bytes"], ",")))


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
        if c.get("pool"):
            second = pool_line(c, result["context"])
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


def speed_notes(ranked, dropped, objective, min_tps, kind, chosen):
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


def more_tokens_notes(rt, plans, chosen):
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


def tier_notes(chosen, ranked):
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
