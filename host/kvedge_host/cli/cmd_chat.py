"""Chat with a llama2.c checkpoint: every line read from stdin is a turn fed on top of the cache the conversation
already holds (kvedge.chat), so a turn costs its own tokens, not the whole history's; the reply streams back.

Runs the device package on CPython (a turn per line as it is typed), or on the MicroPython unix port, the emulated
Cortex-M3 or a board at --port (stdin's lines read first, then the turns run there). When the cache is full its
policy (--window and --sinks, --h2o) evicts, and --stats-ms's KVSTATS lines say what was evicted. After each reply
a line on stderr: the positions the turn fed, the reply's tokens, what the cache holds. --save / --resume keep a
conversation across runs (kvedge.session)."""
import os
import sys

from kvedge import budget, kernels

from ..errors import UserError
from ..paths import DEVICE, model_file
from . import cmd_generate as gen

MARK = b"#KVCHAT "


def add_arguments(p):
    p.add_argument("--model", default=model_file("stories260K.bin"),
                   help="checkpoint (default: %(default)s; `kvedge fetch` downloads it)")
    p.add_argument("--tokenizer", help="llama2.c tokenizer .bin (default: tok512.bin beside the model, else "
                   "where the real stories260K's is)")
    p.add_argument("--input", metavar="FILE", help="read the turns' lines from FILE (UTF-8) instead of stdin")
    p.add_argument("--max-new", type=int, default=64, help="reply tokens a turn samples at most (default 64; a reply "
                   "also ends at EOS or BOS)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--seed", type=int, default=1, help="sampling seed, > 0 (default 1)")
    p.add_argument("--kv-dtype", choices=budget.CACHE_DTYPES, help="cache storage (default f32; i8 for int4 "
                   "weights)")
    gen.add_cache_shape(p)
    p.add_argument("--h2o", type=int, default=0, metavar="SLOTS", help="heavy-hitter eviction: hold SLOTS tokens, "
                   "half of them the most recent (not with --window)")
    p.add_argument("--align", type=int, default=0, help="row alignment in bytes (default 0)")
    p.add_argument("--stream", action="store_true", help="read weight rows from the file instead of RAM")
    p.add_argument("--kernels", default="auto", choices=("auto",) + kernels.KINDS, help="inner-loop kernels "
                   "(default auto: the fastest this runtime compiles)")
    p.add_argument("--forward", choices=("auto", "float", "int"), help="the forward pass (default auto: the "
                   "fastest the model, cache and kernels allow; int: int8 weights and an i8 cache)")
    p.add_argument("--prefill", type=int, default=1, metavar="N", help="each line's tokens N at a time through the "
                   "integer pass (kvedge.model.prefill; 1: one at a time, the default)")
    p.add_argument("--stats-ms", type=int, default=0, metavar="MS", help="also write KVSTATS lines (kvedge monitor's "
                   "stream: evictions, bytes) every MS milliseconds and after each turn, to stderr")
    p.add_argument("--runtime", default="cpython", choices=("cpython", "unix", "m3"),
                   help="where the device package runs: cpython (this Python, the default), unix (the MicroPython "
                   "unix port) or m3 (the emulated Cortex-M3, the package as .mpy)")
    p.add_argument("--heap", type=int, default=0, help="heap bytes for unix (default 8 MB) or m3 (default its "
                   "image's)")
    p.add_argument("--save", metavar="FILE", help="after the last turn, save the conversation (the cache, the "
                   "sampler, the kept token: kvedge.session) to FILE.s0 / FILE.s1 (cpython and unix)")
    p.add_argument("--resume", metavar="FILE", help="go on from the conversation saved to FILE (--save): the same "
                   "model and cache flags; the saved temperature and sampler state are used")
    b = p.add_argument_group("a board at a serial port (a real one, or a virtual board's)")
    b.add_argument("--port", help="run the turns on the board at this port (stdin's lines read first): checks that "
                   "--board (default rp2040) describes it, deploys the package (.mpy) and the model files it lacks, "
                   "streams the replies back; give the cache flags (no plan is made here); --save / --resume name "
                   "files on the board's filesystem")
    b.add_argument("--board", help="--port: the board's profile (default rp2040)")
    b.add_argument("--march", help="--port: override the profile's mpy-cross -march (x64: the unix-port virtual "
                   "board)")
    b.add_argument("--timeout", type=float, default=3600, help="--port: seconds to wait for the turns")


def _as_generate(args):
    """The flags `kvedge generate` checks, as that command's check_args() reads them."""
    for name, v in (("prompt", ""), ("steps", args.max_new), ("mpy", False), ("plan", None), ("csv", None),
                    ("detach", False), ("rom", False)):
        setattr(args, name, v)
    return args


def check_args(args):
    """Every flag and file checked before anything runs; returns (tokenizer path, the runner's arguments)."""
    from .. import validate
    from kvedge.model.passes import MAX_PREFILL, check_prefill
    validate.flag_int("--max-new", args.max_new, 1, budget.LIMITS["tokens"])
    if args.input:
        validate.in_file(args.input, "text file")
        try:
            with open(args.input, encoding="utf-8") as f:
                f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise UserError("%s: not a readable UTF-8 text file (%s)" % (args.input, e))
    validate.flag_int("--prefill", args.prefill, 1, MAX_PREFILL)
    if args.port and (args.runtime != "cpython" or args.heap):
        raise UserError("--port runs on the board: --runtime and --heap do not apply")
    if not args.port:
        for flag in ("board", "march"):
            if getattr(args, flag):
                raise UserError("--%s is for --port" % flag)
    if args.runtime == "m3" and (args.save or args.resume):
        raise UserError("--save and --resume: the emulated board's files do not outlive its run: --runtime cpython "
                        "or unix")
    tok = gen._tokenizer(args)
    runtime = args.runtime
    args.runtime = "cpython" if runtime == "m3" else runtime  # generate's own checks know cpython, unix, wasm
    try:
        gen.check_args(_as_generate(args), tok)
    finally:
        args.runtime = runtime
    if args.prefill > 1:
        try:
            check_prefill(args.prefill, args.forward or "int")
        except ValueError as e:
            raise UserError("--prefill %d: %s" % (args.prefill, e))
        if args.forward != "int":
            raise UserError("--prefill runs on the integer pass: add --forward int")
    call = dict(model=os.path.abspath(args.model), tokenizer=os.path.abspath(tok), max_new=args.max_new,
                temperature=args.temperature, seed=args.seed, kv=gen._kv(args), h2o=args.h2o,
                forward=args.forward or "auto", kernel=args.kernels, stream=args.stream, prefill=args.prefill,
                stats_ms=args.stats_ms)
    for flag in ("save", "resume"):
        if getattr(args, flag):
            call[flag] = getattr(args, flag) if args.port else os.path.abspath(getattr(args, flag))
    return tok, call


def run(args):
    tok, call = check_args(args)
    src = open(args.input, encoding="utf-8") if args.input else sys.stdin
    try:
        if args.runtime == "cpython" and not args.port:
            return _run_here(call, src)
        lines = [ln.rstrip("\r\n") for ln in src]
    finally:
        if args.input:
            src.close()
    if args.port:
        return _run_port(args, call, lines)
    code = "from kvedge.chat import main\nmain(lines=%r, **%r)\n" % (lines, call)
    from ..boards import runtimes
    why = runtimes.missing(args.runtime)
    if why:
        raise UserError("--runtime %s: not runnable here: %s" % (args.runtime, why))
    heap = args.heap or (8 * 1024 * 1024 if args.runtime == "unix" else None)
    folders = [DEVICE] + sorted({os.path.dirname(call["model"]), os.path.dirname(call["tokenizer"])})
    rc, out = runtimes.run_code(args.runtime, code, heap, folders, timeout=3600)
    text, _, trace = out.partition("Traceback (most recent call last):")
    _Lines().feed(text.encode("utf-8"))  # the turns that ran, before a refusal's traceback
    if rc != 0:
        raise UserError(_refused(out) or "%s run failed (exit %s): %s" % (
            args.runtime, rc, out.strip().splitlines()[-1:]))
    return 0


def _refused(text):
    """The one-line message of a refused session or of a turn the cache has no room for, in a runtime's output."""
    bad = gen._session_error(text)
    if bad:
        return bad
    for line in reversed(text.strip().splitlines()[-8:]):
        if "CacheFullError: " in line:
            return line[line.find("CacheFullError: ") + len("CacheFullError: "):].strip()
    return None


def _run_here(call, src):
    if DEVICE not in sys.path:
        sys.path.insert(0, DEVICE)
    from kvedge.chat import main
    from kvedge.errors import CacheFullError, SessionError
    try:
        main(lines=iter(src.readline, ""), emit=_Lines().feed, **call)
    except (SessionError, CacheFullError) as e:
        raise UserError(str(e))
    return 0


def _run_port(args, call, lines):
    """The turns on the board at --port: profile checked against the board, package and model files deployed (only
    what the board lacks), kvedge.chat.main started in a fresh interpreter and its output read back off the port."""
    from ..boards import board as bd
    from .. import profiles
    from ..boards.deploy import deploy, mpremote
    name = args.board or "rp2040"
    prof = profiles.load(name)
    march = args.march or prof["mpy_march"]
    info = bd.probe(args.port)  # refused before anything is deployed
    bd.check_profile(info, prof, march)
    res = deploy(args.port, name, mpy=True, extra=[call["model"], call["tokenizer"]], march=march)
    print("chat: %s %s on %s; deployed kvedge %s (.mpy for %s): %d sent, %d unchanged" % (
        info["impl"], info["version"], info["machine"], res["version"], march, len(res["sent"]),
        len(res["unchanged"])), file=sys.stderr, flush=True)
    call = dict(call, model=os.path.basename(call["model"]), tokenizer=os.path.basename(call["tokenizer"]))
    # the watcher stops at kvedge generate's summary line: one, empty, once the turns are done
    code = "from kvedge.chat import main\nmain(lines=%r, end=%r, **%r)\n" % (lines, gen.MARK + "{}", call)
    mpremote(args.port, ["exec", "--no-follow", code], resume=False)
    split = _Lines()

    def text(piece):
        piece = piece.replace("\r", "")
        if piece.startswith(MARK.decode()):
            split._mark(piece.strip().encode())
        else:
            sys.stdout.write(piece)
            sys.stdout.flush()
    try:
        bd.watch(args.port, timeout=args.timeout, on_text=text,
                 on_stats=lambda line: print(line, file=sys.stderr, flush=True))
    except bd.BoardReset as e:
        bad = _refused(getattr(e, "text", ""))
        if bad:
            raise UserError("%s (on the board at %s)" % (bad, args.port))
        raise UserError("the board at %s reset during the conversation: %s" % (args.port, e))
    except RuntimeError as e:
        bad = _refused(str(e).rpartition("did not finish: ")[2])
        raise UserError("%s (on the board at %s)" % (bad, args.port) if bad else str(e))
    return 0


class _Lines:
    """The runner's bytes: the replies to stdout as they come, its #KVCHAT lines (a turn's summary, as one readable
    line) and KVSTATS lines (which may start mid-reply) to stderr. Each of those arrives whole in one write."""

    def __init__(self):
        self.turn = 0

    def feed(self, data):
        from kvedge.telemetry import PREFIX
        marks = (b"\n" + MARK, PREFIX.encode())
        while data:
            at = [(data.find(m), m) for m in marks]
            at = [(i, m) for i, m in at if i >= 0]
            if not at:
                self._text(data)
                return
            i, m = min(at)
            self._text(data[:i])
            if m != marks[1]:
                self._text(b"\n")
                i += 1
            nl = data.find(b"\n", i)
            self._mark(data[i:] if nl < 0 else data[i:nl])
            data = b"" if nl < 0 else data[nl + 1:]

    def _text(self, b):
        if b:
            sys.stdout.buffer.write(b)
            sys.stdout.flush()

    def _mark(self, line):
        if line.startswith(MARK):
            import json
            s = json.loads(line[len(MARK):].decode())
            self.turn += 1
            print("[turn %d: %d positions fed, %d reply tokens; the cache holds %d of %d positions, %d evicted, %d ms]"
                  % (self.turn, s["fed"], s["reply"], s["cached"], s["seen"], s["evictions"], s["ms"]),
                  file=sys.stderr, flush=True)
        else:
            print(line.decode("utf-8", "replace"), file=sys.stderr, flush=True)
