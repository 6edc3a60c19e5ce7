"""Measure the runtime's own heap on the emulated 32-bit board: code per module and kernel kind, a first run's
residue, the generation loop, the largest free block (kvedge.footprint); --write records it in the profile.

    kvedge footprint --board esp32            # print the figures
    kvedge footprint --board esp32 --write    # and record them in boards/esp32.json (what kvedge plan counts)

Needs qemu-system-arm and the Cortex-M3 firmware images (../shared/runtimes/micropython-cortex-m3); exits 2 with
the reason when they are absent."""
import json

from . import boards, footprint
from .cli import UserError


def add_arguments(p):
    p.add_argument("--board", default="rp2040", help="board profile to measure (default rp2040)")
    p.add_argument("--kernels", metavar="KINDS",
                   help="comma-separated kernel kinds (default: asm on Arm chips, viper, native, plain; plain on "
                        "CircuitPython)")
    p.add_argument("--write", action="store_true", help="record the figures in boards/BOARD.json")
    p.add_argument("--json", action="store_true", help="print the raw measurements as JSON")


def run(a):
    prof = boards.load(a.board)
    kinds = None
    if a.kernels:
        kinds = tuple(k.strip() for k in a.kernels.split(",") if k.strip())
        bad = [k for k in kinds if k not in footprint.KINDS]
        if bad or not kinds:
            raise UserError("--kernels: unknown kind %r (choose from %s)" % ((bad or [a.kernels])[0],
                                                                           ", ".join(footprint.KINDS)))
    from .m3board import M3Missing
    try:
        res = footprint.measure(a.board, kinds, log=None if a.json else lambda m: print("footprint: " + m,
                                                                                          flush=True))
    except M3Missing as e:
        raise UserError("the emulated board cannot run here: %s" % e)
    fp = footprint.figures(res)
    if a.json:
        print(json.dumps({"measured": res, "footprint": fp}, indent=2))
    else:
        report(a.board, prof, res, fp)
    if a.write:
        footprint.record(a.board, res)
        if not a.json:
            print("recorded in boards/%s.json (footprint, with this command, the firmware and today's date in "
                  "sources)" % a.board)
    return 0


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
        t.add_column(k, justify="right")
    names = list(next(iter(res["kinds"].values()))["modules"])
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
