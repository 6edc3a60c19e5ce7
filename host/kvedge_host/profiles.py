"""Board profiles from boards/*.json.

A profile states a board's figures (heap_bytes, fast_memory, slow_memory, flash_bytes, ...) and, in `sources`,
where each one comes from: a list of {"figure": "heap_bytes" or "fast_memory.bytes", "value": the figure as the
profile states it, "source": title, "url": link a user can open, or "command" (+ "firmware") that measured it,
"where": section / file:line / tag, "estimate": true when the value is derived rather than read off the source,
"note": how; a measurement also names its "firmware" and "date"}. A profile with "base": NAME is a variant (e.g. the
same board under CircuitPython): it holds only what differs, and the base profile supplies the rest, sources
included. "footprint" holds the runtime's own heap measured on the emulated board (`kvedge footprint --board B
--write`, kvedge_host.boards.footprint): what `kvedge plan` counts instead of the flat workspace_bytes allowance."""
import os
import re

from . import validate
from .paths import BOARDS

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")  # a file in boards/, never a path out of it
_MAX_BYTES = 1 << 40


class BoardError(validate.InputError):
    pass


# the figures every profile must cite (a dict-valued figure is cited per key: fast_memory.bytes, .kind)
FIGURES = ("sram_bytes", "heap_bytes", "fast_memory", "slow_memory", "flash_bytes", "flash_fs_bytes", "mpy_march",
           "float", "small_int_bits", "workspace_bytes", "footprint", "clock_hz", "read_bytes_per_s")
# kvedge's own allowances: cited, but by a note rather than a public source
OWN_FIGURES = ("workspace_bytes",)
FLOATS = ("single", "double", "single30")
RUNTIMES = ("micropython", "circuitpython")
SOURCE_KEYS = ("figure", "value", "source", "url", "command", "firmware", "date", "where", "estimate", "note")


def names():
    return sorted(f[:-5] for f in os.listdir(BOARDS) if f.endswith(".json"))


def _read(name):
    if not isinstance(name, str) or not _NAME.match(name):
        raise BoardError("unknown board %r (known: %s)" % (name, ", ".join(names())))
    path = os.path.join(BOARDS, name + ".json")
    if not os.path.exists(path):
        raise BoardError("unknown board %r (known: %s)" % (name, ", ".join(names())))
    try:
        prof = validate.load_json(path)
    except validate.InputError as e:
        msg = str(e)
        raise BoardError("%s: cannot read board profile: %s" % (path, msg[len(path) + 2:] if msg.startswith(path)
                                                                 else msg))
    if not isinstance(prof, dict):
        raise BoardError("%s: a board profile is a JSON object" % path)
    return path, prof


def _merge(base, variant):
    """The variant's keys over the base's; the base's sources for figures the variant restates are dropped."""
    prof = dict(base)
    prof.update(variant)
    own = set(variant)
    kept = [s for s in base.get("sources", []) if s["figure"].split(".")[0] not in own]
    prof["sources"] = kept + list(variant.get("sources", []))
    return prof


def load(name):
    path, prof = _read(name)
    if "base" in prof:
        if not isinstance(prof["base"], str) or prof["base"] == name:
            raise BoardError("%s: 'base' must name another board profile" % path)
        bpath, base = _read(prof["base"])
        if "base" in base:
            raise BoardError("%s: base profile %r is itself a variant" % (path, prof["base"]))
        _check_sources(bpath, base)
        _check_sources(path, prof)
        prof = _merge(base, prof)
    for key in ("heap_bytes", "mpy_march", "fast_memory"):
        if key not in prof:
            raise BoardError("%s: board profile is missing %r" % (path, key))
    if prof.get("runtime", "micropython") not in RUNTIMES:
        raise BoardError("%s: runtime must be one of %s, got %r" % (path, ", ".join(RUNTIMES), prof["runtime"]))
    if prof.get("float", "single") not in FLOATS:
        raise BoardError("%s: float must be one of %s, got %r" % (path, ", ".join(FLOATS), prof["float"]))
    _check_fields(path, prof)
    _check_sources(path, prof)
    _check_values(path, prof)
    prof["workspace_bytes"] = prof.get("workspace_bytes") or 0  # absent or null: the runtime needs none
    return prof


def _bytes(path, key, v, lo=1, optional=False):
    if v is None and optional:
        return None
    try:
        return validate.whole(path, key, v, lo, _MAX_BYTES)
    except validate.InputError as e:
        raise BoardError(str(e))


def _memory(path, key, v, optional):
    """fast_memory / slow_memory: {"kind": text, "bytes": n} (slow_memory may be null)."""
    if v is None and optional:
        return
    if not isinstance(v, dict):
        raise BoardError("%s: %s is %s, expected an object with \"kind\" and \"bytes\""
                         % (path, key, validate.show(v)))
    if "bytes" in v:
        _bytes(path, key + ".bytes", v["bytes"])
    if v.get("kind") is not None and not isinstance(v["kind"], str):
        raise BoardError("%s: %s.kind is %s, expected text" % (path, key, validate.show(v["kind"])))


def _check_fields(path, prof):
    """The figures the tools compute with: whole numbers of bytes in range, memories as objects, text as text
    (a profile is user input: one may be added to boards/)."""
    _bytes(path, "heap_bytes", prof["heap_bytes"])
    for key in ("workspace_bytes", "flash_bytes", "flash_fs_bytes", "sram_bytes"):
        _bytes(path, key, prof.get(key), 0, optional=True)
    hz = prof.get("clock_hz")  # the CPU clock a plan's tokens/s is figured at (null: none, e.g. the host's port)
    if hz is not None and (isinstance(hz, bool) or not isinstance(hz, int) or not 10 ** 6 <= hz <= 10 ** 10):
        raise BoardError("%s: clock_hz is %s, expected a whole number of Hz from 1e6 to 1e10 (or null)"
                         % (path, validate.show(hz)))
    rates = prof.get("read_bytes_per_s")  # peak read rates of the board's memories (a plan's memory bound)
    if rates is not None:
        if not isinstance(rates, dict) or not set(rates) <= {"flash", "psram"}:
            raise BoardError("%s: read_bytes_per_s is %s, expected an object with \"flash\" and/or \"psram\""
                             % (path, validate.show(rates)))
        for k, v in rates.items():
            if isinstance(v, bool) or not isinstance(v, int) or not 10 ** 5 <= v <= 10 ** 10:
                raise BoardError("%s: read_bytes_per_s.%s is %s, expected a whole number of bytes/s from 1e5 to "
                                 "1e10" % (path, k, validate.show(v)))
    _memory(path, "fast_memory", prof["fast_memory"], optional=False)
    _memory(path, "slow_memory", prof.get("slow_memory"), optional=True)
    if not isinstance(prof["mpy_march"], str) or not re.match(r"^[a-z0-9]+$", prof["mpy_march"]):
        raise BoardError("%s: mpy_march is %s, expected an mpy-cross -march name such as \"armv6m\""
                         % (path, validate.show(prof["mpy_march"])))
    notes = prof.get("notes")
    if notes is not None and (not isinstance(notes, list) or not all(isinstance(x, str) for x in notes)):
        raise BoardError("%s: notes is %s, expected a list of text lines" % (path, validate.show(notes)))
    for key in ("name", "title", "chip"):
        if prof.get(key) is not None and not isinstance(prof[key], str):
            raise BoardError("%s: %s is %s, expected text" % (path, key, validate.show(prof[key])))


def flash_fs_bytes(prof):
    """Flash a plan may use for files: the profile's flash_fs_bytes, else half its flash (firmware + fs); 0 when
    the profile gives neither."""
    if prof.get("flash_fs_bytes") is not None:
        return prof["flash_fs_bytes"]
    return (prof.get("flash_bytes") or 0) // 2


def resolve(prof, figure):
    """The value a figure path names ("heap_bytes", "fast_memory.bytes"); KeyError when the profile lacks it."""
    value = prof
    for part in figure.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(figure)
        value = value[part]
    return value


def figures(prof):
    """(figure path, value) for every figure a profile must cite; dict values are cited key by key."""
    out = []
    for name in FIGURES:
        if name not in prof:
            continue
        value = prof[name]
        if isinstance(value, dict):
            out += [(name + "." + k, value[k]) for k in sorted(value)]
        else:
            out.append((name, value))
    return out


def _check_sources(path, prof):
    """Each entry is well formed: named figure, a source, a URL or a measuring command, an estimate flag."""
    srcs = prof.get("sources", [])
    if not isinstance(srcs, list):
        raise BoardError("%s: 'sources' must be a list of objects" % path)
    for i, s in enumerate(srcs):
        where = "%s: sources[%d]" % (path, i)
        if not isinstance(s, dict):
            raise BoardError("%s: must be an object with figure, value, source, url or command" % where)
        unknown = sorted(set(s) - set(SOURCE_KEYS))
        if unknown:
            raise BoardError("%s: unknown key %r" % (where, unknown[0]))
        for key in ("figure", "source"):
            if not isinstance(s.get(key), str) or not s[key]:
                raise BoardError("%s: missing %r" % (where, key))
        if "value" not in s:
            raise BoardError("%s (%s): missing 'value'" % (where, s["figure"]))
        if not isinstance(s.get("estimate"), bool):
            raise BoardError("%s (%s): 'estimate' must be true or false" % (where, s["figure"]))
        own = s["figure"] in OWN_FIGURES
        if not own and not s.get("url") and not s.get("command"):
            raise BoardError("%s (%s): needs a 'url' or the 'command' that measured it" % (where, s["figure"]))
        if (s["estimate"] or own) and not s.get("note"):
            raise BoardError("%s (%s): an estimate needs a 'note' saying how it was derived" % (where, s["figure"]))


def _check_values(path, prof):
    """A source states the figure the profile holds: a changed figure cannot keep its old citation."""
    for i, s in enumerate(prof.get("sources", [])):
        try:
            value = resolve(prof, s["figure"])
        except KeyError:
            raise BoardError("%s: source for %r, which the profile does not have" % (path, s["figure"]))
        if value != s["value"]:
            raise BoardError("%s: the source for %s says %r, the profile %r"
                             % (path, s["figure"], s["value"], value))


def uncited(prof):
    """Figures of the profile with no source entry."""
    cited = {s["figure"] for s in prof.get("sources", [])}
    return [f for f, _ in figures(prof) if f not in cited]


def is_estimate(prof, figure):
    """A figure is an estimate unless some source states it directly."""
    return not any(s["figure"] == figure and not s["estimate"] for s in prof.get("sources", []))
