"""`kvedge generate --port --detach` leaves the run going on the board and `kvedge monitor --port --until final`
watches it there (the unix-port virtual board at the rp2040 heap): every stats line from start to final, none lost
or repeated, the final one counting every position of the run."""
import csv
import tempfile

from kvedge_host.boards.sim import VirtualBoard

from _boardkit import kvedge


def test_a_detached_generation_is_watched_by_the_monitor_to_its_end(tmp_path):
    from kvedge.model.checkpoint import convert_to_i8
    from kvedge_host.boards.deploy import deployment, preload
    from kvedge_host.boards.tinyckpt import write
    model, tok = write(str(tmp_path / "m"))
    q = str(tmp_path / "tiny.i8.bin")
    convert_to_i8(model, q)
    fs = str(tmp_path / "flash")
    with tempfile.TemporaryDirectory() as build:
        preload(fs, deployment("rp2040", build, True, extra=[q, tok], march="x64"))
    stats = str(tmp_path / "stats.csv")
    with VirtualBoard("rp2040", fs=fs) as vb:
        p = kvedge("generate", "--port", vb.port, "--board", "rp2040", "--march", "x64", "--model", q,
                   "--tokenizer", tok, "--steps", "40", "--kv-dtype", "i8", "--detach")
        assert p.returncode == 0 and "started on" in p.stderr, p.stderr
        m = kvedge("monitor", "--port", vb.port, "--until", "final", "--csv", stats, "--plain", "--duration", "600",
                   timeout=700)
    assert m.returncode == 0, m.stdout[-2000:] + m.stderr[-2000:]
    rows = list(csv.DictReader(open(stats)))
    assert rows and rows[0]["event"] == "start" and rows[-1]["event"] == "final", rows
    assert [int(r["seq"]) for r in rows] == list(range(1, len(rows) + 1))
    assert int(rows[-1]["tokens_seen"]) == 40
    assert "0 lost, 0 duplicated" in m.stdout, m.stdout[-2000:]
