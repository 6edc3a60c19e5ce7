"""Copy the device package to a board through mpremote (only changed files), then import it there and check
its version. With --mpy the files are compiled by mpy-cross for the board's -march, so viper kernels run as
machine code for that chip."""
import sys

from . import boards
from .deploy import CONFIG_NAME, deploy


def add_arguments(p):
    p.add_argument("--port", required=True, help="serial port of the board (or of `kvedge sim`)")
    p.add_argument("--board", default="rp2040", help="board profile: its mpy-cross -march (%s)"
                   % ", ".join(boards.names()))
    p.add_argument("--mpy", action="store_true", help="send .mpy files compiled with mpy-cross -march=BOARD'S")
    p.add_argument("--march", help="override the profile's mpy-cross -march (e.g. x64: a virtual board with a "
                   "chip's heap)")
    p.add_argument("--config", metavar="PLAN.json", help="device config JSON from `kvedge plan`, sent as "
                   + CONFIG_NAME)
    p.add_argument("--extra", metavar="FILE", action="append", default=[],
                   help="also send this file to the board's top folder (repeatable), e.g. a main.py")
    p.add_argument("--soft-reset", action="store_true",
                   help="let mpremote soft-reset the board first (default: resume, keep its state)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary")


def check_args(args):
    """Flags and files checked before the board is contacted."""
    import os
    import re
    from . import validate
    if args.march and not args.mpy:
        raise ValueError("--march only makes sense with --mpy")
    boards.load(args.board)
    if args.march is not None and not re.match(r"^[a-z0-9]{1,32}$", args.march):
        raise ValueError("--march %s: expected an mpy-cross -march name such as armv6m or xtensawin"
                         % validate.show(args.march))
    if args.config:
        doc = validate.load_json(args.config)
        if not isinstance(doc, dict):
            raise ValueError("%s: a device config is a JSON object (kvedge plan --out), got %s"
                             % (args.config, validate.show(doc)))
    for x in args.extra:
        validate.in_file(x)
    if args.port.startswith("/") and not os.path.exists(args.port):
        raise ValueError("%s: no such port" % args.port)


def run(args):
    echo = None if args.quiet else print
    check_args(args)
    res = deploy(args.port, args.board, mpy=args.mpy, config=args.config, extra=args.extra,
                 resume=not args.soft_reset, echo=echo, march=args.march)
    print("deployed kvedge %s to %s (%s): %d sent, %d unchanged, %d removed"
          % (res["version"], args.port, ".mpy for " + (args.march or boards.load(args.board)["mpy_march"]) if args.mpy else ".py",
             len(res["sent"]), len(res["unchanged"]), len(res["removed"])))
    sys.stdout.flush()
    return 0
