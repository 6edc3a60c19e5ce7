"""Each board's own core against the emulated Cortex-M3 the forward passes' table was measured on
(forward_cost.py): one integer-pass run of stories260K, the same command on every stand-in, and the ratio of its
instructions a token to the M3's with the same kernels. Measured 2026-12-06:

    tools/bench_forward.py --runtime RT --kernels K --forward auto --rom --cache max_tokens=96,window=92,sinks=4
        --context 54 --tokens 4          (xt: with --no-asm, the ESP32's MicroPython has no inline assembler)

mean over positions 0-53, exact instruction counts (qemu -icount shift=0, or the lx106's ticks_cpu()).
A stand-in's count is exact for the stand-in and indicative for the chip it stands for: the M0 runs the RP2040's
Thumb-1 (the Cortex-M0+ has the same instruction set), the M7 (single-precision FPU, DSP) the RP2350's Cortex-M33
(Armv8-M Mainline with the same extensions), the lx106 (call0) the ESP32 family's windowed LX6/LX7, whose inner
loops cost about the same and whose calls differ. Measured on the integer pass: the float pass on a core with an
FPU (RP2350, ESP32s) costs fewer instructions than the M3's soft float, which the figure does not credit."""

COMMAND = ("tools/bench_forward.py --runtime RT --kernels K --forward auto --rom --cache "
           "max_tokens=96,window=92,sinks=4 --context 54 --tokens 4")
M3 = {"asm": 3409907, "viper": 7222074}  # the Cortex-M3's mean with each kernel kind
CORES = {
    "m0": {"core": "Cortex-M0 (qemu microbit, armv6m .mpy)", "stands_for": "the RP2040's Cortex-M0+",
           "kernels": "asm", "instructions": 3916648},
    "m7": {"core": "Cortex-M7 with FPU and DSP (qemu mps2-an500, armv7emsp .mpy)",
           "stands_for": "the RP2350's Cortex-M33", "kernels": "asm", "instructions": 3161555},
    "xt": {"core": "Xtensa lx106, call0 (qemu lx60-nommu, xtensa .mpy, viper q_mv: --no-asm)",
           "stands_for": "the ESP32 family's Xtensa LX6/LX7", "kernels": "viper", "instructions": 7379055},
}
# a board profile's chip -> its stand-in (chips without one: the M3's own count)
STAND_IN = {"rp2040": "m0", "rp2350": "m7", "esp32": "xt", "esp32s3": "xt"}


def for_profile(prof, kernels):
    """{"factor", "core", "stands_for", "measured", "note"?}: what a token on this profile's core costs against the
    Cortex-M3's count with `kernels`; the M3 itself (factor 1) where the profile names no chip with a stand-in."""
    key = STAND_IN.get(str((prof or {}).get("chip") or ""))
    if key is None:
        return {"factor": 1.0, "core": "Cortex-M3 (qemu mps2-an385)", "stands_for": "this board's core",
                "measured": "forward_cost.py's own", "note": "no stand-in for this chip: the M3's count"}
    c = CORES[key]
    out = {"factor": round(c["instructions"] / float(M3[c["kernels"]]), 3), "core": c["core"],
           "stands_for": c["stands_for"], "measured": "%s (%s kernels, against the M3's %s)" % (
               COMMAND.replace("RT", key).replace("K", c["kernels"]), c["kernels"], format(M3[c["kernels"]], ","))}
    if kernels != c["kernels"]:
        out["note"] = "measured with %s kernels, these are %s" % (c["kernels"], kernels)
    return out
