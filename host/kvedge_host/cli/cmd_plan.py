"""Plan a KV cache for a model on a board: compress until it fits, and weigh speed. The first line is the verdict
(fits, with what is chosen, or nothing fits, with the one reason), the second how much of the context fits or what
would fit; then the ranked configurations (--verbose: every setting tried), and with --out the chosen one as a
device config. Exit 0 with a plan, 1 when nothing fits, 2 on bad input.

Argument parsing and printing; the planning itself is kvedge_host.plan.planner (a library: `planrun`, `kvedge demo` and
the tests call it directly)."""
import json

from ..plan import notes, planner, rank
from .. import validate
from ..errors import UserError
from .cmd_budget import add_model_arguments, add_pool_arguments, pool_flags
from ..plan.planquality import DEFAULT_QUALITY


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
    # before kvedge.tier.cache the flash tier was opt-in; it is offered by default now and the old flag does nothing
    p.add_argument("--flash-tier", action="store_true", help=__import__("argparse").SUPPRESS)
    p.add_argument("--kernels", default="auto", metavar="KIND",
                   help="asm, viper, native, plain or auto: the fastest kind with a measured footprint (kvedge footprint) "
                        "for which a configuration fits (default auto)")
    p.add_argument("--forward", default="auto", metavar="PASS",
                   help="auto (default: the integer pass, the fastest, wherever its measured runtime fits a cache "
                        "it runs; else the float pass), int or float: plan for that forward pass only")
    p.add_argument("--tokenizer", metavar="PATH",
                   help="tokenizer the runner loads, counted in the plan (default: tok512.bin or tokenizer.bin beside "
                        "a llama2.c model)")
    p.add_argument("--no-stats", action="store_true",
                   help="the run writes no stats stream: kvedge.telemetry is not counted")
    p.add_argument("--no-prompt", action="store_true",
                   help="the run encodes no prompt (generation from BOS): the tokenizer's sorted ids are not counted")
    p.add_argument("--no-encoder", action="store_true",
                   help="the host encodes the prompt and the board is given token ids: the board's encoder "
                        "(kvedge.model.bpe, the tokenizer's sorted ids) is not counted. Without it the planner "
                        "leaves the encoder out by itself when nothing fits with it, then the stats stream too")
    p.add_argument("--margin", type=int, metavar="BYTES",
                   help="heap kept free beyond the plan (default with a measured footprint: the larger of 3%% of "
                        "the usable heap and 5,120 bytes, less the code's layout allowance the plan counts; see "
                        "kvedge_host.plan.account)")
    p.add_argument("--quality", metavar="FILE.json", nargs="?", const=DEFAULT_QUALITY,
                   help="rank by a quality table written by `kvedge eval --json`; without FILE, the stories260K "
                        "table measured on the written corpus (kvedge_host/data/quality-stories260K.json), which "
                        "also ranks by default when the model is stories260K")
    p.add_argument("--no-quality", action="store_true",
                   help="rank by the heuristic order, even for stories260K (whose shipped table ranks by default)")
    p.add_argument("--objective", default=rank.DEFAULT_OBJECTIVE, metavar="WHAT",
                   help="balanced (default: by quality, but never a plan more than 2x slower than the fastest "
                        "keeping as many tokens unless nothing else fits), quality (quality alone) or speed "
                        "(tokens/s first)")
    p.add_argument("--min-tokens-per-s", type=float, metavar="X",
                   help="leave out configurations slower than X tokens/s at the board's clock")
    p.add_argument("--kind", metavar="KIND",
                   help="search one kind only: %s" % ", ".join(rank.KINDS))
    add_pool_arguments(p, "plan a paged pool of N conversations on one board (kvedge.paged): the longest context "
                          "per session that fits, in whole blocks; the plan file records the pool and the board runs "
                          "its N conversations")
    p.add_argument("--out", metavar="FILE.json", help="write the chosen configuration as a device config JSON")
    p.add_argument("--pick", type=int, default=1, help="rank of the configuration --out writes (default 1)")
    p.add_argument("--top", type=int, default=12, help="ranked rows to print (default 12)")
    p.add_argument("--json", action="store_true", help="print the whole plan as JSON")
    p.add_argument("--verbose", action="store_true",
                   help="list every strategy tried and what it came to (the search's trace; --json holds it too)")


def run(a):
    """The flags, to kvedge_host.plan.planner; the result printed (or as JSON), the chosen plan written with --out."""
    account_checks(a)
    if a.no_quality and a.quality:
        raise UserError("--quality and --no-quality: choose one")
    quality = False if a.no_quality else a.quality
    pool = pool_flags(a)
    if pool is not None:
        pool = {"sessions": pool["sessions"], "block": pool["block"], "shared_prompt": pool["shared"]}
        if a.board == "all" and a.heap is None:
            raise UserError("--sessions plans one board's pool: name the board instead of 'all'")
        if a.batch != 1:
            raise UserError("--sessions with --batch %d: the pool holds the conversations (--batch 1)" % a.batch)
    if a.board == "all" and a.heap is None:
        if a.out:
            raise UserError("--out writes one board's plan: name the board instead of 'all'")
        doc = planner.all_boards(a.model, a.preset, a.context, a.weights_dtype, a.workspace, a.batch, a.kv_dtype,
                                 a.align, a.weights_in, not a.no_tiered, a.kernels, a.margin, a.tokenizer,
                                 not a.no_stats, not a.no_prompt, quality, a.objective, a.kind, a.forward)
        if a.json:
            print(json.dumps(doc, indent=2))
        else:
            print_all_boards(doc, a.top)
        return 0
    if a.out:
        validate.out_folder("--out", a.out)
    spec, context, tgt = planner.inputs(a.model, a.preset, a.context, a.board, a.heap, a.workspace, a.batch,
                                        a.weights_dtype)
    try:
        p = planner.plan(spec, context, tgt, a.kv_dtype, a.weights_dtype, a.align, a.batch, a.weights_in,
                         not a.no_tiered, a.kernels, a.margin, a.workspace, a.model, a.tokenizer, not a.no_stats,
                         not a.no_prompt, quality, a.objective, a.min_tokens_per_s, a.kind, a.pick, a.flash_tier,
                         a.forward, encoder=not a.no_encoder, pool=pool)
    except planner.NothingFits as e:
        print(e)
        return 1
    result = p.result
    if a.out and p.document:
        with open(a.out, "w") as f:
            json.dump(p.document, f, indent=2)
            f.write("\n")
        result["out"] = a.out
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        print_plan(spec, tgt, result, p.chosen, a.top, a.verbose)
    return 0 if p.fits else 1


def account_checks(a):
    from ..plan import account
    account.check_size("--top", a.top)
    rank.check_choices(a.objective, a.kind, a.min_tokens_per_s)


def _speed(cd):
    """(tokens/s, pass) of a configuration, short: ('22.8', 'int'), ('~1.9', 'float') estimated, ('-', 'float')."""
    t = cd.get("tokens_per_s")
    s = ("%.3g" % t if t >= 0.01 else "%.1g" % t) if t else "-"
    return ("~" if t and (cd.get("speed") or {}).get("estimated") else "") + s, cd.get("forward", "?")


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
        print("| # | strategy | tokens kept | KV bytes | mean KL to f32 | perplexity vs f32 | top-1 | tok/s | "
              "weights |")
        print("|---:|---|---:|---:|---:|---:|---:|---:|---|")
        for i, r in enumerate(b["strategies"][:top], 1):
            kl, pp, t1 = _fmt_cost(r)
            print("| %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                i, r["strategy"], format(r["tokens_kept"], ","), format(r["kv_bytes"], ","), kl, pp, t1,
                ("%.3g %s" % (r["tokens_per_s"], r["forward"])) if r["tokens_per_s"] else "- " + r["forward"],
                r["weights"]))




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
    c.print("runtime, measured on the emulated board (%s, %s): %s kernels, %s pass; usable heap %s of %s%s; boot %s "
            "+ code %s + stats %s + prompt encoder %s + loop %s + layout %s; tokenizer %s; largest free block after "
            "start-up %s; "
            "margin %s kept free" % (rt["command"], rt["date"], rt["kernels"], rt.get("forward", "float"),
                                     "{:,}".format(rt["usable_heap"]),
               "{:,}".format(rt["heap_bytes"]), scaled, "{:,}".format(rt["boot_bytes"]),
               "{:,}".format(rt["code_bytes"]), "{:,}".format(rt["telemetry_bytes"]),
               "{:,}".format(rt.get("encode_bytes", 0)), "{:,}".format(rt["loop_bytes"]),
               "{:,}".format(rt.get("layout_bytes", 0)),
               "{:,}".format(rt["tokenizer_bytes"]), "{:,}".format(rt["largest_block_bytes"]),
               "{:,}".format(rt["margin_bytes"])), highlight=False, markup=False, soft_wrap=True)
    for o in r.get("other_kernels", []):
        c.print("  with %s kernels, %s pass: %s" % (o["kernels"], o.get("forward", "float"),
                                                   ("%s tokens kept (%s)" % (o["tokens_kept"], o["strategy"]))
                                                   if o["strategy"] else "nothing fits"),
                highlight=False, markup=False)


ALTERNATIVES = 3  # configurations after the chosen one on the first screen


def _n(x):
    return format(x, ",")


PLACE_SHORT = {"heap": "RAM", "flash": "fl", "rom": "ROM"}  # where the weights are, in the one-line form


def _short_strategy(s):
    """A strategy's name in fewer characters, for one line at 80 columns (the full name: --verbose, --json)."""
    import re
    s = re.sub(r"(\w+) hot ring (\d+) \+ (\d+) sinks, older (\d+) tokens (\w+) on flash", r"\1 ring \2+\3 sinks, \4 \5 fl",
               s)
    for a, b in ((", keep all ", ", all "), ("context cut to ", "cut to "), (", align 0", " a0"),
                 (" + f32 prefix ", " + f32 pfx "), (" heavy + ", "h+"), (" recent)", "r)")):
        s = s.replace(a, b)
    return s


def _qshort(cd):
    q = cd.get("quality")
    m = (q or {}).get("metrics", {})
    k = next((k for k in ("kl", "ppl", "top1") if k in m), None)
    qs = ("%s %s%.2g" % (k, _bound(q, k), m[k])) if k else "-"
    if q and (q.get("estimated") or q.get("uncertain")):
        qs += " ~"
    return qs


# a figure measured at another size that only bounds this one's: the KL/perplexity of fewer tokens kept is at
# least that row's ("lower": >), of more tokens at most ("upper": <)
_BOUND = {"lower": ">", "upper": "<"}


def _bound(q, metric):
    """'>' or '<' before a figure that bounds this configuration's cost (top-1 agreement the other way), or ''."""
    b = (q or {}).get("bound")
    if metric == "top1" and b:
        b = "upper" if b == "lower" else "lower"
    return _BOUND.get(b, "")


def _one_line(i, cd, width):
    """A configuration on one line: rank, tokens kept, total bytes, quality, speed and pass, weights, strategy
    (cut to fit `width`, marked with ~ at the cut)."""
    t, fw = _speed(cd)
    head = "%2d %5s %9s %-11s %-9s %-3s " % (i, _n(cd["tokens_kept"]), _n(cd["total_bytes"]), _qshort(cd),
                                           t + " " + fw, PLACE_SHORT.get(cd["weights"]["place"], "?"))
    name = _short_strategy(cd["strategy"])
    room = max(8, width - len(head))
    if len(name) > room:
        name = name[:room - 1] + "~"
    return head + name


def account_lines(r, cd):
    """The chosen plan's account, a part a line: weights, cache, activations, runtime, and what is left."""
    w = cd["weights"]
    where = {"heap": ", in RAM", "flash": ", %s on flash, read row by row" % _n(w["bytes"]),
             "rom": ", %s in ROMFS, read in place" % _n(w["bytes"])}[w["place"]]
    tier = cd.get("tier") or {}
    cache = cd["kv_bytes"] * cd["batch"] + cd["h2o_score_bytes"] * cd["batch"] + \
        (tier.get("staging_bytes", 0) + tier.get("tables_bytes", 0)) * cd["batch"] + \
        (cd.get("pool") or {}).get("meta_bytes", 0)  # a pool's arena and bookkeeping, as kvedge budget counts it
    rt = r.get("runtime") or {}
    runtime = "measured: %s kernels, %s pass" % (rt["kernels"], cd["forward"]) if rt.get("source") == \
        "measured" else "a flat allowance"
    limit = cd["total_bytes"] + cd["headroom_bytes"] - cd.get("margin_bytes", 0)
    return ["  %-12s %11s  %s%s" % ("weights", _n(w["heap_bytes"]), w["dtype"], where),
            "  %-12s %11s  %s%s" % ("KV cache", _n(cache), cd["cache"]["dtype"],
                                    (", older tokens on flash (%s bytes)" % _n(tier["flash_bytes"])) if tier else
                                    (", a pool of %d blocks and its bookkeeping" % cd["pool"]["blocks"])
                                    if cd.get("pool") else ""),
            "  %-12s %11s" % ("activations", _n(cd["activation_bytes"])),
            "  %-12s %11s  %s" % ("runtime", _n(cd["workspace_bytes"]), runtime),
            "  %-12s %11s  of %s a plan may use (margin %s)" % (
                "total", _n(cd["total_bytes"]), _n(limit), _n(cd.get("margin_bytes", 0)))] + speed_line(cd)


def _rate(x):
    return "-" if not x else ("%.2g" % x) if x < 100 else _n(int(round(x)))


def speed_line(cd):
    """The speed's two bounds, the slower one first: it is the plan's tokens/s (kvedge_host.plan.planspeed)."""
    sp = cd.get("speed") or {}
    if not cd.get("tokens_per_s") or not sp.get("bound"):
        return []
    core = (sp.get("core") or {}).get("core", "?").split(" (")[0].split(" with ")[0].split(",")[0]
    compute = "%s/s on %s" % (_rate(sp.get("compute_tokens_per_s")), core)
    memory = "%s/s" % _rate(sp.get("memory_tokens_per_s"))
    both = ("compute-bound: %s; memory %s" % (compute, memory)) if sp["bound"] == "compute" else (
        "memory-bound: %s; compute %s" % (memory, compute))
    return ["  %-12s %11s  %s" % ("speed", "%s tok/s" % _rate(cd["tokens_per_s"]), both)]


def say(c, line):
    """A line of the first screen: at a terminal's width (or COLUMNS') wrapped by words, its continuation indented
    (a line the terminal wraps breaks the screen's columns); piped elsewhere, whole (a script reads it as a line)."""
    import os
    import textwrap
    if not (c.is_terminal or os.environ.get("COLUMNS")):
        c.print(line, highlight=False, markup=False, soft_wrap=True)
        return
    for part in textwrap.wrap(line, width=max(40, c.width), subsequent_indent="    ", break_long_words=False,
                              break_on_hyphens=False) or [""]:
        c.print(part, highlight=False, markup=False, soft_wrap=True)


def print_first_screen(spec, tgt, r, chosen, c):
    """The answer on one screen: the verdict, the chosen plan's account, the next ALTERNATIVES configurations a
    line each (at the console's width), and where the rest is."""
    verdict = notes.verdict(r)
    cands = r["configurations"]
    for line in verdict if not cands else verdict[:2]:  # a chosen plan's reasons for its weights follow its table
        say(c, line)
    if not cands:
        return
    say(c, "plan #%d, %s on %s (heap %s), bytes:" % (r["chosen"], spec.name, tgt["name"], _n(tgt["heap_bytes"])))
    for line in account_lines(r, chosen):
        say(c, line)
    others = [(i, cd) for i, cd in enumerate(cands, 1) if cd is not chosen][:ALTERNATIVES]
    if others:
        c.print(" # %5s %9s %-11s %-9s %-3s %s" % ("kept", "total", "quality", "tok/s", "wts", "strategy (next "
                                                                                           "best)"),
                highlight=False, markup=False)
        for i, cd in others:
            c.print(_one_line(i, cd, c.width), highlight=False, markup=False, soft_wrap=True)
    for line in verdict[2:]:  # why these weights (and the conversion to run first)
        say(c, line)
    more = len(cands) - 1 - len(others)
    c.print("(%sthe full table and every setting tried: --verbose; all: --json)" % (
        "%d more; " % more if more > 0 else ""), highlight=False, markup=False)


def print_plan(spec, tgt, r, chosen, top, verbose=False):
    from rich import box
    from rich.console import Console
    from rich.table import Table
    c = Console()
    req = r["requested"]
    if not verbose and r["configurations"]:  # the answer first; nothing fitting keeps the account below
        print_first_screen(spec, tgt, r, chosen, c)
        if not req["fits"]:
            tried = [t for t in r["trace"][1:] if "total_bytes" in t or "at any setting" in t["result"]]
            c.print("requested %s: needs %s, over the heap by %s; %d settings of the strategies tried (--verbose "
                    "lists them)" % (req["strategy"], _b(req["total_bytes"]), _b(-req["headroom_bytes"]), len(tried)),
                    highlight=False, markup=False)
        if r.get("out"):
            c.print("device config written to %s" % r["out"], highlight=False)
        for n in r["notes"]:
            c.print(n if n.startswith("warning: ") else "note: " + n, highlight=False, markup=False)
        return
    for line in notes.verdict(r):  # the verdict and its reason first; the account and the search follow
        say(c, line)
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
        tried = [t for t in r["trace"][1:] if "total_bytes" in t or "at any setting" in t["result"]]
        c.print("requested %s: needs %s, [red]over the heap by %s[/red]; %d settings of the strategies tried%s"
                % (req["strategy"], _b(req["total_bytes"]), _b(-req["headroom_bytes"]), len(tried),
                   ":" if verbose else " (--verbose lists them)"), highlight=False)
        for t in r["trace"][1:] if verbose else ():
            tail = (": %s total %s" % (t.get("strategy", ""), _b(t["total_bytes"]))) if "total_bytes" in t else ""
            c.print("  %-34s %s%s" % (t["try"], t["result"], tail), highlight=False, markup=False)
    if not cands:
        for n in r["notes"]:
            c.print(n if n.startswith("warning: ") else "note: " + n, highlight=False, markup=False)
        return
    t = Table(title="feasible configurations, best first", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
    wide = c.width >= 132  # the byte columns beside the rest; at 80 columns: kept, total, quality, speed
    cols = ("#", "strategy", "kept") + (("KV bytes", "total", "headroom") if wide else ("total",)) + (
        "quality", "tok/s", "pass", "weights")
    for col in cols:
        t.add_column(col, justify="left" if col in ("strategy", "quality", "pass", "weights") else "right",
                     overflow="fold")
    for i, cd in enumerate(cands[:top], 1):
        q = cd.get("quality")
        if wide:
            qs = ", ".join("%s %s%.4g" % (k, _bound(q, k), v)
                           for k, v in sorted(q["metrics"].items())) if q else "-"
            if q and q.get("tokens") and q["tokens"] != cd["tokens_kept"]:
                qs += " (at %d)" % q["tokens"]
        else:  # the figure it ranks by (mean KL first)
            qs = _qshort(cd)
        if wide and q and (q.get("estimated") or q.get("uncertain")):
            qs += " ~"
        sizes = ("{:,}".format(cd["kv_bytes"]), "{:,}".format(cd["total_bytes"]),
                 "{:,}".format(cd["headroom_bytes"])) if wide else ("{:,}".format(cd["total_bytes"]),)
        t.add_row(str(i), cd["strategy"], "{:,}".format(cd["tokens_kept"]), *sizes, qs, *_speed(cd),
                  cd["weights"]["place"])
    c.print(t)
    if len(cands) > top:
        c.print("(%d more with --top %d or --json)" % (len(cands) - top, len(cands)))
    c.print("chosen #%d: %s" % (r["chosen"], chosen["strategy"]), highlight=False)
    sp = chosen.get("speed") or {}
    if chosen.get("instructions_per_token"):
        c.print("  speed: %s pass, %s kernels: %s%s instructions per token (mean over positions 0-%d, %s)%s%s"
                % (chosen["forward"], chosen["kernels"], "~" if sp.get("estimated") else "",
                   "{:,}".format(chosen["instructions_per_token"]), chosen["context"] - 1, sp.get("measured"),
                   (", %s tokens/s at %s MHz (%s; %s)" % (chosen["tokens_per_s"], "%g" % (sp["clock_hz"] / 1e6),
                                                          sp.get("clock_source"), sp.get("proxy")))
                   if chosen.get("tokens_per_s") else "", ("; estimated: " + sp["from"]) if sp.get("from") else ""),
                highlight=False, markup=False, soft_wrap=True)
    else:
        c.print("  speed: %s pass, %s kernels: not measured" % (chosen.get("forward"), chosen.get("kernels")),
                highlight=False, markup=False)
    if (chosen.get("prefill") or 1) > 1:
        c.print("  prompt: %d tokens a chunk through each layer (kvedge.model.prefill: a weight row read once a "
                "chunk; its buffers counted in the activations)" % chosen["prefill"], highlight=False, markup=False)
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
        c.print(n if n.startswith("warning: ") else "note: " + n, highlight=False, markup=False)

