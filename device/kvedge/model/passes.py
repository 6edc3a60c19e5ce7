# Which forward pass runs a model: the rule, written once. The runner (forward="auto"), the planner (the plan's
# "forward" field) and the host's account import it from here.
#
#   int    kvedge.model.pass_int: int8 or int4 weights, integer codes end to end, no float and no allocation per token;
#          the fastest pass wherever the asm or viper kernels load (6 M instructions a token on the emulated
#          Cortex-M3 for stories260K against 50 M for the float pass; docs/benchmarks.md)
#   ulab   kvedge.model.pass_ulab: float32 through ulab arrays (CircuitPython boards: no viper, no asm)
#   float  kvedge.model.llama's own pass: f32 and int8 weights, every cache kind, every kernel kind (int4 weights run
#          on the integer pass only, with any kernels)
from kvedge import kernels

FLOAT = "float"
INT = "int"
ULAB = "ulab"
AUTO = "auto"
FORWARDS = (INT, ULAB, FLOAT)

FAST_KERNELS = kernels.FAST  # kernel kinds whose integer pass is faster than the float pass
INT_WEIGHTS = ("i8", "i4")
INT_ONLY_WEIGHTS = ("i4",)  # weights only the integer pass reads
INT_CACHE = ("i8",)  # cache dtypes the integer pass stores into (a tiered cache: its ring)
INT_COLD = ("i8", "i4")  # cold-block dtypes a tiered cache attends on the integer path
INT_KINDS = ("keep", "prefix", "h2o", "sinks", "window", "shorter", "tiered")  # plan kinds the integer pass runs
ULAB_KINDS = ("keep", "window", "sinks", "shorter")  # every slot in order (attention does not care): no eviction
# prompts a chunk of tokens at a time (kvedge.model.prefill): the integer pass, at most MAX_PREFILL a chunk, and
# only kinds whose positions go to fresh slots in order (a policy or a tier places them one at a time)
PREFILL_FORWARDS = (INT,)
PREFILL_KINDS = ("keep", "prefix", "sinks", "window", "shorter")
MAX_PREFILL = 256


def int_runs(wdtype, dtype, kind="keep", cold=None):
    """Whether the integer pass can run this model and cache (whatever the kernels)."""
    if wdtype not in INT_WEIGHTS or dtype not in INT_CACHE:
        return False
    if kind == "tiered":
        return cold in INT_COLD
    return kind in INT_KINDS


def ulab_runs(wdtype, dtype, kind="keep", prefix=0, stream=False, policy=False):
    """Whether the ulab pass can run it (where ulab imports): int8 weights in RAM, an i8 cache without a prefix,
    no eviction policy."""
    return wdtype == "i8" and dtype == "i8" and not prefix and not stream and not policy and \
        kind in ULAB_KINDS


def choose(wdtype, dtype, kernel_kind, kind="keep", cold=None, prefix=0, stream=False, policy=False, ulab=False):
    """The fastest pass for a model with `wdtype` weights and a `dtype` cache of plan kind `kind` (tiered: `cold`
    blocks), run with `kernel_kind` kernels (one of kvedge.kernels.KINDS); ulab: the runtime has ulab."""
    if (kernel_kind in FAST_KERNELS or wdtype in INT_ONLY_WEIGHTS) and int_runs(wdtype, dtype, kind, cold):
        return INT
    if ulab and ulab_runs(wdtype, dtype, kind, prefix, stream, policy):
        return ULAB
    return FLOAT


def check_prefill(prefill, forward):
    """ValueError unless `prefill` (prompt tokens a chunk) is an int in 1..MAX_PREFILL, above 1 on a pass that
    takes chunks."""
    if type(prefill) is not int or prefill < 1 or prefill > MAX_PREFILL or (prefill > 1 and
                                                                              forward not in PREFILL_FORWARDS):
        raise ValueError("prefill must be an int in 1..%d, above 1 on the integer pass, got %r (%s pass)"
                         % (MAX_PREFILL, prefill, forward))


def has_ulab():
    """Whether ulab imports here (CircuitPython's builtin; no file to load)."""
    try:
        import ulab  # noqa: F401
        return True
    except ImportError:
        return False
