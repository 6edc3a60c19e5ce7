"""Deployment to a CircuitPython board through its CIRCUITPY drive (the USB drive the board shows; any folder that
stands in for one).

CircuitPython's conventions: libraries live in lib/ (`circup` installs there too), the board runs code.py on its
own after every reset and after files change, options live in settings.toml (os.getenv reads them there),
boot_out.txt says which CircuitPython the board runs. MicroPython's .mpy files do not load on CircuitPython (its
own .mpy version): the package goes as source unless a CircuitPython mpy-cross of the board's major version is
given.

Nothing half-written is left in use: every changed file is first written beside its target (NAME.kvnew), and
only when all of them are complete are they renamed over the old ones; a drive without room for them is
refused before anything is written, with the number of bytes missing."""
import hashlib
import json
import os
import re
import subprocess
import tempfile

from .. import profiles
from .deploy import CONFIG_NAME, DeployError, device_sources
from ..paths import DEVICE

LIB = "lib"
BOOT_OUT = "boot_out.txt"
SETTINGS = "settings.toml"
CODE = os.path.join(DEVICE, "circuitpython", "code.py")
TMP = ".kvnew"
_VERSION = re.compile(r"CircuitPython (\d+)\.(\d+)\.(\d+)")
_KEY = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
# a module of machine-code kernels (a function under one of these decorators): CircuitPython has no native
# emitters (viper, native, asm_thumb, asm_xtensa), so such modules stay off the drive (the kernel selector falls back to plain)
_NATIVE = re.compile(r"^[ \t]*@micropython\.(viper|native|asm_thumb|asm_xtensa)\b", re.M)


def _machine_code(src):
    """True when device module `src` holds a viper, native or inline-assembler function."""
    with open(src, encoding="utf-8") as f:
        return bool(_NATIVE.search(f.read()))


def board_info(drive):
    """What boot_out.txt says: {"text": its first line, "version": (major, minor, micro), "board": the rest of
    the line after "; "} or None when the drive has none."""
    try:
        with open(os.path.join(drive, BOOT_OUT), encoding="utf-8", errors="replace") as f:
            text = f.read(4096)
    except OSError:
        return None
    first = (text.strip().splitlines() or [""])[0]
    m = _VERSION.search(first)
    return {"text": first, "version": tuple(int(x) for x in m.groups()) if m else None,
            "board": first.split("; ", 1)[1] if "; " in first else "", "all": text}


def check_board(drive, prof):
    """Refuse a profile that does not describe the board behind this drive, before anything is written: a
    MicroPython profile, a drive without boot_out.txt, a board that is not CircuitPython, or a board whose
    boot_out.txt names another chip of the profiles. Returns board_info()."""
    if prof.get("runtime") != "circuitpython":
        cp = [n for n in profiles.names() if profiles.load(n).get("runtime") == "circuitpython"]
        raise DeployError("--board %s is a MicroPython profile; a CIRCUITPY drive needs a CircuitPython one (%s)"
                          % (prof["name"], ", ".join(cp) or "none"))
    info = board_info(drive)
    if info is None:
        raise DeployError("%s: no %s (the board writes it at every start): is this a CIRCUITPY drive?"
                          % (drive, BOOT_OUT))
    if info["version"] is None:
        raise DeployError("%s/%s: %r is not CircuitPython's start line" % (drive, BOOT_OUT, info["text"][:80]))
    chip = prof.get("chip") or ""
    said = info["all"].lower()
    others = sorted({profiles.load(n).get("chip") or "" for n in profiles.names()} - {chip, "", "x64"}, key=len,
                    reverse=True)  # esp32s3 before esp32
    named = [c for c in others if c in said and chip not in said]
    if named:
        raise DeployError("%s says %r: a %s board, but --board %s is for %s" % (
            BOOT_OUT, info["text"], named[0], prof["name"], chip))
    return info


def mpy_cross_version(exe):
    """(major, minor) of a CircuitPython mpy-cross (its --version names CircuitPython), else None."""
    try:
        p = subprocess.run([exe, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DeployError("%s: cannot run it: %s" % (exe, e))
    m = _VERSION.search(p.stdout.decode("utf-8", "replace"))
    return (int(m.group(1)), int(m.group(2))) if m else None


def package_files(build, mpy_cross=None, info=None):
    """(host path, drive path) of the package under lib/: the sources, or .mpy compiled by a CircuitPython
    mpy-cross whose major version is the board's (CircuitPython's .mpy format changes between major versions)."""
    pairs = [(src, LIB + "/" + rel) for src, rel in device_sources() if not _machine_code(src)]
    if not mpy_cross:
        return pairs
    ver = mpy_cross_version(mpy_cross)
    if ver is None:
        raise DeployError("%s is not CircuitPython's mpy-cross (its --version names no CircuitPython): "
                          "MicroPython's .mpy files do not load on CircuitPython; leave --mpy-cross out to "
                          "deploy the sources" % mpy_cross)
    if ver[0] != info["version"][0]:
        raise DeployError("%s is CircuitPython %d.%d's mpy-cross; the board runs CircuitPython %d.%d.%d (%s): "
                          ".mpy files need the board's major version" % ((mpy_cross,) + ver + info["version"]
                                                                        + (BOOT_OUT,)))
    out = []
    for src, rel in pairs:
        dst = os.path.join(build, rel[:-3] + ".mpy")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        p = subprocess.run([mpy_cross, "-o", dst, src], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if p.returncode:
            raise DeployError("%s failed on %s: %s" % (mpy_cross, rel, p.stdout.decode().strip()))
        out.append((dst, rel[:-3] + ".mpy"))
    return out


def settings_text(old, values):
    """settings.toml with KVEDGE_* keys set to `values` ({KEY without the prefix: str or int}): lines of other
    keys (WiFi, CIRCUITPY_*) are kept as they are; a key already there is replaced in place."""
    lines = old.splitlines()
    left = dict(values)
    out = []
    for line in lines:
        key = line.split("=", 1)[0].strip()
        if key.startswith("KVEDGE_") and key[7:] in left:
            out.append(_toml_line(key[7:], left.pop(key[7:])))
        else:
            out.append(line)
    for k in sorted(left):
        out.append(_toml_line(k, left[k]))
    return "\n".join(out) + "\n"


def _toml_line(key, value):
    # CircuitPython's settings.toml takes integers and basic strings (JSON's escapes are TOML's)
    v = str(value) if isinstance(value, int) and not isinstance(value, bool) else json.dumps(str(value))
    return "KVEDGE_%s = %s" % (key, v)


def parse_sets(items):
    """--set KEY=VALUE items -> {KEY: int or str}; KEY is a settings name without KVEDGE_ (STEPS, PROMPT, ...)."""
    out = {}
    for it in items:
        key, eq, val = it.partition("=")
        key = key.strip().upper()
        if key.startswith("KVEDGE_"):
            key = key[7:]
        if not eq or not _KEY.match(key):
            raise DeployError("--set %r: expected KEY=VALUE with KEY in capitals, e.g. STEPS=64 or PROMPT=Once"
                              % it)
        out[key] = int(val) if re.match(r"^-?\d{1,9}$", val.strip()) else val
    return out


def _digest(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).digest()
    except OSError:
        return None


def _blocks(n, unit):
    return (n + unit - 1) // unit * unit


def write_files(drive, items, managed=(LIB + "/kvedge",)):
    """Make the drive hold `items` [(drive path, bytes or host path)]; files in `managed` folders that are not
    wanted are removed. Unchanged files are not rewritten (a flash drive wears, and every write restarts
    code.py). Returns {"sent", "unchanged", "removed"}; raises DeployError with the bytes missing when the
    drive has no room, having written nothing."""
    todo = []
    unchanged = []
    for rel, src in items:
        data = src if isinstance(src, bytes) else None
        if data is None:
            with open(src, "rb") as f:
                data = f.read()
        dst = os.path.join(drive, *rel.split("/"))
        if _digest(dst) == hashlib.sha256(data).digest():
            unchanged.append(rel)
        else:
            todo.append((rel, dst, data))
    st = os.statvfs(drive)
    unit = st.f_frsize or st.f_bsize or 512
    need = sum(_blocks(len(d), unit) for _, _, d in todo)  # the new files beside the old ones, until renamed
    free = st.f_bavail * unit
    if need > free:
        raise DeployError("%s: the drive has %d bytes free, the deploy needs %d: %d bytes missing (nothing was "
                          "written; delete files from the drive or deploy fewer)" % (drive, free, need, need - free))
    written = []
    try:
        for rel, dst, data in todo:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with open(dst + TMP, "wb") as f:
                written.append(dst + TMP)
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
    except OSError as e:
        for p in written:
            try:
                os.remove(p)
            except OSError:
                pass
        raise DeployError("%s: writing %s failed (%s); the drive holds what it held before" % (
            drive, os.path.basename(written[-1][:-len(TMP)]) if written else "?", e.strerror or e))
    # all complete: swap them in, code.py last (CircuitPython restarts it when it changes)
    for rel, dst, _ in sorted(todo, key=lambda t: t[0] == "code.py"):
        os.replace(dst + TMP, dst)
    wanted = {rel for rel, _ in items}
    removed = []
    for folder in managed:
        top = os.path.join(drive, *folder.split("/"))
        for d, subdirs, names in os.walk(top):
            for n in sorted(names):
                rel = os.path.relpath(os.path.join(d, n), drive).replace(os.sep, "/")
                if rel not in wanted:
                    os.remove(os.path.join(d, n))
                    removed.append(rel)
    return {"sent": [t[0] for t in todo], "unchanged": unchanged, "removed": removed}


def check_run(config, weights, tokenizer):
    """The runner's own account of the plan with these files (what code.py checks on the board before it
    allocates) against the plan's total, refused here when the plan cannot hold it: a plan made without the
    runner's objects, the tokenizer and the loop in its workspace. Returns the runtime's share it leaves."""
    from kvedge.errors import PlanError
    from kvedge.model.runplan import plan_args
    from ..validate import plan_file
    doc = plan_file(config)
    try:
        a = plan_args(doc, weights, tokenizer)
    except PlanError as e:
        raise DeployError("%s: %s (model %s)" % (config, e, weights))
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise DeployError("%s: not a `kvedge plan --out` device config (%s)" % (config, e))
    if a["workspace"] < 0:
        raise DeployError("%s: the runner's own account of this plan (its objects, the tokenizer, the loop) is %d "
                          "bytes over the plan's total: plan again with --workspace %d (kvedge demo's loop does "
                          "this on a board it can reach)" % (config, -a["workspace"],
                                                             doc["workspace_bytes"] - a["workspace"]))
    return a["workspace"]


def deploy_drive(drive, board, config=None, weights=None, tokenizer=None, sets=None, mpy_cross=None, extra=()):
    """Copy the package to lib/kvedge, the plan as kvedge_plan.json, the weights and tokenizer, code.py, and the
    KVEDGE_* options into settings.toml (KVEDGE_MODEL and KVEDGE_TOKENIZER name the files copied). Returns the
    write_files() result plus "info" (boot_out.txt) and "mpy" (True when .mpy files went)."""
    if not os.path.isdir(drive):
        raise DeployError("%s: no such folder (the mounted CIRCUITPY drive)" % drive)
    prof = profiles.load(board)
    info = check_board(drive, prof)
    values = dict(sets or {})
    if config:  # the device's own check of a plan (kvedge.model.plandoc), at the board's heap
        from ..validate import plan_file
        plan_file(config, prof["heap_bytes"])
    if config and weights and tokenizer:
        check_run(config, weights, tokenizer)
    with tempfile.TemporaryDirectory(prefix="kvedge-cp-") as build:
        pairs = package_files(build, mpy_cross, info)
        if config:
            from ..validate import load_json
            from .deploy import for_plan
            pairs = for_plan(pairs, load_json(config))  # the parts the plan leaves out stay off the drive
        items = [(rel, src) for src, rel in pairs]
        if config:
            items.append((CONFIG_NAME, os.path.abspath(config)))
        for flag, path, key in (("--weights", weights, "MODEL"), ("--tokenizer", tokenizer, "TOKENIZER")):
            if path:
                if not os.path.isfile(path):
                    raise DeployError("%s: no such file (%s)" % (path, flag))
                items.append((os.path.basename(path), os.path.abspath(path)))
                values[key] = os.path.basename(path)
        for x in extra:
            items.append((os.path.basename(x), os.path.abspath(x)))
        items.append(("code.py", CODE))
        try:
            with open(os.path.join(drive, SETTINGS), encoding="utf-8") as f:
                old = f.read()
        except FileNotFoundError:
            old = ""
        items.append((SETTINGS, settings_text(old, values).encode("utf-8")))
        res = write_files(drive, items)
    res["info"] = info
    res["mpy"] = bool(mpy_cross)
    return res
