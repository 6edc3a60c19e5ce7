"""Checks of user input shared by the kvedge commands.

Every check either returns the value or raises InputError (a ValueError) whose message is one line in the user's
words: the file or the flag first, then the field as the file spells it, the value as the user wrote it, and
what was expected, e.g. "config.json: num_hidden_layers is 1e+30, expected a whole number 1..4096" or
"--temperature inf: expected a finite number >= 0". Checks run before anything is built from the value, so
an absurd size fails at once and in constant memory."""
import itertools
import json
import math
import os
import re
import stat

JSON_MAX_BYTES = 16 << 20  # a config.json, a quality table or a plan: a few KB; anything near this is not one
JSON_MAX_DEPTH = 64  # transformers configs nest 3 levels, `kvedge eval --json` 4; Python's parser recurses

# The unix port's -X heapsize: below ~16 KB the interpreter cannot start; 4 GB and up crash it (seen here).
RUNTIME_HEAP_MIN = 16 << 10
RUNTIME_HEAP_MAX = 1 << 30
BYTES_MAX = 1 << 40  # a heap or workspace figure for planning: 1 TiB is past any board
TOKENS_MAX = 1 << 26  # kvedge.budget.LIMITS["tokens"]


class InputError(ValueError):
    """Bad user input: printed by the CLI as one line, exit status 2."""


def show(v, width=40):
    """A value as the user wrote it in JSON (or on the command line), kept short."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        if abs(v) < 10 ** 15:
            return str(v)
        try:
            return "%.3g" % v
        except OverflowError:
            return "a %d-digit number" % len(str(abs(v))) if abs(v) < 10 ** 4000 else "an enormous number"
    if isinstance(v, float):
        if v != v:
            return "NaN"
        if v in (float("inf"), float("-inf")):
            return "Infinity" if v > 0 else "-Infinity"
        return repr(v)
    if isinstance(v, str):
        s = json.dumps(v[:width], ensure_ascii=False)
        return s[:-1] + '..."' if len(v) > width else s
    if isinstance(v, (list, tuple)):
        return "[]" if not v else "a list of %d item%s" % (len(v), "" if len(v) == 1 else "s")
    if isinstance(v, dict):
        return "{}" if not v else "an object"
    return type(v).__name__


def _num(n):
    """An int bound with thousands separators when large."""
    return format(n, ",") if abs(n) >= 100000 else str(n)


def _where(where, name):
    return "%s: %s" % (where, name) if where else name


def whole(where, name, v, lo, hi):
    """v must be an int (not a bool, not a float) in lo..hi. `where` is the file (or None for a flag)."""
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise InputError("%s is %s, expected a whole number %s..%s" % (_where(where, name), show(v), _num(lo),
                                                                      _num(hi)))
    return v


def real(where, name, v, lo=None, hi=None, lo_open=False):
    """v must be a finite int or float (not a bool) within the bounds; returns it as a float."""
    ok = not isinstance(v, bool) and isinstance(v, (int, float))
    if ok:
        try:
            f = float(v)
        except OverflowError:
            ok = False
        else:
            ok = math.isfinite(f) and (lo is None or (f > lo if lo_open else f >= lo)) and (hi is None or f <= hi)
    if not ok:
        want = "a finite number"
        if lo is not None and hi is not None:
            want += " in %s%g, %g]" % ("(" if lo_open else "[", lo, hi)
        elif lo is not None:
            want += " %s %g" % (">" if lo_open else ">=", lo)
        elif hi is not None:
            want += " <= %g" % hi
        raise InputError("%s is %s, expected %s" % (_where(where, name), show(v), want))
    return f


# ---- command-line flags: "--flag VALUE: expected ..." ----

def flag_int(flag, v, lo, hi, why=""):
    """A --flag's integer value in lo..hi (argparse already made it an int); `why` says where a bound comes
    from, e.g. "the model's seq_len"."""
    if v is None or not lo <= v <= hi:
        raise InputError("%s %s: expected a whole number %s..%s%s" % (flag, show(v), _num(lo), _num(hi),
                                                                     " (%s)" % why if why else ""))
    return v


def flag_real(flag, v, lo=None, hi=None, lo_open=False):
    """A --flag's float value: finite and within the bounds."""
    try:
        return real(None, flag, v, lo, hi, lo_open)
    except InputError as e:
        raise InputError("%s %s: %s" % (flag, show(v), str(e).split(", ", 1)[1]))


def flag_text(flag, s):
    """A text flag as UTF-8 bytes. Arguments that were not valid UTF-8 reach Python as lone surrogates
    (surrogateescape): those are the user's bytes and go through as such (llama2.c encodes its prompt's raw
    bytes too); any other lone surrogate cannot be encoded and is refused."""
    try:
        return s.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as e:
        raise InputError("%s: character %d is a lone surrogate (U+%04X), not text" % (
            flag, e.start, ord(s[e.start])))


def out_folder(flag, path):
    """The folder an output file goes to must exist (checked before any work is done)."""
    if not path:
        raise InputError("%s: an empty file name" % flag)
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise InputError("%s: folder does not exist (%s)" % (path, d))
    if os.path.isdir(path):
        raise InputError("%s: is a folder (%s names a file)" % (path, flag))
    return path


def in_file(path, what="file"):
    """An input file that must exist and be a regular file."""
    if not os.path.exists(path):
        raise InputError("%s: no such %s" % (path, what))
    if os.path.isdir(path):
        raise InputError("%s: is a folder, expected a %s" % (path, what))
    return path


# ---- JSON files ----

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _depth(text):
    """Deepest nesting of [ and { in JSON text, strings skipped; linear time, no recursion."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _read_at_most(f, limit):
    """Up to `limit` bytes of a file, without allocating `limit` up front (read(n) does) and without reading
    for ever from a device such as /dev/zero."""
    st = os.fstat(f.fileno())
    if stat.S_ISREG(st.st_mode) and st.st_size < limit:
        return f.read()
    parts, n = [], 0
    while n < limit:
        b = f.read(min(1 << 16, limit - n))
        if not b:
            break
        parts.append(b)
        n += len(b)
    return b"".join(parts)


def parse_json(path, text, max_depth=JSON_MAX_DEPTH):
    """Parse JSON text from `path`: nesting is measured before Python's recursive parser sees it."""
    d = _depth(text)
    if d > max_depth:
        raise InputError("%s: JSON nested %d levels deep (at most %d)" % (path, d, max_depth))
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError("%s: JSON nested too deeply" % path)
    except ValueError as e:
        raise InputError("%s: not valid JSON: %s" % (path, e))


def load_json(path, max_bytes=JSON_MAX_BYTES, max_depth=JSON_MAX_DEPTH):
    """A JSON file, read with its size and nesting bounded; every failure one line naming the file."""
    try:
        with open(path, "rb") as f:
            raw = _read_at_most(f, max_bytes + 1)
    except OSError as e:
        raise InputError("%s: cannot read: %s" % (path, e.strerror or e))
    if len(raw) > max_bytes:
        raise InputError("%s: larger than %s bytes: not a JSON config" % (path, _num(max_bytes)))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError("%s: not valid JSON: not UTF-8 text (byte %d)" % (path, e.start))
    return parse_json(path, text, max_depth)


def plan_file(path, heap=None):
    """A `kvedge plan --out` document, read bounded (load_json) and checked whole by the device's own reader
    (kvedge.model.plandoc.check; heap: the board's, else no limit but plandoc.MAX_BYTES): InputError
    "PATH: FIELD: ..." on the first bad field. Returns the document."""
    from kvedge.errors import PlanError
    from kvedge.model.plandoc import check
    doc = load_json(path)
    try:
        check(doc, heap)
    except PlanError as e:
        raise InputError("%s: %s" % (path, e))
    return doc


# ---- checkpoint values ----

def finite_weights(path, cfg, dtype, chunk=1 << 20):
    """Every float a checkpoint holds (f32 weights; an int8 file's scales and norms; an int4 file's f16
    group scales, which must also not be negative, and its norms) must be finite: a NaN or
    an infinity there is a damaged file, and it would only surface later as NaN text or a failed cache
    write. Read with numpy in chunks (memory stays small whatever the file's size). The header and the
    file's length are checked before (kvedge.model.header.read_config)."""
    import numpy as np
    from kvedge.model import header as ck
    from kvedge import w4sizes
    from kvedge.model import f32file
    data = np.memmap(path, dtype=np.uint8, mode="r")
    if dtype == "f32":  # everything but the legacy RoPE tables, which no reader uses (llama2.c skips them)
        rope = f32file.layout(cfg)["rms_final"] + 4 * cfg.dim
        spans = [(ck.HEADER_BYTES, rope), (rope + 4 * cfg.seq_len * cfg.head_dim, len(data))]
    else:  # each matrix's scales before its codes (int8: f32 a row; int4: f16 a group), and the norm vectors
        lay = ck.i8_layout(cfg) if dtype == "i8" else ck.i4_layout(cfg)
        spans, spans16 = [], []
        d, h, kv = cfg.dim, cfg.hidden_dim, cfg.kv_dim
        rows = {"embedding": cfg.vocab_size, "wcls": cfg.vocab_size, "wq": d, "wk": kv, "wv": kv, "wo": d,
                "w1": h, "w2": d, "w3": h}
        for name, n in rows.items():
            offs = lay[name]
            for o in (offs if isinstance(offs, list) else [offs] if offs is not None else []):
                if dtype == "i8":
                    spans.append((o, o + 4 * n))
                else:
                    spans16.append((o, o + 2 * n * w4sizes.groups(h if name == "w2" else d)))
        for name in ("rms_att", "rms_ffn", "rms_final"):
            offs = lay[name]
            for o in (offs if isinstance(offs, list) else [offs]):
                spans.append((o, o + 4 * d))
    for size, kind, found in ((4, "<f4", spans), (2, "<f2", [] if dtype != "i4" else spans16)):
        for a, b in found:
            for lo in range(a, b, size * chunk):
                hi = min(b, lo + size * chunk)
                x = np.frombuffer(data[lo:hi], dtype=kind)
                bad = ~np.isfinite(x) | (np.signbit(x) if size == 2 else False)
                if bad.any():
                    at = lo + size * int(np.argmax(bad))
                    raise InputError("%s: the %s at byte %s is %s: a damaged checkpoint" % (
                        path, "f16 scale" if size == 2 else "float", format(at, ","),
                        show(float(x[(at - lo) // size]))))
    del data
