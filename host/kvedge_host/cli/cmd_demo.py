"""The whole story on a virtual board: plan the cache for a model, deploy, generate on the board with the cache
shown live, and a summary.

1. the model: --model, else ../shared/models/stories260K.bin, else a small random model written here (said so;
   --random PRESET: one of that preset's shape, e.g. stories15m, with a tokenizer of its vocabulary);
2. its weights converted to int8, or to int4 where the int8 file does not fit the profile's flash filesystem
   (kvedge convert --weights-dtype; --weights-dtype picks);
3. a virtual board (kvedge sim) with the board profile's heap; the package deployed as .mpy (kvedge deploy),
   with the weights and tokenizer on the board's filesystem;
4. the plan (kvedge plan): on the emulated board (the machine that stands for the profile: the Cortex-M0 for the
   rp2040, the single-precision Cortex-M7 for the rp2350, else the Cortex-M3), from the runtime's footprint
   measured on that board and
   recorded in the profile (kvedge footprint: code per kernel kind, the loop, the stats stream, the largest
   block); on the unix port (--sim host: 64-bit objects, twice a board's), from the runner's code measured on it
   and the planning loop of the source document; it picks the cache, the kernels and where the weights live;
5. generation on the board from the plan's configuration, while the monitor reads the stats stream off the same
   port (CSV in the work folder); then tokens/s, peak cache bytes, evictions and the peak heap against the plan.
   A PSRAM profile runs on the emulated board's image with its heap in PSRAM (4 or 8 MiB) with a plan made for
   that heap. On the emulated board, weights larger than half its RAM disk go into its ROMFS image (the board's
   flash partition that MicroPython maps, read in place), in the image whose ROMFS slot holds them."""
import json
import os
import shutil
import tempfile
import time

from ..boards import board_scripts
from .. import profiles
from ..errors import UserError
from ..paths import SHARED_MODELS

_SHAPE = ("layers", "heads", "kv_heads", "head_dim")


def add_arguments(p):
    p.add_argument("--board", default="rp2040", help="board profile whose heap the virtual board gets")
    p.add_argument("--model", help="llama2.c .bin checkpoint (default: ../shared/models/stories260K.bin)")
    p.add_argument("--tokenizer", help="its tokenizer (default: tok512.bin beside the model)")
    p.add_argument("--tiny", action="store_true", help="use a small random model written here")
    p.add_argument("--random", metavar="PRESET", help="use a random model of this preset's shape written here, with "
                   "a tokenizer of its vocabulary (e.g. stories15m: dim 288, 6 layers, 32,000 tokens); its text is "
                   "not language")
    p.add_argument("--weights-dtype", choices=("auto", "i8", "i4"), default="auto",
                   help="the board's weights: int8 or int4 (kvedge convert --weights-dtype); auto (default): int8 "
                        "where its file fits the profile's flash filesystem, else int4")
    p.add_argument("--prompt", default="", help="prompt text (default: generate from BOS)")
    p.add_argument("--steps", type=int, default=256, help="tokens to generate (default 256)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--seed", type=int, default=1, help="sampling seed, > 0 (default 1)")
    p.add_argument("--stats-ms", type=int, default=250, help="stats line interval on the board")
    p.add_argument("--workdir", help="keep the work files here (default: a temporary folder)")
    p.add_argument("--plain", action="store_true", help="print progress lines instead of the live view")
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for the generation")
    p.add_argument("--port", help="a board of your own at this serial port instead of a virtual one: checked "
                   "against --board first (runtime, -march, heap), then the same story")
    p.add_argument("--march", help="--port: override the profile's mpy-cross -march")
    p.add_argument("--plan", metavar="PLAN.json", help="run this `kvedge plan --out` document instead of planning "
                   "(checked first, as the board checks it: kvedge.model.plandoc)")
    p.add_argument("--sim", choices=("host", "m3", "auto"), default="auto",
                   help="the virtual board: m3 = the emulated Arm board (the rp2040's Cortex-M0, the rp2350's "
                        "Cortex-M7, else a Cortex-M3: 32-bit, the package as Thumb .mpy, weights on its flash "
                        "image), host = the MicroPython unix port, auto = m3 where qemu and "
                        "its firmware are here (default)")


def check_args(a, prof):
    """Flags, the plan and the model files checked before the virtual board starts. Returns the prompt as bytes."""
    from kvedge import budget as kvbudget
    from .. import validate
    prompt = validate.flag_text("--prompt", a.prompt)
    validate.flag_int("--steps", a.steps, 1, kvbudget.LIMITS["tokens"])
    validate.flag_real("--temperature", a.temperature, 0.0)
    validate.flag_int("--seed", a.seed, 1, (1 << 64) - 1)
    validate.flag_int("--stats-ms", a.stats_ms, 0, 24 * 3600 * 1000)
    validate.flag_real("--timeout", a.timeout, 0.0, 7 * 86400.0, lo_open=True)
    if a.workdir == "":
        raise UserError("--workdir: an empty folder name")
    if a.march and not a.port:
        raise UserError("--march is for --port (a virtual board's -march follows its CPU)")
    if a.port and a.port.startswith("/") and not os.path.exists(a.port):
        raise UserError("%s: no such port" % a.port)
    if a.workdir and os.path.exists(a.workdir) and not os.path.isdir(a.workdir):
        raise UserError("%s: not a folder (--workdir)" % a.workdir)
    if a.workdir and not os.path.isdir(os.path.dirname(os.path.abspath(a.workdir))):
        # the folder itself is made, not a whole path of them: a mistyped parent is a mistake, not a wish
        raise UserError("%s: its parent folder does not exist (--workdir)" % a.workdir)
    if a.plan:
        validate.plan_file(a.plan, prof["heap_bytes"])
    if a.random and (a.model or a.tokenizer or a.tiny):
        raise UserError("--random writes its own model and tokenizer: not with --model, --tokenizer or --tiny")
    if a.random:
        from ..models import ModelError
        from ..boards.tinyckpt import preset_shape
        try:
            preset_shape(a.random)
        except ModelError as e:
            raise UserError("--random: %s" % e)
    if a.model or a.tokenizer:
        from kvedge.model.header import read_config
        from kvedge.model.tokenizer import Tokenizer
        model = a.model or os.path.join(SHARED_MODELS, "stories260K.bin")
        tok = a.tokenizer or os.path.join(os.path.dirname(os.path.abspath(model)), "tok512.bin")
        validate.in_file(model, "checkpoint")
        cfg, wdtype = read_config(model)  # the header checked, and the file's size against it
        if wdtype != "f32":
            raise UserError("%s: the demo converts an f32 llama2.c checkpoint itself; this is a kvedge int8 file"
                            % model)
        validate.finite_weights(model, cfg, wdtype)
        validate.in_file(tok, "tokenizer")
        Tokenizer.load(tok, cfg.vocab_size)
    return prompt


def _model(a, work, say):
    if a.random:
        from ..boards.tinyckpt import preset_shape, write
        shape = preset_shape(a.random)
        model, tok = write(os.path.join(work, "random"), name=a.random.lower(), **shape)
        say("model: a random llama2.c model of %s's shape written here (dim %d, %d layers, %d heads, %s tokens, "
            "context %d; --random): its text is not language" % (
                a.random, shape["dim"], shape["n_layers"], shape["n_heads"], format(shape["vocab_size"], ","),
                shape["seq_len"]))
        return model, tok
    if a.tiny or (not a.model and not os.path.exists(os.path.join(SHARED_MODELS, "stories260K.bin"))):
        from ..boards.tinyckpt import write
        model, tok = write(os.path.join(work, "tiny"))
        why = "--tiny" if a.tiny else "../shared/models/stories260K.bin is absent"
        say("model: a small random llama2.c model written here (%s): its text is not language" % why)
        return model, tok
    model = a.model or os.path.join(SHARED_MODELS, "stories260K.bin")
    tok = a.tokenizer or os.path.join(os.path.dirname(os.path.abspath(model)), "tok512.bin")
    for f in (model, tok):
        if not os.path.isfile(f):
            raise UserError("%s: no such file" % f)
    say("model: %s (%s)" % (model, "--model" if a.model else "the shared stories260K checkpoint"))
    return model, tok


def _mpremote(port, args, resume=True, timeout=300):
    from ..boards.deploy import mpremote
    return mpremote(port, args, resume=resume, timeout=timeout)


def weights_dtype(choice, cfg, prof, tok_bytes=0):
    """The demo's weights: `choice` ("i8", "i4"), or for "auto" int8 where its file and the tokenizer fit the
    profile's flash filesystem (kvedge_host.profiles.flash_fs_bytes; a profile without flash figures, the unix
    port's: int8), else int4."""
    if choice != "auto":
        return choice
    from kvedge.model.header import file_bytes
    fs = profiles.flash_fs_bytes(prof)
    return "i8" if not fs or file_bytes(cfg, "i8") + tok_bytes <= fs else "i4"


def convert(model, out, dtype):
    """kvedge convert: the f32 checkpoint's int8 (the device's converter) or int4 file (the host's numpy one,
    byte for byte the device's). Returns the bytes written."""
    if dtype == "i8":
        from kvedge.model.checkpoint import convert_to_i8
        return convert_to_i8(model, out)[1]
    from ..readers.write import convert_i4_numpy
    return convert_i4_numpy(model, out)


def run(a):
    from kvedge.model.header import read_config
    from ..boards.deploy import deploy, deployment, preload
    from ..boards.sim import make_board

    prof = profiles.load(a.board)
    prompt = check_args(a, prof)
    work = os.path.abspath(a.workdir) if a.workdir else tempfile.mkdtemp(prefix="kvedge-demo-")
    os.makedirs(work, exist_ok=True)

    def say(msg):
        print("demo: " + msg, flush=True)

    try:
        model, tok = _model(a, work, say)
        cfg = read_config(model)[0]
        wd = weights_dtype(a.weights_dtype, cfg, prof, os.path.getsize(tok))
        name = "model.%s.bin" % wd
        weights = os.path.join(work, name)
        nbytes = convert(model, weights, wd)
        shutil.copyfile(tok, os.path.join(work, "tok.bin"))
        say("weights converted to %s: %s bytes (kvedge convert --weights-dtype %s%s)" % (
            {"i8": "int8", "i4": "int4"}[wd], format(nbytes, ","), wd,
            "; int8's do not fit the profile's %s-byte flash filesystem" % format(profiles.flash_fs_bytes(prof), ",")
            if wd != "i8" and a.weights_dtype == "auto" else ""))
        fs = os.path.join(work, "fs")
        # w: the weights as the board sees them ("rom": read in place from its ROMFS image)
        w = {"path": weights, "dtype": wd, "board": name, "rom": False}
        extra = (weights, os.path.join(work, "tok.bin"))
        if prof.get("runtime") == "circuitpython" and a.sim != "host" and not a.port:
            from ..boards.runtimes import circuitpython_bin
            if circuitpython_bin() is not None:
                return _demo_circuitpython(a, prof, model, w, tok, prompt, work, say)
            # the virtual board of a CircuitPython profile is CircuitPython (kvedge_host.boards.sim): not the unix port
            raise UserError("the %s demo runs on CircuitPython: no interpreter in ../shared/runtimes/"
                            "circuitpython-unix32 (a board of your own: kvedge deploy --drive, docs/boards.md)"
                            % a.board)
        heap = None
        rom = None
        if a.sim != "host" and prof.get("mpy_march") != "x64" and not a.port:
            from ..boards.m3board import DISK_BLOCK, in_rom, layout_for, m3_heap, missing
            heap = m3_heap(prof, a.board, nbytes)
            why = missing(a.board, heap, layout_for(a.board, heap)) if heap else missing(a.board)
            if why and a.sim == "m3":
                raise UserError("the emulated board cannot run here: %s" % why)
            heap = None if why else heap
            if heap and in_rom(nbytes, layout_for(a.board, heap)):
                rom = os.path.join(work, "rom")
                os.makedirs(rom, exist_ok=True)
                os.replace(weights, os.path.join(rom, name))
                w = dict(w, path=os.path.join(rom, name), board="/rom/" + name, rom=True)
                extra = (os.path.join(work, "tok.bin"),)
                say("the weights go into the emulated board's ROMFS image (its flash partition, read in place: "
                    "mpremote romfs deploy on a board of your own), not its %s-byte RAM disk" % format(
                        layout_for(a.board, heap).disk_blocks * DISK_BLOCK, ","))
        if a.port:
            vb, march = _attach(a, prof, say)
        else:
            # the unix profile describes the unix port itself (64-bit objects): its demo runs there
            vb, why = make_board(a.board, fs=fs, host=a.sim == "host" or prof.get("mpy_march") == "x64", heap=heap,
                                 rom=rom)
        if vb.kind == "port":
            pass
        elif vb.kind == "m3":
            from ..boards.m3board import march_for
            march = march_for(a.board, vb.layout)  # the machine's Thumb code (rp2040's armv6m, rp2350's armv7emsp)
            # the board's flash image is built with the files in place: the weights never cross the serial link
            with tempfile.TemporaryDirectory(prefix="kvedge-mpy-") as build:
                preload(fs, deployment(a.board, build, True, extra=extra, march=march))
        else:
            march = "x64"  # the unix port's CPU is this machine's
            if why and why != "--host":
                say("the emulated board cannot run here (%s): the MicroPython unix port instead" % why)
        with vb:
            say("%s %s on %s: %s, heap %s bytes%s" % (
                "board" if vb.kind == "port" else "virtual", a.board, vb.port, vb.describe(), format(vb.heap, ","),
                "" if vb.kind == "port" else " (kvedge sim)"))
            res = deploy(vb.port, a.board, mpy=True, extra=extra, march=march)
            say("deployed kvedge %s as .mpy (-march=%s for the virtual board; a real %s takes -march=%s), "
                "weights and tokenizer (kvedge deploy --mpy: %d sent, %d already on the board's filesystem)"
                % (res["version"], march, a.board, prof["mpy_march"], len(res["sent"]), len(res["unchanged"])))
            if a.plan:
                plan, code_run = _plan_given(a, w, os.path.join(work, "tok.bin"), vb.heap, prompt, say)
            elif vb.kind == "m3":
                plan, code_run = _plan_measured(a, prof, model, w, tok, vb.heap, prompt, work, say)
            else:
                plan, code_run = _plan_host(a, prof, vb, model, w, tok, cfg, prompt, work, say)
            # a fresh interpreter (as after a reset), started and left running: the monitor takes the port
            _mpremote(vb.port, ["exec", "--no-follow", code_run], resume=False)
            text, summary, mon = _watch(vb.port, os.path.join(work, "stats.csv"), a.plain, a.timeout, plan=plan)
        _report(text, summary, mon, plan, a.steps)
        if a.workdir:
            say("work files (plan.json, stats.csv, the board's filesystem) kept in %s" % work)
        return 0
    finally:
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)


def _demo_circuitpython(a, prof, model, w, tok, prompt, work, say):
    """A CircuitPython profile: the 32-bit CircuitPython interpreter (../shared/runtimes/circuitpython-unix32:
    float32, ulab, no viper, its heap split in four areas) at the profile's heap, the package as .py source as a
    CIRCUITPY drive holds it, the model and tokenizer in its folder; plan from the footprint measured on it."""
    import subprocess
    from ..boards.runtimes import circuitpython_bin
    from ..paths import DEVICE
    board_dir = os.path.join(work, "circuitpy")
    os.makedirs(board_dir, exist_ok=True)
    shutil.copyfile(w["path"], os.path.join(board_dir, w["board"]))
    shutil.copyfile(tok, os.path.join(board_dir, "tok.bin"))
    exe = circuitpython_bin()
    say("virtual %s: CircuitPython interpreter (%s), heap %s bytes, the package as .py source"
        % (a.board, exe, format(prof["heap_bytes"], ",")))
    if a.plan:
        plan, code_run = _plan_given(a, w, tok, prof["heap_bytes"], prompt, say, ctrl_c=False)
    else:
        plan, code_run = _plan_measured(a, prof, model, w, tok, prof["heap_bytes"], prompt, work, say,
                                        ctrl_c=False)
    env = dict(os.environ, MICROPYPATH=DEVICE)
    proc = subprocess.Popen([exe, "-X", "heapsize=%d" % prof["heap_bytes"], "-c", code_run], cwd=board_dir,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        text, summary, mon = _watch(None, os.path.join(work, "stats.csv"), a.plain, a.timeout, proc=proc, plan=plan)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    _report(text, summary, mon, plan, a.steps)
    if a.workdir:
        say("work files (plan.json, stats.csv, the board's folder circuitpy/) kept in %s" % work)
    return 0


def _plan_measured(a, prof, model, w, tok, heap, prompt, work, say, ctrl_c=True):
    """kvedge plan from the profile's measured footprint (kvedge_host.boards.planrun.plan_for), and the runner call
    that runs it: the budget the board checks is the plan's, so what runs is what was planned."""
    from ..boards import planrun
    plan_path = os.path.join(work, "plan.json")
    other = heap if heap != prof["heap_bytes"] else None
    if other:
        from ..boards.m3board import layout_for, m3_heap
        full = m3_heap(prof, a.board)
        if w["rom"] and heap != full:
            say("the ROMFS slot of the emulated board's %s-byte image (%s bytes) cannot hold the weights: it runs "
                "the %s-byte image (slot %s bytes), and the plan is made for that heap (kvedge plan --heap %d)" % (
                    format(full, ","), format(layout_for(a.board, full).romfs_max, ","), format(heap, ","),
                    format(layout_for(a.board, heap).romfs_max, ","), heap))
        else:
            say("the emulated board has no %s-byte image: it runs the %s-byte one, and the plan is made for that "
                "heap (kvedge plan --heap %d)" % (format(prof["heap_bytes"], ","), format(heap, ","), heap))
    plan = planrun.plan_for(a.board, model, tok, plan_path, heap=other, prompt=prompt, stats=a.stats_ms > 0,
                            log=say, weights_dtype=w["dtype"])
    rt = plan["runtime"]
    stats_ms = a.stats_ms if rt.get("stats", True) else 0
    say("plan (%s): "
        "%s, %s kernels, weights %s; %s bytes of the %s usable (runtime %s measured on the emulated board, %s; "
        "margin %s kept free)" % (
            planrun.plan_command(model, a.board, plan, other, prompt, w["dtype"]), plan["strategy"], rt["kernels"],
            "in RAM" if plan["weights"]["place"] == "heap" else "read from flash", format(plan["total_bytes"], ","),
            format(rt["usable_heap"], ","), rt.get("command"), rt.get("date"), format(rt["margin_bytes"], ",")))
    kw = planrun.runner_args(plan, a.steps, stats_ms, prompt, a.temperature, a.seed)
    kw["ctrl_c"] = ctrl_c  # mpremote's Ctrl-C reaches a board that reads its UART only when asked
    if w["rom"] and kw["stream"]:
        kw["stream"] = "rom"  # the plan's weights on flash: read in place from the ROMFS image
    return plan, planrun.runner_code(w["board"], "tok.bin", kw)


def _plan_given(a, w, tok, heap, prompt, say, ctrl_c=True):
    """--plan: the given document, checked at the board's heap and against the model files by the device's own
    reader (kvedge.model.runplan.plan_args), and the runner call that runs it: a plan with the runtime's measured
    footprint as kvedge_host.boards.planrun runs one, any other with the budget and workspace the board reads from it."""
    from kvedge.errors import PlanError
    from kvedge.model.runplan import plan_args, run_args
    from ..boards import planrun
    from .. import validate
    plan = validate.plan_file(a.plan, heap)
    try:
        pa = plan_args(plan, w["path"], tok, heap)
    except PlanError as e:
        raise UserError("%s: %s (model %s)" % (a.plan, e, w["path"]))
    if pa["workspace"] < 0:
        raise UserError("%s: the runner's own account of this plan is %d bytes over its total: plan again with "
                        "--workspace %d" % (a.plan, -pa["workspace"], plan["workspace_bytes"] - pa["workspace"]))
    if (plan.get("runtime") or {}).get("source") == "measured":
        kw = planrun.runner_args(plan, a.steps, a.stats_ms, prompt, a.temperature, a.seed)
        kw.update({k: v for k, v in run_args(pa).items() if k in ("tier", "forward", "prefill")})
    else:
        kw = dict(run_args(pa), prompt=prompt, steps=a.steps, temperature=a.temperature, seed=a.seed,
                  stats_ms=a.stats_ms, peak=True)
    kw["ctrl_c"] = ctrl_c
    if w["rom"] and kw.get("stream"):
        kw["stream"] = "rom"
    say("plan: %s (--plan %s), weights %s; %s bytes of a %s-byte heap" % (
        plan["strategy"], a.plan, "in RAM" if plan["weights"]["place"] == "heap" else "read from flash",
        format(plan["total_bytes"], ","), format(plan["heap_bytes"], ",")))
    return plan, planrun.runner_code(w["board"], "tok.bin", kw)


def _plan_host(a, prof, vb, model, w, tok, cfg, prompt, work, say):
    """On the unix port (or a board at --port): the runner's code measured there, then the planning loop with it
    as workspace."""
    from kvedge.model.run import RUN_OVERHEAD
    from kvedge.model.tokenizer import Tokenizer
    from ..boards.deploy import DeployError
    try:
        out = _mpremote(vb.port, ["exec", board_scripts.source("demo_footprint")], resume=False)
    except DeployError as e:
        if "MemoryError" not in str(e):
            raise
        # a small profile's heap on the unix port, whose 64-bit objects take about twice a board's: the runner's
        # modules alone do not load (esp32's 102,400 bytes), refused before anything is planned or run
        raise UserError("the %s profile's %s-byte heap cannot load the runner's code on the MicroPython unix port "
                        "(64-bit objects, about twice a board's; MemoryError importing it): run it on the emulated "
                        "board (../shared/runtimes, KVEDGE_M3_FIRMWARE) or on the board itself (--port)"
                        % (a.board, format(vb.heap, ",")))
    line = [ln for ln in out.splitlines() if ln.startswith("KVFOOTPRINT ")]
    if not line:
        raise UserError("the board did not report its footprint:\n" + out[-1500:])
    code, free, kind = line[0].split()[1:4]
    code = int(code)
    tok_bytes = Tokenizer.nbytes(tok, cfg.vocab_size)
    workspace = prof.get("workspace_bytes", 0) + code + tok_bytes + RUN_OVERHEAD
    say("measured on the board: the runner's code takes %s bytes of heap (%s kernels); workspace for "
        "the plan = board %s + code %s + tokenizer %s + loop %s = %s bytes" % (
            format(code, ","), kind, format(prof.get("workspace_bytes", 0), ","), format(code, ","),
            format(tok_bytes, ","), format(RUN_OVERHEAD, ","), format(workspace, ",")))
    plan, kv, stream, h2o = _plan_loop(model, w["path"], a.board, vb.heap, workspace,
                                       prof.get("workspace_bytes", 0) + code + tok_bytes + RUN_OVERHEAD,
                                       os.path.join(work, "plan.json"), say)
    code_run = ("from kvedge.model import run\n"
                "run.main(%r, 'tok.bin', prompt=%r, steps=%d, temperature=%r, seed=%d, kv=%r, "
                "budget=%d, workspace=%d, stream=%r, h2o=%d, stats_ms=%d, ctrl_c=True, peak=True)\n" % (
                    w["board"], prompt, a.steps, a.temperature, a.seed, kv, vb.heap,
                    prof.get("workspace_bytes", 0) + code, stream, h2o, a.stats_ms))
    return plan, code_run


def _attach(a, prof, say):
    """The board at --port, once tools/board_probe.py there says --board describes it (before anything is
    deployed). Returns (board, -march for its .mpy files)."""
    from ..boards.board import Attached, check_profile, probe
    march = a.march or prof["mpy_march"]
    info = probe(a.port)  # interrupts whatever it was running
    check_profile(info, prof, march)
    say("the board at %s: %s %s on %s, %s bytes of heap; --board %s fits it" % (
        a.port, info["impl"], info["version"], info["machine"], format(info["heap_usable"], ","), a.board))
    return Attached(a.port, a.board, info), march


def _plan_loop(model, weights, board, heap, workspace, run_workspace, plan_path, say):
    """The source document's loop: plan (kvedge plan), recompute the need with the runner's own account
    (kvedge.model.llama.plan: Python objects, scratch, streaming buffers, policy arrays on top of the budget
    formulas), and when it is over the heap plan again with that difference reserved; at most four rounds."""
    from kvedge.model.header import read_config
    from kvedge.model import llama
    from . import cmd_plan
    from ..plan import planner
    cfg, wdtype = read_config(weights)
    extra = 0
    for round_ in range(4):
        say("planning round %d (kvedge plan --model %s --board %s --weights-dtype %s --kv-dtype i8 --align 0 "
            "--no-tiered --workspace %d):" % (round_ + 1, os.path.basename(model), board, wdtype, workspace + extra))
        spec, context, tgt = planner.inputs(model, board=board, workspace=workspace + extra, weights_dtype=wdtype)
        try:
            # no tiered cache: the runner call below (and the runner's account) build the plan's cache in RAM
            p = planner.plan(spec, context, tgt, kv_dtype="i8", weights_dtype=wdtype, align=0, tiered=False,
                             workspace=workspace + extra, model=model)
        except planner.NothingFits:
            p = None
        if p is None or p.document is None:
            raise UserError("no cache configuration fits %s with this model" % board)
        cmd_plan.print_plan(spec, tgt, p.result, p.chosen, 6)
        plan = p.document
        with open(plan_path, "w") as f:
            json.dump(plan, f, indent=2)
            f.write("\n")
        kv = {k: v for k, v in plan["cache"].items() if k not in _SHAPE}
        stream = plan["weights"]["place"] != "heap"
        pol = plan.get("policy") or {}
        h2o = pol.get("budget", 0) if pol.get("kind") == "h2o" else 0
        ccfg = llama.cache_config(cfg, kv)
        need = llama.plan(cfg, wdtype, ccfg, stream, 32, run_workspace + ((8 * ccfg.slots + 256) if h2o else 0))
        say("the runner's account of \"%s\": weights %s + kv %s + activations %s + workspace %s = %s bytes "
            "for a %s-byte heap" % (plan["strategy"], format(need["weights"], ","), format(need["kv"], ","),
                                    format(need["activations"], ","), format(need["workspace"], ","),
                                    format(need["total"], ","), format(heap, ",")))
        if need["total"] <= heap:
            return plan, kv, stream, h2o
        extra += need["total"] - plan["total_bytes"]
        say("over by %s bytes: planning again with that reserved" % format(need["total"] - heap, ","))
    raise UserError("the plan and the runner's account did not converge in four rounds")


def _pump(proc, mon, should_stop, on_tick):
    """Feed a process's output to the monitor as mon.run feeds a serial port's, until it ends or should_stop."""
    import select
    fd = proc.stdout.fileno()
    mon.connected, mon.port_state = True, "pipe"
    while not should_stop():
        r, _, _ = select.select([fd], [], [], 0.2)
        data = os.read(fd, 4096) if r else b""
        if r and not data:
            break
        if data:
            mon.feed(data)
        on_tick()
    on_tick()


# Plans whose cache evicts (or moves tokens to flash) once full: a full arena is their steady state, no alert
EVICTING = ("window", "sinks", "h2o", "tiered")


def _watch(port, csv_path, plain, timeout, proc=None, plan=None):
    """The generation's output through the monitor (off the serial port, or a process's stdout with proc). Alerts
    are what the user should act on: a plan whose cache evicts raises none for being full."""
    from ..boards.monitor import Monitor, render
    from ..boards.board import Capture
    cap = Capture()
    notes = []
    mon = Monitor(csv_path=csv_path, on_note=notes.append,
                  cache_alert=(plan or {}).get("kind") not in EVICTING)
    feed_line = mon.line

    def line(text):
        cap.line(text)
        return feed_line(text)

    mon.line = line
    t_end = time.monotonic() + timeout

    def stop():
        return cap.summary is not None or bool(cap.error and "Error" in cap.error[-1]) or cap.reset is not None \
            or mon.counts["disconnects"] > 0 or time.monotonic() > t_end

    if plain:
        last = [0]

        def tick():
            n = mon.counts["samples"]
            if n != last[0] and mon.samples:
                last[0] = n
                s = mon.samples[-1]
                print("demo: cache %s/%s bytes, %s tokens seen, %s cached, %s evictions, heap free %s, %s tok/s"
                      % (s.get("used_bytes"), s.get("total_bytes"), s.get("tokens_seen"), s.get("tokens_cached"),
                         s.get("evictions"), s.get("heap_free"), s.get("tok_s")), flush=True)
        if proc is not None:
            _pump(proc, mon, stop, tick)
        else:
            mon.run(port, should_stop=stop, on_tick=tick, retry_s=0.2)
    else:
        from rich.console import Group
        from rich.live import Live
        from rich.panel import Panel
        from rich.text import Text

        def view():
            tail = "".join(cap.text)[-600:]
            return Group(render(mon), Panel(Text(tail), title="generated on the board"))
        with Live(view(), refresh_per_second=4) as live:
            if proc is not None:
                _pump(proc, mon, stop, lambda: live.update(view()))
            else:
                mon.run(port, should_stop=stop, on_tick=lambda: live.update(view()), retry_s=0.2)
    mon.close()
    if cap.summary is None:
        msg = cap.error[-1] if cap.error else "no summary within %gs" % timeout
        if cap.reset is not None or mon.counts["disconnects"]:
            msg = "the board reset (%s)" % (cap.reset or "the port vanished")
        tb = "".join(cap.text)
        where = [ln.strip() for ln in tb[tb.rfind("Traceback"):].splitlines()[1:-1]] if "Traceback" in tb else []
        raise UserError("the generation on the board did not finish: %s%s" % (
            msg.strip(), (" (at %s)" % " <- ".join(reversed(where[-3:]))) if where else ""))
    return "".join(cap.text), cap.summary, mon


def account_rows(s, plan):
    """The heap's account as named rows (name, bytes, what it is): the plan's parts and their sum, the headroom it
    keeps free and the heap that makes, then what the board measured and checked. The parts add up to the total
    and the total plus the headroom to the heap; a board row is a figure of its own, beside them."""
    w = (plan.get("weights") or {}).get("heap_bytes", 0)
    rows = [("weights in RAM", w, "all of them" if (plan.get("weights") or {}).get("place") == "heap" else
             "norms and a chunk of rows: the rest on flash"),
            ("KV cache", plan["kv_bytes"], "the arena: " + plan["strategy"])]
    if plan.get("h2o_score_bytes"):
        rows.append(("H2O scores", plan["h2o_score_bytes"], "the eviction policy's per-slot scores"))
    tier = plan.get("tier") or {}
    if tier.get("staging_bytes") or tier.get("tables_bytes"):
        rows.append(("tier staging, tables", (tier.get("staging_bytes", 0) + tier.get("tables_bytes", 0))
                     * plan.get("batch", 1), "a cold block read back, the running softmax per head"))
    rows += [("activations", plan["activation_bytes"], "the forward pass's buffers"),
             ("runtime and workspace", plan["workspace_bytes"], "code (measured), stats, tokenizer, loop, objects")]
    parts = sum(r[1] for r in rows)
    rows.append(("= plan total", plan["total_bytes"], "the rows above" if parts == plan["total_bytes"]
                 else "the plan's (the rows above sum to %s)" % format(parts, ",")))
    if plan.get("headroom_bytes") is not None and plan.get("heap_bytes"):
        rows.append(("+ headroom", plan["headroom_bytes"], "kept free (the margin)"))
        rows.append(("= heap", plan["heap_bytes"], "the usable heap planned for"))
    if s.get("plan_total", -1) >= 0:
        rows.append(("board's own check", s["plan_total"], "its account before allocating"))
    if s.get("heap_top", -1) >= 0:
        rows.append(("board's measured peak", s["heap_top"], "gc.mem_alloc(): %.1f %% of the total" % (
            100.0 * s["heap_top"] / plan["total_bytes"])))
    return rows


def account_table(s, plan):
    from rich.table import Table
    t = Table(title="heap account (bytes)")
    t.add_column("row")
    t.add_column("bytes", justify="right")
    t.add_column("what it is")
    for name, n, what in account_rows(s, plan):
        t.add_row(name, format(n, ","), what)
    return t


def peak_vs_plan(s, plan):
    """The board's peak heap in use (gc.mem_alloc() after set-up and after every token, everything included)
    against the plan's total."""
    if s.get("heap_top", -1) < 0:
        return "not measured on this port"
    return "measured peak %s bytes, plan %s bytes (%.1f %% of the plan)" % (
        format(s["heap_top"], ","), format(plan["total_bytes"], ","), 100.0 * s["heap_top"] / plan["total_bytes"])


def stopped_early(s, plan, steps):
    """Why the board ran fewer positions than --steps (None when it ran them all): a keep-all cache full at its
    tokens, else the model's own end of text (it sampled BOS, as llama2.c stops)."""
    if steps is None or s["tokens"] >= steps:
        return None
    c = plan["cache"]
    if plan.get("kind") in ("keep", "prefix", "shorter") and s["tokens"] >= c["max_tokens"]:
        return "--steps %d: stopped at %d, the cache is full (%d tokens)" % (steps, s["tokens"], c["max_tokens"])
    return "--steps %d: stopped at %d, where the model ended its text (BOS)" % (steps, s["tokens"])


def _report(text, s, mon, plan, steps=None):
    from rich.console import Console
    from rich.table import Table
    print()
    print(text.strip())
    print()
    t = Table(title="demo summary (figures printed by the board)")
    t.add_column("item")
    t.add_column("value", justify="right")
    rows = [
        ("tokens (prompt + generated)", "%d (%d generated%s)" % (s["tokens"], s["generated"], "; %s" % (
            stopped_early(s, plan, steps)) if stopped_early(s, plan, steps) else "")),
        ("speed", "%.1f tokens/s (%s kernels, %s weights)" % (s["tok_s"], s["kernels"], s["weights"])),
        ("KV cache", "%s, %s bytes" % (s["kv_dtype"], format(s["cache_bytes"], ","))),
        ("peak cache bytes", format(s["peak_bytes"], ",")),
        ("evictions", format(s["evictions"], ",")),
        ("stats samples", mon.summary()),
        ("alerts", "; ".join(m for _, _, m in mon.alerts) or "none"),
        ("strategy", plan["strategy"]),
    ]
    for k, v in rows:
        t.add_row(k, v)
    Console().print(t)
    Console().print(account_table(s, plan))
    print("demo: plan vs board: " + peak_vs_plan(s, plan), flush=True)
    print("demo: " + built_vs_plan(s, plan), flush=True)


def built_vs_plan(s, plan):
    """What the board says it built (its stats line: the pass, the cache kind, slots, cold blocks, prompt chunks)
    beside what the plan named; a difference is said first."""
    got = {"forward": s.get("forward"), "kind": s.get("kind"), "slots": s.get("slots"),
           "cold_blocks": s.get("cold_blocks", 0), "prefill": s.get("prefill", 1)}
    from kvedge.sizes import cache_slots
    c = plan["cache"]
    kind = plan.get("kind")
    # a shorter context is a keep-all cache of fewer tokens: the board sees the cache, not the cut
    want = {"forward": plan.get("forward"), "kind": "keep" if kind == "shorter" else kind,
            "slots": cache_slots(c["max_tokens"], c.get("window", 0), c.get("sinks", 0)),
            "cold_blocks": (plan.get("tier") or {}).get("cold_blocks", 0), "prefill": plan.get("prefill") or 1}
    line = "board built %s pass, %s cache, %s slots%s%s" % (got["forward"], got["kind"], got["slots"], (
        ", %d cold blocks" % got["cold_blocks"]) if got["cold_blocks"] else "", (
        ", prompts in chunks of %d" % got["prefill"]) if got["prefill"] != 1 else "")
    off = [k for k in want if want[k] is not None and got[k] != want[k]]
    if off:
        return "NOT AS PLANNED (%s): %s; the plan: %s" % (", ".join(off), line, json.dumps(want, sort_keys=True))
    return line + ": as planned"
