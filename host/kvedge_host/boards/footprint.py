"""The runtime's own footprint on a 32-bit board, measured on the emulated board that stands for
its profile (`kvedge footprint --board B`: the Cortex-M0 for the RP2040, the single-precision Cortex-M7 for the
RP2350, the Xtensa lx106 for the ESP32 and ESP32-S3, else the Cortex-M3, which also stands in, saying so, where
that machine cannot run here; kvedge_host.boards.m3board.layout_for).

A plan is only as good as its account of what the runtime itself takes: the package's code once imported from the
board's filesystem as .mpy (bytecode copied into the heap, names interned), the state a first generation leaves
behind (tables, interned attribute names), the generation loop's own objects, and how fragmented the heap is
afterwards. These figures are exact and repeatable on the emulated board (same firmware, same heap, same bytes),
so they are measured there, once per board profile, and recorded in the profile (`footprint`, with the command,
firmware and date in `sources`); `kvedge plan` counts them instead of a flat allowance.

One fresh interpreter per kernel kind (asm on Arm chips, viper, native, plain; plain only on CircuitPython), with the
package as .mpy on the board's littlefs filesystem (as `kvedge deploy --mpy` leaves it) and the tiny model of
kvedge.model.tiny as int8 weights beside it:

1. boot: heap allocated before kvedge is imported (the REPL, the filesystem, the snippet that calls the runner),
   and the usable heap
   (gc.mem_free() + gc.mem_alloc(): the GC span less its own tables);
2. the kernels of that kind, then the runner's modules one at a time in dependency order, each after gc.collect():
   what each costs (evict, telemetry and bpe only when H2O eviction, the stats stream or a prompt is used);
3. a first generation (kvedge.model.run.main on the tiny model: streamed int8 weights, an i8 cache with H2O, the
   stats stream) and what it leaves behind once everything it made is dropped: interned names, tables built on
   first use;
4. the generation loop's own heap: the run's measured peak less its formula-sized parts (weights, arena,
   activations, the model's objects, the tokenizer);
5. the largest block the heap can allocate (bisection over bytearray sizes) at start-up, once kvedge.model.run is
   imported: the runner allocates the KV arena there (run.main(kv_bytes=...)), before anything else, because
   imports leave holes that split the heap unpredictably (the same run, one line of code apart, had a largest
   block of 118 KB or under 53 KB after its imports)."""
import datetime
import json
import os
import re
import shutil
import tempfile

from kvedge import kernels as kvkernels

from ..plan import account
from . import board_scripts, m3board
from .. import profiles
from ..paths import BOARDS

KINDS = account.KERNEL_KINDS  # asm: Thumb inline assembler, Arm chips only
# the runner's modules in dependency order: each one's cost is its own (what it imports is already loaded)
MODULES = ("kvedge.errors", "kvedge.sizes", "kvedge.config", "kvedge.quant", "kvedge.cache", "kvedge.floatatt",
           "kvedge.model.header", "kvedge.model.pieces", "kvedge.model.sampler", "kvedge.model.llama",
           "kvedge.model.run")
FLOAT_WEIGHTS = "kvedge.model.checkpoint"  # the float pass's weight loader (kvedge.model.run loads it for that pass)
INTEGER_KINDS = kvkernels.FAST  # kernels with which an i8 cache takes kvedge.attention's integer path
INT = account.INT_KEY  # the integer pass's figures: the same keys with the kind "int_asm", "int_viper"


def _shared(kind):
    """The modules every run of `kind` kernels and an i8 cache loads: the integer attention path
    (kvedge.attention) only with the kinds that run it (kvedge.model.llama.integer_path)."""
    if kind not in INTEGER_KINDS:
        return MODULES
    i = MODULES.index("kvedge.floatatt") + 1
    return MODULES[:i] + ("kvedge.attention",) + MODULES[i:]


def modules_for(kind):
    """The float pass's run with `kind` kernels (the first run's): the shared modules and its weight loader."""
    return _shared(kind) + (FLOAT_WEIGHTS,)


def int_modules(kind):
    """The integer pass's run (kvedge.model.passes.FAST_KERNELS: where it is the fastest pass): the shared
    modules with `kind` kernels, then its q_* kernels and kvedge.model.pass_int (never the float weight loader)."""
    from kvedge.kernels import module_name
    return _shared(kind) + (module_name("q8_", kind), "kvedge.model.pass_int")


def runs(kinds):
    """(name, kernel kind, forward pass, modules) of each first run to measure: the float pass with every kind,
    the integer pass with the kinds on which it is the fastest (named INT + kind)."""
    out = [(k, k, "float", modules_for(k)) for k in kinds]
    return out + [(INT + k, k, "int", int_modules(k)) for k in kinds if k in INTEGER_KINDS]


# what only some runs load: H2O eviction, the stats stream, encoding a prompt
OPTIONAL = {"evict": "kvedge.evict", "telemetry": "kvedge.telemetry", "encode": "kvedge.model.bpe",
            "tiered": "kvedge.tier.cache", "fold": "kvedge.kernels.viper_tier", "floats": "kvedge.kernels.f32_native",
            "int4": "kvedge.model.pass_int4", "split": "kvedge.kvsplit", "pool": "kvedge.paged", "pooled": "kvedge.pooled",
            "runpool": "kvedge.model.runpool"}
# imported after the first run (less heap at the run's peak): the encoder, the tier and its fold (viper: skipped
# where it does not compile), the float kernels the viper and asm kinds load on first use (an integer-pass run
# loads them for a cache with f32 rows: a prefix, KIVI's residual); the tiered cache's modules may not fit a small
# board beside the runner: then they get no figure, and the planner offers no tiered plan there
# K and V apart (kvedge.kvsplit, which a split cache loads) is late too: a board it does not fit gets no figure, and
# the planner offers no split there
LATE = ("kvedge.model.bpe", "kvedge.tier.cache", "kvedge.kernels.viper_tier", "kvedge.kernels.f32_native",
        "kvedge.kvsplit")
POOL = ("pool", "pooled", "runpool")  # a pool plan's runner and its pool (kvedge.model.runpool.main): one figure
# last of all (what is measured before them stays as it was measured without them)
POOL_LATE = tuple(OPTIONAL[n] for n in POOL)
FLOAT_OPTIONAL = tuple(m for n, m in OPTIONAL.items() if n != "int4")  # a float-pass run measures no int4 rows


def late_int(kind):
    """LATE after an integer-pass run: also int4 rows' reader and the kind's q4 kernels (kvedge.model.pass_int4 and
    kernels4()'s module: what a run of int4 weights loads), each imported and measured as the probe does the
    others (the probe itself unchanged: on the esp32's 100 KB its own size decides what fits)."""
    from kvedge import kernels
    return LATE + (OPTIONAL["int4"], kernels.module_name("q4_", kind)) + POOL_LATE
TINY = {"steps": 12, "h2o": 12, "max_tokens": 16}  # the first run: every path of a generation, a few tokens
MODEL, TOKENIZER = "fp_tiny.bin", "fp_tok.bin"

# The board-side probe, a module on the board's filesystem (compiled like the package, so the snippet that runs it
# is tiny): board_scripts/kvfp_probe.py. Prints KVFP lines; a kind that does not fit the heap says so (KVFP nofit)
# instead of failing.
PROBE_NAME = "kvfp_probe"
PROBE = board_scripts.source(PROBE_NAME)
BOOT = board_scripts.source("kvfp_boot")  # heap allocated after boot, and the usable heap
# The runner's call (kvedge_host.boards.planrun.runner_code) stays in the heap as long as the run lasts (its bytecode,
# keyword names and values): on the emulated board it took 880 bytes more than BOOT alone, the whole gap between
# the board's peak and a plan that left it out. Boot is measured with such a call in a branch that never runs.
# a plan's cache has its model's shape, and kv_bytes is that cache's arena (kvedge.model.runplan reads both): the
# sample's arena has seven digits, as a board's plan's does at most
SAMPLE_PLAN = {"cache": {"layers": 5, "heads": 8, "kv_heads": 4, "head_dim": 8, "max_tokens": 9999, "dtype": "i8",
                         "window": 0, "sinks": 0, "align": 0, "group": 32, "residual": 0, "prefix": 0},
               "weights": {"place": "flash"}, "kv_bytes": 3999600,
               "policy": {"kind": "h2o", "budget": 9999, "recent": 9999},
               "runtime": {"source": "measured", "kernels": "native", "tile": 32, "prompt": False,
                           "usable_heap": 9999999, "margin_bytes": 99999, "boot_bytes": 9999, "code_bytes": 99999,
                           "telemetry_bytes": 9999, "evict_bytes": 9999, "loop_bytes": 9999, "file_bytes": 9999}}


def boot_code():
    """BOOT, holding a runner call as long as a plan's (no prompt) in a branch that never runs."""
    from .planrun import runner_args, runner_code
    kw = runner_args(SAMPLE_PLAN, 9999, 9999)
    kw["ctrl_c"] = True
    call = runner_code("model.i8.bin", "tok.bin", kw)
    return BOOT + "if gc.mem_alloc() < 0:\n" + "".join("    %s\n" % line for line in call.strip().splitlines())
# what a run's arena can take: the largest block once the runner's entry module is imported, which is when
# kvedge.model.run.main(kv_bytes=...) allocates it (the snippet is as small as the one that starts a run)
START = board_scripts.source("kvfp_start")
RUN = "import %s\n%s.main(%%r, %%r, %%r, %%r, %%r, %%r, %%d, %%d, %%d, %%r)\n" % (PROBE_NAME, PROBE_NAME)
_LINE = re.compile(r"^KVFP (\w+) (.*)$")


def tiny_files(folder):
    """The tiny model as int8 weights and its tokenizer in `folder` (host paths)."""
    from kvedge.model.checkpoint import convert_to_i8
    from .tinyckpt import write
    model, tok = write(os.path.join(folder, "tiny"))
    i8 = os.path.join(folder, MODEL)
    convert_to_i8(model, i8)
    return i8, tok


def image_heap(prof):
    """The firmware image to measure a profile on: its own heap (the images of the machine that stands for it,
    the Cortex-M3's, those with the heap in PSRAM included), or the largest image for a bigger heap: code and first-run state do not depend on the heap's
    size."""
    heap = prof["heap_bytes"]
    imgs = set(m3board.m3_images()) | set(m3board.firmware_images(layout=m3board.layout_for(prof["name"], heap)))
    if heap in imgs or not imgs:
        return heap
    bigger = [h for h in imgs if h <= heap]
    return max(bigger) if bigger else heap


def kinds_for(prof):
    if prof.get("runtime") == "circuitpython":
        return ("plain",)
    arm = str(prof.get("mpy_march", "")).startswith("armv")
    return tuple(k for k in KINDS if k != "asm" or arm)


def parse(out):
    """The KVFP lines of one session as a dict."""
    r = {"modules": {}, "optional": {}}
    for line in out.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        key, vals = m.group(1), m.group(2).split()
        if key == "boot":
            r["boot"], r["usable"] = int(vals[0]), int(vals[1])
        elif key in ("module", "optional"):
            r["modules" if key == "module" else "optional"][vals[0]] = int(vals[1])
        elif key == "largest_imports":
            r["largest_imports"] = int(vals[0])
        elif key == "file":
            r["file"] = int(vals[0])
        elif key == "telemetry_state":
            r["telemetry_state"] = int(vals[0])
        elif key == "telemetry_line":
            r["telemetry_line"] = int(vals[0])
        elif key == "loop":
            r["loop_peak"], r["loop_setup"] = int(vals[0]), int(vals[1])
        elif key == "warm":
            r["warm"] = int(vals[0])
        elif key == "run":
            r["run_peak"], r["run_plan"], r["run_tokenizer"] = (int(v) for v in vals[:3])
            if len(vals) > 3:
                r["run_setup"] = int(vals[3])
        elif key == "largest":
            r["largest"], r["free"] = int(vals[0]), int(vals[1])
        elif key == "start_largest":
            r["start_largest"] = int(vals[0])
        elif key == "nofit":
            r["nofit"] = " ".join(vals)
        elif key == "start":
            r["start"] = int(vals[0])
    return r


def missing(board="rp2040", heap=None):
    """None when the emulated board can measure (or run a plan) here, else why not."""
    if not hasattr(m3board, "build_disk"):
        return "kvedge_host.boards.m3board cannot load a filesystem image into the board (no build_disk)"
    return m3board.missing(board, heap, m3board.layout_for(board, heap))


def measure_circuitpython(board, log=None):
    """A CircuitPython profile's footprint, on the 32-bit CircuitPython interpreter at the profile's heap: the
    package as .py (CircuitPython loads neither MicroPython's .mpy nor viper), plain kernels. Its heap is split
    in four areas (a build option of that interpreter), so its largest block is about a quarter of the heap:
    recorded as measured, and a plan on it respects it."""
    import subprocess
    from ..paths import DEVICE
    from .runtimes import circuitpython_bin
    exe = circuitpython_bin()
    if exe is None:
        raise m3board.M3Missing("no CircuitPython interpreter in ../shared/runtimes/circuitpython-unix32")
    prof = profiles.load(board)
    heap = prof["heap_bytes"]
    with tempfile.TemporaryDirectory(prefix="kvedge-footprint-") as tmp:
        model, tok = tiny_files(tmp)
        shutil.copyfile(tok, os.path.join(tmp, TOKENIZER))
        with open(os.path.join(tmp, PROBE_NAME + ".py"), "w") as f:
            f.write(PROBE)

        def run(code):
            env = dict(os.environ, MICROPYPATH=os.pathsep.join([tmp, DEVICE]))
            p = subprocess.run([exe, "-X", "heapsize=%d" % heap, "-c", code], cwd=tmp, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
            out = p.stdout.decode("utf-8", "replace")
            if p.returncode:
                raise m3board.M3Error("circuitpython failed: %s" % out[-1500:], out)
            return out
        version = run("import sys\nprint('KVFP version', sys.version)")
        boot = parse(run(boot_code()))
        r = parse(run(RUN % ("plain", modules_for("plain"), FLOAT_OPTIONAL, LATE + POOL_LATE, MODEL, TOKENIZER,
                             TINY["steps"], TINY["h2o"], TINY["max_tokens"], "float")))
        r["boot"], r["usable"] = boot["boot"], boot["usable"]
        res = {"board": board, "heap_image": heap, "march": "none (.py source)", "kinds": {"plain": r},
               "largest": parse(run(START))["start_largest"],
               "firmware": "CircuitPython %s (../shared/runtimes/circuitpython-unix32, 32-bit, float32, heap split "
                           "in 4 areas)" % (re.search(r"CircuitPython (\S+)", version) or
                                            re.search(r"(\S+)", version)).group(1)}
        if log:
            log("plain: %s" % summary(r))
    return res


def measure(board, kinds=None, log=None):
    """Measure the footprint of `board`'s profile on the emulated board (a CircuitPython profile on the
    CircuitPython interpreter). Returns the figures (see record())."""
    prof = profiles.load(board)
    if prof.get("runtime") == "circuitpython":
        return measure_circuitpython(board, log)
    heap = image_heap(prof)
    why = missing(board, heap)
    if why:
        raise m3board.M3Missing(why)
    kinds = kinds or kinds_for(prof)
    layout = m3board.layout_for(board, heap)
    march = m3board.march_for(board, layout)
    from .deploy import device_sources, for_chip
    res = {"board": board, "heap_image": heap, "march": march, "machine": layout.key, "kinds": {}}
    stand = m3board.fallback_note(board, heap)
    if stand:
        res["fallback"] = stand
        if log:
            log(stand)
    with tempfile.TemporaryDirectory(prefix="kvedge-footprint-") as tmp:
        model, tok = tiny_files(tmp)
        probe = os.path.join(tmp, PROBE_NAME + ".py")
        with open(probe, "w") as f:
            f.write(PROBE)
        files = [(src, "/" + rel) for src, rel in for_chip(device_sources(), board, march)] + [
            (model, "/" + MODEL), (tok, "/" + TOKENIZER), (probe, "/" + PROBE_NAME + ".py")]
        disk = m3board.build_disk(os.path.join(tmp, "disk.img"), files, march=march, mpy=True, work=tmp,
                                  layout=layout)
        rom = os.path.join(tmp, "rom")
        os.makedirs(rom)
        m3board.write_disk_module(rom, march, layout)
        image = m3board.build_romfs(rom, os.path.join(tmp, "rom.img"), layout)
        with m3board.M3Board(board, heap=heap, romfs=image, disk=disk, log=log, layout=layout) as b:
            res["firmware"] = firmware_name(b)
            boot = parse(b.exec(boot_code()))
            res["largest"] = parse(b.exec(START))["start_largest"]
            for name, kind, forward, mods in runs(kinds):
                late = late_int(kind) if forward == "int" else LATE + POOL_LATE
                optional = FLOAT_OPTIONAL + (late[len(LATE):len(LATE) + 2] if forward == "int" else ())
                code = RUN % (kind, mods, optional, late, MODEL, TOKENIZER, TINY["steps"], TINY["h2o"],
                              TINY["max_tokens"], forward)
                r = parse(b.exec(code, timeout=900))
                r["boot"], r["usable"] = boot["boot"], boot["usable"]
                res["kinds"][name] = r
                if log:
                    log("%s: %s" % (name, summary(r)))
    return res


def firmware_name(b):
    """The firmware as it names itself (sys.version, its build), its image and the machine."""
    out = b.exec("import sys\nprint('KVFP version', sys.version, getattr(sys.implementation, '_build', '?'))")
    m = re.search(r"MicroPython (\S+).* (\S+)\s*$", out.strip())
    args = b.layout.qemu_args
    cpu = " -cpu " + args[args.index("-cpu") + 1] if "-cpu" in args else ""
    return "MicroPython %s, ports/qemu BOARD=%s, %s, %s -machine %s%s -icount shift=0" % (
        m.group(1) if m else "?", m.group(2) if m else "?", os.path.basename(b.firmware), b.layout.qemu[0],
        b.layout.machine, cpu)


def runtime_bytes(r):
    """The runner's code (kernels and modules) plus what its first run leaves behind."""
    return sum(r["modules"].values()) + r["warm"]


def loop_bytes(r):
    """The generation loop's own heap: what the run's peak adds to the heap once it is set up (measured: the
    formulas' slack on the tiny model cannot hide it), or if more, the run's peak less its formula-sized parts and
    the buffers of its two open files (the weights, streamed, and the tokenizer); never below zero. Measured on
    a second run without the stats stream where the probe made one (its lines are telemetry_bytes': a line a
    stale pointer kept through the first run's collections moved this figure by its size, 208 bytes, with any
    change to the runner's code); the first run's peak includes what that run leaves (warm)."""
    if "loop_peak" in r:
        over = r["loop_peak"] - r["run_plan"] - r["run_tokenizer"] - 2 * r.get("file", 0)
        return max(0, over, r["loop_peak"] - r["loop_setup"])
    over = r["run_peak"] - r["warm"] - r["run_plan"] - r["run_tokenizer"] - 2 * r.get("file", 0)
    return max(0, over, r["run_peak"] - r.get("run_setup", r["run_peak"]))


def summary(r):
    if "nofit" in r:
        return "does not fit: MemoryError %s after %d bytes of code" % (r["nofit"], sum(r["modules"].values()))
    return ("boot %d, runtime %d (code %d + first run %d), loop %d, largest block %d of %d free"
            % (r["boot"], runtime_bytes(r), sum(r["modules"].values()), r["warm"], loop_bytes(r), r["largest"],
               r["free"]))


def figures(res):
    """The profile's `footprint` object: flat keys, each cited by one source entry. The largest block is the one a
    run's arena is allocated from: at start-up, once kvedge.model.run is imported (run.main(kv_bytes=...)
    allocates it before importing anything else; later the imports' holes split the heap unpredictably). A kind
    whose runtime cannot run even the tiny model gets no figures: its code alone would leave out the first run's
    residue, the open files and the loop, and a plan counting it would promise more than the board has."""
    kinds = res["kinds"]
    first = next(iter(kinds.values()))
    fp = {"heap_image": res["heap_image"], "heap_usable": first["usable"], "boot_bytes": first["boot"],
          "largest_bytes": res["largest"]}
    for name, mod in OPTIONAL.items():
        if name in ("tiered", "fold", "floats", "int4") + POOL:
            continue  # per kernel kind below: with the asm/viper kinds kvedge.attention is already loaded
        got = [r["optional"][mod] + (r.get("telemetry_state", 0) + r.get("telemetry_line", 0)
                                     if name == "telemetry" else 0)
               for r in kinds.values() if mod in r["optional"]]
        if got:
            fp[name + "_bytes"] = max(got)
    files = [r["file"] for r in kinds.values() if "file" in r]
    if files:
        fp["file_bytes"] = max(files)
    for kind, r in kinds.items():
        if "warm" not in r or "nofit" in r:
            continue  # the tiny model did not run with these kernels here: no figure a plan could count in full
        fp["runtime_" + kind] = runtime_bytes(r)
        fp["loop_" + kind] = loop_bytes(r)
        if OPTIONAL["tiered"] in r["optional"]:
            # the integer pass's tier also loads its cold blocks' fold (TieredCache.load_fold: kernels.viper_tier)
            fold = r["optional"].get(OPTIONAL["fold"], 0) if kind.startswith(INT) else 0
            fp["tiered_" + kind] = r["optional"][OPTIONAL["tiered"]] + fold
        if all(OPTIONAL[n] in r["optional"] for n in POOL):  # kvedge.attention among them with plain and native
            fp["pool_" + kind] = sum(r["optional"][OPTIONAL[n]] for n in POOL)
        if kind.startswith(INT) and OPTIONAL["floats"] in r["optional"]:
            fp["floats_" + kind] = r["optional"][OPTIONAL["floats"]]
        if kind.startswith(INT) and OPTIONAL["int4"] in r["optional"]:
            q4 = late_int(kind[len(INT):])[len(LATE) + 1]
            fp["int4_" + kind] = r["optional"][OPTIONAL["int4"]] + r["optional"].get(q4, 0)
    return fp


WHAT = {
    "heap_image": "GC heap of the firmware image measured on (MICROPY_HEAP_SIZE)",
    "heap_usable": "gc.mem_free() + gc.mem_alloc() after boot: the GC heap less its own tables",
    "boot_bytes": "gc.mem_alloc() after gc.collect() in a fresh interpreter, before kvedge is imported, in a "
                  "snippet holding a runner call as long as a plan's (kvedge_host.boards.planrun.runner_code)",
    "largest_bytes": "largest bytearray the heap can allocate once kvedge.model.run is imported, where a run "
                     "allocates its KV arena (bisection)",
    "evict_bytes": "importing kvedge.evict (H2O eviction) after the runner",
    "split_bytes": "importing kvedge.kvsplit (a cache with K and V in formats of their own, and kvedge.kivi, its "
                   "asymmetric codes) after the runner's modules and a first run",
    "file_bytes": "opening a file on the board's filesystem (littlefs: its buffers); a run keeps the tokenizer "
                  "open, and the weights when they are read from flash",
    "encode_bytes": "importing kvedge.model.bpe (encoding a prompt) after the runner",
    "telemetry_bytes": "importing kvedge.telemetry (the stats stream) after the runner, a Telemetry object "
                       "that has written its first lines, and one line held while it is written",
}


def _what(key):
    if key in WHAT:
        return WHAT[key]
    part, kind = key.split("_", 1)
    if kind.startswith(INT):
        kind = kind[len(INT):]
        return {"runtime": "the runner's modules as .mpy with %s kernels and the integer forward pass (its q_* "
                           "kernels, kvedge.model.pass_int), each imported after gc.collect(), plus what a first "
                           "generation on that pass leaves behind" % kind,
                "tiered": "importing kvedge.tier.cache and kvedge.kernels.viper_tier (its cold blocks' fold) after the runner's "
                          "modules and a first run of the integer pass with %s kernels" % kind,
                "floats": "importing kvedge.kernels.f32_native (the float kernels %s kernels load on first use: the "
                          "integer pass for a cache with f32 rows) after a first run of the integer pass" % kind,
                "int4": "importing kvedge.model.pass_int4 and its q4 kernels (kernels4(): what a run of int4 weights "
                        "loads beside the int8 pass) after a first run of the integer pass with %s kernels" % kind,
                "pool": "importing kvedge.paged, kvedge.pooled and kvedge.model.runpool (a pool plan's runner: kvedge "
                        "plan --sessions) after a first run of the integer pass with %s kernels" % kind,
                "loop": "the integer pass's generation loop peak heap (%s kernels) beyond its formula-sized parts"
                        % kind}[part]
    return {"runtime": "the runner's modules as .mpy with %s kernels (kvedge.kernels.select('%s')), each imported "
                       "after gc.collect(), plus what a first generation leaves behind" % (kind, kind),
            "tiered": "importing kvedge.tier.cache (a tiered cache: its cold store and the formulas it sizes itself "
                      "with) after the runner's modules and a first run with %s kernels" % kind,
            "pool": "importing kvedge.paged, kvedge.pooled and kvedge.model.runpool (a pool plan's runner: kvedge plan "
                    "--sessions) after the runner's modules and a first run with %s kernels" % kind,
            "loop": "the generation loop's peak heap (%s kernels) beyond its formula-sized parts (weights, arena, "
                    "activations, objects, tokenizer)" % kind}[part]


def sources(board, res, fp, command, date):
    prof = profiles.load(board)
    chip = prof.get("chip", board)
    cpu = m3board.LAYOUTS[res.get("machine", "m3")].cpu
    note = ("Measured on the emulated %s (32-bit MicroPython, the same object model) with %s .mpy files on "
            "a littlefs filesystem, as kvedge deploy --mpy leaves them; the tiny model of kvedge.model.tiny for the "
            "first run. A real %s runs other firmware, whose built-in names and port objects differ a little"
            % (cpu, res["march"], chip))
    if res["heap_image"] != prof["heap_bytes"]:
        note += ("; measured on the %d-byte image (no image has this profile's %d-byte heap): code and first-run "
                 "state do not depend on the heap's size" % (res["heap_image"], prof["heap_bytes"]))
    out = []
    for key in sorted(fp):
        n = note
        if key.endswith(("_viper", "_native")) and prof.get("mpy_march") != res["march"]:
            n += "; viper/native machine code measured as %s %s, the board's %s code differs in size" % (
                res["march"], "(call0)" if res["march"] == "xtensa" else "Thumb", prof.get("mpy_march"))
        out.append({"figure": "footprint." + key, "value": fp[key],
                    "source": "kvedge measurement on the emulated %s board: %s" % (cpu, _what(key)),
                    "command": command, "firmware": res["firmware"], "date": date, "where": "KVFP lines",
                    "estimate": True, "note": n + "."})
    return out


def record(board, res, command=None, date=None):
    """Write the figures into boards/BOARD.json (`footprint` and its `sources` entries, replacing older ones)."""
    fp = figures(res)
    command = command or "kvedge footprint --board %s --write" % board
    date = date or datetime.date.today().isoformat()
    path = os.path.join(BOARDS, board + ".json")
    with open(path) as f:
        raw = json.load(f)
    raw["footprint"] = fp
    kept = [s for s in raw.get("sources", []) if not s["figure"].startswith("footprint.")]
    raw["sources"] = kept + sources(board, res, fp, command, date)
    with open(path, "w") as f:
        json.dump(raw, f, indent=2, ensure_ascii=False)
        f.write("\n")
    profiles.load(board)  # the written profile must load (its sources state its figures)
    return fp
