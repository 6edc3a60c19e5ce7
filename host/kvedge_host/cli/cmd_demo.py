"""The whole story on a virtual board: plan the cache for a model, deploy, generate on the board with the cache
shown live, and a summary.

1. the model: --model, else ../shared/models/stories260K.bin, else a small random model written here (said so;
   --random PRESET: one of that preset's shape, e.g. stories15m, with a tokenizer of its vocabulary);
2. its weights converted to int8, or to int4 where the int8 file does not fit the profile's flash filesystem
   (kvedge convert --weights-dtype; --weights-dtype picks);
3. a virtual board (kvedge sim) with the board profile's heap; the package deployed as .mpy (kvedge deploy),
   with the weights and tokenizer on the board's filesystem;
4. the plan (kvedge plan): on the emulated board (the machine that stands for the profile: the Cortex-M0 for the
   rp2040, the single-precision Cortex-M7 for the rp2350, the Xtensa lx106 for the esp32 and esp32s3, else the
   Cortex-M3, which also stands in, saying so, where a machine's qemu or image is missing), from the runtime's
   footprint
   measured on that board and
   recorded in the profile (kvedge footprint: code per kernel kind, the loop, the stats stream, the largest
   block); on the unix port (--sim host: 64-bit objects, twice a board's), from the runner's code measured on it
   and the planning loop of the source document; it picks the cache, the kernels and where the weights live;
5. generation on the board from the plan's configuration, while the monitor reads the stats stream off the same
   port (CSV in the work folder); then tokens/s, peak cache bytes, evictions and the peak heap against the plan.
   A PSRAM profile runs on the emulated board's image with its heap in PSRAM (4 or 8 MiB) with a plan made for
   that heap. On the emulated board, weights larger than half its RAM disk go into its ROMFS image (the board's
   flash partition that MicroPython maps, read in place), in the image whose ROMFS slot holds them."""
import os
import shutil
import tempfile
import time

from .. import profiles
from ..errors import UserError
from ..paths import SHARED_MODELS
from ..plan.runaccount import account_rows, built_vs_plan, peak_vs_plan, stopped_early


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
                   help="the virtual board: m3 = the emulated board (the rp2040's Cortex-M0, the rp2350's "
                        "Cortex-M7, the ESP32s' Xtensa lx106, else a Cortex-M3: 32-bit, the package as that "
                        "core's .mpy, weights on its flash image), host = the MicroPython unix port, auto = m3 where qemu and "
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
    from ..boards.deploy import deploy, deployment, mpremote, preload
    from ..boards.sim import make_board
    from .demoplan import plan_given, plan_host, plan_measured

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
            from ..boards.m3board import fallback_note, march_for
            # the machine's own code (rp2040's armv6m, rp2350's armv7emsp, the ESP32s' xtensa on the lx106)
            march = march_for(a.board, vb.layout)
            stand = fallback_note(a.board, vb.heap)
            if stand:
                say(stand)
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
                plan, code_run = plan_given(a, w, os.path.join(work, "tok.bin"), vb.heap, prompt, say)
            elif vb.kind == "m3":
                plan, code_run = plan_measured(a, prof, model, w, tok, vb.heap, prompt, work, say)
            else:
                plan, code_run = plan_host(a, prof, vb, model, w, tok, cfg, prompt, work, say)
            # a fresh interpreter (as after a reset), started and left running: the monitor takes the port
            mpremote(vb.port, ["exec", "--no-follow", code_run], resume=False)
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
    from .demoplan import plan_given, plan_measured
    board_dir = os.path.join(work, "circuitpy")
    os.makedirs(board_dir, exist_ok=True)
    shutil.copyfile(w["path"], os.path.join(board_dir, w["board"]))
    shutil.copyfile(tok, os.path.join(board_dir, "tok.bin"))
    exe = circuitpython_bin()
    say("virtual %s: CircuitPython interpreter (%s), heap %s bytes, the package as .py source"
        % (a.board, exe, format(prof["heap_bytes"], ",")))
    if a.plan:
        plan, code_run = plan_given(a, w, tok, prof["heap_bytes"], prompt, say, ctrl_c=False)
    else:
        plan, code_run = plan_measured(a, prof, model, w, tok, prof["heap_bytes"], prompt, work, say,
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


def account_table(s, plan):
    from rich.table import Table
    t = Table(title="heap account (bytes)")
    t.add_column("row")
    t.add_column("bytes", justify="right")
    t.add_column("what it is")
    for name, n, what in account_rows(s, plan):
        t.add_row(name, format(n, ","), what)
    return t


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

