"""A ROMFS image larger than the firmware's 4 MiB partition on the emulated Cortex-M7 and Xtensa
(kvedge_host.boards.m3machines.BIG_ROM, what tools/bench_forward.py --rom runs a 15M-class model's int4 file on):
chosen for weights over the partition's room only, clear of the RAM disk, and mounted at /rom by the session so
that a file past 4 MiB reads in place with the bytes the host wrote, and modules import from it."""
import os

import pytest

from kvedge_host.boards import m3board, m3firmware, m3machines
from kvedge_host.boards.deploy import DeployError

import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "tools"))
from bench_forward import BIG_WEIGHTS, machine  # noqa: E402


def test_the_big_slot_is_taken_for_big_weights_only_and_clear_of_the_ram_disk():
    for rt in ("m7", "xt"):
        big = m3machines.BIG_ROM[rt]
        assert machine(rt, 2097152, 1 << 20) is m3machines.LAYOUTS[rt]
        assert machine(rt, 2097152, BIG_WEIGHTS + 1) is big
        assert big.romfs_max >= 12 << 20 and big.marches == m3machines.LAYOUTS[rt].marches
        disk = (big.disk_addr, big.disk_addr + big.disk_blocks * m3machines.DISK_BLOCK)
        rom = (big.romfs_addr, big.romfs_addr + big.romfs_max)
        assert disk[1] <= rom[0] or rom[1] <= disk[0]
        assert "_ADDR = const(%d)" % big.romfs_addr in big.mount
    # the Cortex-M3's PSRAM image as before, where it is here; a clone without ../shared has none: the plain M3
    psram = 4194304 in m3firmware.firmware_images(layout=m3machines.M3P4)
    assert machine("m3", 4194304, 8 << 20) is (m3machines.M3P4 if psram else m3machines.M3)


def test_an_image_over_the_partition_is_refused_there_and_built_for_the_big_slot(tmp_path):
    folder = tmp_path / "rom"
    folder.mkdir()
    (folder / "w.bin").write_bytes(bytes(5 << 20))
    with pytest.raises(DeployError):
        m3board.build_romfs(str(folder), str(tmp_path / "a.img"), m3machines.M7)
    assert m3board.build_romfs(str(folder), str(tmp_path / "b.img"), m3machines.M7_BIG_ROM)


@pytest.mark.parametrize("rt", ["m7", "xt"])
def test_a_file_past_4_mib_reads_in_place_with_the_hosts_bytes(rt, tmp_path):
    lay = m3machines.BIG_ROM[rt]
    why = m3board.missing("rp2040", 2097152, lay)
    if why:
        pytest.skip("emulated %s: %s" % (lay.cpu, why))
    data = bytes((i * 7 + (i >> 12)) & 255 for i in range(5 << 20))
    src = tmp_path / "w.bin"
    src.write_bytes(data)
    at = (0, 4 << 20, (5 << 20) - 1, 3 * 1048573)
    mod = tmp_path / "bigmod.py"
    mod.write_text("X = 42\n")
    code = ("import bigmod\nf = open('/rom/w.bin', 'rb')\nm = memoryview(f)\n"
            "print('KV', len(m), %s, bigmod.__file__)\n" % ", ".join("m[%d]" % i for i in at))
    out = m3board.run_code(code, board="rp2040", heap=2097152, package=None, march=lay.marches[0],
                           extra=[(str(src), "w.bin"), (str(mod), "bigmod.py")], layout=lay, timeout=300)
    got = [ln.split()[1:] for ln in out.splitlines() if ln.startswith("KV ")][0]
    assert got[:-1] == [str(len(data))] + [str(data[i]) for i in at]
    assert got[-1] == "/rom/bigmod.py"
