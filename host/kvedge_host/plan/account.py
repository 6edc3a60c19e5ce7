"""The deployment account shared by `kvedge budget` and `kvedge plan`: every figure from kvedge.budget.

Nothing here computes a size itself; it picks the right kvedge.budget function for a ModelSpec and a memory
target (a board profile or a bare heap) and names the results."""
from kvedge import budget
from kvedge import kernels as kvkernels

from .. import profiles
from ..errors import UserError
from ..validate import show

KV_DTYPES = budget.KV_DTYPES
WEIGHT_DTYPES = budget.WEIGHT_DTYPES


def target(board=None, heap=None, workspace=None):
    """Memory target: a dict with name, heap_bytes, workspace_bytes and the board profile (or None). A heap alone
    is a bare heap; a board with a heap is that board's profile with this heap (the profile's own heap is kept as
    profile_heap_bytes)."""
    if heap is not None:
        check_size("--heap", heap)
    if heap is not None and board is None:
        t = {"name": "--heap %d" % heap, "heap_bytes": heap, "workspace_bytes": 0, "profile": None}
    else:
        board = board or "rp2040"
        prof = profiles.load(board)
        name = board
        if heap is not None and heap != prof["heap_bytes"]:
            name = "%s with a %s-byte heap" % (board, format(heap, ","))
            prof = dict(prof, heap_bytes=heap, profile_heap_bytes=prof["heap_bytes"])
        t = {"name": name, "heap_bytes": prof["heap_bytes"], "workspace_bytes": prof.get("workspace_bytes", 0),
             "profile": prof}
    if workspace is not None:
        check_size("--workspace", workspace, 0)
        t["workspace_bytes"] = workspace
    return t


# The largest value each size flag takes: past these a figure is a typo or a unit error, not a deployment.
SIZE_LIMITS = {"--context": budget.LIMITS["tokens"], "--heap": 1 << 40, "--workspace": 1 << 40,
               "--batch": budget.LIMITS["batch"], "--pick": 1 << 20, "--top": 1 << 20,
               "--align": budget.LIMITS["align"],
               "--sessions": 0x7FFF, "--block": budget.LIMITS["tokens"],  # a pool's holder counts are int16
               "--shared-prompt": budget.LIMITS["tokens"]}


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


def activations(spec, batch=1, tile=32):
    return budget.activation_bytes(spec.dim, spec.hidden_dim, spec.heads, spec.vocab, tile=tile, batch=batch,
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
            residual=None, pool=None):
    """Every figure of `kvedge budget` as a dict (the --json output). residual: KIVI's sliding residual of
    i4/i2 caches (None: one key group; 0: per-token keys, no f32 rows). pool: {"sessions", "block", "shared"}:
    the cache is a PagedPool of that many conversations of `context` tokens, the first `shared` a prompt held once
    (kvedge.poolsizes.pool_bytes; result["pool"]), in place of `batch` caches of their own."""
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
    pooled = None
    if pool is not None:
        pooled = pool_account(spec, context, kv_dtype, align, windows, residual, pool)
        kv = dict(kv, total=pooled["total"])
    dep = budget.deployment_bytes(w, kv["total"], act, ws)
    heap = tgt["heap_bytes"]
    limit = max(spec.context, context)
    fixed = w + act + ws
    max_ctx = 0
    if pooled is not None:
        max_ctx = pool_max_context(spec, kv_dtype, align, pool, heap - fixed, limit)
    elif heap > fixed:
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
        "warnings": lowbit_warnings(kv_dtype, kv, windows, spec, context, align, batch),
        "pool": pooled,
    }


def check_pool(pool, kv_dtype, residual, windows, context):
    """A pool's fields, checked before a figure is computed (UserError naming the flag)."""
    for flag, key, low in (("--sessions", "sessions", 1), ("--block", "block", 1), ("--shared-prompt", "shared", 0)):
        check_size(flag, pool[key], low)
    if pool["shared"] > context:
        raise UserError("--shared-prompt %d: longer than --context %d" % (pool["shared"], context))
    if any(windows):
        raise UserError("--sessions: a paged pool keeps every token of a session; this model's sliding windows are "
                        "not planned in a pool")
    if kv_dtype in budget.LOWBIT and residual != 0:  # None: the default residual of one key group
        raise UserError("--sessions with --kv-dtype %s: a pool needs --residual 0 (KIVI groups span one sequence)"
                        % kv_dtype)


def pool_account(spec, context, kv_dtype, align, windows, residual, pool):
    check_pool(pool, kv_dtype, residual, windows, context)
    r = budget.pool_bytes(spec.layers, spec.kv_heads, spec.head_dim, pool["block"], kv_dtype, align,
                          pool["sessions"], context, pool["shared"])
    if pool["shared"]:
        r["copies"] = budget.pool_bytes(spec.layers, spec.kv_heads, spec.head_dim, pool["block"], kv_dtype, align,
                                        pool["sessions"], context)["total"]
    return dict(r, sessions=pool["sessions"], block=pool["block"], shared=pool["shared"])


def pool_max_context(spec, kv_dtype, align, pool, room, limit):
    """The longest context per session whose pool fits in `room` bytes (the shared prompt included), up to limit."""
    def need(t):
        return budget.pool_bytes(spec.layers, spec.kv_heads, spec.head_dim, pool["block"], kv_dtype, align,
                                 pool["sessions"], t, min(pool["shared"], t))["total"]
    lo, hi = 0, limit
    while lo < hi:  # need() grows with t
        mid = (lo + hi + 1) // 2
        if need(mid) <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo


def lowbit_warnings(kv_dtype, kv, windows, spec, context, align, batch, residual_flag=True):
    """An i4/i2 cache larger than a plainer one at this context (its f32 residual outweighs the packing: SmolLM2-135M
    at 64 tokens, i4 3,340,800 bytes against f32's 2,949,120): one warning naming the plainer caches that are
    smaller, else none. kv: budget.kv_bytes_layers(..., detail=True) of the low-bit cache; residual_flag: the command
    has --residual (budget; plan does not)."""
    if kv_dtype not in budget.LOWBIT:
        return []
    smaller = []
    for dt in ("f32", "f16", "i8"):
        n = budget.kv_bytes_layers(windows, spec.kv_heads, spec.head_dim, context, dt, align, batch)
        if n < kv["total"]:
            smaller.append((dt, n))
    if not smaller:
        return []
    return ["this %s cache (%s bytes, %s of them its f32 residual) is larger than a plainer one at %d tokens: %s "
            "bytes (--kv-dtype %s%s)" % (
                kv_dtype, format(kv["total"], ","), format(kv["residual"], ","), context,
                ", ".join("%s %s" % (dt, format(n, ",")) for dt, n in smaller), min(smaller, key=lambda x: x[1])[0],
                "; or --residual 0, no f32 rows" if residual_flag else "")]


# ---- the runtime's own heap, measured on the emulated board (kvedge footprint; boards/*.json "footprint") ----

KERNEL_KINDS = kvkernels.KINDS  # fastest first
# Heap a plan leaves free beyond its account: a nearly full heap has its last free bytes in holes, and set-up and
# each token's stats line need blocks of a few hundred bytes. Measured on the emulated board with stories260K and
# the stats stream (kvedge plan --margin N, then the plan run there): the least that ran was 2-2.5 % of the usable
# heap (rp2040, viper: 4,202 ran, 3,000 failed; esp32s3: 5,301 ran, 4,000 failed; esp32, plain: 2,000 ran);
# how the last free bytes are split changes from build to build, so a plan keeps 3 %. And at least 5 KB: set-up
# needs a few KB beyond what it keeps (the checkpoint's layout tables, a module's reader while it loads); on the
# esp32 heap a plan that left 3 KB failed while loading the weights, one that left 5 KB ran.
MARGIN_FRACTION = 0.03
MARGIN_MIN = 5120
# Part of that reserve is counted in the plan's total instead, as the runtime's "layout": the heap the runtime's
# code takes depends on how the board reached the run (what boot left, the runner call's text), because the GC is
# conservative: a stale word in a live frame can keep a dead object's tree alive. Measured on the emulated esp32
# (plain kernels, float pass, `tools/bench_layout.py --board esp32`): the same plan peaked at its total with one
# runner call and 1,330 bytes above it (2.0 % of the code) with another that differed by `tier=None`. A plan counts
# LAYOUT_FRACTION of the code, so its total holds the peak it promises; the rest of the reserve stays free (the
# least that ran on the esp32 was 2,000 free beyond the total without it, above).
LAYOUT_FRACTION = 0.025


INT_KEY = "int_"  # footprint keys of the integer pass: runtime_int_asm, loop_int_asm, tiered_int_asm


def kernel_kinds(prof):
    """Kernel kinds with a measured footprint on this profile, fastest first."""
    fp = (prof or {}).get("footprint") or {}
    return [k for k in KERNEL_KINDS if "runtime_" + k in fp]


def footprint_key(kind, forward="float"):
    """The suffix of a runtime's footprint keys: the kind ("asm": runtime_asm), the integer pass's INT_KEY + kind."""
    return (INT_KEY if forward == "int" else "") + kind


def int_measured(prof):
    """Kernel kinds whose integer pass has a measured footprint on this profile (kvedge footprint runs it with
    the kinds that make it the fastest pass: kvedge.model.passes.FAST_KERNELS), fastest first."""
    fp = (prof or {}).get("footprint") or {}
    return [k for k in KERNEL_KINDS if "runtime_" + footprint_key(k, "int") in fp]


def loads_floats(kv, forward):
    """Whether a run of this pass on a cache of these plan fields loads the float kernels the viper and asm kinds
    take on their first call (kvedge.kernels.viper's stubs, kvedge.kernels.f32_native): the float pass (mv_*), or f32
    rows the integer attention converts (att_conv_f32: a prefix, KIVI's residual of an i4/i2 cache). The float
    pass's measured footprint holds them; the integer pass's does not (footprint floats_int_*)."""
    return forward == "float" or bool(kv.get("prefix")) or kv.get("dtype") in budget.LOWBIT


class Runtime:
    """What kvedge's runner takes of a board's heap with one kernel kind, from the profile's measured footprint:
    the usable heap (the GC span less its tables), the heap taken before kvedge runs (boot), the runner's code and
    first-run state, the stats stream, the generation loop, and the largest block left for a single allocation.
    A profile whose heap is larger than the image it was measured on (PSRAM) is scaled: its GC tables take the
    same share, and the runtime leaves the same holes beside the largest block."""

    def __init__(self, prof, kind, heap=None, forward="float"):
        fp = prof["footprint"]
        key = footprint_key(kind, forward)
        if "runtime_" + key not in fp:
            raise ValueError("no measured %s footprint for %s (kvedge footprint --board %s --write)"
                             % (key, prof.get("name"), prof.get("name")))
        self.kind = kind
        self.forward = forward  # the pass whose code and first-run state were measured: float or int
        self.heap = heap or prof["heap_bytes"]
        self.image = fp["heap_image"]
        if self.heap == self.image:
            self.usable = fp["heap_usable"]
        else:
            self.usable = self.heap * fp["heap_usable"] // self.image
        self.boot = fp["boot_bytes"]
        self.code = fp["runtime_" + key]
        self.telemetry = fp.get("telemetry_bytes", 0)
        self.evict = fp.get("evict_bytes", 0)
        self.split = fp.get("split_bytes")  # kvedge.kvsplit (K and V apart); None: not measured, no split plan
        self.tiered = fp.get("tiered_" + key)  # None: not measured (or does not fit): no tiered plan counted on it
        # the float kernels the viper and asm kinds load on first use: the integer pass loads them for f32 rows
        self.floats = fp.get("floats_" + key, 0)
        # int4 rows' reader and q4 kernels, which a run of int4 weights loads (None: not measured, no int4 plan)
        self.int4 = fp.get("int4_" + key)
        # a pool plan's runner and the pool (kvedge.model.runpool, kvedge.paged, kvedge.pooled; None: not measured,
        # no pool plan counted on it)
        self.pool = fp.get("pool_" + key)
        self.encode = fp.get("encode_bytes", 0)  # kvedge.model.bpe, loaded by a run with a prompt
        self.loop = fp.get("loop_" + key, 0)
        self.file = fp.get("file_bytes", 0)  # one open file (the filesystem's buffers)
        # plain kernels run the float attention path, whose tile only batches scores: 8 costs little time and
        # 1.1 KB less heap than 32 (stories260K); the integer kernels fold 32 tokens a call
        self.tile = 8 if kind == "plain" else 32
        # the block a run's arena takes at start-up (kvedge.model.run.main(kv_bytes=...)); a larger heap than the
        # image's has the same start-up allocations below it
        self.largest = self.usable - (fp["heap_usable"] - fp["largest_bytes"])
        self.layout = int(LAYOUT_FRACTION * self.code)  # counted in the total (fixed())
        self.margin = max(MARGIN_MIN, int(MARGIN_FRACTION * self.usable)) - self.layout  # kept free beyond it

    def fixed(self):
        """Heap the runtime takes whatever the model: boot, code + first-run state, stats stream, prompt encoder,
        loop, and the code's layout allowance."""
        return self.boot + self.code + self.telemetry + self.encode + self.loop + self.layout

    def limit(self):
        """What a plan's total may reach: the usable heap less the margin."""
        return self.usable - self.margin

    def block_limit(self, h2o=False):
        """What the largest single allocation (the arena, allocated first) may reach: the largest free block at
        start-up less the whole reserve (the margin and the layout allowance: the arena is allocated before the
        code it allows for is loaded)."""
        return self.largest - self.margin - self.layout


# ---- the runner's own parts (kvedge.model.llama's formulas, for any Llama-shaped model) ----

H2O_STATE_BYTES = 256  # kvedge.model.llama counts a policy as its per-slot scores + this


class _Shape:
    """The fields of kvedge.model.header.ModelConfig that the runner's formulas read."""

    def __init__(self, spec):
        self.dim, self.hidden_dim, self.n_layers = spec.dim, spec.hidden_dim, spec.layers
        self.n_heads, self.n_kv_heads, self.head_dim = spec.heads, spec.kv_heads, spec.head_dim
        self.kv_dim = spec.kv_heads * spec.head_dim
        self.vocab_size = spec.vocab
        self.shared_classifier = spec.shared_classifier


def runner_shape(spec):
    return _Shape(spec)


def runner_scratch(shape, weights_dtype, stream=False):
    """The runner's buffers beyond budget.activation_bytes (kvedge.model.sizes.float_scratch_bytes)."""
    from kvedge.model import sizes as msizes
    return msizes.float_scratch_bytes(shape, weights_dtype, stream)


def runner_objects(shape, cfg, word=4, tile=32, kernels="plain"):
    """The runner's Python objects for a cache config (kvedge.model.llama.object_bytes, `word`-byte pointers),
    with the integer attention path's scratch when those kernels run it."""
    from kvedge.model import llama
    return llama.object_bytes(shape, cfg, tile, word, cfg.dtype in budget.INT_CODES and kernels in kvkernels.FAST)
