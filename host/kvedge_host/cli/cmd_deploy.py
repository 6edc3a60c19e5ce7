"""Copy the device package to a board through mpremote (only changed files), then import it there and check
its version. With --mpy the files are compiled by mpy-cross for the board's -march, so viper kernels run as
machine code for that chip. With --drive PATH, to a CircuitPython board's CIRCUITPY drive instead: the package in
lib/kvedge, the plan, weights and tokenizer, and a code.py that the board runs on its own."""
import sys

from .. import profiles
from ..boards.deploy import CONFIG_NAME, deploy


def add_arguments(p):
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", help="serial port of the board (or of `kvedge sim`)")
    where.add_argument("--drive", metavar="PATH", help="a CircuitPython board's mounted CIRCUITPY drive (a folder)")
    p.add_argument("--board", default="rp2040", help="board profile: its mpy-cross -march (%s)"
                   % ", ".join(profiles.names()))
    p.add_argument("--mpy", action="store_true", help="send .mpy files compiled with mpy-cross -march=BOARD'S")
    p.add_argument("--march", help="override the profile's mpy-cross -march (e.g. x64: a virtual board with a "
                   "chip's heap)")
    p.add_argument("--config", metavar="PLAN.json", help="device config JSON from `kvedge plan`, sent as "
                   + CONFIG_NAME)
    p.add_argument("--extra", metavar="FILE", action="append", default=[],
                   help="also send this file to the board's top folder (repeatable), e.g. a main.py")
    p.add_argument("--soft-reset", action="store_true",
                   help="let mpremote soft-reset the board first (default: resume, keep its state)")
    cp = p.add_argument_group("CircuitPython (--drive)")
    cp.add_argument("--weights", metavar="FILE", help="checkpoint to copy to the drive (KVEDGE_MODEL names it)")
    cp.add_argument("--tokenizer", metavar="FILE", help="tokenizer to copy (KVEDGE_TOKENIZER names it)")
    cp.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                    help="a code.py option written to settings.toml as KVEDGE_KEY (repeatable): PROMPT, STEPS, "
                         "TEMPERATURE, SEED, STATS_MS")
    cp.add_argument("--mpy-cross", metavar="EXE", help="CircuitPython's own mpy-cross, of the board's major "
                    "version (boot_out.txt): send .mpy files (default: the sources; MicroPython's .mpy do not load)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary")


def check_args(args):
    """Flags and files checked before the board is contacted."""
    import os
    import re
    from .. import validate
    if args.march and not args.mpy:
        raise ValueError("--march only makes sense with --mpy")
    prof = profiles.load(args.board)
    if args.march is not None and not re.match(r"^[a-z0-9]{1,32}$", args.march):
        raise ValueError("--march %s: expected an mpy-cross -march name such as armv6m or xtensawin"
                         % validate.show(args.march))
    if args.config:  # the device's own check of a plan (kvedge.model.plandoc), at the board's heap
        validate.plan_file(args.config, prof["heap_bytes"])
    for x in args.extra:
        validate.in_file(x)
    if args.port.startswith("/") and not os.path.exists(args.port):
        raise ValueError("%s: no such port" % args.port)


def run_drive(args):
    from ..boards.drive import deploy_drive, parse_sets
    for flag in ("mpy", "march", "soft_reset"):
        if getattr(args, flag):
            raise ValueError("--%s is for --port (a MicroPython board)" % flag.replace("_", "-"))
    res = deploy_drive(args.drive, args.board, config=args.config, weights=args.weights, tokenizer=args.tokenizer,
                       sets=parse_sets(args.set), mpy_cross=args.mpy_cross, extra=args.extra)
    if not args.quiet:
        for p in res["sent"]:
            print("written   " + p)
        for p in res["removed"]:
            print("removed   " + p)
    print("deployed kvedge to %s (%s, %s): %d written, %d unchanged, %d removed; the board runs code.py"
          % (args.drive, res["info"]["text"], ".mpy" if res["mpy"] else ".py", len(res["sent"]),
             len(res["unchanged"]), len(res["removed"])))
    sys.stdout.flush()
    return 0


def run(args):
    if args.drive:
        return run_drive(args)
    for flag in ("weights", "tokenizer", "mpy_cross"):
        if getattr(args, flag):
            raise ValueError("--%s is for --drive (a CircuitPython board)" % flag.replace("_", "-"))
    if args.set:
        raise ValueError("--set is for --drive (a CircuitPython board)")
    echo = None if args.quiet else print
    check_args(args)
    res = deploy(args.port, args.board, mpy=args.mpy, config=args.config, extra=args.extra,
                 resume=not args.soft_reset, echo=echo, march=args.march)
    print("deployed kvedge %s to %s (%s): %d sent, %d unchanged, %d removed"
          % (res["version"], args.port, ".mpy for " + (args.march or profiles.load(args.board)["mpy_march"]) if args.mpy else ".py",
             len(res["sent"]), len(res["unchanged"]), len(res["removed"])))
    sys.stdout.flush()
    return 0
