# Inner-loop kernels, chosen once: asm (Thumb inline assembler), viper (native machine code with raw pointers,
# MicroPython only), native (@micropython.native), or plain Python (CPython, CircuitPython, any MicroPython).
#
# The switch: kernels.ALLOWED lists the kinds that may be used, best first. To force the plain path (what a
# CircuitPython board runs) set `kvedge.kernels.ALLOWED = ["plain"]` before building an attention object, or
# call select("plain"); on ports with os.getenv, KVEDGE_KERNELS=plain does the same.
# All kinds implement the same functions with the same results (integer kernels are bit-exact).
# asm: @micropython.asm_thumb (Arm ports with the inline assembler; Thumb-1 code, so the RP2040 runs it too).
KINDS = ("asm", "viper", "native", "plain")  # every kind, fastest first: the one list of them
FAST = ("asm", "viper")  # the kinds whose integer paths (attention, the int pass) beat the float ones
ALLOWED = list(KINDS)
_MODULES = {"asm": "kvedge.kernels_asm", "viper": "kvedge.kernels_viper", "native": "kvedge.kernels_native",
            "plain": "kvedge.kernels_plain"}
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


def _load(kind):
    # kinds this port cannot compile are not imported at all: the failed compile of a large module would cost
    # a parse's worth of heap (and a MemoryError there is not a SyntaxError)
    if (kind == "asm" and not thumb()) or (kind in ("viper", "native") and arch() == 0):
        return None
    name = _MODULES[kind]
    try:
        mod = __import__(name)
    except (ImportError, SyntaxError, NameError, AttributeError, TypeError):
        return None
    for part in name.split(".")[1:]:
        mod = getattr(mod, part)
    if not mod.OK:
        return None
    if _bound[0] and hasattr(mod, "att_bind"):
        mod.att_bind()
    return mod


_bound = [False]


def bind_att():
    """Give the kernel modules the tile's word indexes (kvedge.layout) their att_* kernels read, now and for any
    kind loaded later: kvedge.attention calls it when the integer attention loads. A float-only run never does,
    and never loads kvedge.layout (2,960 bytes of a board's heap, measured on the emulated ESP32 heap)."""
    import sys
    _bound[0] = True
    for name in _MODULES.values():
        mod = sys.modules.get(name)
        if mod is not None and hasattr(mod, "att_bind"):
            mod.att_bind()


def available():
    """Kinds that load on this runtime and are allowed."""
    allowed = _env_allowed() or ALLOWED
    return [k for k in allowed if k in _MODULES and _load(k) is not None]


def select(kind="auto"):
    """Choose the kernels; "auto" takes the best allowed kind that loads, importing no other (each kind's code
    costs heap on a board: the viper module alone ~24 KB on Thumb). Returns the kernel module."""
    global _current, _kind
    kinds = (_env_allowed() or ALLOWED) if kind == "auto" else [kind]
    for k in kinds:
        mod = _load(k) if k in _MODULES else None
        if mod is not None:
            _current, _kind = mod, k
            return mod
    raise ValueError("kernels %r not available here (available: %s)" % (kind, ", ".join(available())))


def get():
    return _current or select()


def kind():
    get()
    return _kind
