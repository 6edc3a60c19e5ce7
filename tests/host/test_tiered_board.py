"""The tiered cache on the emulated Cortex-M3 board (qemu mps2-an385, MicroPython firmware, rp2040 heap of 215,040
bytes, the package as armv6m .mpy in ROMFS, a littlefs RAM disk standing in for flash):

- a 5,000-token stream (integer writes and an integer attention step every token, blocks of 32 tokens moving
  to flash, the oldest dropped at the cap) keeps the heap flat and the cold store within its formula;
- power cuts: qemu is killed at arbitrary instructions while the board streams (its PSRAM, holding the disk, is
  a host file, so the disk survives as flash would); each restart reopens the store whole, every cold row equal
  to what was written, or refuses it with a clear message, and the stream goes on from resume_pos.

Skipped when qemu, the firmware or mpremote is missing. Runs for several minutes."""
import os
import re
import subprocess
import tempfile
import time

import pytest

from kvedge import budget
from kvedge_host.boards import m3board, tied
from kvedge_host.boards.deploy import mpremote_exe

WHY = m3board.missing("rp2040")
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")

COMMON = r"""
import gc
import os
from array import array
from kvedge.config import CacheConfig
from kvedge.errors import ColdStoreError
from kvedge.tier.cache import TieredCache


def rows(pos, kb, vb):
    # exact in float32: k / 2**14 with |k| <= 20000
    x = (pos * 7919 + 1) & 0x3FFFFFFF
    for i in range(len(kb)):
        x = (x * 1103515245 + 12345) & 0x3FFFFFFF
        kb[i] = ((x >> 8) % 40001 - 20000) / 16384.0
        x = (x * 1103515245 + 12345) & 0x3FFFFFFF
        vb[i] = ((x >> 8) % 40001 - 20000) / 16384.0


def store_bytes(path):
    n = 0
    for x in (".h0", ".h1", ".s", ".0", ".1"):
        try:
            n += os.stat(path + x)[6]
        except OSError:
            pass
    return n
"""

SOAK = COMMON + r"""
from kvedge.attention import quantize_query

cfg = CacheConfig(1, 2, 1, 8, 34, "i8", window=32, sinks=2, prefix=2, align=0)
tc = TieredCache(cfg, "soak", block=32, cold="i4", cold_blocks=4, fresh=True)
kb, vb = array("f", bytes(32)), array("f", bytes(32))
kc, vc = array("b", bytes(8)), array("b", bytes(8))
ks, vs = array("H", bytes(2)), array("H", bytes(2))
qc, qs, oq, oe = array("b", bytes(16)), array("H", bytes(4)), array("i", bytes(64)), array("i", bytes(8))
rows(99999, kb, vb)
q = array("f", bytes(64))
for i in range(16):
    q[i] = kb[i % 8]
quantize_query(q, qc, qs, 2)
ks[0] = vs[0] = 0x2400
marks = array("i", bytes(4 * 8 * 10))  # made before the stream: keeping the marks must not grow the heap
for t in range(5000):
    pos = tc.start_token()
    rows(pos, kb, vb)
    if pos < 2:
        tc.write(0, kb, vb)
    else:
        for i in range(8):
            kc[i] = int(kb[i] * 64) % 255 - 127
            vc[i] = int(vb[i] * 64) % 255 - 127
        tc.write_q8(0, kc, ks, vc, vs)
    tc.step_q8(0, qc, qs, oq, oe)
    if t % 500 == 499:
        gc.collect()
        m = 8 * (t // 500)
        marks[m + 1] = gc.mem_alloc()  # before stats() and its dict
        marks[m + 2] = gc.mem_free()
        st = tc.stats()
        marks[m] = t + 1
        marks[m + 3] = st["tokens_cached"]
        marks[m + 4] = st["cold_tokens"]
        marks[m + 5] = store_bytes("soak")
        marks[m + 6] = st["flash_reads"]
        marks[m + 7] = st["cold_drops"]
        st = None
        print("MARK", tuple(marks[m:m + 8]))
print("CAP", tc.size["tokens"], tc.size["flash"], tc.size["ram"])
print("STATS", tc.stats_json())
tc.close()
"""

# f32 ring and f32 cold: a reopened store's rows must equal the generator's values exactly
CUT = COMMON + r"""
cfg = CacheConfig(2, 2, 1, 8, 18, "f32", window=16, sinks=2, prefix=2, align=0)
kb, vb = array("f", bytes(32)), array("f", bytes(32))
row = array("f", bytes(32))


def verify(tc):
    bad = 0
    out = array("i", bytes(4 * tc.size["tokens"]))
    n = tc.positions(out)
    for j in range(n):
        p = out[j]
        rows(p, kb, vb)
        for layer in range(2):
            for kv in (0, 1):
                tc.read(layer, 0, p, kv, row)
                src = kb if kv == 0 else vb
                for i in range(8):
                    if row[i] != src[i]:
                        bad += 1
    return n, bad


def run(fresh, n):
    try:
        tc = TieredCache(cfg, "cut", block=4, cold="f32", cold_blocks=4, fresh=fresh)
    except ColdStoreError as e:
        print("REFUSED", e)
        return
    st = tc.store
    live, bad = verify(tc)
    print("OPENED", st.seq, st.k0, st.count, tc.resume_pos, live, bad)
    seq = st.seq
    for t in range(n):
        pos = tc.start_token()
        rows(pos, kb, vb)
        tc.write(0, kb, vb)
        tc.write(1, kb, vb)
        if st.seq != seq:
            seq = st.seq
            print("COMMIT", seq, st.k0, st.count)
    print("DONE")
    tc.close()
"""


def _romfs(tmp):
    folder = os.path.join(tmp, "rom")
    os.makedirs(folder)
    m3board.stage_package(folder, m3board.march_for("rp2040"))
    return m3board.build_romfs(folder, os.path.join(tmp, "rom.img"))


def _prog(code, call):
    return m3board.MOUNT + code + "\n" + call + "\n"


def test_5000_token_stream_keeps_ram_flat_and_the_store_bounded():
    with tempfile.TemporaryDirectory() as tmp:
        with m3board.M3Board("rp2040", romfs=_romfs(tmp)) as b:
            out = b.exec(SOAK, timeout=5400, mount=True).replace("\r", "")
    marks = [eval(m) for m in re.findall(r"^MARK (\(.*\))$", out, re.M)]
    cap = re.search(r"^CAP (\d+) (\d+) (\d+)$", out, re.M)
    assert cap, out[-3000:]
    cap_tokens, flash, ram = [int(x) for x in cap.groups()]
    assert len(marks) == 10 and marks[-1][0] == 5000
    assert ram == budget.tiered_bytes(1, 2, 1, 8, 32, 2, 32, 4, "i8", "i4", 0, 0)["ram"]
    for m in marks:  # shown with pytest -s: tokens, heap allocated and free, tokens held, cold, store bytes
        print("after %6d tokens: heap alloc %d free %d, held %d (cold %d), store files %d bytes, reads %d, drops %d"
              % m)
    alloc = [m[1] for m in marks]
    assert max(alloc[1:]) - min(alloc[1:]) <= 64, alloc  # flat (one stale word on the stack may hold 32 B)
    for t, _, _, cached, cold, files, reads, drops in marks:
        assert cached <= cap_tokens == 2 + 4 * 32 + 32 and cold <= 128
        assert files <= flash  # never more than its formula on flash
    assert marks[-1][7] == (5000 - 34 + 31) // 32 - 4  # blocks demoted past the cap of 4 were dropped
    assert '"tokens_seen":5000' in out and '"alloc_failures":0' in out


def test_check_tiered_cases_on_the_board():
    """kvedge check's tiered cases (f32 exact, i4/i8 cold on the float path and every kernel kind of the integer
    path) on the emulated Cortex-M3: float32, 31-bit ints, Thumb-2 viper, .mpy from ROMFS, littlefs."""
    from kvedge_host.cli import cmd_check
    cases = [c for c in cmd_check.standard_cases(1) if c["name"].startswith("tiered-")]
    rows = cmd_check.check_runtime("m3", cases)
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad
    paths = {r["path"] for r in rows}
    assert {"float", "int asm", "int viper", "int native", "int plain"} <= paths  # armv6m: asm first
    kinds = len([p for p in paths if p.startswith("int ")])
    assert len(rows) == len(cases) + kinds * sum(1 for c in cases if c["ring"] == "i8")
    assert max(r["rel_err"] for r in rows if r["case"].endswith("f32-f32")) <= 1e-5


def _stream(b, call, kill_after=None, delay=0.0):
    """Run the CUT program on the board; with kill_after=N, kill qemu `delay` seconds after the N-th COMMIT line
    arrives (the board is then somewhere in the next blocks' writes). Returns the lines read."""
    p = tied.popen([mpremote_exe(), "connect", b.port, "exec", _prog(CUT, call)], stdout=subprocess.PIPE,
                   stderr=subprocess.STDOUT)
    lines = []
    commits = 0
    end = time.monotonic() + 1800
    try:
        for raw in p.stdout:
            line = raw.decode("utf-8", "replace").strip()
            lines.append(line)
            if line.startswith("COMMIT"):
                commits += 1
                if kill_after is not None and commits >= kill_after:
                    time.sleep(delay)
                    b.stop()  # power cut: qemu killed at whatever instruction it is running
                    break
            if time.monotonic() > end:
                break
    finally:
        tied.kill(p)
    return lines


def test_power_cuts_mid_stream_reopen_whole_or_refuse():
    with tempfile.TemporaryDirectory() as tmp:
        disk = os.path.join(tmp, "psram.img")
        b = m3board.M3Board("rp2040", romfs=_romfs(tmp), disk_image=disk)
        try:
            b.start()
            outcomes = []
            fresh = "True"
            last = None
            # commits to wait for, then a delay, before each cut: the kill lands anywhere in the writes that follow
            for kill_after, delay in ((3, 0.0), (7, 0.011), (5, 0.023), (9, 0.002), (4, 0.037), (6, 0.005)):
                lines = _stream(b, "run(%s, 400)" % fresh, kill_after, delay)
                fresh = "False"
                opened = [ln for ln in lines if ln.startswith(("OPENED", "REFUSED"))]
                assert opened, lines[-5:]
                if last is not None:
                    outcomes.append((last, opened[0]))
                commits = [tuple(int(x) for x in ln.split()[1:]) for ln in lines if ln.startswith("COMMIT")]
                last = commits[-1]  # the newest commit the board reported before the cut
                assert not b.alive()
                b.start()  # power on: same disk
            lines = _stream(b, "run(False, 0)")
            outcomes.append((last, [ln for ln in lines if ln.startswith(("OPENED", "REFUSED"))][0]))
        finally:
            b.stop()
    for reported, opened in outcomes:
        print("cut after commit %s -> %s" % (reported, opened))
        if opened.startswith("REFUSED"):  # allowed, but only with a clear reason
            assert "refusing the cold store" in opened, opened
            continue
        seq, k0, count, resume, live, bad = (int(x) for x in opened.split()[1:])
        assert bad == 0, opened  # every row read back equals what was written: never half-read
        assert seq >= reported[0] and count <= 4, (reported, opened)  # at least what the board saw committed
        assert resume == 2 + (k0 + count) * 4 and live == 2 + 4 * count, opened
    assert sum(1 for _, o in outcomes if o.startswith("OPENED")) >= 5, outcomes
