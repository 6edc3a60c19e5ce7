"""Board profiles: every figure cites a source a user can open (or the command that measured it), estimates say
so, variants inherit from their base, and tools/board_probe.py measures the figures a runtime really has."""
import json
import os
import platform
import re
import subprocess
import sys

import pytest

from kvedge_host import profiles, cli
from kvedge_host.boards import runtimes
from kvedge_host.paths import BOARDS, ROOT, TOOLS

SHARED = os.path.join(os.path.dirname(ROOT), "shared", "runtimes")
M3_IMAGES = os.path.join(SHARED, "micropython-cortex-m3")
CP_BIN = os.path.join(SHARED, "circuitpython-unix32", "circuitpython")
PROBE = os.path.join(TOOLS, "board_probe.py")
# the heaps the test matrix runs at: the emulated Cortex-M3 images are built with exactly these
MATRIX_HEAPS = {"rp2040": 215040, "esp32": 102400, "esp32s3": 271360, "rp2350": 460800}
CORE = ("sram_bytes", "heap_bytes", "fast_memory.bytes", "fast_memory.kind", "flash_bytes", "flash_fs_bytes",
        "mpy_march", "float", "small_int_bits", "workspace_bytes")


def _walk(prof, path):
    for part in path.split("."):
        prof = prof[part]
    return prof


def _all():
    return [(n, profiles.load(n)) for n in profiles.names()]


def test_every_figure_of_every_profile_has_a_source_stating_its_value():
    for name, p in _all():
        cited = {}
        for s in p["sources"]:
            cited.setdefault(s["figure"], []).append(s)
            assert _walk(p, s["figure"]) == s["value"], (name, s["figure"], s["value"])
        for fig in CORE:
            assert fig in cited, (name, fig)
        slow = p["slow_memory"]
        for fig in (["slow_memory"] if slow is None else ["slow_memory.bytes", "slow_memory.kind"]):
            assert fig in cited, (name, fig)
        assert profiles.uncited(p) == [], name


def test_sources_are_links_or_named_measurements_and_estimates_are_marked():
    for name, p in _all():
        for s in p["sources"]:
            what = (name, s["figure"], s["source"])
            assert isinstance(s["estimate"], bool), what
            if s["figure"] == "workspace_bytes":  # kvedge's own allowance: no public source exists
                assert s["estimate"] and s["note"], what
                continue
            assert s.get("url") or s.get("command"), what
            if s.get("url"):
                assert re.match(r"https://[^ ]+$", s["url"]), what
            if s.get("command"):
                assert s.get("firmware"), what  # a measurement names the firmware it ran on
            if s["estimate"]:
                assert len(s.get("note", "")) > 20, what  # says how it was derived
            assert "SPEC.md" not in json.dumps(s), what  # not a file users do not have


def test_the_emulated_board_measurement_is_never_the_boards_heap():
    """The qemu images' heap was SET to the profile's figure: citing them for heap_bytes confirms overheads only."""
    for name, p in _all():
        for s in p["sources"]:
            if s["figure"] == "heap_bytes" and "mps2-an385" in s.get("firmware", ""):
                assert s["estimate"] and "SET" in s["note"], name


def test_test_matrix_heaps_are_kept_and_match_the_emulated_images():
    for name, heap in MATRIX_HEAPS.items():
        p = profiles.load(name)
        assert p["heap_bytes"] == heap
        fw = [s["firmware"] for s in p["sources"] if s["figure"] == "heap_bytes" and s.get("firmware")]
        assert any("firmware-heap%d.elf" % heap in f for f in fw), name
        if os.path.isdir(M3_IMAGES):
            assert os.path.exists(os.path.join(M3_IMAGES, "firmware-heap%d.elf" % heap))


def test_derived_figures_are_estimates_and_datasheet_figures_are_not():
    rp = profiles.load("rp2040")
    assert profiles.is_estimate(rp, "heap_bytes")  # depends on the firmware build's .bss
    assert not profiles.is_estimate(rp, "sram_bytes") and not profiles.is_estimate(rp, "flash_bytes")
    assert profiles.is_estimate(profiles.load("rp2350"), "mpy_march")  # no public report read off a board
    assert profiles.is_estimate(profiles.load("esp32-psram"), "fast_memory.bytes")  # stock firmware puts it in PSRAM


def test_circuitpython_variant_restates_what_differs_and_inherits_the_rest():
    mp, cp = profiles.load("rp2040"), profiles.load("rp2040-circuitpython")
    assert cp["runtime"] == "circuitpython" and mp["runtime"] == "micropython"
    assert cp["base"] == "rp2040"
    assert cp["heap_bytes"] < mp["heap_bytes"] and cp["fast_memory"]["bytes"] == cp["heap_bytes"]
    for key in ("sram_bytes", "flash_bytes", "slow_memory", "workspace_bytes", "chip"):
        assert cp[key] == mp[key], key
    assert cp["float"] == "single30" and mp["float"] == "single"
    # the base's heap sources are replaced, its datasheet sources kept
    heap_src = [s["source"] for s in cp["sources"] if s["figure"] == "heap_bytes"]
    assert heap_src and not any("MicroPython" in s for s in heap_src)
    assert [s for s in cp["sources"] if s["figure"] == "sram_bytes"] == \
        [s for s in mp["sources"] if s["figure"] == "sram_bytes"]
    assert runtimes.heap_for("rp2040-circuitpython") == cp["heap_bytes"]


def _profile(tmp_path, monkeypatch, name, prof):
    import shutil
    for f in os.listdir(BOARDS):
        shutil.copy(os.path.join(BOARDS, f), str(tmp_path))
    (tmp_path / (name + ".json")).write_text(json.dumps(prof))
    monkeypatch.setattr(profiles, "BOARDS", str(tmp_path))


def _src(**kw):
    s = {"figure": "heap_bytes", "value": 1000, "source": "a datasheet", "url": "https://example.org/ds.pdf",
         "where": "1.1", "estimate": False}
    s.update(kw)
    return s


BASIC = {"name": "mine", "heap_bytes": 1000, "mpy_march": "armv6m", "fast_memory": {"kind": "SRAM", "bytes": 1000}}


@pytest.mark.parametrize("src,problem", [
    (_src(url=None), "needs a 'url' or the 'command'"),
    (_src(value=999), "the source for heap_bytes says 999, the profile 1000"),
    (_src(estimate=True), "an estimate needs a 'note'"),
    (_src(estimate="yes"), "'estimate' must be true or false"),
    (_src(figure="psram_bytes"), "source for 'psram_bytes', which the profile does not have"),
    (_src(source=""), "missing 'source'"),
    (_src(colour="red"), "unknown key 'colour'"),
    ("heap: 1000", "must be an object"),
])
def test_malformed_sources_are_refused_naming_the_file(tmp_path, monkeypatch, capsys, src, problem):
    _profile(tmp_path, monkeypatch, "mine", dict(BASIC, sources=[src]))
    with pytest.raises(profiles.BoardError) as e:
        profiles.load("mine")
    assert "mine.json" in str(e.value) and problem in str(e.value), str(e.value)
    assert cli.main(["boards", "mine"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kvedge boards: error: ") and problem in err[0]


def test_a_measured_source_needs_no_url(tmp_path, monkeypatch):
    src = _src(url=None, command="mpremote connect PORT run tools/board_probe.py", firmware="MicroPython 1.28")
    _profile(tmp_path, monkeypatch, "mine", dict(BASIC, sources=[src]))
    assert profiles.load("mine")["sources"] == [src]


@pytest.mark.parametrize("variant,problem", [
    ({"base": "mine"}, "'base' must name another board profile"),
    ({"base": "rp2040-circuitpython"}, "is itself a variant"),
    ({"base": "nosuch"}, "unknown board 'nosuch'"),
    ({"base": "rp2040", "float": "half"}, "float must be one of"),
    ({"base": "rp2040", "runtime": "lua"}, "runtime must be one of"),
    ({"base": "rp2040", "heap_bytes": 1, "sources": [_src()]}, "the source for heap_bytes says 1000, the profile 1"),
])
def test_bad_variants_are_refused(tmp_path, monkeypatch, variant, problem):
    _profile(tmp_path, monkeypatch, "mine", dict(variant, name="mine"))
    with pytest.raises(profiles.BoardError) as e:
        profiles.load("mine")
    assert problem in str(e.value), str(e.value)


def test_a_variant_restating_a_figure_drops_the_base_sources_for_it(tmp_path, monkeypatch):
    src = _src(value=123456, note="measured on my board", estimate=True)
    _profile(tmp_path, monkeypatch, "mine", {"name": "mine", "base": "rp2040", "heap_bytes": 123456,
                                               "sources": [src]})
    p = profiles.load("mine")
    assert [s for s in p["sources"] if s["figure"] == "heap_bytes"] == [src]
    assert p["flash_bytes"] == 2097152 and p["name"] == "mine"
    assert profiles.uncited(p) == []  # fast_memory kept the base's value and sources
    # restated without a source: the base's citation does not carry over to the new value
    _profile(tmp_path, monkeypatch, "mine", {"name": "mine", "base": "rp2040", "heap_bytes": 123456})
    assert profiles.uncited(profiles.load("mine")) == ["heap_bytes"]


def test_boards_command_shows_sources_estimates_and_missing_ones(tmp_path, monkeypatch, capsys):
    assert cli.main(["boards"]) == 0
    out = capsys.readouterr().out
    assert "sources:" in out and "estimates: heap_bytes" in out and "board_probe.py" in out
    assert "NO SOURCE" not in out
    assert cli.main(["boards", "rp2040-circuitpython"]) == 0
    out = capsys.readouterr().out
    assert "heap_bytes = 169,984  [estimate]" in out and "a variant of rp2040" in out
    assert "https://datasheets.raspberrypi.com/rp2040/rp2040-datasheet.pdf" in out
    assert cli.main(["boards", "--sources"]) == 0
    out = capsys.readouterr().out
    for name in profiles.names():
        assert "\n%s:" % name in "\n" + out, name
    assert "command: mpremote connect PTY run tools/board_probe.py" in out
    # a user's own profile without sources loads, and the listing says what is uncited
    _profile(tmp_path, monkeypatch, "mine", BASIC)
    assert cli.main(["boards", "mine"]) == 0
    out = capsys.readouterr().out
    assert "heap_bytes = 1,000  [NO SOURCE]" in out


@pytest.mark.parametrize("columns", [80, 160])
def test_the_boards_table_keeps_every_name_whole(monkeypatch, capsys, columns):
    # at 80 columns: sizes only, one line per board, nothing cut (it cut "esp32-p…", "micropy…", "xtensaw…");
    # a wide terminal: the memory kinds beside them
    monkeypatch.setenv("COLUMNS", str(columns))
    assert cli.main(["boards"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("board "))
    rows = lines[head + 2:head + 2 + len(profiles.names())]
    assert [r.split()[0] for r in rows] == profiles.names() and "\u2026" not in "".join(lines[:head + 2 + len(rows)])
    for r, name in zip(rows, profiles.names()):
        p = profiles.load(name)
        assert p.get("runtime", "micropython") in r.split() and r.rstrip().endswith(p["mpy_march"]), r
    assert max(len(line) for line in lines[:head + 2 + len(rows)]) <= columns
    if columns >= 132:
        assert "internal SRAM" in lines[head + 2]


# ---- tools/board_probe.py: the measurement the profiles cite ----

def _probe(cmd):
    p = subprocess.run(cmd + [PROBE], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stdout
    return json.loads(p.stdout.decode().strip().splitlines()[-1])


def test_probe_on_cpython_matches_float_info():
    r = _probe([sys.executable])
    assert r["impl"] == "cpython" and r["float_mant_bits"] == sys.float_info.mant_dig == 53
    assert r["heap_usable"] is None and r["small_int_bits"] is None and r["mpy_march"] is None


def test_probe_on_the_unix_port_agrees_with_the_unix_profile():
    try:
        exe = runtimes.micropython_bin()
    except runtimes.RuntimeMissing as e:
        pytest.skip(str(e))
    prof = profiles.load("unix")
    heap = prof["heap_bytes"]
    r = _probe([exe, "-X", "heapsize=%d" % heap])
    # independent references: the port's word size, the host CPU, the GC's table overhead (< 3% of the span)
    maxsize = int(subprocess.check_output([exe, "-c", "import sys; print(sys.maxsize)"]).decode())
    assert r["small_int_bits"] == maxsize.bit_length() == prof["small_int_bits"] == 63
    assert r["float_mant_bits"] == 53 and r["float"] == prof["float"] == "double"
    if platform.machine() in ("x86_64", "AMD64"):
        assert r["mpy_march"] == prof["mpy_march"] == "x64"
    assert heap * 0.97 < r["heap_usable"] <= heap
    assert 0 < r["heap_free"] < r["heap_usable"]


def test_probe_on_circuitpython_runtime():
    if not os.path.exists(CP_BIN):
        pytest.skip("no CircuitPython runtime at %s (../shared is not part of a clone)" % CP_BIN)
    heap = profiles.load("rp2040")["heap_bytes"]
    r = _probe([CP_BIN, "-X", "heapsize=%d" % heap])
    assert r["impl"] == "circuitpython" and r["small_int_bits"] == 31
    assert r["mpy_march"] is None  # no native emitter: bytecode-only .mpy
    # this unix build stores floats as full float32 (a board's REPR_C keeps 22 bits: the profile says single30)
    assert r["float_mant_bits"] == 24
    assert heap * 0.9 < r["heap_usable"] <= heap


def test_measured_footprints_name_their_command_firmware_and_date():
    """The runtime footprints `kvedge plan` counts were measured on a stand-in board: each says how, when, on what,
    and that it is an estimate for the real board."""
    for name, p in _all():
        for s in p["sources"]:
            if s["figure"].startswith("footprint."):
                what = (name, s["figure"])
                assert s["command"] == "kvedge footprint --board %s --write" % name, what
                assert s["firmware"] and re.match(r"\d{4}-\d\d-\d\d$", s["date"]), what
                assert s["estimate"] is True, what


def _doc_table():
    """{profile: (heap column, [estimates])} from docs/boards.md's table of estimates."""
    with open(os.path.join(ROOT, "docs", "boards.md")) as f:
        text = f.read()
    rows = re.findall(r"^\| ([\w-]+) \| ([^|]+) \| ([^|]+) \|$", text, re.M)
    return {n: (heap.strip(), [e.strip() for e in est.split(",")]) for n, heap, est in rows
            if n in profiles.names()}


def test_docs_table_of_estimates_matches_the_profiles():
    """docs/boards.md lists each profile's heap and the figures that are estimates (footprints aside: all are):
    the table must say what the profiles say."""
    table = _doc_table()
    assert sorted(table) == sorted(profiles.names())
    for name, p in _all():
        heap, est = table[name]
        m = re.match(r"([\d,]+)( MiB)?", heap)
        shown = int(m.group(1).replace(",", "")) * (2 ** 20 if m.group(2) else 1)
        assert shown == p["heap_bytes"], (name, heap)
        actual = [f for f, _ in profiles.figures(p) if profiles.is_estimate(p, f) and not f.startswith("footprint.")]
        assert sorted(est) == sorted(actual), (name, est, actual)


def _plan_json(board, wdtype):
    p = subprocess.run([sys.executable, "-m", "kvedge_host.cli", "plan", "--preset", "stories15m", "--board", board,
                        "--context", "256", "--weights-dtype", wdtype, "--json"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, cwd=ROOT)
    return p.returncode, json.loads(p.stdout)


@pytest.mark.parametrize("board", ["esp32s3-n16r8", "rp2350-psram8"])
def test_16mb_flash_psram_profiles_hold_stories15m_at_256_tokens_with_int4_weights(board):
    # issue 24: stories15M's int4 weights (8.5 MB with their f16 group scales) fit the 14 MiB filesystem of a 16 MB board, and its
    # full 256-token cache (f32: 6 layers x 2 x 288 x 4 bytes x 256 = 3,538,944 by hand) the PSRAM heap;
    # int8 weights (~15.6 MB) fit neither: nothing fits
    p = profiles.load(board)
    assert p["flash_bytes"] == 16 * 2 ** 20 and p["flash_fs_bytes"] == 14 * 2 ** 20
    assert p["slow_memory"]["bytes"] == 8 * 2 ** 20
    assert any(s["figure"] == "clock_hz" and s["value"] == p["clock_hz"] for s in p["sources"])
    rc, doc = _plan_json(board, "i4")
    assert rc == 0
    chosen = doc["configurations"][doc["chosen"] - 1]
    # int4 weights run on the integer pass only, which stores an i8 cache: at least the i8 rows (6 layers x 2 x
    # 288 codes x 256 tokens) in PSRAM, all 256 tokens kept
    assert chosen["tokens_kept"] == 256 and chosen["forward"] == "int"
    assert 6 * 2 * 288 * 256 <= chosen["kv_bytes"] <= 6 * 2 * 288 * 4 * 256
    assert chosen["flash_bytes"] <= p["flash_fs_bytes"]
    rc, doc = _plan_json(board, "i8")
    assert rc == 1 and "chosen" not in doc
    # the 8 MB-flash N8R8 profile: int4 weights do not fit its 6 MiB filesystem
    assert _plan_json("esp32s3-psram8", "i4")[0] == 1
