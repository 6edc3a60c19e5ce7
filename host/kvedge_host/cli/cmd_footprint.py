"""Measure the runtime's own heap on the emulated 32-bit board: code per module and kernel kind, a first run's
residue, the generation loop, the largest free block (kvedge.footprint); --write records it in the profile.

    kvedge footprint --board esp32            # print the figures
    kvedge footprint --board esp32 --write    # and record them in boards/esp32.json (what kvedge plan counts)
    kvedge footprint --board all --write      # every profile with a footprint, after a change to the runner's code

Runs on the emulated board that stands for the profile (kvedge_host.boards.m3board.layout_for: the Cortex-M0,
M7 or Xtensa lx106 where its qemu and image are here, else the Cortex-M3, saying so); needs qemu-system-arm and the
Cortex-M3 firmware images (../shared/runtimes/micropython-cortex-m3) at least; exits 2 with the reason when they
are absent."""
import json

from .. import profiles
from ..boards import footprint, runtimes
from ..errors import UserError


def add_arguments(p):
    p.add_argument("--board", default="rp2040",
                   help="board profile to measure (default rp2040); all: every profile with a footprint, one after "
                        "another (what to run when the runner's code changed: a stale footprint fails the demo test)")
    p.add_argument("--kernels", metavar="KINDS",
                   help="comma-separated kernel kinds (default: asm on Arm chips, viper, native, plain; plain on "
                        "CircuitPython)")
    p.add_argument("--write", action="store_true", help="record the figures in boards/BOARD.json")
    p.add_argument("--json", action="store_true", help="print the raw measurements as JSON")


def measured_profiles():
    """The profiles `--board all` measures: those with a footprint (the unix profile describes the host's port)."""
    return [n for n in profiles.names() if profiles.load(n).get("footprint")]


def run(a):
    names = measured_profiles() if a.board == "all" else [a.board]
    for name in names:
        profiles.load(name)
    kinds = None
    if a.kernels is not None:
        kinds = tuple(k.strip() for k in a.kernels.split(","))
        for i, k in enumerate(kinds):
            if not k:  # "asm,,plain", a trailing comma, "": a kind left out is a typo, not a default
                raise UserError("--kernels %r: kind %d of %d is empty (comma-separated kinds: %s)"
                                % (a.kernels, i + 1, len(kinds), ", ".join(footprint.KINDS)))
            if k not in footprint.KINDS:
                raise UserError("--kernels: unknown kind %r (choose from %s)" % (k, ", ".join(footprint.KINDS)))
            if k in kinds[:i]:
                raise UserError("--kernels %r: %s is named twice" % (a.kernels, k))
    for name in names:  # every board can be measured here, before any is measured (or any profile written)
        why = _missing(name)
        if why:
            raise UserError("the emulated board cannot run here (%s): %s" % (name, why))
    out = {}
    for name in names:
        out[name] = _one(a, name, kinds)
    if a.json:
        print(json.dumps(out[a.board] if a.board != "all" else out, indent=2))
    return 0


def _missing(name):
    prof = profiles.load(name)
    if prof.get("runtime") == "circuitpython":
        return None if runtimes.circuitpython_bin() else "no CircuitPython interpreter in ../shared/runtimes"
    return footprint.missing(name, footprint.image_heap(prof))


def _one(a, name, kinds):
    """Measure one profile (and with --write record it); returns what --json prints for it."""
    from ..boards.m3board import M3Missing
    prof = profiles.load(name)
    try:
        res = footprint.measure(name, kinds, log=None if a.json else lambda m: print("footprint: " + m, flush=True))
    except M3Missing as e:
        raise UserError("the emulated board cannot run here: %s" % e)
    fp = footprint.figures(res)
    if not a.json:
        report(name, prof, res, fp)
    if a.write:
        footprint.record(name, res)
        if not a.json:
            print("recorded in boards/%s.json (footprint, with this command, the firmware and today's date in "
                  "sources)" % name)
    return {"measured": res, "footprint": fp}


def report(board, prof, res, fp):
    from rich.console import Console
    from rich.table import Table
    c = Console()
    kinds = list(res["kinds"])
    c.print("%s: %s, heap %s bytes (image %s: usable %s, %s allocated at boot)" % (
        board, res["firmware"], format(prof["heap_bytes"], ","), format(res["heap_image"], ","),
        format(fp["heap_usable"], ","), format(fp["boot_bytes"], ",")), highlight=False)
    t = Table(title="heap taken by importing each module (.mpy, -march=%s), bytes" % res["march"])
    t.add_column("module")
    for k in kinds:
        t.add_column(k.replace(footprint.INT, "") + " int pass" if k.startswith(footprint.INT) else k,
                     justify="right")
    names = []  # every module any run imported, in import order (the integer pass's runs import more)
    for k in kinds:
        names += [n for n in res["kinds"][k]["modules"] if n not in names]
    for n in names:
        t.add_row(n, *[format(res["kinds"][k]["modules"].get(n, 0), ",") for k in kinds])
    for mod in footprint.OPTIONAL.values():
        t.add_row(mod + " (when used)", *[format(res["kinds"][k]["optional"].get(mod, 0), ",") for k in kinds])
    t.add_row("first run's residue", *[format(res["kinds"][k].get("warm", 0), ",") for k in kinds])
    t.add_row("runtime (counted by plan)", *[format(fp["runtime_" + k], ",") if "runtime_" + k in fp else "-"
                                             for k in kinds])
    t.add_row("generation loop", *[format(fp.get("loop_" + k, 0), ",") if "loop_" + k in fp else "-"
                                   for k in kinds])
    c.print(t)
    c.print("largest free block at start-up (where a run allocates its KV arena): %s bytes"
            % format(fp["largest_bytes"], ","), highlight=False)
    for k in kinds:
        r = res["kinds"][k]
        if "nofit" in r:
            c.print("%s kernels: the runtime does not fit this heap (MemoryError: %s)" % (k, r["nofit"]),
                    highlight=False)
