"""kvedge footprint: the runtime's heap measured on the emulated 32-bit board, recorded in a profile with the command,
firmware and date that measured it. The arithmetic and the record are checked on written board output; one live
measurement is checked against what the rp2040 profile records (the emulated board's heap figures repeat exactly)."""
import json
import os
import shutil

import pytest

from kvedge_host import profiles
from kvedge_host.boards import footprint, runtimes

from _boardkit import kvedge

WHY = footprint.missing("rp2040")
needs_m3 = pytest.mark.skipif(WHY is not None, reason="emulated Cortex-M3: %s" % WHY)

# what the board prints for one kernel kind (KVFP lines; other output is ignored)
OUT = """KVFP start 4608 210112
KVFP module kernels 7856
KVFP module kvedge.errors 848
KVFP module kvedge.budget 6208
KVFP largest_imports 134208
KVFP optional kvedge.evict 2752
KVFP optional kvedge.telemetry 2720
Once upon a time
KVFP warm 176
KVFP telemetry_state 240
KVFP file 1152
KVFP run 20000 12328 2562
KVFP largest 129696 134544
"""


def _res(out=OUT):
    r = footprint.parse(out)
    r["boot"], r["usable"] = 1968, 210112
    return {"board": "rp2040", "heap_image": 215040, "march": "armv6m", "largest": 199920,
            "firmware": "MicroPython v1.29.0-preview (test)", "kinds": {"plain": r}}


def test_board_lines_become_the_profiles_figures():
    res = _res()
    r = res["kinds"]["plain"]
    assert r["modules"] == {"kernels": 7856, "kvedge.errors": 848, "kvedge.budget": 6208}
    assert r["optional"] == {"kvedge.evict": 2752, "kvedge.telemetry": 2720}
    fp = footprint.figures(res)
    assert fp == {"heap_image": 215040, "heap_usable": 210112, "boot_bytes": 1968, "largest_bytes": 199920,
                  "evict_bytes": 2752, "telemetry_bytes": 2720 + 240, "file_bytes": 1152,
                  "runtime_plain": 7856 + 848 + 6208 + 176,          # code + what the first run left
                  "loop_plain": 20000 - 176 - 12328 - 2562 - 2 * 1152}  # the run's peak beyond its formulas
    # the loop's own growth over the set-up heap counts even where the formulas' slack on the tiny model hides it
    grown = footprint.parse(OUT.replace("KVFP run 20000 12328 2562", "KVFP run 20000 19000 100 18500"))
    assert 20000 - 176 - 19000 - 100 - 2 * 1152 < 0 and footprint.loop_bytes(grown) == 20000 - 18500
    # a kind that cannot run even the tiny model gets no figure: its code alone would leave out the first run's
    # residue, the files and the loop, and a plan counting it would promise more than the board has
    short = footprint.parse(OUT.split("Once upon")[0] + "KVFP nofit memory allocation failed\n")
    short["boot"], short["usable"] = 1968, 210112
    fp = footprint.figures(dict(_res(), kinds={"viper": short, "plain": _res()["kinds"]["plain"]}))
    assert "runtime_viper" not in fp and "loop_viper" not in fp and "runtime_plain" in fp
    assert footprint.summary(short).startswith("does not fit")


def test_the_loop_is_measured_without_the_stats_stream_whose_line_is_counted_with_it():
    # the probe's second run has no stats stream: its peak over its set-up is the loop, and a stats line held while
    # it is written goes to telemetry_bytes (the first run's peak had it only when a stale pointer kept it)
    out = OUT.replace("KVFP warm 176\n", "KVFP warm 176\nKVFP loop 14000 13700\n").replace(
        "KVFP telemetry_state 240\n", "KVFP telemetry_state 240\nKVFP telemetry_line 224\n").replace(
        "KVFP run 20000 12328 2562", "KVFP run 16000 12328 2562 15300")
    r = footprint.parse(out)
    assert (r["loop_peak"], r["loop_setup"], r["telemetry_line"]) == (14000, 13700, 224)
    assert footprint.loop_bytes(r) == 300 != 16000 - 15300  # the second run's, not the first's 700
    # its peak beyond the formulas, when more (that run's base already holds the first run's residue)
    fat = footprint.parse(out.replace("KVFP loop 14000 13700", "KVFP loop 19000 18900"))
    assert footprint.loop_bytes(fat) == 19000 - 12328 - 2562 - 2 * 1152
    r["boot"], r["usable"] = 1968, 210112
    fp = footprint.figures(dict(_res(), kinds={"plain": r}))
    assert fp["telemetry_bytes"] == 2720 + 240 + 224 and fp["loop_plain"] == 300


def test_the_integer_pass_is_measured_with_the_kinds_it_is_fastest_on_and_planned_from_its_own_figures():
    runs = footprint.runs(("asm", "viper", "native", "plain"))
    assert [(n, k, f) for n, k, f, _ in runs] == [
        ("asm", "asm", "float"), ("viper", "viper", "float"), ("native", "native", "float"),
        ("plain", "plain", "float"), ("int_asm", "asm", "int"), ("int_viper", "viper", "int")]
    mods = dict((n, m) for n, _, _, m in runs)
    assert mods["int_asm"][-2:] == ("kvedge.kernels.q8_asm_thumb", "kvedge.model.pass_int")
    assert "kvedge.model.pass_int" not in mods["asm"] and "kvedge.attention" in mods["asm"]
    # the float pass's weight loader only where the float pass runs (the integer pass reads the file's header)
    assert "kvedge.model.checkpoint" in mods["asm"] and "kvedge.model.checkpoint" not in mods["int_asm"]
    assert "kvedge.model.header" in mods["int_asm"]
    assert footprint.runs(("plain",)) == [("plain", "plain", "float", footprint.modules_for("plain"))]
    # an int run's lines become int_ figures beside the float pass's, each with its own code and loop
    res = _res()
    fl = res["kinds"]["plain"]
    it = footprint.parse(OUT.replace("KVFP warm 176", "KVFP warm 9000").replace("KVFP run 20000", "KVFP run 40000"))
    it["boot"], it["usable"] = 1968, 210112
    fp = footprint.figures(dict(res, kinds={"asm": fl, "int_asm": it}))
    assert fp["runtime_asm"] == 7856 + 848 + 6208 + 176 and fp["runtime_int_asm"] == 7856 + 848 + 6208 + 9000
    assert fp["loop_int_asm"] == 40000 - 9000 - 12328 - 2562 - 2 * 1152 != fp["loop_asm"]
    from kvedge_host.plan import account
    prof = {"name": "x", "heap_bytes": 215040, "footprint": fp}
    assert account.kernel_kinds(prof) == ["asm"] and account.int_measured(prof) == ["asm"]
    rt_i, rt_f = account.Runtime(prof, "asm", forward="int"), account.Runtime(prof, "asm")
    assert (rt_i.code, rt_i.loop, rt_i.forward) == (fp["runtime_int_asm"], fp["loop_int_asm"], "int")
    assert (rt_f.code, rt_f.loop, rt_f.forward) == (fp["runtime_asm"], fp["loop_asm"], "float")
    with pytest.raises(ValueError, match="no measured int_viper footprint"):
        account.Runtime(prof, "viper", forward="int")


def test_the_boot_figure_holds_a_runner_call_that_allocates_the_plans_arena_first():
    # a plan's run passes its arena to main() (kvedge.model.runplan); the boot figure is measured with a call as
    # long as a plan's, so the sample plan is read by the same rule (it once lacked the cache's shape, and every
    # footprint measurement stopped in CacheConfig.from_dict)
    from kvedge.config import CacheConfig
    cache = footprint.SAMPLE_PLAN["cache"]
    assert CacheConfig.from_dict(cache).nbytes() == footprint.SAMPLE_PLAN["kv_bytes"]
    code = footprint.boot_code()
    assert "kv_bytes=%d" % footprint.SAMPLE_PLAN["kv_bytes"] in code and "budget=" in code


def test_record_writes_cited_figures_that_load(tmp_path, monkeypatch):
    folder = tmp_path / "boards"
    shutil.copytree(os.path.dirname(profiles.__file__).replace("host/kvedge_host", "boards"), folder)
    monkeypatch.setattr(profiles, "BOARDS", str(folder))
    monkeypatch.setattr(footprint, "BOARDS", str(folder))
    fp = footprint.record("rp2040", _res(), command="kvedge footprint --board rp2040 --write", date="2026-01-02")
    prof = profiles.load("rp2040")
    assert prof["footprint"] == fp
    cites = {s["figure"]: s for s in prof["sources"] if s["figure"].startswith("footprint.")}
    assert set(cites) == {"footprint." + k for k in fp}
    for s in cites.values():
        assert s["command"] == "kvedge footprint --board rp2040 --write" and s["date"] == "2026-01-02"
        assert s["firmware"] == "MicroPython v1.29.0-preview (test)" and s["note"]
    assert not profiles.uncited(prof)
    # recording again replaces the old entries instead of piling them up
    footprint.record("rp2040", _res(), date="2026-01-03")
    again = [s for s in profiles.load("rp2040")["sources"] if s["figure"].startswith("footprint.")]
    assert len(again) == len(cites) and {s["date"] for s in again} == {"2026-01-03"}
    with open(folder / "rp2040.json") as f:
        assert json.load(f)["footprint"] == fp


def test_a_bad_kernel_kind_is_one_line(capsys):
    from kvedge_host import cli
    assert cli.main(["footprint", "--board", "rp2040", "--kernels", "sse"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "kvedge footprint: error: --kernels: unknown kind 'sse' (choose from asm, viper, native, plain)"]
    # a kind left out or named twice is refused too ("asm,,plain" was measured as if it were "asm,plain")
    for arg, why in (("asm,,plain", "kind 2 of 3 is empty"), ("plain,", "kind 2 of 2 is empty"),
                     (",", "kind 1 of 2 is empty"), ("plain,plain", "plain is named twice")):
        assert cli.main(["footprint", "--board", "rp2040", "--kernels", arg]) == 2, arg
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and why in err and "kvedge footprint: error: --kernels" in err, (arg, err)


@needs_m3
def test_measured_again_the_rp2040_figures_repeat():
    p = kvedge("footprint", "--board", "rp2040", "--kernels", "plain", "--json", timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    got = json.loads(p.stdout)["footprint"]
    rec = profiles.load("rp2040")["footprint"]
    assert got["heap_usable"] == rec["heap_usable"] and got["heap_image"] == rec["heap_image"]
    # the same firmware and heap give the same bytes; the package changes as the project does, so the
    # recorded figures only have to be current within a few percent (re-record with --write when not)
    for key in ("boot_bytes", "runtime_plain", "largest_bytes"):
        assert abs(got[key] - rec[key]) <= 0.05 * rec[key], (key, got[key], rec[key])
    assert 0 < got["telemetry_bytes"] <= rec["telemetry_bytes"]  # recorded: the largest over the kernel kinds


def test_board_all_measures_every_profile_with_a_footprint_and_checks_first(capsys, monkeypatch):
    # after a change to the runner's code every profile's footprint is stale (test_demo_boards then fails): --board
    # all measures each profile that has one; any board it cannot run, or a bad flag, stops it before anything is
    # measured or written
    from kvedge_host import cli
    from kvedge_host.cli import cmd_footprint
    want = [n for n in profiles.names() if profiles.load(n).get("footprint")]
    assert cmd_footprint.measured_profiles() == want and "unix" not in want and "esp32" in want
    measured = []
    monkeypatch.setattr(footprint, "measure", lambda board, kinds=None, log=None: measured.append(board))
    monkeypatch.setattr(footprint, "record", lambda board, res: measured.append(("write", board)))
    assert cli.main(["footprint", "--board", "all", "--write", "--kernels", "plain,bogus"]) == 2
    assert "--kernels: unknown kind 'bogus'" in capsys.readouterr().err
    monkeypatch.setattr(footprint, "missing", lambda board, heap=None: "no qemu" if board == "rp2350" else None)
    monkeypatch.setattr(runtimes, "circuitpython_bin", lambda: "/bin/true")
    assert cli.main(["footprint", "--board", "all", "--write"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "(rp2350): no qemu" in err[0] and err[0].startswith("kvedge footprint: error:")
    assert measured == []
