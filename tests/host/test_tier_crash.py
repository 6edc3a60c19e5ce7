"""Power cuts at every point of a paged pool's cold tier (kvedge.tier.spill on kvedge.tier.store, kind 1) while sessions are
spilled, paged in, spilled again, closed and reset, through a log small enough that compaction copies live
records forward many times: the tier reopens exactly as its last commit left it (every saved session's records
bit-identical to the rows that were fed, independent of the tier's code), or, only when the cut fell inside the
store's creation, is refused with ColdStoreError. Never half-read.

The cut images come from tests/host/test_tiered_crash.py's recorder: every truncation, write, flush and close is
logged; what a file had when it was last flushed or closed is on flash, and of each file's operations since then
any subset may have landed (each one alone missing, all missing, the last write torn halfway)."""
import struct
from array import array

from kvedge import budget
from kvedge.tier import store as coldstore
from kvedge.config import CacheConfig
from kvedge.errors import ColdStoreError
from kvedge.paged import PagedPool
from kvedge.tier.spill import ColdTier
from test_tiered_crash import _cuts, _image, _recording_open

L, H, D, B = 2, 2, 4, 2  # f32 rows, align 0: a record is the rows themselves, packed here from the seeds
CAPACITY, SLOTS = 4, 5
HEADER = budget.TIER_HEADER_BYTES + budget.POOL_INDEX_HEAD + SLOTS * budget.POOL_ENTRY_BYTES


def _cfg():
    return CacheConfig(L, H, H, D, 16, "f32", align=0)


def _value(seed, pos, layer, kv, i):
    x = (seed * 7919 + pos * 131 + layer * 17 + kv * 5 + i) % 2147483647 or 1
    x = x * 48271 % 2147483647
    return (x % 2001 - 1000) / 256.0  # exact in f32


def _feed(pool, sid, seed, n):
    for _ in range(n):
        pos = pool.length(sid)
        ks = [array("f", [_value(seed, pos, layer, 0, i) for i in range(H * D)]) for layer in range(L)]
        vs = [array("f", [_value(seed, pos, layer, 1, i) for i in range(H * D)]) for layer in range(L)]
        pool.append(sid, ks, vs)


def _record_bytes(seed, j):
    """Block j of a session fed from `seed`, as the tier must store it: per layer, K|V and KV head its B rows."""
    out = b""
    for layer in range(L):
        for kv in (0, 1):
            for h in range(H):
                for t in range(B):
                    out += struct.pack("<%df" % D, *[_value(seed, j * B + t, layer, kv, h * D + i)
                                                     for i in range(D)])
    return out


def _is_header(e):
    return e[0] == "w" and e[1].endswith((".h0", ".h1")) and len(e[3]) == HEADER


def _seq(data):
    return struct.unpack_from(coldstore.HDR, data, 0)[13]


def _expected_seq(log, upto, drop, torn):
    """Sequence number of the newest header write that fully landed (None: none did)."""
    last = {}
    for i, e in enumerate(log[:upto]):
        if i in drop:
            continue
        if e[0] == "t":
            last.pop(e[1], None)
        elif _is_header(e) and not (torn and i == upto - 1):
            last[e[1]] = _seq(e[3])
    best = None
    for s in last.values():
        if best is None or coldstore._newer(s, best):
            best = s
    return best


def _saved(model):
    """{session id: cold block count} of the model's sessions with records."""
    return {sid: n for sid, (seed, n) in model.items() if n}


def _record(path):
    """Drive a pool and its tier through spills, page-ins, closes and resets; every write recorded. Returns (log,
    entries of the creation, {seq: {sid: (seed, cold blocks)}} the state each commit names)."""
    log = []
    coldstore.open = _recording_open(log)
    try:
        pool = PagedPool(_cfg(), B, sessions=4)
        tier = ColdTier(pool, path, CAPACITY, SLOTS, fresh=True)
        created = len(log)
        model = {}  # sid -> [seed, cold blocks] (cold blocks are always a session's oldest)
        committed = {0: {}}
        seen = [0]

        def after(before):
            heads = [_seq(e[3]) for e in log[seen[0]:] if _is_header(e)]
            seen[0] = len(log)
            for s in heads[:-1]:  # compaction's copies: the records are those before the operation
                committed[s] = before
            if heads:
                committed[heads[-1]] = {k: v[1] for k, v in model.items() if v[1]}

        keep = pool.open()
        model[keep] = [11, 0]
        _feed(pool, keep, 11, 2 * B)
        hot = pool.open()
        model[hot] = [12, 0]
        _feed(pool, hot, 12, 2 * B + 1)
        before = _saved(model)
        assert tier.spill(keep, 1) == 1  # keep's block 0 stays cold all along: compaction carries it
        model[keep][1] = 1
        after(before)
        other = None
        for cycle in range(7):
            before = _saved(model)
            assert tier.spill(hot, 1) == 1
            model[hot][1] += 1
            after(before)
            if cycle % 2:
                before = _saved(model)
                assert tier.spill(hot, 1) == 1
                model[hot][1] += 1
                after(before)
            before = _saved(model)
            tier.fetch(hot)
            model[hot][1] = 0
            after(before)
            if cycle == 2:
                other = pool.open()
                model[other] = [13, 0]
                _feed(pool, other, 13, B)
                before = _saved(model)
                assert tier.spill(other, 1) == 1
                model[other][1] = 1
                after(before)
            if cycle == 5:
                before = _saved(model)
                pool.close(other)  # its record is dropped by one commit
                del model[other]
                after(before)
        before = _saved(model)
        assert tier.spill(hot, 1) == 1
        model[hot][1] = 1
        after(before)
        before = _saved(model)
        pool.reset(hot)
        model[hot] = [14, 0]
        after(before)
        assert tier.copies >= 4, tier.copies  # the log came round to live records several times
        seeds = {keep: 11, hot: 12, other: 13}  # the rows every committed record was fed from
        tier.close()
    finally:
        del coldstore.open
    return log, created, committed, seeds


def _check_reopened(path, want, seeds):
    pool = PagedPool(_cfg(), B, sessions=4)
    tier = ColdTier(pool, path, CAPACITY, SLOTS)
    try:
        seq = tier.store.seq  # the state it reopened (adopting below commits more)
        got = {sid: n for g, sid, n in tier.saved()}
        assert got == want
        c = pool.cache
        for g, sid, n in tier.saved():
            new = tier.adopt(g, sid)
            tier.fetch(new)
            i = pool._handle(new)
            for j in range(n):
                b = pool.table[i * pool.MB + j]
                data = b"".join(bytes(c.arena[off:off + m]) for off, m in tier._segs_of(b))
                assert data == _record_bytes(seeds[sid], j), (sid, j)
        return seq
    finally:
        tier.close()


def test_power_cut_anywhere_reopens_the_last_commit_or_refuses_only_at_creation(tmp_path):
    log, created, committed, seeds = _record(str(tmp_path / "cold"))
    assert len(committed) >= 20
    checked = refused = 0
    cut = tmp_path / "cut"
    for upto, drop, torn in _cuts(log):
        cut.mkdir()
        for name, data in _image(log, upto, drop, torn).items():
            (cut / name.replace("cold", "cut")).write_bytes(data)
        seq = _expected_seq(log, upto, drop, torn)
        try:
            got = _check_reopened(str(cut / "cut"), committed[seq or 0], seeds)
        except ColdStoreError as e:
            assert upto <= created, (upto, drop, torn, str(e))  # only a store whose creation was cut
            assert str(cut / "cut") in str(e) and "refusing the cold" in str(e), str(e)
            refused += 1
        else:
            assert got == (seq or 0), (upto, drop, torn, got, seq)
            checked += 1
        for f in cut.iterdir():
            f.unlink()
        cut.rmdir()
    print("tier crash: %d cut points reopened, %d refused (inside creation), %d log entries" % (checked, refused, len(log)))
    assert checked > 200, (checked, refused)


def test_removing_the_flush_before_the_commit_is_caught(tmp_path, monkeypatch):
    # the test can fail: without the flush of a block's bytes before the header that names it, a cut after the
    # header leaves a committed record that is not on flash, and the reopen refuses or misreads it
    real = coldstore.ColdStore.end_block

    def no_flush(self, k, sinks=None):
        f = self._seg((k // self.C) & 1)
        f.write(self._pack_tag(k, self.B))
        self.writes += 1

    monkeypatch.setattr(coldstore.ColdStore, "end_block", no_flush)
    log, created, committed, seeds = _record(str(tmp_path / "cold"))
    monkeypatch.setattr(coldstore.ColdStore, "end_block", real)
    bad = 0
    cut = tmp_path / "cut"
    for upto, drop, torn in _cuts(log):
        cut.mkdir()
        for name, data in _image(log, upto, drop, torn).items():
            (cut / name.replace("cold", "cut")).write_bytes(data)
        seq = _expected_seq(log, upto, drop, torn)
        try:
            _check_reopened(str(cut / "cut"), committed[seq or 0], seeds)
        except (ColdStoreError, AssertionError, OSError):
            bad += 1
        for f in cut.iterdir():
            f.unlink()
        cut.rmdir()
        if bad:
            break
    assert bad, "no cut point noticed the missing flush"
