# Weights read in place from a memory-mapped file (checkpoint's "rom" placement): an int8 checkpoint in a ROMFS
# image mounted with vfs.VfsRom (a board maps its flash partition the same way), run without copying a row, and
# compared with the same checkpoint held in RAM: the same kernels on the same codes, so bit-identical logits.
import gc

# the ROMFS image is built in this block, reserved before the imports below fragment the heap (the unix port at
# the rp2040 heap compiles the package from source)
_IMAGE = bytearray(12288)

from _support import need  # noqa: E402
from _model_support import RefAttention, skip, tmp_path  # noqa: E402
from kvedge import compat, kernels  # noqa: E402
from kvedge.model import checkpoint, header, romweights, tiny  # noqa: E402
from kvedge.model.llama import Llama  # noqa: E402
from kvedge.model import pass_int  # noqa: E402,F401  (compiled while the heap is in one piece, as kernels.get() below)

_FILES = {}
MOUNT = "/kvrom"
TOKENS = (1, 40, 30, 7, 7)


def _i8():
    need("fs")
    if not _FILES:
        import os
        kernels.get()  # compiled while the heap is in one piece
        p = tmp_path("kvedge_rom_f32.bin")
        tiny.write_checkpoint(p, seed=5, vocab_size=48)
        q = tmp_path("kvedge_rom_i8.bin")
        checkpoint.convert_to_i8(p, q)
        os.remove(p)
        _FILES["i8"] = q
    return _FILES["i8"]


def _need_romfs():
    # ROMFS (vfs.VfsRom, MicroPython >= 1.25) and uctypes to read a mapped file in place. CircuitPython has no
    # vfs module; devrunner's emulation of it on MicroPython shows as a micropython module without heap_lock.
    import sys
    if not compat.HAS_HEAP_LOCK and sys.implementation.name == "micropython":
        skip("needs romfs (emulated CircuitPython has none)")
    try:
        import vfs
        import uctypes  # noqa: F401
        if hasattr(vfs, "VfsRom"):
            return
    except ImportError:
        pass
    skip("needs romfs (vfs.VfsRom and uctypes)")


def _mount(skew):
    _need_romfs()
    import vfs
    import _romfs
    path = _i8()
    img = _romfs.image("m.bin", path, skew, _IMAGE)
    vfs.mount(vfs.VfsRom(img), MOUNT)
    return img


def _umount():
    import vfs
    vfs.umount(MOUNT)


def _model(path, stream):
    return Llama(path, kv={"align": 0, "max_tokens": 8}, attention=RefAttention, stream=stream)


def _logits(m):
    out = [list(m.forward(t)) for t in TOKENS]
    m.close()
    return out


def _run_both(skew, kind="auto"):
    """(logits from the ROMFS file, logits from RAM, the ROMFS model's weights object)."""
    old = kernels.kind()
    kernels.select(kind)
    img = _mount(skew)
    try:
        rom = _model(MOUNT + "/m.bin", "rom")
        w = rom.w
        a = _logits(rom)
    finally:
        _umount()
        del img
        kernels.select(old)
    gc.collect()
    kernels.select(kind)
    try:
        b = _logits(_model(_i8(), False))
    finally:
        kernels.select(old)
    return a, b, w


def test_rom_rows_read_in_place_give_the_ram_logits():
    a, b, w = _run_both(0)
    assert w.stream == "rom"
    assert isinstance(w.wq[0], romweights.RomI8Matrix) and isinstance(w.embedding, romweights.RomI8Matrix)
    assert a == b


def _held(path, stream):
    gc.collect()
    before = compat.mem_alloc()
    w = checkpoint.Weights(path, stream)
    gc.collect()
    held = compat.mem_alloc() - before
    w.close()
    return held, w.cfg


def test_rom_weights_take_no_ram_per_row():
    need("mem_alloc")
    import sys
    if sys.platform == "webassembly":
        skip("the wasm port's gc.mem_alloc() does not settle after gc.collect()")
    img = _mount(0)
    try:
        held, cfg = _held(MOUNT + "/m.bin", "rom")
        streamed, _ = _held(MOUNT + "/m.bin", True)  # the same file read through a buffer
    finally:
        _umount()
        del img
    p = cfg.params()
    # the norms (the "rom" account) and the Python object of each matrix (llama.object_bytes's 320 bytes)
    assert held <= header.resident_bytes(cfg, "i8", "rom") + 320 * (7 * cfg.n_layers + 2) + 1024, held
    # streaming holds a chunk of rows and that chunk's scales (kvedge.model.sizes) beside as many objects:
    # neither grows with the number of rows
    rows = p["matrix_rows"] + p["embedding_rows"]
    assert streamed <= header.resident_bytes(cfg, "i8", True) + 320 * (7 * cfg.n_layers + 2) + 1024, streamed
    assert header.resident_bytes(cfg, "i8", True) < 4 * p["norms"] + 4 * rows, (held, streamed)


def test_unaligned_rom_file_falls_back_to_streaming():
    a, b, w = _run_both(1)
    assert w.stream is True and not isinstance(w.wq[0], romweights.RomI8Matrix)
    assert a == b


def test_rom_rows_with_plain_kernels():
    # plain subscripts read the int8 view (uctypes INT8), viper reads the bytes with ptr8: same codes
    a, b, w = _run_both(0, "plain")
    assert w.stream == "rom" and w.wq[0].codes is w.wq[0].i8
    assert a == b


def test_file_on_a_plain_filesystem_is_streamed():
    # not mapped (a littlefs/posix file): "rom" means streamed, and the plan counts what streaming holds
    m = _model(_i8(), "rom")
    assert m.w.stream is True
    assert m.plan["weights"] == header.resident_bytes(m.cfg, "i8", True)
    m.close()


def _int_logits(path, stream, kind):
    old = kernels.kind()
    kernels.select(kind)
    try:
        m = Llama(path, kv={"align": 0, "max_tokens": 8, "dtype": "i8"}, forward="int", stream=stream)
        w = m.w
        held = (w.stream, w._rom is not None, hasattr(m.intp, "wbuf"))
        out = [list(m.forward(t)) for t in TOKENS]
        m.close()
    finally:
        kernels.select(old)
    return out, held


def test_the_integer_pass_reads_rows_in_place_and_gives_the_logits_of_rows_in_ram():
    # the integer pass's kernels take the file's int8 rows as they lie: from the mapped file nothing is copied (no
    # chunk buffer), and every kernel kind gives the logits of the same rows read into RAM and of them streamed
    import sys
    kinds = kernels.available()
    if sys.implementation.name == "micropython" and sys.maxsize > (1 << 31):
        kinds = [kernels.kind()]  # the 64-bit unix port at the rp2040's heap holds one kind's modules and models
    for kind in kinds:
        img = _mount(0)
        try:
            rom, held = _int_logits(MOUNT + "/m.bin", "rom", kind)
            streamed, sheld = _int_logits(MOUNT + "/m.bin", True, kind)
        finally:
            _umount()
            del img
        gc.collect()
        ram, rheld = _int_logits(_i8(), False, kind)
        assert held == (False, True, False) and sheld == (True, False, True) and rheld == (False, False, False)
        assert rom == ram and streamed == ram, kind
