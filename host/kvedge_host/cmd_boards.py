"""The board profiles in boards/: usable heap, fast and slow memory, flash, and where each figure comes from."""
import json

from . import boards


def add_arguments(p):
    p.add_argument("--json", action="store_true", help="print the profiles as a JSON list")


def _kib(n):
    return "-" if n is None else "{:,} KiB".format(n // 1024) if n % 1024 == 0 else "{:,} B".format(n)


def run(a):
    profs = [boards.load(n) for n in boards.names()]
    if a.json:
        print(json.dumps(profs, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table
    t = Table(title="kvedge board profiles (boards/*.json)")
    for col in ("board", "heap", "fast memory", "slow memory", "flash", "-march"):
        t.add_column(col, justify="right" if col in ("heap", "flash") else "left")
    for p in profs:
        fast = p.get("fast_memory") or {}
        slow = p.get("slow_memory") or {}
        t.add_row(p.get("name", "?"), _kib(p["heap_bytes"]),
                  "%s %s" % (_kib(fast.get("bytes")), fast.get("kind", "")) if fast else "-",
                  "%s %s" % (_kib(slow.get("bytes")), slow.get("kind", "")) if slow else "-",
                  _kib(p.get("flash_bytes")), p["mpy_march"])
    c = Console()
    c.print(t)
    for p in profs:
        c.print("[bold]%s[/bold]: %s" % (p.get("name", "?"), p.get("title", "")), highlight=False)
        for n in p.get("notes", []):
            c.print("  note: " + n, highlight=False, markup=False)
        for s in p.get("sources", []):
            c.print("  source: " + s, highlight=False, markup=False)
    return 0
