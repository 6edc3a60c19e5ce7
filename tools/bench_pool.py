#!/usr/bin/env python3
"""Shared prefixes in a PagedPool (issue 45, item 4): the bytes N conversations starting with the same prompt hold
when they share its blocks (one session holds the prompt, N forks of it add their own tokens) beside N sessions each
holding a copy, and what a fork and the first write past a shared part cost.

  .venv/bin/python tools/bench_pool.py [--runtime unix|cpython|wasm|m3|circuitpython] [--board rp2350]
                                       [--sessions 4] [--prompt 64] [--own 16] [--block 16] [--dtype f32|f16|i8]

Shape: stories260K's attention (5 layers, 8 heads, 4 KV heads, head_dim 8), align 0. Bytes held = the pool's
blocks in use x one block's arena bytes (PagedPool.held_bytes), counted after the run in a pool sized by
kvedge.poolsizes' formula (pool_shared_blocks): a formula short of a block fails the run (CacheFullError), one
over it shows as blocks held below the pool's size; either fails. The 4 copies' 128 KB arena needs the rp2350's
heap on m3. On m3 the costs are Cortex-M3 instructions (qemu -icount), elsewhere host microseconds."""
import argparse
import json
import sys

import _benchkit
from _benchkit import TIMING

from kvedge import poolsizes

SHAPE = (5, 8, 4, 8)  # layers, heads, kv_heads, head_dim

DEVICE_CODE = TIMING + r"""
import json
from kvedge.compat import zeros
from kvedge.config import CacheConfig
from kvedge.paged import PagedPool
from kvedge.poolsizes import pool_shared_blocks

L, H, KVH, D, B, N, P, OWN, DT = ARGS
n = KVH * D
ks = [zeros("f", n) for _ in range(L)]
vs = [zeros("f", n) for _ in range(L)]


def feed(pool, sid, seed, count):
    for t in range(count):
        for layer in range(L):
            for i in range(n):
                x = ((seed * 31 + t * 7 + layer * 3 + i) % 17 - 8) / 8.0
                ks[layer][i] = x
                vs[layer][i] = -x
        pool.append(sid, ks, vs)


def bench(shared):
    gc.collect()
    NB = pool_shared_blocks(N, P, OWN, B, shared)  # a pool just large enough: the figures are its blocks in use
    pool = PagedPool(CacheConfig(L, H, KVH, D, NB * B, DT, align=0), B, sessions=N + 1)
    fork_us = cow_us = -1
    if shared:
        story = pool.open()
        feed(pool, story, 1, P)
        t0 = now()
        forks = [pool.fork(story) for _ in range(N)]
        fork_us = since(t0) // N
        t0 = now()
        feed(pool, forks[0], 2, 1)  # the first write past the shared part (a copy when P % B)
        cow_us = since(t0)
        for k in range(1, N):
            feed(pool, forks[k], 2 + k, OWN)
        feed(pool, forks[0], 2, OWN - 1)
    else:
        for k in range(N):
            feed(pool, pool.open(), 2 + k, P + OWN)
    pool.check()
    print(json.dumps({"shared": shared, "blocks": pool.blocks_held(), "held_bytes": pool.held_bytes(),
                      "arena": len(pool.cache.arena), "n_blocks": NB, "fork_us": fork_us, "first_write_us": cow_us,
                      "tokens": pool.tokens()}))


bench(True)
bench(False)
"""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _benchkit.add_arguments(ap)
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=64, help="tokens every session starts with (default 64)")
    ap.add_argument("--own", type=int, default=16, help="tokens each session adds (default 16, at least 1)")
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--dtype", default="i8", choices=("f32", "f16", "i8"))
    a = ap.parse_args(argv)
    for name in ("sessions", "prompt", "own", "block"):
        if getattr(a, name) < (0 if name == "prompt" else 1):
            print("bench_pool: --%s must be >= %d, got %d" % (name, 0 if name == "prompt" else 1, getattr(a, name)))
            return 2
    args = SHAPE + (a.block, a.sessions, a.prompt, a.own, a.dtype)
    heap = _benchkit.heap_for(a.runtime, a.board, 8 * 1024 * 1024)
    rc, out = _benchkit.run(a.runtime, "ARGS = %r\n" % (args,) + DEVICE_CODE, heap)
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if rc or len(rows) != 2:
        print(out)
        return 1
    print(_benchkit.describe(a.runtime, a.board, heap))
    L, H, KVH, D = SHAPE
    block_bytes = poolsizes.pool_block_bytes(L, KVH, D, a.block, a.dtype, 0)
    unit = "instructions" if _benchkit.is_m3(a.runtime) else "us"
    print("%d sessions, each a %d-token prompt + %d tokens of its own; %s blocks of %d tokens (%d bytes each)"
          % (a.sessions, a.prompt, a.own, a.dtype, a.block, block_bytes))
    bad = 0
    for r in rows:
        want = poolsizes.pool_shared_blocks(a.sessions, a.prompt, a.own, a.block, shared=r["shared"])
        ok = (r["blocks"] == want == r["n_blocks"] and r["held_bytes"] == want * block_bytes
              and r["arena"] == r["n_blocks"] * block_bytes)
        bad += not ok
        label = "shared prompt (1 holder + %d forks)" % a.sessions if r["shared"] else "%d copies" % a.sessions
        print("  %-34s %3d blocks  %8s bytes held   formula %3d blocks %8s bytes  %s"
              % (label, r["blocks"], format(r["held_bytes"], ","), want, format(want * block_bytes, ","),
                 "ok" if ok else "MISMATCH"))
    shared, copies = rows[0], rows[1]
    print("  saved: %s bytes (%.0f%% of the copies)" % (format(copies["held_bytes"] - shared["held_bytes"], ","),
                                                         100.0 * (copies["held_bytes"] - shared["held_bytes"])
                                                         / copies["held_bytes"]))
    cost = _benchkit.instructions(a.runtime, shared["fork_us"]) or shared["fork_us"]
    first = _benchkit.instructions(a.runtime, shared["first_write_us"]) or shared["first_write_us"]
    print("  a fork: %s %s; the first token past the shared part (append, %s): %s %s"
          % (format(cost, ","), unit, "a block copied" if a.prompt % a.block else "a new block", format(first, ","),
             unit))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
