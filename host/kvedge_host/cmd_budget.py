"""Memory account of a model on a board: weights, KV cache (K and V), activations, workspace, longest context."""
import json

from rich.console import Console
from rich.table import Table

from kvedge import budget
from . import boards, models


def add_arguments(p):
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="llama2.c .bin checkpoint")
    src.add_argument("--preset", help="built-in model: " + ", ".join(sorted(models.PRESETS)))
    p.add_argument("--context", type=int, help="tokens to cache (default: the model's context)")
    p.add_argument("--kv-dtype", default="f32", choices=budget.KV_DTYPES)
    p.add_argument("--weights-dtype", default="f32", choices=budget.WEIGHT_DTYPES)
    p.add_argument("--align", type=int, default=0, help="pad each row to this many bytes (0 = none)")
    hp = p.add_mutually_exclusive_group()
    hp.add_argument("--board", default="rp2040")
    hp.add_argument("--heap", type=int, help="usable heap bytes instead of a board profile")
    p.add_argument("--json", action="store_true")


def account(spec, context, kv_dtype, weights_dtype, heap, workspace, align=0):
    """Every figure of the budget, from kvedge.budget's formulas."""
    params = budget.llama_params(spec.dim, spec.hidden_dim, spec.layers, spec.heads, spec.kv_heads, spec.vocab,
                                 spec.shared_classifier, spec.head_dim)
    w = budget.weights_bytes(params, weights_dtype)
    kv = budget.kv_bytes(spec.layers, spec.kv_heads, spec.head_dim, context, kv_dtype, align, detail=True)
    act = budget.activation_bytes(spec.dim, spec.hidden_dim, spec.heads, spec.vocab, head_dim=spec.head_dim)
    dep = budget.deployment_bytes(w, kv["total"], act, workspace)
    fixed = w + act + workspace
    max_ctx = budget.max_tokens_for_budget(max(heap - fixed, 0), spec.layers, spec.kv_heads, spec.head_dim,
                                           kv_dtype, align, limit=max(spec.context, 1))
    return {
        "model": spec.name, "context": context, "kv_dtype": kv_dtype, "weights_dtype": weights_dtype,
        "weights_bytes": w, "kv_bytes_per_token": kv["total"] // context if context else 0,
        "kv_cache_bytes": kv["total"], "k_bytes": kv["k"], "v_bytes": kv["v"], "kv_padding_bytes": kv["padding"],
        "activation_bytes": act, "workspace_bytes": workspace, "total_bytes": dep["total"], "heap_bytes": heap,
        "headroom_bytes": heap - dep["total"], "max_context_tokens": max_ctx, "fits": dep["total"] <= heap,
    }


def run(a):
    spec = models.load(a.model, a.preset)
    context = a.context or spec.context
    budget.check_int("tokens", context)
    if a.heap is not None:
        budget.check_int("heap", a.heap)
        heap, workspace, where = a.heap, 0, "--heap"
    else:
        prof = boards.load(a.board)
        heap, workspace, where = prof["heap_bytes"], prof.get("workspace_bytes", 0), a.board
    r = account(spec, context, a.kv_dtype, a.weights_dtype, heap, workspace, a.align)
    r["board"] = where
    if a.json:
        print(json.dumps(r, indent=2))
        return 0
    t = Table(title="%s on %s, %d tokens, KV %s, weights %s" % (spec.name, where, context, a.kv_dtype,
                                                                a.weights_dtype))
    t.add_column("item")
    t.add_column("bytes", justify="right")
    for label, key in (("weights", "weights_bytes"), ("KV per token", "kv_bytes_per_token"),
                       ("K cache", "k_bytes"), ("V cache", "v_bytes"), ("KV cache total", "kv_cache_bytes"),
                       ("  of which padding", "kv_padding_bytes"), ("activations", "activation_bytes"),
                       ("workspace", "workspace_bytes"), ("total", "total_bytes"), ("board heap", "heap_bytes"),
                       ("headroom", "headroom_bytes")):
        t.add_row(label, "{:,}".format(r[key]))
    t.add_row("longest context that fits", "{:,} tokens".format(r["max_context_tokens"]))
    t.add_row("fits", "yes" if r["fits"] else "[red]no[/red]")
    Console().print(t)
    return 0
