"""tools/gen_q4_v7m.py, the assembler of kvedge.kernels.q4_v7m_thumb (raw Thumb-2 halfwords): the module is what
its listing gives, each form's encoding is the architecture's (llvm-mc assembles the same listing to the same
bytes where it is installed; a few encodings written out here elsewhere), and branches out of range are refused."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import gen_q4_v7m as gen  # noqa: E402


def test_the_module_is_what_the_listing_gives():
    assert gen.main(["--check"]) == 0, "run tools/gen_q4_v7m.py"


@pytest.mark.parametrize("line,want", [
    ("sbfx r12, r3, #4, #4", [0xF343, 0x1C03]),  # llvm-mc's encodings (ARMv7-M ARM, A7.7)
    ("mla r2, r12, r5, r2", [0xFB0C, 0x2205]),
    ("ldm.w r0!, {r3, r11}", [0xE8B0, 0x0808]),
    ("ldrh.w r4, [lr], #2", [0xF83E, 0x4B02]),
    ("mvn.w r4, #0xE0000000", [0xF06F, 0x4460]),
    ("push.w {r8, r9, r10, r11, r12}", [0xE92D, 0x1F00]),
    ("ldm r1!, {r4, r5, r6, r7}", [0xC9F0]),
    ("ubfx r5, r4, #3, #7", [0xF3C4, 0x05C6]),
])
def test_encodings(line, want):
    assert gen.encode(line) == want


def test_branches_resolve_and_refuse_what_is_out_of_range():
    out = gen.assemble(["L:", "movs r0, #1", "bne.w L", "b L", "beq L"])
    assert [h for _, h in out if h] == [[0x2001], [0xF47F, 0xAFFD], [0xE7FB], [0xD0FA]]  # llvm-mc's bytes
    with pytest.raises(gen.AsmError):
        gen.assemble(["L:"] + ["mla r2, r12, r5, r2"] * 70 + ["bne L"])  # 280 bytes back: past a 16-bit branch
    with pytest.raises(gen.AsmError):
        gen.encode("ldm r1!, {r1, r2}")  # writeback into a loaded register


def test_llvm_mc_assembles_the_listing_to_the_same_bytes(tmp_path):
    mc = shutil.which("llvm-mc")
    objcopy = shutil.which("llvm-objcopy")
    if not mc or not objcopy:
        pytest.skip("llvm-mc / llvm-objcopy not installed")
    src = ".syntax unified\n.thumb\n" + "\n".join(
        line.replace("mul.w ", "mul ").replace("ldrh.w ", "ldrh ") for line in gen.LISTING) + "\n"
    obj, raw = str(tmp_path / "q.o"), str(tmp_path / "q.bin")
    p = subprocess.run([mc, "-triple=thumbv7m-none-eabi", "-filetype=obj", "-o", obj], input=src.encode(),
                       capture_output=True)
    assert p.returncode == 0, p.stderr.decode()
    subprocess.run([objcopy, "-O", "binary", "--only-section=.text", obj, raw], check=True)
    mine = b"".join(h.to_bytes(2, "little") for _, hws in gen.assemble(gen.LISTING) if hws for h in hws)
    with open(raw, "rb") as f:
        assert f.read() == mine
