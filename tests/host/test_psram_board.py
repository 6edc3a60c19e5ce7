"""The emulated PSRAM boards: the Cortex-M3 images whose GC heap sits at the top of the machine's 16 MiB PSRAM
(firmware-psram-heap4194304.elf, -heap8388608.elf) stand for the PSRAM profiles. Checked against the runtime
README's memory map, not against m3board's own table: the profile picks the image with its heap, the heap lies in
PSRAM, the RAM disk is the 4 MiB of SSRAM2/3 (writable, mounted at /), and the ROMFS slot below the heap holds an
image larger than the other images' 4 MiB slot, read in place (a zero-copy view into the slot)."""
import os

import pytest

from kvedge_host.boards import m3board

MIB = 1024 * 1024
# board profile, heap, where the heap starts, the ROMFS slot's size (the runtime's README, "PSRAM-heap images")
PSRAM = (("esp32-psram", 4194304, 0x21C00000, 12 * MIB), ("esp32s3-psram8", 8388608, 0x21800000, 8 * MIB))


def _why(board):
    return m3board.missing(board, layout=m3board.layout_for(board))


@pytest.mark.parametrize("board,heap,heap_at,slot", PSRAM)
def test_a_psram_profile_runs_on_the_image_with_its_heap_in_psram(board, heap, heap_at, slot, tmp_path):
    why = _why(board)
    if why:
        pytest.skip("emulated PSRAM board: %s" % why)
    lay = m3board.layout_for(board)
    assert os.path.basename(m3board.firmware_for(heap, lay)) == "firmware-psram-heap%d.elf" % heap
    assert lay.romfs_addr == 0x21000000 and lay.romfs_max == slot and lay.romfs_addr + slot == heap_at
    big = tmp_path / "rom" / "weights.bin"
    big.parent.mkdir()
    n = 5 * MIB + 12345  # past the 4 MiB slot of the other images
    with open(big, "wb") as f:
        for i in range(0, n, 65536):
            f.write(bytes([(i // 65536) & 255]) * min(65536, n - i))
    m3board.write_disk_module(str(big.parent), "armv7m", lay)
    image = m3board.build_romfs(str(big.parent), str(tmp_path / "rom.img"), lay)
    src = tmp_path / "a.txt"
    src.write_text("kvedge")
    disk = m3board.build_disk(str(tmp_path / "disk.img"), [(str(src), "/a.txt")], layout=lay)
    with m3board.M3Board(board, romfs=image, disk=disk) as b:
        assert b.layout is lay
        out = b.exec(
            "import gc, os, uctypes\n"
            "gc.collect()\n"
            "x = bytearray(64)\n"
            "m = memoryview(open('/rom/weights.bin', 'rb'))\n"
            "print('KV', gc.mem_free(), uctypes.addressof(x), len(m), uctypes.addressof(m), m[0], m[%d], m[-1])\n"
            "print('KV', open('/a.txt').read(), os.statvfs('/')[0] * os.statvfs('/')[2])\n"
            "with open('/b.bin', 'wb') as f:\n"
            "    f.write(bytearray(3 * 1024 * 1024))\n"
            "print('KV', os.stat('/b.bin')[6])\n" % (4 * MIB + 65536))
    lines = [ln.split()[1:] for ln in out.splitlines() if ln.startswith("KV ")]
    free, addr, size, rom_at, first, past4, last = (int(v) for v in lines[0])
    assert heap - 200 * 1024 < free < heap  # the GC's tables and the boot take the rest
    assert heap_at <= addr < heap_at + heap  # an object lives in PSRAM, at the heap's place
    assert size == n and 0x21000000 <= rom_at < heap_at  # the file read in place from the ROMFS slot
    assert (first, past4, last) == (0, 65, ((n - 1) // 65536) & 255)
    assert lines[1] == ["kvedge", str(4 * MIB)]  # the RAM disk: SSRAM2/3's 4 MiB
    assert lines[2] == [str(3 * MIB)]


def test_an_image_larger_than_the_slot_is_refused(tmp_path):
    lay = m3board.M3P8
    rom = tmp_path / "rom"
    rom.mkdir()
    with open(rom / "w.bin", "wb") as f:
        f.truncate(8 * MIB + 1)
    with pytest.raises(m3board.DeployError, match="ROMFS slot holds %d" % (8 * MIB)):
        m3board.build_romfs(str(rom), str(tmp_path / "rom.img"), lay)


def test_kvedge_sim_runs_a_profile_whose_heap_no_image_has_on_the_image_its_footprint_was_measured_on(tmp_path):
    """rp2350-psram8 (8,849,408 bytes of heap: a Pico Plus 2's PSRAM less the firmware's share) has no image of its
    own: `kvedge sim` boots the 8 MiB-heap image with its heap in PSRAM (the one its footprint, its demo and its
    plans use) and says so, instead of the unix port."""
    why = _why("esp32s3-psram8")
    if why:
        pytest.skip("emulated PSRAM board: %s" % why)
    from kvedge_host.boards.sim import SimProcess
    from _boardkit import board_eval
    sim = SimProcess("rp2350-psram8", fs=str(tmp_path / "fs"))
    try:
        out = board_eval(sim.port, "import gc, sys, uctypes\nx = bytearray(16)\n"
                                   "print(sys.implementation._machine, gc.mem_free(), uctypes.addressof(x))")
        machine, free, addr = out.rsplit(" ", 2)
        assert "Cortex-M3" in machine or "MPS2" in machine, out
        assert 8 * MIB - 256 * 1024 < int(free) < 8 * MIB and 0x21800000 <= int(addr) < 0x22000000, out
        os.set_blocking(sim.proc.stderr.fileno(), False)
        said = (sim.proc.stderr.read() or b"").decode()  # printed before the port
        assert "no image with the profile's 8,849,408-byte heap: the emulated board runs the 8,388,608-byte one" \
            in said, said
    finally:
        sim.stop()
