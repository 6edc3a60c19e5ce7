"""A plan, run: the call that makes kvedge's runner generate with a plan's configuration on a board, and a one-shot
run of it on the emulated board at the profile's heap (what `kvedge demo` and the plan tests use).

The runner checks the same account the plan made before it allocates anything: `workspace` and `overhead` carry the
runtime's measured parts (boot, code, the stats stream, the eviction module, the generation loop), so that the
board's own total (kvedge.model.llama.plan with its tokenizer and objects) equals the plan's total_bytes, and the
budget is the plan's limit (the usable heap less the margin)."""
import json
import os
import tempfile

from .. import profiles
from . import m3board
from ..plan.account import loads_floats


def runner_args(doc, steps, stats_ms=0, prompt="", temperature=0.0, seed=1, model=None, tokenizer=None):
    """Keyword arguments of kvedge.model.run.main for a plan document (`kvedge plan --out`): what the document
    says of the cache, the policy, the weights, the tier, the pass and prefill is the device's reading of it
    (kvedge.model.runplan.doc_args, the rule written once); with a measured runtime, the budget and workspace
    the plan counted from the profile's footprint (the host account's parts, kvedge_host.plan.account). A plan
    without the board's encoder gets the prompt as ids encoded here (runplan.prompt_args: model and tokenizer,
    the host's paths, needed then)."""
    from kvedge.model.runplan import doc_args, prompt_args
    from kvedge.model.plandoc import encodes, streams_stats
    rt = doc.get("runtime") or {}
    kw = doc_args(doc)
    h2o, tier = kw["h2o"], kw.pop("tier")
    if tier:
        kw["tier"] = tier
    if stats_ms and not streams_stats(doc):
        raise ValueError("the plan has no stats stream (its \"without\", or kvedge plan --no-stats): run with "
                         "stats_ms=0")
    if prompt and not encodes(doc):
        if model is None or tokenizer is None:
            raise ValueError("the plan leaves the board's encoder out: the prompt is encoded on the host, which "
                             "needs the model and tokenizer files")
        from kvedge.model.header import read_config
        kw.update(prompt_args(doc, prompt, tokenizer, read_config(model)[0].vocab_size))
    else:
        kw["prompt"] = prompt
    kw.update(steps=steps, temperature=temperature, seed=seed, stats_ms=stats_ms, peak=True)
    if rt.get("source") == "measured":
        kw["kernel"] = rt["kernels"]
        kw["tile"] = rt["tile"]
        kw["encode"] = bool(rt.get("prompt", True)) and encodes(doc)
        kw["budget"] = rt["usable_heap"] - rt["margin_bytes"]
        kw["workspace"] = rt["boot_bytes"] + rt["code_bytes"] + rt["telemetry_bytes"] + (rt["evict_bytes"] if h2o
                                                                                         else 0) + (
            rt.get("encode_bytes", 0) if kw["encode"] else 0) + (rt.get("tiered_bytes", 0) if tier else 0) + (
            rt.get("floats_bytes", 0) if loads_floats(kw["kv"], kw["forward"]) else 0) + rt.get("layout_bytes", 0) + (
            rt.get("int4_bytes", 0)) + rt.get("pool_bytes", 0)  # int4 rows' modules: the plan counted them for int4
        # weights only; a pool plan's modules (kvedge.model.runpool and the pool)
        # the loop, and the buffers of the files the run keeps open (the tokenizer; the weights when streamed)
        kw["overhead"] = rt["loop_bytes"] + rt["file_bytes"] * (1 + (1 if kw["stream"] else 0))
        if prompt and not rt.get("prompt", True):
            raise ValueError("the plan counted no prompt (kvedge plan --no-prompt); plan again without it")
    return kw


MIN_TOKENS = 8  # fewer tokens kept than this (or a cut context) is not a generation worth a stats stream


def plan_for(board, model, tokenizer, out=None, heap=None, prompt="", stats=True, log=None, weights_dtype="i8",
             forward="auto", kernels="auto"):
    """The plan (kvedge_host.plan.planner) for kvedge's runner on `board` (int8 weights unless weights_dtype says the
    file holds others, an i8 cache, unpadded rows, no tiered cache, the tokenizer counted, the prompt counted when
    there is one), written to `out` when given; with the stats stream unless it leaves the cache fewer than
    MIN_TOKENS tokens (or only a cut context), in which case the run goes without it (the returned document's
    runtime.stats says which). forward / kernels: planner.plan's. Returns the plan document; UserError when
    nothing fits either way."""
    from ..plan import planner
    from ..errors import UserError
    from kvedge.model.plandoc import ENCODER, STATS
    spec, context, tgt = planner.inputs(model, board=board, heap=heap, weights_dtype=weights_dtype)
    # the full runtime first, then without the board's encoder, then without the stats stream too (the planner's
    # own order: planner.lean_levels), until the cache keeps MIN_TOKENS
    tries = planner.lean_levels(bool(prompt), stats)
    if not stats:
        tries = [t + [STATS] for t in tries]
    doc = None
    for i, drop in enumerate(tries):
        with_stats = STATS not in drop
        p = planner.plan(spec, context, tgt, kv_dtype="i8", weights_dtype=weights_dtype, align=0, tiered=False,
                         model=model, tokenizer=tokenizer, stats=with_stats, prompt=bool(prompt), forward=forward,
                         kernels=kernels, encoder=ENCODER not in drop, lean=False)
        if p.document is None:
            continue
        doc = p.document
        if out:
            with open(out, "w") as f:
                json.dump(doc, f, indent=2)
                f.write("\n")
        if doc["tokens_kept"] >= MIN_TOKENS and doc["kind"] != "shorter":
            return doc
        if log and i + 1 < len(tries):
            kept = ["the board's encoder"] * (bool(prompt) and ENCODER not in drop) + ["the stats stream"] * with_stats
            log("with %s the cache keeps %d tokens (%s): planning without %s" % (
                " and ".join(kept), doc["tokens_kept"], doc["strategy"],
                "the board's encoder" if ENCODER in tries[i + 1] and ENCODER not in drop else "the stats stream"))
    hint = "" if weights_dtype == "i8" else ": int8 weights (kvedge convert --weights-dtype i8) leave it more"
    if doc is None:
        raise UserError("nothing fits %s: %s with %s weights and an i8 cache (kvedge plan --board %s)%s"
                        % (board, model, weights_dtype, board, hint))
    if doc["tokens_kept"] < MIN_TOKENS:  # a run that stops after a token or two is not a plan worth running
        raise UserError("nothing fits %s keeping %d tokens or more: %s with %s weights keeps %d (%s; kvedge plan "
                        "--board %s)%s" % (board, MIN_TOKENS, model, weights_dtype, doc["tokens_kept"],
                                           doc["strategy"], board, hint))
    return doc


def plan_command(model, board, doc, heap=None, prompt="", weights_dtype="i8", forward="auto", kernels="auto"):
    """The `kvedge plan` command that writes the plan plan_for made (doc: its document)."""
    from kvedge.model.plandoc import encodes, streams_stats
    stats = streams_stats(doc)
    return "kvedge plan --model %s --board %s --weights-dtype %s --kv-dtype i8 --align 0 --no-tiered%s%s%s%s%s%s" % (
        os.path.basename(model), board, weights_dtype, " --heap %d" % heap if heap else "",
        "" if prompt else " --no-prompt", "" if encodes(doc) else " --no-encoder", "" if stats else " --no-stats",
        "" if forward == "auto" else " --forward " + forward, "" if kernels == "auto" else " --kernels " + kernels)


def runner_code(model, tokenizer, kw):
    """The snippet that runs it on the board (paths as the board sees them)."""
    args = ", ".join("%s=%r" % (k, kw[k]) for k in sorted(kw))
    mod = "runpool" if kw.get("pool") is not None else "run"  # a pool plan's runner (kvedge.model.runplan.entry)
    return "from kvedge.model import %s\n%s.main(%r, %r, %s)\n" % (mod, mod, model, tokenizer, args)


def summary(out):
    """The runner's closing "#KVEDGE {json}" line, or None."""
    for line in out.splitlines():
        i = line.find("#KVEDGE ")
        if i >= 0:
            return json.loads(line[i + 8:])
    return None


def run_on_m3(board, doc, model, tokenizer, steps, heap=None, timeout=900, log=None, stats_ms=0, prompt="",
              temperature=0.0, seed=1):
    """Run a plan once on a fresh emulated board: the package as .mpy for the board and the model and tokenizer
    on its filesystem; returns (summary dict, everything the board printed). heap: the firmware image to boot
    (default the profile's heap; a PSRAM profile runs on the largest image with a plan made for that heap)."""
    prof = profiles.load(board)
    heap = heap or prof["heap_bytes"]
    layout = m3board.layout_for(board, heap)
    why = m3board.missing(board, heap, layout)
    if why:
        raise m3board.M3Missing(why)
    march = m3board.march_for(board, layout)
    from .deploy import device_sources, for_chip
    with tempfile.TemporaryDirectory(prefix="kvedge-planrun-") as tmp:
        files = [(src, "/" + rel) for src, rel in for_chip(device_sources(), board, march)] + [
            (model, "/model.bin"), (tokenizer, "/tok.bin")]
        disk = m3board.build_disk(os.path.join(tmp, "disk.img"), files, march=march, mpy=True, work=tmp,
                                  layout=layout)
        rom = os.path.join(tmp, "rom")
        os.makedirs(rom)
        m3board.write_disk_module(rom, march, layout)
        image = m3board.build_romfs(rom, os.path.join(tmp, "rom.img"), layout)
        with m3board.M3Board(board, heap=heap, romfs=image, disk=disk, log=log, layout=layout) as b:
            out = b.exec(runner_code("model.bin", "tok.bin", runner_args(doc, steps, stats_ms, prompt, temperature,
                                                                         seed, model=model, tokenizer=tokenizer)),
                         timeout=timeout)
    return summary(out), out


def run_on_circuitpython(board, doc, model, tokenizer, steps, timeout=900, stats_ms=0):
    """Run a plan once on the 32-bit CircuitPython interpreter at the profile's heap (the package as .py source,
    as a CIRCUITPY drive holds it); returns (summary dict, everything it printed)."""
    import shutil
    import subprocess
    from .runtimes import circuitpython_bin
    from ..paths import DEVICE
    exe = circuitpython_bin()
    if exe is None:
        raise m3board.M3Missing("no CircuitPython interpreter in ../shared/runtimes/circuitpython-unix32")
    heap = profiles.load(board)["heap_bytes"]
    with tempfile.TemporaryDirectory(prefix="kvedge-planrun-") as tmp:
        shutil.copyfile(model, os.path.join(tmp, "model.bin"))
        shutil.copyfile(tokenizer, os.path.join(tmp, "tok.bin"))
        code = runner_code("model.bin", "tok.bin", runner_args(doc, steps, stats_ms))
        env = dict(os.environ, MICROPYPATH=DEVICE)
        p = subprocess.run([exe, "-X", "heapsize=%d" % heap, "-c", code], cwd=tmp, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout)
        out = p.stdout.decode("utf-8", "replace")
        if p.returncode:
            raise m3board.M3Error("circuitpython failed: %s" % out.strip().splitlines()[-1:], out)
    return summary(out), out
