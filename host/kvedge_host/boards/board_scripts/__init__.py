"""Scripts the host sends to a board: MicroPython source in files of their own, each read here as a file.

Every other module in this folder runs on a board (MicroPython, CircuitPython or the unix port), never on the
host: standard library only, no f-strings, and each compiles with mpy-cross (tests/host/test_mpy_cross.py). They
are not part of the device package (`device/kvedge`, which `kvedge deploy` and mip install on a board): the host
sends them when a command needs them (the footprint probe, the emulated board's RAM disk, deploy's inventory, the
device side of `kvedge check`), so a board pays no flash for them. They live in the host package so that
`pip install kvedge` ships them with the commands that read them.

A script that takes parameters reads them from names the host prepends as a header (`source(name, NAME=value)`:
one line `NAME = repr(value)` each, or `_NAME = const(value)` with `const=True`, which MicroPython folds into the
bytecode and keeps out of the module's globals); the script's own header comment lists them."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
# scripts in Thumb inline assembler, for the emulated Arm boards only (the RAM disk's word copy): mpy-cross for
# another arch (x64, xtensawin) refuses them, and no host command sends them anywhere else
THUMB_ONLY = ("_m3disk",)
# and in Xtensa (call0) inline assembler, for the emulated Xtensa lx106 only (its RAM disk's copy): xtensa alone
XTENSA_ONLY = ("_xtdisk",)


def path(name):
    """The host path of board script `name` (a module name, no .py)."""
    p = os.path.join(HERE, name + ".py")
    if name.startswith("__") or not os.path.isfile(p):
        raise FileNotFoundError("no board script %r in %s" % (name, HERE))
    return p


def names():
    """Every board script's name, sorted."""
    return sorted(n[:-3] for n in os.listdir(HERE) if n.endswith(".py") and not n.startswith("__"))


def source(name, const=False, **params):
    """Board script `name`'s code (its leading comment block left out: a snippet sent to a raw REPL stays in the
    heap while it runs) after a header assigning `params` (in the order given)."""
    with open(path(name), encoding="utf-8") as f:
        lines = f.read().splitlines(True)
    i = 0
    while i < len(lines) and lines[i].startswith("#"):
        i += 1  # the leading comment block documents the script for its readers; the board gets the code
    text = "".join(lines[i:])
    if const:
        head = "".join("_%s = const(%d)\n" % (k, _int(k, v)) for k, v in params.items())
    else:
        head = "".join("%s = %r\n" % (k, v) for k, v in params.items())
    return head + text


def _int(k, v):
    if type(v) is not int:
        raise TypeError("const parameter %s must be an int, not %r" % (k, v))
    return v
