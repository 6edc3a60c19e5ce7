"""The board profiles in boards/: usable heap, fast and slow memory, flash, and where each figure comes from.

`kvedge boards` lists them; `kvedge boards NAME` (or `--sources`) shows every figure with its sources: the
datasheet, documentation page or source file (URL and section), or the command that measured it, and which
figures are estimates."""
import json

from .. import profiles


def add_arguments(p):
    p.add_argument("names", nargs="*", metavar="NAME", help="show these profiles with the source of every figure")
    p.add_argument("--sources", action="store_true", help="show the source of every figure of every profile")
    p.add_argument("--json", action="store_true", help="print the profiles as a JSON list")


def _kib(n):
    return "-" if n is None else "{:,} KiB".format(n // 1024) if n % 1024 == 0 else "{:,} B".format(n)


def _value(v):
    if v is None:
        return "none"
    if isinstance(v, int) and not isinstance(v, bool):
        return format(v, ",")
    return str(v)


def _table(profs, width):
    """The profiles' table. Below 132 columns: sizes in KiB without the unit, no memory kinds (`kvedge boards NAME`
    and the wide table say them), so that at 80 columns every name is whole and no cell wraps."""
    from rich import box
    from rich.table import Table
    wide = width >= 132
    t = Table(title="kvedge board profiles (boards/*.json)%s" % ("" if wide else ", sizes in KiB"),
              box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)
    for col in ("board", "runtime", "heap", "fast memory" if wide else "fast", "slow memory" if wide else "slow",
                "flash", "-march"):
        t.add_column(col, justify="left" if col in ("board", "runtime", "-march") or wide and "memory" in col
                     else "right", no_wrap=not wide or col in ("board", "runtime", "-march"))

    def size(n):
        if wide or n is None:
            return _kib(n)
        return "{:,}".format(n // 1024) if n % 1024 == 0 else "{:,.1f}".format(n / 1024.0)

    def mem(m):
        return ("%s %s" % (_kib(m.get("bytes")), m.get("kind", "")) if wide else size(m.get("bytes"))) if m else "-"
    for p in profs:
        heap = size(p["heap_bytes"]) + ((" (est.)" if wide else "*") if profiles.is_estimate(p, "heap_bytes") else "")
        t.add_row(p.get("name", "?"), p.get("runtime", "micropython"), heap, mem(p.get("fast_memory")),
                  mem(p.get("slow_memory")), size(p.get("flash_bytes")), p["mpy_march"])
    return t


def _summary(c, p):
    c.print("[bold]%s[/bold]: %s" % (p.get("name", "?"), p.get("title", "")), highlight=False)
    for n in p.get("notes", []):
        c.print("  note: " + n, highlight=False, markup=False)
    figs = profiles.figures(p)
    est = [f for f, _ in figs if profiles.is_estimate(p, f)]
    missing = profiles.uncited(p)
    line = "  sources: %d figures cited from %d sources" % (len(figs) - len(missing), len(p.get("sources", [])))
    if est:
        line += "; estimates: " + ", ".join(est)
    if missing:
        line += "; NO SOURCE: " + ", ".join(missing)
    c.print(line + "  (kvedge boards %s)" % p.get("name", "?"), highlight=False, markup=False)


def _sources(c, p):
    c.print("[bold]%s[/bold]: %s" % (p.get("name", "?"), p.get("title", "")), highlight=False)
    if p.get("base"):
        c.print("  a variant of %s: figures it does not restate, and their sources, are %s's" % (p["base"], p["base"]),
                highlight=False, markup=False)
    by_figure = {}
    for s in p.get("sources", []):
        by_figure.setdefault(s["figure"], []).append(s)
    order = [f for f, _ in profiles.figures(p)] + [f for f in by_figure if f not in dict(profiles.figures(p))]
    for fig in order:
        value = profiles.resolve(p, fig)
        tag = "estimate" if profiles.is_estimate(p, fig) else "sourced"
        if fig not in by_figure:
            tag = "NO SOURCE"
        c.print("  %s = %s  [%s]" % (fig, _value(value), tag), highlight=False, markup=False)
        for s in by_figure.get(fig, []):
            head = "    - %s%s" % (s["source"], " (estimate)" if s["estimate"] else "")
            c.print(head, highlight=False, markup=False)
            for key in ("where", "url", "command", "firmware", "note"):
                if s.get(key):
                    c.print("      %s: %s" % (key, s[key]), highlight=False, markup=False, soft_wrap=True)


def run(a):
    names = a.names or profiles.names()
    profs = [profiles.load(n) for n in names]
    if a.json:
        print(json.dumps(profs, indent=2))
        return 0
    from rich.console import Console
    c = Console()
    if a.names or a.sources:
        for p in profs:
            _sources(c, p)
        return 0
    c.print(_table(profs, c.width))
    if c.width < 132:
        c.print("* an estimate. fast, slow: the memory the heap lives in, and PSRAM (their kinds: kvedge boards NAME)",
                highlight=False, markup=False)
    for p in profs:
        _summary(c, p)
    c.print("Measure a board's own figures: mpremote connect PORT run tools/board_probe.py", highlight=False,
            markup=False)
    return 0
