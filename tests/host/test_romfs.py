"""ROMFS: kvedge's images (every file's data 4-byte aligned, so int8 rows and f32 scales can be read in place) read
back by MicroPython's own VfsRom, and `kvedge plan --weights-in rom` counting no RAM for the weights beyond one
row. (The model reading rows in place from a mounted image is tests/device/test_model_rom.py.)"""
import json
import os
import subprocess

from kvedge import budget
from kvedge_host.boards import romfs
from kvedge_host.boards.runtimes import micropython_bin

from kvedge_host.boards.tinyckpt import write as write_tiny

from _boardkit import kvedge

READ_BACK = """
import vfs, uctypes, os, hashlib, binascii
img = bytearray(open(%(img)r, 'rb').read())
vfs.mount(vfs.VfsRom(img), '/r')
def walk(d):
    for e in os.ilistdir(d):
        p = d + '/' + e[0]
        if e[1] & 0x4000:
            walk(p)
        else:
            f = open(p, 'rb')
            v = memoryview(f)  # the file's bytes where they lie in the image
            print('FILE', p[3:], len(v), (uctypes.addressof(v) - uctypes.addressof(img)) %% 4,
                  binascii.hexlify(hashlib.sha256(v).digest()).decode())
            f.close()
walk('/r')
"""


def test_image_files_read_back_in_place_and_aligned(tmp_path):
    import hashlib
    files = []
    for i, (rel, n) in enumerate([("a.txt", 3), ("weights.bin", 70001), ("lib/kvedge/m.mpy", 517),
                                  ("lib/z.bin", 0), ("tok.bin", 4097)]):
        p = tmp_path / ("f%d" % i)
        p.write_bytes(os.urandom(n))
        files.append((str(p), rel))
    img = tmp_path / "t.romfs"
    romfs.write(files, str(img))
    p = subprocess.run([micropython_bin(), "-X", "heapsize=1M", "-c", READ_BACK % {"img": str(img)}],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got = {}
    for line in p.stdout.splitlines():
        _, rel, size, mis, sha = line.split()
        got[rel] = (int(size), int(mis), sha)
    want = {rel: (os.path.getsize(src), 0, hashlib.sha256(open(src, "rb").read()).hexdigest()) for src, rel in files}
    assert got == want


def test_plan_places_rom_weights_in_flash_and_counts_one_row(tmp_path):
    model = write_tiny(str(tmp_path))[0]
    from kvedge.model import sizes as msizes
    from kvedge.model.header import read_config
    from kvedge_host.plan import account
    from kvedge_host import models
    cfg, _ = read_config(model)
    spec = models.load(model)
    # the float pass reads rows in place (one row's buffer); the integer pass (the default where it fits) reads
    # them in place too and keeps every norm, nothing per row (kvedge.model.header.resident_bytes, "rom")
    held = {"float": budget.weights_row_buffer_bytes(cfg.dim, cfg.hidden_dim, budget.I8),
            "int": 4 * account.params(spec)["norms"]}
    assert held["int"] < msizes.weights_stream_bytes(account.params(spec), cfg.dim, cfg.hidden_dim, budget.I8,
                                                          norms=True)  # no chunk of rows, no chunk's scales
    for fw in ("auto", "float"):
        out = kvedge("plan", "--model", model, "--board", "rp2040", "--weights-dtype", "i8", "--weights-in", "rom",
                     "--json", "--forward", fw)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        top = doc["configurations"][doc["chosen"] - 1]
        assert top["forward"] == ("int" if fw == "auto" else "float")
        assert top["weights"]["place"] == "rom"
        assert top["weights"]["heap_bytes"] == held[top["forward"]]
        where = {p["array"]: p["where"] for p in top["placement"]}
        assert where["weights"] == "flash (ROMFS), read in place"
    bad = kvedge("plan", "--model", model, "--board", "rp2040", "--weights-in", "rom")
    assert bad.returncode == 2 and "--weights-dtype i8" in bad.stderr
