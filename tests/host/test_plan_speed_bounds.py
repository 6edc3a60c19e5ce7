"""Issue 44, item 3: a plan's speed is the slower of two bounds, each from the board's own figures. Compute: the
Cortex-M3's measured count times the board's stand-in core against the M3 on one run (kvedge_host/plan/cores.py),
at the profile's clock. Memory: the bytes a token reads from each memory (the weights once; the attended rows of
the cache; a tier's cold blocks), where the plan's placement puts them, over the profile's cited read rate
(read_bytes_per_s; internal SRAM one 32-bit word a cycle). Checked here by hand from the plan's own --json fields
and the profile files, for every built-in profile with a clock."""
import json
import os

import pytest

from kvedge_host.paths import BOARDS

from _boardkit import kvedge

MODEL = os.path.join(os.path.dirname(BOARDS), "docs", "examples", "stories260K.json")


def _profile(name):
    with open(os.path.join(BOARDS, name + ".json")) as f:
        p = json.load(f)
    if "base" in p:
        base = _profile(p["base"])
        base.update({k: v for k, v in p.items() if k != "sources"})
        p = base
    return p


def _by_hand(c, prof):
    """(memory seconds a token, bytes a memory) from the configuration's placement and the profile's rates."""
    C = c["context"]
    tier = c.get("tier") or {}
    slots = c["cache"]["window"] + c["cache"]["sinks"] if tier else c["tokens_kept"]
    if c["kind"] == "h2o":
        slots = c["policy"]["budget"]
    rates = dict(prof.get("read_bytes_per_s") or {}, sram=4 * prof["clock_hz"])
    reads = {}
    for p in c["placement"]:
        mem = "flash" if p["where"].startswith("flash") else "psram" if p["where"].startswith("slow") else "sram"
        if p["array"] == "weights":
            n = p["bytes"]
        elif p["array"] in ("kv cache", "kv hot ring"):
            n = p["bytes"] * sum(min(q + 1, slots) for q in range(C)) / float(C * slots)
        elif p["array"] == "cold KV store":
            per = p["bytes"] / float(tier["cold_tokens"])
            n = per * sum(max(0, min(q + 1, slots + tier["cold_tokens"]) - slots) for q in range(C)) / float(C)
        else:
            continue
        reads[mem] = reads.get(mem, 0) + n
    return sum(n / float(rates[m]) for m, n in reads.items()), reads


@pytest.mark.parametrize("board", ["rp2040", "rp2350", "rp2350-psram8", "esp32", "esp32-psram", "esp32s3",
                                   "esp32s3-n16r8"])
def test_speed_is_the_slower_of_compute_and_memory(board):
    # the esp32's 100 KB with the stats stream and a prompt fits no cache (its footprint measured on the Xtensa
    # lx106: boot 5,088 bytes; on the Cortex-M3's, 4,624, a context cut to 1): planned without the stats stream, as
    # kvedge demo and generate plan it there
    more = ("--no-stats",) if board == "esp32" else ()
    p = kvedge("plan", "--model", MODEL, "--board", board, "--weights-dtype", "i8", "--top", "99", "--json", *more)
    assert p.returncode in (0, 1), p.stderr[-1500:]
    r = json.loads(p.stdout)
    prof = _profile(board)
    assert prof.get("read_bytes_per_s", {}).get("flash"), board  # every MicroPython board cites its flash's rate
    if "psram" in (prof.get("slow_memory") or {}).get("kind", "").lower():
        assert prof["read_bytes_per_s"].get("psram"), board
    seen = 0
    for c in r["configurations"]:
        sp = c["speed"]
        if not c.get("tokens_per_s"):
            continue
        seen += 1
        mem_s, reads = _by_hand(c, prof)
        assert sorted(sp["reads_per_token"]) == sorted(reads), (sp["reads_per_token"], reads)
        for m, n in reads.items():
            assert abs(sp["reads_per_token"][m] - n) <= 1 + 1e-6 * n, (m, sp["reads_per_token"][m], n)
        assert abs(sp["memory_tokens_per_s"] - 1 / mem_s) <= 0.01 * (1 / mem_s), (sp["memory_tokens_per_s"], mem_s)
        compute = prof["clock_hz"] / float(sp["m3_instructions_per_token"] * sp["core"]["factor"])
        assert abs(sp["compute_tokens_per_s"] - compute) <= 0.01 * compute, (sp["compute_tokens_per_s"], compute)
        slower = min(compute, 1 / mem_s)
        assert sp["bound"] == ("memory" if 1 / mem_s < compute else "compute"), sp
        assert abs(c["tokens_per_s"] - slower) <= 0.05 * slower, (c["tokens_per_s"], slower)
        # the weights are read once a token, wherever they are
        w = next(x for x in c["placement"] if x["array"] == "weights")
        assert sum(reads.values()) >= w["bytes"]
        # each figure says what it is: the core it was counted on, and every rate's source
        assert sp["core"]["core"] and sp["core"]["stands_for"] and sp["proxy"]
        assert all(sp["read_rates"][m]["source"] for m in reads), sp["read_rates"]
    assert seen, board


def test_the_stand_in_cores_ratios_are_the_benchmarks():
    """cores.py's figures, re-read: each chip's stand-in against the M3 with the same kernels (the command and
    figures in its docstring), and the chips that map to them."""
    from kvedge_host.plan import cores
    assert cores.STAND_IN == {"rp2040": "m0", "rp2350": "m7", "esp32": "xt", "esp32s3": "xt"}
    for key, c in cores.CORES.items():
        assert c["kernels"] in cores.M3 and 0.5 < c["instructions"] / float(cores.M3[c["kernels"]]) < 4, key
    f = cores.for_profile({"chip": "rp2350"}, "asm")
    assert f["factor"] == round(cores.CORES["m7"]["instructions"] / float(cores.M3["asm"]), 3) and "note" not in f
    assert f["factor"] < 1  # the M7's DSP product takes fewer instructions than the M3's Thumb-2 one
    assert "measured with asm kernels" in cores.for_profile({"chip": "rp2040"}, "plain")["note"]
    assert cores.for_profile({"chip": "x64"}, "plain")["factor"] == 1.0
