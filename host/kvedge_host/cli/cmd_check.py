"""Run seeded attention cases on a runtime and compare the outputs with an independent numpy reference.

The device code is one script (kvedge_host/boards/board_scripts/check_device.py) run by `run_script` on the chosen
runtime (or on a board through mpremote with --port, after `kvedge deploy`); it prints one JSON line per case and
path. The host draws the same inputs (check_device.Gen), computes numpy
attention over the positions the cache must hold (numref), and checks every output:

  f32  float path   max relative error <= 1e-5
  f16  float path   max relative error <= 1e-5 against attention over IEEE-half-rounded K/V (numpy float16),
                    and <= 4e-3 against the exact inputs
  i8   every path   cosine >= 0.999          i4  every path   cosine >= 0.99      i2  every path   cosine >= 0.8
  int paths         the same bits from every kernel kind (viper, native, plain)

Exit status 0 when every check passes, 1 otherwise (2 for bad arguments or a missing runtime)."""
import json
import os
import subprocess
import sys
import tempfile

from kvedge import budget

# numpy (and kvedge_host.ref.numref) are imported inside the functions that compare: every kvedge command builds
# this module's parser, and numpy took 0.35 s of each command's start-up
from ..boards import board_scripts
from ..paths import DEVICE

RUNTIMES = ("cpython", "unix", "wasm")
M3_HEAP = 2097152  # the emulated Cortex-M3's benchmark image: room for the larger cases
HEAP = 8 * 1024 * 1024  # a cross-check, not a board test: room for the larger cases
I2_BOUND = 0.8  # 2-bit values, four levels each: over seeds 1-10 the lowest cosine was 0.836
I2_MODEL_TOL = 2.0  # 2-bit K/V on stories260K: measured 1.22 at the default 64 positions (4.47 at 256)
BOUNDS = {"f32": 1e-5, "f16": 1e-5, "f16_exact": 4e-3, "i8": 0.999, "i4": 0.99, "i2": I2_BOUND}
DTYPES = budget.CACHE_DTYPES
LOWBIT = budget.LOWBIT
I4_GROUP = 8

# name, heads, kv_heads, head_dim, tokens appended, window, sinks, layers, tile
SHAPES = [
    ("mha", 4, 4, 16, 40, 0, 0, 1, 8),
    ("gqa2", 4, 2, 32, 80, 24, 4, 2, 16),  # 80 tokens through a 24-token ring: wraps 3 times; layer 1
    ("gqa4", 8, 2, 64, 100, 32, 8, 1, 16),
    ("gqa8", 16, 2, 8, 70, 16, 2, 1, 8),
    ("mqa", 4, 1, 128, 40, 8, 2, 1, 4),
]


def add_arguments(p):
    p.add_argument("--runtime", choices=RUNTIMES + ("m3", "circuitpython", "all"), default="cpython",
                   help="where the device code runs (all = cpython, unix, wasm; m3 = the emulated Cortex-M3 board: "
                        "float32, 31-bit ints, Thumb-2 viper, the package as .mpy, a littlefs RAM disk)")
    p.add_argument("--port", help="run on the board at this serial port (or `kvedge sim`'s) instead of "
                                  "--runtime; deploy kvedge there first (`kvedge deploy --port PORT`)")
    p.add_argument("--cases", type=int, default=0, metavar="N",
                   help="random cases drawn from --seed, added to the standard set (default 0)")
    p.add_argument("--seed", type=int, default=1, help="seed of every input (default 1)")
    p.add_argument("--only", metavar="TEXT", help="only cases whose name contains TEXT")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    p.add_argument("--model", metavar="PATH", help="also the model case: logits of the device forward pass of "
                   "this llama2.c checkpoint (f32 or kvedge int8) against the numpy reference")
    p.add_argument("--positions", type=int, default=64, help="positions of the model case, at most the model's "
                   "seq_len (default 64, or seq_len when shorter)")
    p.add_argument("--kv-dtype", default="f32", choices=DTYPES, help="cache dtype of the model case (default f32: "
                   "1e-4)")
    # hidden: use a wrong GQA head mapping in the reference, to show the check catches trap 1 (docs/architecture.md)
    p.add_argument("--wrong-mapping", action="store_true", help=__import__("argparse").SUPPRESS)


# ---- cases ----

def ring(dtype, window):
    """The window a case uses: KIVI i4/i2 need a ring of at least their residual and one group (R + G)."""
    if dtype in LOWBIT and window:
        return max(window, 2 * I4_GROUP)
    return window


def make_case(name, heads, kv_heads, head_dim, tokens, window, sinks, layers, tile, dtype, seed, prefix=0):
    """A case dict the device script understands; i4 keeps its sinks at f32 (prefix = sinks, KIVI groups
    then tile the ring) and uses groups of I4_GROUP tokens with a sliding residual of one group."""
    window = ring(dtype, window)
    group, residual = I4_GROUP, 0
    if dtype in LOWBIT:
        prefix = sinks
        residual = I4_GROUP
    max_tokens = sinks + window if window else tokens
    if dtype in LOWBIT and not window:
        max_tokens = prefix + max(2 * group, -(-(tokens - prefix) // group) * group)  # >= residual + group
    return {"name": name, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim, "tokens": tokens,
            "window": window, "sinks": sinks, "layers": layers, "layer": layers - 1, "tile": tile,
            "dtype": dtype, "seed": seed, "prefix": prefix, "group": group, "residual": residual,
            "max_tokens": max_tokens, "align": 0 if head_dim % 16 else 64}


def standard_cases(seed):
    cases = []
    for i, (sname, H, KVH, D, n, W, S, L, T) in enumerate(SHAPES):
        for j, dt in enumerate(DTYPES):
            w = ring(dt, W)
            name = "%s-h%dkv%d-d%d-%s-%s" % (sname, H, KVH, D, "w%ds%d" % (w, S) if w else "all", dt)
            cases.append(make_case(name, H, KVH, D, n, W, S, L, T, dt, seed * 1000 + i * 10 + j))
    # i8 with an f32 prefix (trap 5): the float path reads prefix rows at f32 (no integer path there)
    cases.append(make_case("gqa2-prefix4-i8", 4, 2, 32, 80, 24, 4, 1, 16, "i8", seed * 1000 + 99, prefix=4))
    return cases + tiered_cases(seed)


# tiered caches (kvedge.tier.cache): name, heads, kv_heads, head_dim, tokens, window, sinks, layers, tile, block,
# cold blocks, sinks at f32 (prefix = sinks) or in the ring's dtype; the ring wraps many times and the oldest
# blocks are dropped at the cold cap
TIERED = [
    ("tiered-gqa2", 4, 2, 32, 90, 16, 4, 2, 8, 4, 5, True),
    ("tiered-gqa4", 8, 2, 16, 120, 24, 2, 1, 16, 8, 4, False),
    ("tiered-mqa", 4, 1, 64, 60, 8, 0, 1, 4, 4, 6, False),
]
# (hot ring dtype, cold dtype): the criterion is the cold dtype's (f32 in both: exact attention)
TIER_DTYPES = (("f32", "f32"), ("f32", "i4"), ("i8", "i4"), ("i8", "i8"))


def tiered_cases(seed):
    cases = []
    for i, (sname, H, KVH, D, n, W, S, L, T, B, C, f32_sinks) in enumerate(TIERED):
        for j, (ring, cold) in enumerate(TIER_DTYPES):
            name = "%s-h%dkv%d-d%d-w%ds%d-b%dc%d-%s-%s" % (sname, H, KVH, D, W, S, B, C, ring, cold)
            c = make_case(name, H, KVH, D, n, W, S, L, T, ring, seed * 1000 + 200 + i * 10 + j,
                          prefix=S if f32_sinks else 0)
            c.update(dtype=cold, ring=ring, max_tokens=S + W, align=0,
                     tier={"block": B, "cold": cold, "cold_blocks": C})
            cases.append(c)
    return cases


def random_cases(n, seed):
    """n further cases: random GQA ratio, head_dim, window, sinks, dtype, tile (from check_device.Gen)."""
    from ..boards.board_scripts import check_device
    g = check_device.Gen(seed + 7777)
    out = []
    for k in range(n):
        kvh = (1, 2)[g.bits() % 2]
        H = kvh * (1, 2, 4, 8)[g.bits() % 4]
        D = (8, 16, 32, 64, 128)[g.bits() % 5]
        dt = DTYPES[g.bits() % len(DTYPES)]
        W = (0, 8, 16, 24)[g.bits() % 4]
        S = (0, 1, 2, 4)[g.bits() % 4] if W else 0
        n_tok = 1 + g.bits() % (3 * (S + W) + 1 if W else 48)
        T = (1, 4, 8, 32, 64)[g.bits() % 5]
        w = ring(dt, W)
        name = "rand%d-h%dkv%d-d%d-%s-%s" % (k, H, kvh, D, "w%ds%d" % (w, S) if w else "all", dt)
        out.append(make_case(name, H, kvh, D, n_tok, W, S, 1, T, dt, seed * 1000 + 500 + k))
    return out


# ---- running the device script ----

def device_script(cases):
    return board_scripts.source("check_device") + "\nmain(%r)\n" % json.dumps(cases)


def run_script(runtime, code, port=None, timeout=900):
    """Run device code on `runtime` (or a board at `port`); returns (exit status, output)."""
    if port:  # a board (or `kvedge sim`) with kvedge deployed: `mpremote connect PORT resume run SCRIPT`
        from ..boards import deploy
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(code)
            script = f.name
        try:
            return 0, deploy.mpremote(port, ["run", script], timeout=timeout)
        finally:
            os.unlink(script)
    if runtime == "m3":
        from ..boards import m3board
        from ..errors import UserError
        try:
            return 0, m3board.run_code(code, heap=M3_HEAP, timeout=timeout * 4)
        except m3board.M3Missing as e:
            raise UserError(str(e))
        except m3board.M3Error as e:
            return 1, e.output
    if runtime == "cpython":
        env = dict(os.environ)
        env["PYTHONPATH"] = DEVICE
        # a script file, not `-c CODE`: one argument is limited to 128 KB (a long token list is more)
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(code)
            script = f.name
        try:
            p = subprocess.run([sys.executable, script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=env, timeout=timeout)
        finally:
            os.unlink(script)
        return p.returncode, p.stdout.decode("utf-8", "replace")
    from ..boards import runtimes
    try:
        return runtimes.run_code(runtime, code, HEAP, [DEVICE], timeout)
    except runtimes.RuntimeMissing as e:
        from ..errors import UserError
        raise UserError(str(e))


def parse_output(rc, text):
    """JSON records from the device output; a record {"error": ...} when the run did not finish."""
    recs = []
    done = False
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("done"):
            done = True
        else:
            recs.append(r)
    if not done or rc != 0:
        tail = " | ".join(text.strip().splitlines()[-3:])
        recs.append({"case": "(run)", "error": "runtime exited %s before finishing: %s" % (rc, tail)})
    return recs


# ---- the reference ----

def case_inputs(c):
    """The case's inputs exactly as the device drew them: K, V (tokens, kv_heads, D) of the queried layer,
    and q (heads, D), float64."""
    import numpy as np
    from ..boards.board_scripts import check_device
    H, KVH, D, L = c["heads"], c["kv_heads"], c["head_dim"], c["layers"]
    g = check_device.Gen(c["seed"])
    n = KVH * D
    K = np.zeros((c["tokens"], KVH, D))
    V = np.zeros((c["tokens"], KVH, D))
    buf = [0.0] * n
    for p in range(c["tokens"]):
        for layer in range(L):
            g.fill(buf, 0, n, D, True)
            if layer == c["layer"]:
                K[p] = np.reshape(buf, (KVH, D))
            g.fill(buf, 0, n, D, False)
            if layer == c["layer"]:
                V[p] = np.reshape(buf, (KVH, D))
    qb = [0.0] * (H * D)
    g.fill(qb, 0, H * D, D, False)
    return K, V, np.reshape(qb, (H, D)) * c.get("qscale", 1.0)


def reference(c, wrong_mapping=False):
    """{"exact": attention over the true inputs, "f16": over half-rounded K/V} for the live positions."""
    import numpy as np
    from ..ref import numref
    K, V, q = case_inputs(c)
    if "tier" in c:
        t = c["tier"]
        live = numref.tiered_live_positions(c["tokens"], c["window"], c["sinks"], t["block"], t["cold_blocks"])
    else:
        live = numref.live_positions(c["tokens"], c["window"], c["sinks"])
    H, KVH = c["heads"], c["kv_heads"]
    mapping = numref.wrong_mapping(H, KVH) if wrong_mapping else None
    K, V = K[live], V[live]
    ref = {"exact": numref.attention(q, K, V, H, KVH, mapping)}
    if c["dtype"] == "f16":
        h = np.float16
        ref["f16"] = numref.attention(q, K.astype(h).astype(np.float64), V.astype(h).astype(np.float64), H, KVH,
                                      mapping)
    return ref


def _decode(rec, c):
    import numpy as np
    H, D = c["heads"], c["head_dim"]
    if rec["path"] == "float":
        return np.frombuffer(bytes.fromhex(rec["out"]), "<f4").astype(np.float64).reshape(H, D)
    q = np.frombuffer(bytes.fromhex(rec["q"]), "<i4").astype(np.float64).reshape(H, D)
    return np.ldexp(q, np.asarray(rec["e"], dtype=np.int64)[:, None])


def compare(c, rec, ref, first_int=None):
    """One result row: the case's criterion applied to the device output `rec` against `ref`."""
    from ..ref import numref
    out = _decode(rec, c)
    exact = ref["exact"]
    dt = c["dtype"]
    row = {"case": c["name"], "dtype": dt,
           "path": "float" if rec["path"] == "float" else "int " + rec["kind"],
           "max_abs_err": numref.max_abs_err(out, exact), "rel_err": numref.max_rel_err(out, exact),
           "cosine": numref.cosine(out, exact)}
    if dt == "f32":
        ok = row["rel_err"] <= BOUNDS["f32"]
        crit = "rel %.1e <= %.0e" % (row["rel_err"], BOUNDS["f32"])
    elif dt == "f16":
        r16 = numref.max_rel_err(out, ref["f16"])
        ok = r16 <= BOUNDS["f16"] and row["rel_err"] <= BOUNDS["f16_exact"]
        crit = "rel vs half-rounded K/V %.1e <= %.0e" % (r16, BOUNDS["f16"])
    else:
        ok = row["cosine"] >= BOUNDS[dt]
        crit = "cosine >= %s" % BOUNDS[dt]
    if rec["path"] == "int" and first_int is not None and (rec["q"], rec["e"]) != first_int:
        ok = False
        crit += "; bits differ from the first kernel kind"
    row["criterion"] = crit
    row["ok"] = bool(ok)
    return row


def check_runtime(runtime, cases, port=None, wrong_mapping=False):
    """Run the cases on one runtime; returns result rows (errors are failing rows)."""
    if port:  # a board's heap is small: one short script per case, so each run starts with a tidy heap
        rc, parts = 0, []
        for c in cases:
            r, t = run_script(runtime, device_script([c]), port)
            rc = rc or r
            parts.append(t if c is cases[-1] else t.replace('{"done":true}', ""))
        text = "\n".join(parts)
    else:
        rc, text = run_script(runtime, device_script(cases), port)
    by_name = {c["name"]: c for c in cases}
    refs = {}
    first_int = {}
    rows = []
    seen = set()
    for rec in parse_output(rc, text):
        name = rec.get("case")
        if "error" in rec:
            rows.append({"runtime": runtime, "case": name, "dtype": by_name.get(name, {}).get("dtype", "-"),
                         "path": "-", "max_abs_err": float("nan"), "rel_err": float("nan"),
                         "cosine": float("nan"), "criterion": rec["error"], "ok": False})
            seen.add(name)
            continue
        c = by_name[name]
        seen.add(name)
        if name not in refs:
            refs[name] = reference(c, wrong_mapping)
        fi = None
        if rec["path"] == "int":
            fi = first_int.setdefault(name, (rec["q"], rec["e"]))
        row = compare(c, rec, refs[name], fi)
        row["runtime"] = runtime
        rows.append(row)
    for c in cases:
        if c["name"] not in seen:
            rows.append({"runtime": runtime, "case": c["name"], "dtype": c["dtype"], "path": "-",
                         "max_abs_err": float("nan"), "rel_err": float("nan"), "cosine": float("nan"),
                         "criterion": "no output", "ok": False})
    return rows


def _table(rows, title):
    from rich.console import Console
    from rich.table import Table
    t = Table(title=title)
    for col, just in (("runtime", "left"), ("case", "left"), ("dtype", "left"), ("path", "left"),
                      ("max abs err", "right"), ("cosine", "right"), ("criterion", "left"), ("", "left")):
        t.add_column(col, justify=just)
    for r in rows:
        t.add_row(r["runtime"], r["case"], r["dtype"], r["path"], "%.2e" % r["max_abs_err"],
                  "%.6f" % r["cosine"], r["criterion"], "[green]pass[/green]" if r["ok"] else "[red]FAIL[/red]")
    Console(width=max(140, Console().width)).print(t)


# The model case (board_scripts/check_model.py): teacher-forced tokens through kvedge.model.llama on the runtime;
# logits back as raw float32.
MODEL_TOL = {"f32": 1e-4, "f16": 2e-2, "i8": 5e-2, "i4": 0.25, "i2": I2_MODEL_TOL}  # max abs logit error


def model_tokens(vocab, n, seed):
    """BOS then a deterministic pseudo-random token sequence (teacher forcing: any tokens will do)."""
    toks, x = [1], seed * 7919 + 13
    while len(toks) < n:
        x = (x * 48271) % 2147483647
        toks.append(3 + x % (vocab - 3) if vocab > 3 else x % vocab)  # past <unk>, BOS, EOS when there is room
    return toks


def check_model(runtime, path, positions, kv_dtype, seed=1):
    """Rows comparing the device forward pass on `runtime` with kvedge_host.ref.llama_ref at every position."""
    import numpy as np
    from ..ref import llama_ref
    from ..errors import UserError
    if not os.path.isfile(path):
        raise UserError("%s: no such file" % path)
    ref = llama_ref.RefModel(path)
    toks = model_tokens(ref.cfg.vocab_size, positions, seed)
    code = board_scripts.source("check_model", PATH=os.path.abspath(path), DTYPE=kv_dtype,
                                MAX_TOKENS=max(positions, 1), TOKENS=toks)
    if runtime == "cpython":
        rc, out = run_script("cpython", code)
    else:
        from ..boards import runtimes
        rc, out = runtimes.run_code(runtime, code, HEAP, [DEVICE, os.path.dirname(os.path.abspath(path))], 1800)
    got = [np.frombuffer(bytes.fromhex(ln[7:].strip()), dtype="<f4").astype(np.float64)
           for ln in out.splitlines() if ln.startswith("LOGITS ")]
    name = "model:%s" % os.path.basename(path)
    if rc != 0 or len(got) != len(toks):
        return [{"runtime": runtime, "case": name, "dtype": kv_dtype, "path": "forward", "max_abs_err": float("nan"),
                 "rel_err": float("nan"), "cosine": float("nan"), "ok": False,
                 "criterion": "device run failed: " + (out.strip().splitlines() or ["no output"])[-1][:80]}]
    want = np.array([ref.forward(t) for t in toks])
    got = np.array(got)
    err = float(np.abs(got - want).max())
    cos = float(min(np.dot(g, w) / (np.linalg.norm(g) * np.linalg.norm(w)) for g, w in zip(got, want)))
    tol = MODEL_TOL.get(kv_dtype, 1e-4)
    return [{"runtime": runtime, "case": "%s x%d positions" % (name, len(toks)), "dtype": kv_dtype,
             "path": "forward", "max_abs_err": err, "rel_err": err / float(np.abs(want).max()), "cosine": cos,
             "criterion": "max abs logit error <= %g at every position" % tol, "ok": err <= tol}]


MAX_CASES = 10000
MAX_SEED = 1 << 30  # seeds travel to 32-bit boards, where larger ints become heap longs


def check_args(a):
    """Every flag, and the model file, checked before any case runs; fills in the --positions default."""
    from .. import validate
    from ..errors import UserError
    validate.flag_int("--cases", a.cases, 0, MAX_CASES)
    validate.flag_int("--seed", a.seed, 0, MAX_SEED)
    if not a.model:
        return
    if a.port:
        raise UserError("--model runs on cpython, unix or wasm (a board's model case is kvedge generate)")
    from kvedge.model.header import read_config
    validate.in_file(a.model, "checkpoint")
    cfg, wdtype = read_config(a.model)  # the header checked, and the file's size against it
    validate.finite_weights(a.model, cfg, wdtype)
    if a.positions == 64 and cfg.seq_len < 64:
        a.positions = cfg.seq_len
    validate.flag_int("--positions", a.positions, 1, cfg.seq_len, "the model's seq_len")


def run(a):
    check_args(a)
    cases = standard_cases(a.seed) + random_cases(a.cases, a.seed)
    if a.only:
        cases = [c for c in cases if a.only in c["name"]]
        if not cases:
            raise ValueError("no case name contains %r" % a.only)
    runtimes = RUNTIMES if a.runtime == "all" else (a.runtime,)
    if a.port:
        runtimes = ("port " + os.path.basename(a.port),)
    rows = []
    for rt in runtimes:
        rows += check_runtime(rt, cases, a.port, a.wrong_mapping)
        if a.model:
            rows += check_model(rt, a.model, a.positions, a.kv_dtype, a.seed)
    failed = sum(1 for r in rows if not r["ok"])
    if a.json:
        clean = [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()} for r in rows]
        print(json.dumps(clean, indent=1))  # NaN (a case that raised) becomes null: strict JSON
    else:
        title = "kvedge check: %d cases on %s vs numpy%s" % (
            len(cases), ", ".join(runtimes), " (WRONG head mapping in the reference)" if a.wrong_mapping else "")
        _table(rows, title)
        print("%d checks, %d passed, %d failed" % (len(rows), len(rows) - failed, failed))
    return 1 if failed else 0
