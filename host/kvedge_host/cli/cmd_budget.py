"""Memory account of a model on a board: weights, KV cache (K and V), activations, workspace, longest context.

Every figure comes from kvedge.budget (device/kvedge/budget.py), the formulas the device cache sizes itself with.
Rows are not padded by default (--align 0) so that f16/q8_0/q4_0 figures equal llama.cpp's log lines; --align 64
shows the padded layout the device cache uses by default (trap 7 in docs/architecture.md)."""
import json
import sys

from kvedge import budget

from ..plan import account
from .. import models, validate

STORAGE_CURVES = budget.CACHE_DTYPES


def add_model_arguments(p):
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="PATH", help="llama2.c .bin, Hugging Face config.json (or its folder), .gguf")
    src.add_argument("--preset", metavar="NAME", help="built-in model: " + ", ".join(sorted(models.PRESETS)))
    p.add_argument("--context", type=int, help="tokens to cache per sequence (default: the model's context)")
    p.add_argument("--weights-dtype", metavar="DTYPE",
                   help="weights storage: %s (default: the source's; GGUF: the file's exact tensor bytes)"
                        % ", ".join(budget.WEIGHT_DTYPES))
    p.add_argument("--board", help="board profile in boards/ (default rp2040, unless only --heap is given)")
    p.add_argument("--heap", type=int, metavar="BYTES",
                   help="heap bytes instead of a board profile; with --board: that board with this heap (e.g. the "
                        "emulated board's image for a PSRAM profile)")
    p.add_argument("--workspace", type=int, metavar="BYTES", help="runtime workspace (default: the board's)")
    p.add_argument("--batch", type=int, default=1, help="sequences cached at once (default 1)")


def add_arguments(p):
    add_model_arguments(p)
    p.add_argument("--kv-dtype", default="f16", metavar="DTYPE",
                   help="KV storage: %s (default f16: llama.cpp's default cache type, so the figures compare with "
                        "its logs; kvedge plan starts from f32, the exact cache its compressions are ranked "
                        "against)" % ", ".join(budget.KV_DTYPES))
    p.add_argument("--align", type=int, default=0,
                   help="pad each row to this many bytes: 0 = none, as llama.cpp (default); 64 = the device default")
    p.add_argument("--residual", type=int, metavar="R",
                   help="i4/i2: KIVI's sliding residual, the newest R..R+31 tokens kept at f32 (a multiple of the "
                        "key group 32; default 32; 0 = per-token keys, no f32 rows)")
    add_pool_arguments(p, "plan a paged pool of N conversations of --context tokens each on one board (kvedge.paged)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.add_argument("--plot", metavar="FILE.png", help="draw memory against context per strategy with the heap")


def add_pool_arguments(p, sessions_help):
    """--sessions, --block, --shared-prompt: a pool of conversations (kvedge budget counts one, kvedge plan plans
    one)."""
    p.add_argument("--sessions", type=int, metavar="N", help=sessions_help)
    p.add_argument("--block", type=int, default=16, metavar="B", help="with --sessions: tokens a block (default 16)")
    p.add_argument("--shared-prompt", type=int, default=0, metavar="P",
                   help="with --sessions: the first P tokens are a prompt every conversation shares, held once")


def pool_flags(a):
    """The pool the flags ask for ({"sessions", "block", "shared"}), or None; --block or --shared-prompt without
    --sessions is refused."""
    if a.sessions is None:
        if a.shared_prompt:
            raise ValueError("--shared-prompt needs --sessions (a pool of conversations)")
        if a.block != 16:
            raise ValueError("--block needs --sessions (a pool of conversations)")
        return None
    return {"sessions": a.sessions, "block": a.block, "shared": a.shared_prompt}


def load_inputs(a):
    """(spec, context, target) from the shared flags (kvedge_host.plan.planner.inputs: one-line errors for bad values,
    the flags checked before the model file is read)."""
    from ..plan.planner import inputs
    return inputs(a.model, a.preset, a.context, a.board, a.heap, a.workspace, a.batch, a.weights_dtype)


def run(a):
    account.check_kv_dtype(a.kv_dtype)
    account.check_align("--align", a.align)
    if a.plot:
        validate.out_folder("--plot", a.plot)
        if not a.plot.lower().endswith(".png"):
            raise ValueError("%s: --plot writes a PNG file (name it FILE.png)" % a.plot)
    spec, context, tgt = load_inputs(a)
    pool = pool_flags(a)
    r = account.account(spec, context, a.kv_dtype, tgt, a.weights_dtype, a.align, a.batch, residual=a.residual,
                        pool=pool)
    if a.plot:
        plot(a.plot, spec, r, tgt, a.align, a.batch)
        r["plot"] = a.plot
    if a.json:
        print(json.dumps(r, indent=2))
    else:
        print_table(spec, r)
    if a.plot:  # on stderr beside --json (stdout stays one JSON document)
        print("memory plot written to %s" % a.plot, file=sys.stderr if a.json else sys.stdout)
    return 0


def _b(n):
    """Bytes with a binary-unit hint, e.g. '46,137,344 (44.00 MiB)'."""
    if isinstance(n, float):
        return "{:,.2f}".format(n)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return "{:,} ({:.2f} {})".format(n, n / size, unit)
    return "{:,}".format(n)


def print_table(spec, r):
    from rich.console import Console
    from rich.table import Table
    t = Table(title="%s on %s: %d tokens x %d, KV %s, weights %s, align %d" % (
        r["model"], r["board"], r["context"], r["batch"], r["kv_dtype"], r["weights_dtype"], r["align"]))
    t.add_column("item")
    t.add_column("bytes", justify="right")
    rows = (("weights", "weights_bytes"), ("KV per token (all layers)", "kv_bytes_per_token"),
            ("K cache", "k_bytes"), ("V cache", "v_bytes"), ("KV cache total", "kv_cache_bytes"),
            ("  of which padding", "kv_padding_bytes"), ("  of which scales", "kv_scale_bytes"),
            ("activations", "activation_bytes"), ("workspace", "workspace_bytes"), ("total", "total_bytes"),
            ("heap", "heap_bytes"), ("headroom", "headroom_bytes"))
    if r["pool"]:
        rows = rows[:1] + (("KV pool (%d sessions, %d blocks of %d)" % (r["pool"]["handles"], r["pool"]["blocks"],
                                                                       r["pool"]["block"]),
                                  "kv_cache_bytes"),) + rows[-5:]
    for label, key in rows:
        t.add_row(label, _b(r[key]))
        if key == "kv_cache_bytes" and r["pool"]:
            t.add_row("  of which bookkeeping", _b(r["pool"]["meta"]))
            if r["pool"]["shared"]:
                t.add_row("  %d copies of the %d-token prompt instead" % (r["pool"]["sessions"], r["pool"]["shared"]),
                          _b(r["pool"]["copies"]))
        if key == "kv_scale_bytes" and r["kv_residual"]:  # KIVI's hidden cost: R + G - 1 f32 rows per pair
            t.add_row("  of which f32 residual (R %d + 31 rows)" % r["kv_residual"],
                      _b(r["kv_residual_bytes"]))
    capped = " (the search limit: model context or --context)" if r["max_context_capped_by_model"] else ""
    longest = "longest context per session that fits" if r["pool"] else "longest context that fits"
    t.add_row(longest, "{:,} tokens{}".format(r["max_context_tokens"], capped))
    t.add_row("fits", "yes" if r["fits"] else "[red]no[/red]")
    c = Console()
    c.print("%s: %d layers, %d heads, %d KV heads (%s), head_dim %d, sliding window: %s"
            % (spec.name, spec.layers, spec.heads, spec.kv_heads, spec.attention, spec.head_dim,
               spec.window_summary()), highlight=False)
    c.print("source: " + spec.source, highlight=False)
    for n in r["notes"]:
        c.print("note: " + n, highlight=False, markup=False)
    c.print(t)
    for w in r.get("warnings", ()):
        c.print("warning: " + w, highlight=False, markup=False)


def curves(spec, r, align, batch, points=120):
    """Memory (deployment total) against context per storage/eviction strategy: {label: (xs, ys)}."""
    top = max(r["context"], spec.context, 2)
    xs = sorted(set([1, top] + [max(1, round(top * i / (points - 1))) for i in range(points)]))
    fixed = r["weights_bytes"] + r["activation_bytes"] + r["workspace_bytes"]
    windows = spec.windows()
    out = {}
    for dt in STORAGE_CURVES:
        try:
            budget.row_bytes(spec.head_dim, dt)
        except ValueError:  # i4 needs an even head_dim, i2 a multiple of 4
            continue
        out["%s, keep all" % dt] = (xs, [fixed + budget.kv_bytes_layers(windows, spec.kv_heads, spec.head_dim, x, dt,
                                                                         align, batch) for x in xs])
    w = max(16, top // 4)
    sinks = 4
    out["f16, window %d + %d sinks" % (w, sinks)] = (
        xs, [fixed + budget.kv_bytes_layers([w + sinks] * spec.layers, spec.kv_heads, spec.head_dim, x, "f16", align,
                                            batch) for x in xs])
    out["i8, H2O %d slots (with scores)" % (w + sinks)] = (
        xs, [fixed + budget.kv_bytes_layers([w + sinks] * spec.layers, spec.kv_heads, spec.head_dim, x, "i8", align,
                                            batch)
             + batch * budget.h2o_score_bytes(w + sinks) for x in xs])
    return out


def plot(path, spec, r, tgt, align, batch):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if not path.lower().endswith(".png"):
        raise ValueError("%s: --plot writes a PNG file (name it FILE.png)" % path)
    fig, ax = plt.subplots(figsize=(8, 5))
    lo, hi = None, tgt["heap_bytes"]
    for label, (xs, ys) in curves(spec, r, align, batch).items():
        ax.plot(xs, [y / 1024.0 for y in ys], label=label)
        lo = min(ys) if lo is None else min(lo, min(ys))
        hi = max(hi, max(ys))
    ax.axhline(tgt["heap_bytes"] / 1024.0, color="black", linestyle="--", label="heap of %s" % tgt["name"])
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("weights + KV + activations + workspace (KiB)")
    ax.set_title("%s on %s (weights %s, align %d, batch %d)" % (spec.name, tgt["name"], r["weights_dtype"], align,
                                                                batch))
    if lo and hi / lo > 50:
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    try:
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
