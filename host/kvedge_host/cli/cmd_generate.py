"""Generate text with a llama2.c checkpoint (f32 .bin or `kvedge convert` int8 file) on the kvedge cache.

Runs the device package on CPython, or on the MicroPython unix / wasm port (heap from --board or --heap), or on a
board at --port (deploying what it lacks first). Prints the text, then a summary line (tokens/s, kernels, cache
peak bytes, heap) on stderr."""
import json
import os
import sys

from kvedge import budget, kernels
from kvedge.model import passes

from ..errors import UserError
from ..paths import DEVICE, model_file

MARK = "#KVEDGE "


def add_cache_shape(p):
    """The cache's cap, window, sinks and f32 prefix: the flags generate and chat share (kvedge.config's fields)."""
    p.add_argument("--max-tokens", type=int, default=0, help="cache cap (default: the model's context)")
    p.add_argument("--window", type=int, default=0, help="ring window of the last W tokens (0 = none)")
    p.add_argument("--sinks", type=int, default=0, help="tokens kept for ever beside the window")
    p.add_argument("--prefix", type=int, default=0, help="first tokens kept at f32")


def add_arguments(p):
    p.add_argument("--model", default=model_file("stories260K.bin"),
                   help="checkpoint (default: %(default)s; `kvedge fetch` downloads it)")
    p.add_argument("--tokenizer", help="llama2.c tokenizer .bin (default: tok512.bin beside the model, else "
                   "where the real stories260K's is)")
    p.add_argument("--prompt", default="", help="text to start from (default: nothing, i.e. from BOS)")
    p.add_argument("--steps", type=int, default=256, help="positions to run, prompt included (default 256)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--seed", type=int, default=1, help="sampling seed, > 0 (default 1)")
    p.add_argument("--kv-dtype", choices=budget.CACHE_DTYPES,
                   help="cache storage (default f32: the exact cache, as kvedge plan starts from; with --board or "
                   "--port and no cache flag the board's plan chooses)")
    add_cache_shape(p)
    p.add_argument("--h2o", type=int, default=0, metavar="SLOTS", help="heavy-hitter eviction: hold SLOTS "
                   "tokens, half of them the most recent (kvedge.evict.H2O; not with --window)")
    p.add_argument("--stats-ms", type=int, default=0, metavar="MS", help="also write KVSTATS lines (kvedge "
                   "monitor's stream) every MS milliseconds; they go to stderr here, to the port on a board")
    p.add_argument("--align", type=int, default=0, help="row alignment in bytes (default 0)")
    p.add_argument("--stream", action="store_true", help="read weight rows from the file instead of RAM")
    p.add_argument("--kernels", default="auto", choices=("auto",) + kernels.KINDS,
                   help="inner-loop kernels: asm (Thumb inline assembler), viper, native (MicroPython machine code), "
                   "plain Python, or auto: the fastest this runtime compiles (default auto)")
    p.add_argument("--forward", choices=("auto", "float", "int", "ulab"), help="the forward pass (default: the "
                   "plan's with --plan, or with --board or --port and no cache flag, where the board's plan is made "
                   "for the fastest pass its measured footprint fits; float with --board and cache flags, whose "
                   "allowance is of that pass; else auto: the fastest the model, cache and kernels allow, kvedge.model.passes: "
                   "int for int8 weights and an i8 cache with asm or viper kernels); int: the integer pass (no "
                   "float, no allocation per token); ulab: CircuitPython's ulab pass; float: every model and cache")
    p.add_argument("--runtime", default="cpython", choices=("cpython", "unix", "wasm"),
                   help="where the device package runs without --port: cpython (this Python, the default), unix "
                   "(the MicroPython unix port) or wasm (MicroPython's wasm port on Node.js)")
    p.add_argument("--mpy", action="store_true", help="unix: run the device package precompiled with mpy-cross "
                   "(as deployed to a board: no compiler garbage, about 8 KB less heap and far less "
                   "fragmentation, which a 215 KB board heap needs)")
    p.add_argument("--board", help="board profile: its heap caps the port and is the budget checked at start; without "
                   "--plan or a cache flag the run is planned for it first, as at --port (not on --runtime unix, "
                   "whose 64-bit objects no profile's footprint describes)")
    b = p.add_argument_group("a board at a serial port (a real one, or a virtual board's)")
    b.add_argument("--port", help="run on the board at this port: checks that --board (default rp2040) describes "
                   "it, deploys the package (.mpy) and the model files it lacks, streams the text and stats back; "
                   "without --plan or a cache flag (--kv-dtype, --max-tokens, --window, --sinks, --prefix, --h2o, "
                   "--align, --stream) it plans the cache first, as `kvedge plan --board` does from the profile's "
                   "measured footprint, and runs that plan")
    b.add_argument("--plan", metavar="PLAN.json", help="take the cache, eviction and weights placement from a "
                   "`kvedge plan --out` file (instead of --kv-dtype, --window, --h2o, --stream ...)")
    b.add_argument("--rom", action="store_true", help="int8 weights in ROMFS, read in place (no copy of a row): "
                   "on a board whose firmware has ROMFS (/rom); elsewhere they are streamed from the file")
    b.add_argument("--march", help="--port: override the profile's mpy-cross -march (x64: the unix-port virtual "
                   "board with a chip's heap)")
    b.add_argument("--csv", metavar="FILE", help="--port: write every stats sample to this CSV file")
    b.add_argument("--detach", action="store_true", help="--port: start the generation and return; watch it with "
                   "`kvedge monitor --port PORT`")
    b.add_argument("--timeout", type=float, default=3600, help="--port: seconds to wait for the generation")
    p.add_argument("--heap", type=int, default=0, help="heap bytes for unix/wasm without --board (default 8 MB)")
    p.add_argument("--save", metavar="FILE", help="when the run ends, save the conversation (the cache, the sampler, "
                   "the next token: kvedge.session) to FILE.s0 / FILE.s1 (at --port: on the board's filesystem); "
                   "cpython and unix runtimes, or --port")
    p.add_argument("--resume", metavar="FILE", help="go on from the conversation saved to FILE (--save) for --steps "
                   "more positions, bit-identical to a run that never stopped: the same model and cache flags; the "
                   "saved temperature and sampler state are used; a tiered cache's cold store is reopened, not started "
                   "afresh")


def _tokenizer(args):
    if args.tokenizer:
        return args.tokenizer
    near = os.path.join(os.path.dirname(os.path.abspath(args.model)), "tok512.bin")
    return near if os.path.exists(near) else model_file("tok512.bin")


def _kv(args):
    # int4 weights run on the integer pass only, which stores an i8 cache: that is their default cache
    int_only = getattr(args, "wdtype", None) in passes.INT_ONLY_WEIGHTS
    kv = {"dtype": args.kv_dtype or ("i8" if int_only else "f32"), "align": args.align}
    for name in ("max_tokens", "window", "sinks", "prefix"):
        v = getattr(args, name)
        if v:
            kv[name] = v
    if args.window and "max_tokens" not in kv:
        kv["max_tokens"] = args.sinks + args.window
    if args.h2o and "max_tokens" not in kv:
        kv["max_tokens"] = args.h2o  # the arena holds exactly what H2O keeps
    return kv


MAX_STATS_MS = 24 * 3600 * 1000


def check_args(args, tok):
    """Every flag and both files checked on the host before anything runs (on a MicroPython port a bad value
    would otherwise surface as the port's own error, or not at all). Returns (ModelConfig, prompt bytes)."""
    from kvedge import budget as kvbudget
    from kvedge.model.header import read_config
    from kvedge.model.llama import cache_config
    from kvedge.model.tokenizer import Tokenizer
    from .. import validate
    from ..plan.account import check_align
    validate.in_file(args.model, "checkpoint")
    prompt = validate.flag_text("--prompt", args.prompt)
    validate.flag_int("--steps", args.steps, 1, kvbudget.LIMITS["tokens"])
    validate.flag_real("--temperature", args.temperature, 0.0)
    validate.flag_int("--seed", args.seed, 1, (1 << 64) - 1)
    for flag in ("--max-tokens", "--window", "--sinks", "--prefix", "--h2o"):
        validate.flag_int(flag, getattr(args, flag[2:].replace("-", "_")), 0, kvbudget.LIMITS["max_tokens"])
    validate.flag_int("--stats-ms", args.stats_ms, 0, MAX_STATS_MS)
    check_align("--align", args.align)
    if args.heap:
        validate.flag_int("--heap", args.heap, validate.RUNTIME_HEAP_MIN, validate.RUNTIME_HEAP_MAX,
                          "bytes a MicroPython port can start with")
    if args.h2o and args.window:
        raise UserError("--h2o replaces the ring buffer: use it without --window")
    if args.mpy and args.runtime != "unix":
        raise UserError("--mpy is for the unix port")
    if args.port:
        if args.runtime != "cpython" or args.heap or args.mpy:
            raise UserError("--port runs on the board: --runtime, --heap and --mpy do not apply")
        if args.port.startswith("/") and not os.path.exists(args.port):
            raise UserError("%s: no such port" % args.port)
        validate.flag_real("--timeout", args.timeout, 0.0, 7 * 86400.0, lo_open=True)
    else:
        for flag in ("march", "csv", "detach"):
            if getattr(args, flag):
                raise UserError("--%s is for --port" % flag)
    if args.csv:
        validate.out_folder("--csv", args.csv)
    _check_session(args)
    if args.plan:
        _plan_kwargs(args)  # checked before anything runs
    cfg, wdtype = read_config(args.model)  # the header checked, and the file's size against it
    validate.finite_weights(args.model, cfg, wdtype)
    args.wdtype = wdtype
    weights_ok = passes.INT_WEIGHTS if args.forward == "int" else ("i8",)
    if args.forward in ("int", "ulab") and (wdtype not in weights_ok or (
            _kv(args)["dtype"] != "i8" and not args.plan and not _plans_itself(args))):
        raise UserError("%s: --forward %s needs %s weights (kvedge convert) and --kv-dtype i8" % (
            args.model, args.forward, "int8 or int4" if args.forward == "int" else "int8"))
    if wdtype in passes.INT_ONLY_WEIGHTS and args.forward in ("float", "ulab"):
        raise UserError("%s: int4 weights run on the integer pass only: --forward int (or leave it out)" % args.model)
    try:
        ccfg = cache_config(cfg, _kv(args))
    except ValueError as e:
        raise UserError("%s: the cache settings (--max-tokens, --window, --sinks, --prefix, --align, --h2o) do "
                        "not fit this model: %s" % (args.model, e))
    most = max(cfg.seq_len, args.steps)
    if ccfg.slots > most:  # slots no run of --steps positions can fill: memory taken for nothing
        raise UserError("%s: a cache of %d slots (--max-tokens, --window + --sinks or --h2o) is more than this "
                        "run can fill: at most %d (the larger of --steps and the model's seq_len %d)"
                        % (args.model, ccfg.slots, most, cfg.seq_len))
    validate.in_file(tok, "tokenizer")
    Tokenizer.load(tok, cfg.vocab_size)  # raises TokenizerError naming the file
    return cfg, prompt


def _check_session(args):
    """--save and --resume: on a host runtime whose files outlive the run; a session there to resume."""
    from kvedge import session
    if not (args.save or args.resume):
        return
    flag = "--save" if args.save else "--resume"
    if args.runtime == "wasm":
        raise UserError("%s: the wasm port's files do not outlive its run: --runtime cpython or unix" % flag)
    if args.resume and args.prompt:
        raise UserError("--resume goes on from the saved conversation: --prompt does not apply")
    if args.port:  # FILE names a file on the board's filesystem: the board checks it
        return
    if args.save:
        from .. import validate
        validate.out_folder("--save", args.save)
    if args.resume:
        names = session.files(args.resume)
        if not any(os.path.isfile(n) for n in names):
            raise UserError("%s: no saved session (neither %s nor %s is there)" % (args.resume, names[0], names[1]))


def _session_error(text):
    """The one-line message of a refused session (kvedge.errors.SessionError) in a runtime's output, or None."""
    for line in reversed(text.strip().splitlines()[-8:]):
        for name in ("SessionError: ", "kvedge.errors.SessionError: "):
            if name in line:
                return line[line.find(name) + len(name):].strip()
    return None


# the flags that describe a cache by hand: without them (and without --plan) a run at --port is planned first
CACHE_FLAGS = ("kv_dtype", "max_tokens", "window", "sinks", "prefix", "h2o", "align", "stream")


def _cache_flags(args):
    return ["--" + f.replace("_", "-") for f in CACHE_FLAGS if getattr(args, f)]


def _plans_itself(args):
    """A run for a board (--port, or --board run here) given no plan and no cache flag: it is planned first
    (_board_plan), as the board would be. Not on the 64-bit unix port (the --march x64 virtual board at --port,
    --runtime unix here), whose objects no board profile's footprint describes."""
    if args.plan or _cache_flags(args):
        return False
    if args.port:
        return args.march != "x64"
    return bool(args.board) and args.runtime != "unix"


def run(args):
    tok = _tokenizer(args)
    cfg, prompt = check_args(args, tok)
    if _plans_itself(args):
        import tempfile
        with tempfile.TemporaryDirectory(prefix="kvedge_plan_") as tmp:
            args.plan = _board_plan(args, tok, prompt, os.path.join(tmp, "plan.json"))
            return _run(args, tok, cfg, prompt)
    return _run(args, tok, cfg, prompt)


def _board_plan(args, tok, prompt, out):
    """The plan a run at --port takes when it is given none: `kvedge plan --board` from the profile's measured
    footprint (kvedge_host.boards.planrun.plan_for, as `kvedge demo` plans), for the weights the checkpoint holds and
    the fastest pass that fits, written to `out`. Refused here, before anything is deployed, when nothing fits."""
    from kvedge.model.header import read_config
    from .. import profiles
    from ..boards import planrun
    name = args.board or "rp2040"
    prof = profiles.load(name)
    say = (lambda m: print("generate: " + m, file=sys.stderr, flush=True))
    wdtype = read_config(args.model)[1]
    forward = args.forward or "auto"
    doc, wdtype = _fit_weights(args, name, tok, out, prompt, say, wdtype, forward)
    rt = doc.get("runtime") or {}
    say("plan (%s --out plan.json): %s, %s pass, %s kernels, weights %s; %s bytes of a %s-byte heap%s" % (
        planrun.plan_command(args.model, name, doc, None, prompt, wdtype, forward, args.kernels), doc["strategy"],
        doc.get("forward") or "float", rt.get("kernels", "auto"),
        "in RAM" if doc["weights"]["place"] == "heap" else "read from flash", format(doc["total_bytes"], ","),
        format(prof["heap_bytes"], ","), "" if rt.get("source") == "measured" else
        " (a flat allowance for the runtime: this profile has no measured footprint)"))
    if wdtype not in passes.INT_WEIGHTS:
        say("the integer pass (several times fewer instructions a token) needs int8 weights: kvedge convert %s "
            "--weights-dtype i8 -o %s" % (args.model, os.path.splitext(os.path.basename(args.model))[0] + ".i8.bin"))
    return out


def _fit_weights(args, name, tok, out, prompt, say, wdtype, forward):
    """(plan document, weights dtype): the plan for the checkpoint's own weights when it keeps the whole context;
    else, for an f32 checkpoint, the int8 or int4 weights whose plan keeps more (as `kvedge plan` without
    --weights-dtype chooses), the checkpoint converted beside the plan (args.model then names the converted
    file). Refused, as planrun.plan_for refuses, when no format gives a plan."""
    from ..boards import planrun
    refused = None
    try:
        doc = planrun.plan_for(name, args.model, tok, out, prompt=prompt, stats=True, log=say, weights_dtype=wdtype,
                               forward=forward, kernels=args.kernels)
    except UserError as e:
        doc, refused = None, e
    if wdtype != "f32" or (doc is not None and doc["tokens_kept"] >= doc["context"]):
        if doc is None:
            raise refused
        return doc, wdtype
    best = None  # (dtype, its plan) keeping more tokens than the checkpoint's own weights
    kept = doc["tokens_kept"] if doc is not None else -1
    for d in ("i8", "i4"):
        try:
            other = planrun.plan_for(name, args.model, tok, None, prompt=prompt, stats=True, weights_dtype=d,
                                     forward=forward, kernels=args.kernels)
        except UserError:
            continue
        if other["tokens_kept"] > kept:
            best, kept = (d, other), other["tokens_kept"]
            if kept >= other["context"]:
                break
    if best is None:
        if doc is None:
            raise refused
        return doc, wdtype
    d, doc_d = best
    from .cmd_demo import convert
    conv = os.path.join(os.path.dirname(out), os.path.splitext(os.path.basename(args.model))[0] + ".%s.bin" % d)
    convert(args.model, conv, d)
    with open(out, "w") as f:
        json.dump(doc_d, f, indent=2)
        f.write("\n")
    say("the f32 weights %s on %s; %s weights keep %d: converted (kvedge convert %s --weights-dtype %s -o %s)" % (
        "fit nothing" if doc is None else "keep %d of %d tokens" % (doc["tokens_kept"], doc["context"]), name,
        {"i8": "int8", "i4": "int4"}[d], doc_d["tokens_kept"], args.model, d, os.path.basename(conv)))
    args.model, args.wdtype = conv, d
    return doc_d, d


def _run(args, tok, cfg, prompt):
    budget = workspace = None
    heap = args.heap or 8 * 1024 * 1024
    if args.board:
        from .. import profiles
        prof = profiles.load(args.board)
        heap = prof["heap_bytes"]
        budget, workspace = heap, prof.get("workspace_bytes", 0)
    call = dict(model=os.path.abspath(args.model), tokenizer=os.path.abspath(tok), prompt=prompt,
                steps=args.steps, temperature=args.temperature, seed=args.seed, kv=_kv(args), budget=budget,
                workspace=workspace or 0, stream="rom" if args.rom else args.stream, kernel=args.kernels,
                h2o=args.h2o, stats_ms=args.stats_ms)
    call["forward"] = args.forward or ("auto" if not (args.port or args.board) else
                                       "int" if args.wdtype in passes.INT_ONLY_WEIGHTS else "float")
    if args.plan:
        call.update(_plan_kwargs(args, prompt))
    for flag in ("save", "resume"):  # absent unless given; at --port a file on the board's filesystem
        if getattr(args, flag):
            call[flag] = getattr(args, flag) if args.port else os.path.abspath(getattr(args, flag))
    if args.port:
        return _run_port(args, call)
    if args.runtime == "cpython":
        if DEVICE not in sys.path:
            sys.path.insert(0, DEVICE)
        from kvedge.model.runplan import entry
        import io
        buf = io.StringIO()
        real = sys.stdout
        # the device runner writes pieces to stdout.buffer and its summary with print(): split them here
        sys.stdout = _Split(real, buf)
        from kvedge.errors import SessionError
        try:
            entry(call)(**call)  # kvedge.model.run.main, or a pool plan's kvedge.model.runpool.main
        except SessionError as e:
            raise UserError(str(e))
        finally:
            sys.stdout = real
        _split_stats(buf.getvalue())
        _summary(buf.getvalue())
        return 0
    from ..boards import runtimes
    mod = "runpool" if call.get("pool") is not None else "run"  # kvedge.model.runplan.entry's choice
    code = "from kvedge.model import %s\n%s.main(**%r)\n" % (mod, mod, call)
    import tempfile
    with tempfile.TemporaryDirectory(prefix="kvedge_mpy_") as tmp:
        pkg = DEVICE
        if args.mpy:
            pkg = _compile_mpy(tmp)
        folders = [pkg] + sorted({os.path.dirname(call["model"]), os.path.dirname(call["tokenizer"])})
        # in the user's folder, as on CPython: a tiered plan's cold store (kv_cold.*) goes there, not into the package
        rc, out = runtimes.run_code(args.runtime, code, heap, folders, timeout=3600, cwd=os.getcwd())
    if rc != 0 and _session_error(out):  # refused before the first token: its one line, not the traceback
        raise UserError(_session_error(out))
    text, _, tail = out.partition("\n" + MARK)
    sys.stdout.write(_split_stats(text) + "\n")
    if rc != 0 or not tail:
        raise UserError("%s run failed (exit %s): %s" % (args.runtime, rc, out.strip().splitlines()[-1:]))
    _summary(MARK + tail)
    return 0


def _plan_heap(args):
    """The heap a --plan must be made for at most: the board's (--board; --port: rp2040 by default), the port's
    (--runtime unix/wasm: --heap, default 8 MB), else none but kvedge.model.plandoc's bound (CPython)."""
    if args.board or args.port:
        from .. import profiles
        return profiles.load(args.board or "rp2040")["heap_bytes"]
    if args.runtime != "cpython":
        return args.heap or 8 * 1024 * 1024
    return None


def _plan_kwargs(args, prompt=""):
    """run.main's cache and memory arguments from --plan (kvedge.model.runplan.plan_args: the device's own reading
    and check, kvedge.model.plandoc), refused here, before anything runs or is deployed, when the plan is not one
    or cannot run this model file."""
    from kvedge.errors import PlanError
    from kvedge.model.runplan import plan_args, run_args
    from .. import validate
    heap = _plan_heap(args)
    doc = validate.plan_file(args.plan, heap)
    try:
        kw = plan_args(doc, args.model, _tokenizer(args), heap)
    except PlanError as e:
        raise UserError("%s: %s (model %s)" % (args.plan, e, args.model))
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise UserError("%s: not a `kvedge plan --out` device config (%s)" % (args.plan, e))
    if args.rom and kw["stream"] is not True and kw["stream"] != "rom":
        raise UserError("--rom: %s places the weights in the heap" % args.plan)
    if args.rom:
        kw["stream"] = "rom"
    if kw["workspace"] < 0:
        raise UserError("%s: the plan's total (%d bytes) is %d short of this run's own account (its objects, the "
                        "tokenizer, the loop): plan again with --workspace %d" % (
                            args.plan, doc["total_bytes"], -kw["workspace"], doc["workspace_bytes"] - kw["workspace"]))
    kw = run_args(kw)
    kw.update(_plan_prompt(args, doc, prompt))
    rk = (doc.get("runtime") or {}).get("kernels")
    if args.port and args.kernels == "auto" and rk:
        # the board runs the kernels its plan counted (the profile's measured footprint is theirs): a stand-in
        # that could run others (the Cortex-M3 for an ESP32's viper) would otherwise take its own best, whose
        # modules the plan did not count
        kw["kernel"] = rk
    if args.forward is not None:  # --forward given: it overrides the plan's pass
        kw["forward"] = args.forward
        if args.forward != "int":
            kw.pop("prefill", None)  # the plan's prompt chunks run on the integer pass only
    return kw


def _plan_prompt(args, doc, prompt):
    """A plan's prompt and stats arguments: the prompt as ids encoded here when the plan leaves the board's
    encoder out (kvedge.model.runplan.prompt_args), no stats stream when it leaves that out (--stats-ms refused)."""
    from kvedge.model.plandoc import streams_stats
    from kvedge.model.runplan import prompt_args
    from kvedge.model.header import read_config
    out = prompt_args(doc, prompt, _tokenizer(args), read_config(args.model)[0].vocab_size)
    args.plan_stats = streams_stats(doc)
    if not args.plan_stats:
        if args.stats_ms:
            raise UserError("--stats-ms: %s leaves the stats stream out (its \"without\"): drop --stats-ms"
                            % args.plan)
        out["stats_ms"] = 0
    return out


def _run_port(args, call):
    """The run on the board at --port: profile checked against the board, package and files deployed (only
    what the board lacks), the generation started in a fresh interpreter and read back off the port."""
    from ..boards import board as bd
    from .. import profiles
    from ..boards.deploy import deploy, mpremote
    name = args.board or "rp2040"
    prof = profiles.load(name)
    march = args.march or prof["mpy_march"]
    say = (lambda m: print("generate: " + m, file=sys.stderr, flush=True))
    info = bd.probe(args.port)  # interrupts a running program; refused before anything is deployed
    bd.check_profile(info, prof, march)
    say("%s %s on %s, %s bytes of heap; --board %s" % (info["impl"], info["version"], info["machine"],
                                                       format(info["heap_usable"], ","), name))
    if call["budget"] is None:
        call["budget"], call["workspace"] = prof["heap_bytes"], prof.get("workspace_bytes", 0)
    if not args.plan:
        _check_fits(call, name)  # the cache given by hand: refused before anything is deployed
    files = [call["model"], call["tokenizer"]]
    on_board = {f: os.path.basename(f) for f in files}
    if call["stream"] == "rom":
        from ..boards import romfs
        on_board[call["model"]] = romfs.ensure(args.port, [call["model"]], say)[0]
        files.remove(call["model"])
    plan = None
    if args.plan:  # the parts the plan leaves out are not sent (kvedge_host.boards.deploy.for_plan)
        from ..validate import load_json
        plan = load_json(args.plan)
    res = deploy(args.port, name, mpy=True, extra=files, march=march, plan=plan)
    say("deployed kvedge %s (.mpy for %s): %d sent, %d unchanged, %d removed" % (
        res["version"], march, len(res["sent"]), len(res["unchanged"]), len(res["removed"])))
    streams = getattr(args, "plan_stats", True)  # a plan may leave the stats stream out (_plan_prompt)
    call = dict(call, model=on_board[call["model"]], tokenizer=on_board[call["tokenizer"]],
                stats_ms=call["stats_ms"] or (1000 if streams else 0), ctrl_c=True)
    mod = "runpool" if call.get("pool") is not None else "run"  # kvedge.model.runplan.entry's choice
    code = "from kvedge.model import %s\n%s.main(**%r)\n" % (mod, mod, call)
    # a fresh interpreter (mpremote soft-resets the board), left running: its output is read off the port
    mpremote(args.port, ["exec", "--no-follow", code], resume=False)
    if args.detach:
        say("started on %s; watch it with: kvedge monitor --port %s" % (args.port, args.port) if streams else
            "started on %s; its plan has no stats stream (without: stats): nothing for kvedge monitor to watch"
            % args.port)
        return 0

    con = Console()
    try:
        _, summary, mon = bd.watch(args.port, csv_path=args.csv, timeout=args.timeout, on_text=con.text,
                                   on_stats=con.stats)
    except bd.BoardReset as e:
        bad = _session_error(getattr(e, "text", ""))  # refused before the first token, then back at its prompt
        if bad:
            raise UserError("%s (on the board at %s)" % (bad, args.port))
        sys.stdout.write("\n")
        print("kvedge generate: error: %s" % e, file=sys.stderr)
        return 1
    except RuntimeError as e:
        bad = _session_error(str(e).rpartition("did not finish: ")[2])  # a refused session: its own line
        raise UserError("%s (on the board at %s)" % (bad, args.port) if bad else str(e))
    _summary(MARK + json.dumps(summary))
    say("stats: " + mon.summary())
    return 0


def _check_fits(call, board):
    """The run's own account (kvedge.model.llama.check, with the tokenizer and the loop as kvedge.model.run.main
    adds them, 32-bit objects as on the board) against the budget the board will check: UserError when over."""
    from kvedge.errors import BudgetError
    from kvedge.model import llama
    from kvedge.model.header import read_config
    from kvedge.model.pieces import FileTokenizer
    from kvedge.model.run import RUN_OVERHEAD
    if call["forward"] == "auto":
        return  # resolved on the board, by its kernels
    vocab = read_config(call["model"])[0].vocab_size
    ws = call["workspace"] + FileTokenizer.nbytes(call["tokenizer"], vocab, len(call["prompt"]) > 0) + RUN_OVERHEAD
    try:
        llama.check(call["model"], call["kv"], call["budget"], ws, call["stream"], 32, call["h2o"] > 0,
                    call["forward"], None, llama.integer_path(call["kv"], True), call.get("tier"), word=4)
    except BudgetError as e:
        raise UserError("%s on %s: %s: drop the cache flags to have the run planned for the board, or kvedge plan "
                        "--board %s --out plan.json and --plan plan.json" % (os.path.basename(call["model"]), board,
                                                                            e, board))
    except ValueError as e:
        raise UserError("%s on %s: %s" % (os.path.basename(call["model"]), board, e))


class Console:
    """The generated text (stdout) and the stats lines (stderr) as they arrive from a board: on a terminal both
    land on one screen, so a stats line that would start mid-text gets a newline (on stderr: stdout keeps the
    text as generated) and never reads glued to the text."""

    def __init__(self, out=None, err=None):
        self.out, self.err = out, err
        self.mid = False  # the screen's cursor is after text that did not end its line

    def text(self, piece):
        out = self.out or sys.stdout
        out.write(piece)
        out.flush()
        if piece:
            self.mid = not piece.endswith("\n")

    def stats(self, line):
        err = self.err or sys.stderr
        if self.mid:
            err.write("\n")
            self.mid = False
        err.write(line + "\n")
        err.flush()


def _split_stats(text):
    """The generated text with the KVSTATS lines taken out (they are printed to stderr)."""
    from kvedge.telemetry import PREFIX
    if PREFIX not in text:
        return text
    keep = []
    for chunk in text.split(PREFIX):
        if not keep:
            keep.append(chunk)
            continue
        line, nl, rest = chunk.partition("\n")
        print(PREFIX + line, file=sys.stderr)
        keep.append(rest)
    return "".join(keep)


def _compile_mpy(dest):
    """The device package compiled with mpy-cross for the x86-64 unix port, in dest; returns dest."""
    from ..boards.deploy import DeployError, compile_mpy, device_sources, for_arch
    try:
        compile_mpy(for_arch(device_sources(), "x64"), "x64", dest)
    except DeployError as e:
        raise UserError(str(e))
    return dest


class _Split:
    """stdout stand-in: bytes pieces go straight through, text (the summary line) is captured."""

    def __init__(self, real, capture):
        self.buffer = getattr(real, "buffer", None)
        self.capture = capture

    def write(self, s):
        self.capture.write(s)

    def flush(self):
        pass


_WHERE = {"heap": "in RAM", "file": "streamed from the file", "rom": "read in place from ROMFS"}


def _slots(s):
    """The cache's size as the board built it: slots, and for a tier its cold tokens in blocks."""
    if "slots" not in s:
        return ""
    cold = " + %d cold tokens in %d blocks" % (s["cold_tokens"], s["cold_blocks"]) if s.get("cold_blocks") else ""
    return " (%d slots%s)" % (s["slots"], cold)


def _summary(out):
    for line in out.splitlines():
        if line.startswith(MARK):
            s = json.loads(line[len(MARK):])
            sys.stdout.write("\n")
            print("[%d tokens in %.2f s: %.1f tok/s; %s pass, weights %s (%s), kernels %s, cache %s %s%s: %s bytes "
                  "(peak %s), evictions %d; plan %s bytes, heap used %s]" % (
                      s["tokens"], s["ms"] / 1000.0, s["tok_s"], s.get("forward", "?"), s["weights"],
                      _WHERE.get(s.get("weights_in"), "?"), s["kernels"], s["kv_dtype"], s.get("kind", "?"),
                      _slots(s),
                      format(s["cache_bytes"], ","), format(s["peak_bytes"], ","), s["evictions"],
                      format(s["plan_total"], ","), format(s["heap_used"], ",") if s["heap_used"] >= 0 else "n/a"),
                  file=sys.stderr)
            return s
    return None
