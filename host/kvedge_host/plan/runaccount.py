"""A run's figures against its plan (kvedge demo's summary): the heap's account as named rows, the board's
measured peak against the plan's total, what the board built against what the plan named, and why a run
stopped before its steps. `s` is the runner's closing summary (kvedge_host.boards.planrun.summary), `plan` the
plan document."""
import json


def account_rows(s, plan):
    """The heap's account as named rows (name, bytes, what it is): the plan's parts and their sum, the headroom it
    keeps free and the heap that makes, then what the board measured and checked. The parts add up to the total
    and the total plus the headroom to the heap; a board row is a figure of its own, beside them."""
    w = (plan.get("weights") or {}).get("heap_bytes", 0)
    rows = [("weights in RAM", w, "all of them" if (plan.get("weights") or {}).get("place") == "heap" else
             "norms and a chunk of rows: the rest on flash"),
            ("KV cache", plan["kv_bytes"], "the arena: " + plan["strategy"])]
    if plan.get("h2o_score_bytes"):
        rows.append(("H2O scores", plan["h2o_score_bytes"], "the eviction policy's per-slot scores"))
    tier = plan.get("tier") or {}
    if tier.get("staging_bytes") or tier.get("tables_bytes"):
        rows.append(("tier staging, tables", (tier.get("staging_bytes", 0) + tier.get("tables_bytes", 0))
                     * plan.get("batch", 1), "a cold block read back, the running softmax per head"))
    rows += [("activations", plan["activation_bytes"], "the forward pass's buffers"),
             ("runtime and workspace", plan["workspace_bytes"], "code (measured), stats, tokenizer, loop, objects")]
    parts = sum(r[1] for r in rows)
    rows.append(("= plan total", plan["total_bytes"], "the rows above" if parts == plan["total_bytes"]
                 else "the plan's (the rows above sum to %s)" % format(parts, ",")))
    if plan.get("headroom_bytes") is not None and plan.get("heap_bytes"):
        rows.append(("+ headroom", plan["headroom_bytes"], "kept free (the margin)"))
        rows.append(("= heap", plan["heap_bytes"], "the usable heap planned for"))
    if s.get("plan_total", -1) >= 0:
        rows.append(("board's own check", s["plan_total"], "its account before allocating"))
    if s.get("heap_top", -1) >= 0:
        rows.append(("board's measured peak", s["heap_top"], "gc.mem_alloc(): %.1f %% of the total" % (
            100.0 * s["heap_top"] / plan["total_bytes"])))
    return rows


def peak_vs_plan(s, plan):
    """The board's peak heap in use (gc.mem_alloc() after set-up and after every token, everything included)
    against the plan's total."""
    if s.get("heap_top", -1) < 0:
        return "not measured on this port"
    return "measured peak %s bytes, plan %s bytes (%.1f %% of the plan)" % (
        format(s["heap_top"], ","), format(plan["total_bytes"], ","), 100.0 * s["heap_top"] / plan["total_bytes"])


def stopped_early(s, plan, steps):
    """Why the board ran fewer positions than --steps (None when it ran them all): a keep-all cache full at its
    tokens, else the model's own end of text (it sampled BOS, as llama2.c stops)."""
    if steps is None or s["tokens"] >= steps:
        return None
    c = plan["cache"]
    if plan.get("kind") in ("keep", "prefix", "shorter") and s["tokens"] >= c["max_tokens"]:
        return "--steps %d: stopped at %d, the cache is full (%d tokens)" % (steps, s["tokens"], c["max_tokens"])
    return "--steps %d: stopped at %d, where the model ended its text (BOS)" % (steps, s["tokens"])


def built_vs_plan(s, plan):
    """What the board says it built (its stats line: the pass, the cache kind, slots, cold blocks, prompt chunks)
    beside what the plan named; a difference is said first."""
    got = {"forward": s.get("forward"), "kind": s.get("kind"), "slots": s.get("slots"),
           "cold_blocks": s.get("cold_blocks", 0), "prefill": s.get("prefill", 1)}
    from kvedge.sizes import cache_slots
    c = plan["cache"]
    kind = plan.get("kind")
    # a shorter context is a keep-all cache of fewer tokens: the board sees the cache, not the cut
    want = {"forward": plan.get("forward"), "kind": "keep" if kind == "shorter" else kind,
            "slots": cache_slots(c["max_tokens"], c.get("window", 0), c.get("sinks", 0)),
            "cold_blocks": (plan.get("tier") or {}).get("cold_blocks", 0), "prefill": plan.get("prefill") or 1}
    line = "board built %s pass, %s cache, %s slots%s%s" % (got["forward"], got["kind"], got["slots"], (
        ", %d cold blocks" % got["cold_blocks"]) if got["cold_blocks"] else "", (
        ", prompts in chunks of %d" % got["prefill"]) if got["prefill"] != 1 else "")
    off = [k for k in want if want[k] is not None and got[k] != want[k]]
    if off:
        return "NOT AS PLANNED (%s): %s; the plan: %s" % (", ".join(off), line, json.dumps(want, sort_keys=True))
    return line + ": as planned"
