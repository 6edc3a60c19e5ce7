# Inner-loop kernels, chosen once: asm (Thumb inline assembler), viper (native machine code with raw pointers,
# MicroPython only), native (@micropython.native), or plain Python (CPython, CircuitPython, any MicroPython).
#
# The switch: kernels.ALLOWED lists the kinds that may be used, best first. To force the plain path (what a
# CircuitPython board runs) set `kvedge.kernels.ALLOWED = ["plain"]` before building an attention object, or
# call select("plain"); on ports with os.getenv, KVEDGE_KERNELS=plain does the same.
# All kinds implement the same functions with the same results (integer kernels are bit-exact).
# asm: @micropython.asm_thumb (Arm ports with the inline assembler; Thumb-1 code, so the RP2040 runs it too).
#
# The modules, one per role and kind: ROLE + KIND, KIND's name with the instruction set it is written in where it
# is one chip's (asm_thumb: Arm only; *_v7m_thumb: Thumb-2, Armv7-M and up; q8_dsp_thumb: Armv7E-M only; q8_asm_xtensa:
# call0 Xtensa only):
#   ""   the float pass's matrix-vector kernels and the integer attention's (plain, native, viper, asm_thumb)
#   q8_  the integer pass's int8 matrix-vector product and its helpers
#   q4_  the integer pass's int4 rows
# and the kinds' shared parts: f32_native (the float kernels viper and asm load), viper_head (the integer
# attention's fused drivers), viper_tier (a tier's cold blocks folded in one call), words (the blocks' word
# indexes), cpuid (the core's DSP instructions). One rule (first) picks a role's module: the kind asked for, or
# the next in KINDS that loads here.
KINDS = ("asm", "viper", "native", "plain")  # every kind, fastest first: the one list of them
FAST = ("asm", "viper")  # the kinds whose integer paths (attention, the int pass) beat the float ones
ALLOWED = list(KINDS)
_SUFFIX = {"asm": "asm_thumb"}  # a kind's module name where it is not the kind's own
_current = None
_kind = None


def _env_allowed():
    try:
        import os
        v = os.getenv("KVEDGE_KERNELS")
    except (ImportError, AttributeError):
        v = None
    return v.split(",") if v else None


def arch():
    """The native-code architecture of this port (sys.implementation._mpy bits 10-13: 0 = none, as on
    CircuitPython; 2 x64; 3-8 Arm Thumb, armv6 to armv7emdp; 9-10 Xtensa), -1 on CPython."""
    import sys
    m = getattr(sys.implementation, "_mpy", None)
    return -1 if m is None else (m >> 10) & 15


def thumb():
    return 3 <= arch() <= 8  # Arm Thumb code: the inline assembler can run here


def runs_here(kind):
    """Whether this port can run a kind's code at all: asm needs Thumb, viper and native need machine code. Kinds
    that cannot are not imported: the failed compile of a large module would cost a parse's worth of heap (and a
    MemoryError there is not a SyntaxError)."""
    return not ((kind == "asm" and not thumb()) or (kind in ("viper", "native") and arch() <= 0))


def module_name(role, kind):
    """The module of `role`'s kernels ("" the kind's own, "q8_", "q4_") of `kind`: kvedge.kernels.ROLE + KIND."""
    return "kvedge.kernels." + role + _SUFFIX.get(kind, kind)


def _import(role, kind):
    """The module ROLE + KIND (see above) if this port runs it and it loads and says OK, else None."""
    if not runs_here(kind):
        return None
    name = module_name(role, kind)
    try:
        mod = getattr(__import__(name).kernels, name[len("kvedge.kernels."):])
    except (ImportError, SyntaxError, NameError, AttributeError, TypeError):
        return None
    return mod if mod.OK else None


def first(role, kind):
    """(module, kind) of `role`'s kernels ("q8_", "q4_") for `kind`, or of the next kind in KINDS that loads here:
    every kind gives the same bits."""
    for k in KINDS[KINDS.index(kind):]:
        mod = _import(role, k)
        if mod is not None:
            return mod, k
    raise ValueError("no %skernels load here" % role)


def _load(kind):
    mod = _import("", kind)
    if mod is not None and _bound[0] and hasattr(mod, "att_bind"):
        mod.att_bind()
    return mod


_bound = [False]


def bind_att():
    """Give the kernel modules the tile's word indexes (kvedge.kernels.words) their att_* kernels read, now and for any
    kind loaded later: kvedge.attention calls it when the integer attention loads. A float-only run never does,
    and never loads kvedge.kernels.words (2,960 bytes of a board's heap, measured on the emulated ESP32 heap)."""
    import sys
    _bound[0] = True
    for kind in KINDS:
        mod = sys.modules.get(module_name("", kind))
        if mod is not None and hasattr(mod, "att_bind"):
            mod.att_bind()


def available():
    """Kinds that load on this runtime and are allowed."""
    allowed = _env_allowed() or ALLOWED
    return [k for k in allowed if k in KINDS and _load(k) is not None]


def select(kind="auto"):
    """Choose the kernels; "auto" takes the best allowed kind that loads, importing no other (each kind's code
    costs heap on a board: the viper module alone ~24 KB on Thumb). Returns the kernel module."""
    global _current, _kind
    kinds = (_env_allowed() or ALLOWED) if kind == "auto" else [kind]
    for k in kinds:
        mod = _load(k) if k in KINDS else None
        if mod is not None:
            _current, _kind = mod, k
            return mod
    raise ValueError("kernels %r not available here (available: %s)" % (kind, ", ".join(available())))


def get():
    return _current or select()


def kind():
    get()
    return _kind
