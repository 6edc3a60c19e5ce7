#!/usr/bin/env python3
"""Run the device-API fuzzers (tests/device/test_fuzz_*.py) longer than the suite does, with any seeds.

  tools/fuzz.py [--runtime cpython|unix|wasm|circuitpython|m3] [--seed N | --seeds A,B,...] [--scale K]
                [--minutes M] [-k FILTER]

Each round runs every fuzzer file (or those whose name contains FILTER) on the runtime with KVEDGE_FUZZ_SEED = the
round's seed and KVEDGE_FUZZ_SCALE = K (calls per family: K times the suite's). Seeds go on from --seed (default
1000) until --minutes pass, or are the --seeds given. Prints each round's fuzz lines and result, then a total;
exits 1 when any round failed (its failure lines are printed: the seed reproduces it)."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "host"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "device"))

from kvedge_host.boards import runtimes  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", choices=runtimes.RUNTIMES, default="cpython")
    ap.add_argument("--board", default="rp2040")
    ap.add_argument("--seed", type=int, default=1000, help="first seed (then +1 per round)")
    ap.add_argument("--seeds", help="comma-separated seeds, one round each")
    ap.add_argument("--scale", type=int, default=4, help="calls per family, times the suite's (default 4)")
    ap.add_argument("--minutes", type=float, default=10.0, help="rounds until this much time has passed")
    ap.add_argument("-k", dest="filter", default="test_fuzz", help="fuzzer files whose name contains this")
    a = ap.parse_args(argv)
    if a.scale < 1 or not a.minutes > 0:
        ap.error("--scale must be >= 1 and --minutes > 0")
    seeds = [int(x) for x in a.seeds.split(",")] if a.seeds else None
    files = runtimes.test_files([a.filter])
    if not files:
        ap.error("no fuzzer file matches %r" % a.filter)
    os.environ["KVEDGE_FUZZ_SCALE"] = str(a.scale)
    end = time.monotonic() + 60.0 * a.minutes
    rounds = failed = 0
    seed = a.seed
    t0 = time.monotonic()
    while (seeds and rounds < len(seeds)) or (not seeds and (rounds == 0 or time.monotonic() < end)):
        s = seeds[rounds] if seeds else seed + rounds
        os.environ["KVEDGE_FUZZ_SEED"] = str(s)
        lines = []
        res = runtimes.run_device_tests(a.runtime, a.board, files, echo=lines.append, timeout=3600)
        rounds += 1
        for ln in lines:
            if ln.startswith("fuzz "):
                print("  " + ln)
        if not res["ok"]:
            failed += 1
            for ln in res["lines"]:
                print("  " + ln)
        print("seed %d: %d passed, %d failed, %d skipped (%.0f s so far)"
              % (s, res["passed"], res["failed"], res["skipped"], time.monotonic() - t0), flush=True)
    print("%s: %d rounds, %d failed, scale %d, %.1f min" % (a.runtime, rounds, failed, a.scale,
                                                            (time.monotonic() - t0) / 60.0))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
