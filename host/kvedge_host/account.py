"""The deployment account shared by `kvedge budget` and `kvedge plan`: every figure from kvedge.budget.

Nothing here computes a size itself; it picks the right kvedge.budget function for a ModelSpec and a memory
target (a board profile or a bare heap) and names the results."""
from kvedge import budget

from . import boards
from .cli import UserError
from .validate import show

KV_DTYPES = budget.KV_DTYPES
WEIGHT_DTYPES = budget.WEIGHT_DTYPES


def target(board=None, heap=None, workspace=None):
    """Memory target: a dict with name, heap_bytes, workspace_bytes and the board profile (or None)."""
    if heap is not None:
        check_size("--heap", heap)
        prof = None
        t = {"name": "--heap %d" % heap, "heap_bytes": heap, "workspace_bytes": 0, "profile": None}
    else:
        prof = boards.load(board)
        t = {"name": board, "heap_bytes": prof["heap_bytes"], "workspace_bytes": prof.get("workspace_bytes", 0),
             "profile": prof}
    if workspace is not None:
        check_size("--workspace", workspace, 0)
        t["workspace_bytes"] = workspace
    return t


# The largest value each size flag takes: past these a figure is a typo or a unit error, not a deployment.
SIZE_LIMITS = {"--context": budget.LIMITS["tokens"], "--heap": 1 << 40, "--workspace": 1 << 40,
               "--batch": budget.LIMITS["batch"], "--pick": 1 << 20, "--top": 1 << 20,
               "--align": budget.LIMITS["align"]}


def check_size(flag, value, minimum=1, maximum=None):
    """A size flag's value in minimum..maximum (default SIZE_LIMITS[flag]); one-line error naming the flag."""
    if maximum is None:
        maximum = SIZE_LIMITS.get(flag, 1 << 40)
    if value < minimum:
        raise UserError("%s must be %s, got %d" % (flag, "positive" if minimum == 1 else ">= %d" % minimum, value))
    if value > maximum:
        raise UserError("%s must be at most %s, got %s" % (flag, format(maximum, ","), show(value)))
    return value


def check_align(flag, align):
    """--align: 0 (no padding), 1, or a power of two up to kvedge.budget.LIMITS["align"]."""
    check_size(flag, align, 0)
    if align > 1 and align & (align - 1):
        raise UserError("%s must be 0, 1 or a power of two, got %d" % (flag, align))
    return align


def check_kv_dtype(dtype):
    if dtype not in KV_DTYPES:
        raise UserError("unknown KV dtype %r (choose from %s)" % (dtype, ", ".join(KV_DTYPES)))
    return dtype


def check_weights_dtype(dtype):
    if dtype is not None and dtype not in WEIGHT_DTYPES:
        raise UserError("unknown weights dtype %r (choose from %s)" % (dtype, ", ".join(WEIGHT_DTYPES)))
    return dtype


def params(spec):
    return budget.llama_params(spec.dim, spec.hidden_dim, spec.layers, spec.heads, spec.kv_heads, spec.vocab,
                               spec.shared_classifier, spec.head_dim)


def weights(spec, dtype=None):
    """(bytes, label): the file's exact tensor bytes when the source holds weights and no dtype is asked,
    else kvedge.budget.weights_bytes() of the Llama-style parameter count in `dtype` (default: the source's)."""
    if dtype is None and spec.weights_file_bytes is not None:
        return spec.weights_file_bytes, "file"
    dtype = dtype or spec.weights_dtype
    return budget.weights_bytes(params(spec), dtype), dtype


def activations(spec, batch=1):
    return budget.activation_bytes(spec.dim, spec.hidden_dim, spec.heads, spec.vocab, batch=batch,
                                   head_dim=spec.head_dim)


def kv_per_token(spec, dtype, align, batch=1, group=budget.QK):
    """Bytes one more token adds while every layer still grows (i4: averaged over one key group)."""
    if dtype in budget.LOWBIT:
        g = budget.kv_bytes_growth(spec.layers, spec.kv_heads, spec.head_dim, group, dtype, align, group) * batch
        return g // group if g % group == 0 else g / group
    return budget.kv_bytes_per_token(spec.layers, spec.kv_heads, spec.head_dim, dtype, align) * batch


def check_residual(kv_dtype, residual, group=budget.QK):
    """KIVI's sliding residual (i4/i2 only): None = the default (one group), else 0 or a multiple of group."""
    if residual is None:
        return None
    if kv_dtype not in budget.LOWBIT:
        raise UserError("--residual applies to %s caches only, not %s" % (" and ".join(budget.LOWBIT), kv_dtype))
    if residual < 0 or residual % group or residual > budget.LIMITS["residual"]:
        raise UserError("--residual must be 0 or a multiple of the key group (%d), at most %d, got %d"
                        % (group, budget.LIMITS["residual"], residual))
    return residual


def account(spec, context, kv_dtype, tgt, weights_dtype=None, align=0, batch=1, windows=None, weights_bytes=None,
            residual=None):
    """Every figure of `kvedge budget` as a dict (the --json output). residual: KIVI's sliding residual of
    i4/i2 caches (None: one key group; 0: per-token keys, no f32 rows)."""
    check_kv_dtype(kv_dtype)
    check_residual(kv_dtype, residual)
    check_weights_dtype(weights_dtype)
    budget.check_int("tokens", context)
    budget.check_int("batch", batch)
    budget.check_align(align)
    windows = spec.windows() if windows is None else windows
    if weights_bytes is None:
        w, wlabel = weights(spec, weights_dtype)
    else:
        w, wlabel = weights_bytes, "given"
    kv = budget.kv_bytes_layers(windows, spec.kv_heads, spec.head_dim, context, kv_dtype, align, batch,
                                residual=residual, detail=True)
    act = activations(spec, batch)
    ws = tgt["workspace_bytes"]
    dep = budget.deployment_bytes(w, kv["total"], act, ws)
    heap = tgt["heap_bytes"]
    limit = max(spec.context, context)
    fixed = w + act + ws
    max_ctx = 0
    if heap > fixed:
        max_ctx = budget.max_context_for_budget(heap - fixed, windows, spec.kv_heads, spec.head_dim, kv_dtype, align,
                                                batch, residual=residual, limit=limit)
    return {
        "model": spec.name, "source": spec.source, "layers": spec.layers, "heads": spec.heads,
        "kv_heads": spec.kv_heads, "head_dim": spec.head_dim, "attention": spec.attention,
        "sliding_window": spec.window_summary(), "layer_windows": list(windows) if any(windows) else [],
        "context": context, "batch": batch, "kv_dtype": kv_dtype, "align": align,
        "weights_dtype": wlabel, "weights_bytes": w,
        "kv_bytes_per_token": kv_per_token(spec, kv_dtype, align, batch),
        "kv_cache_bytes": kv["total"], "k_bytes": kv["k"], "v_bytes": kv["v"],
        "kv_padding_bytes": kv["padding"], "kv_scale_bytes": kv["meta"], "kv_residual_bytes": kv["residual"],
        "kv_residual": (budget.QK if residual is None else residual) if kv_dtype in budget.LOWBIT else 0,
        "activation_bytes": act, "workspace_bytes": ws, "total_bytes": dep["total"],
        "board": tgt["name"], "heap_bytes": heap, "headroom_bytes": heap - dep["total"],
        "max_context_tokens": max_ctx, "max_context_capped_by_model": max_ctx == limit and limit > 0,
        "fits": dep["total"] <= heap, "notes": list(spec.notes) + (
            ["context %d is longer than the model's trained context %d" % (context, spec.context)]
            if spec.context and context > spec.context else []),
    }
