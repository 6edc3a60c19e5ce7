# A prompt's tokens a chunk at a time through the integer forward pass (kvedge.model.pass_int): each layer takes
# the chunk's tokens together, so each weight row is read once for the chunk (streamed weights: once from the
# file), while the cache is written token by token as forward() writes it. In its own module: a run that takes
# prompts one token at a time does not hold its bytecode.
#
# Why the bits are forward()'s: the chunk's positions go to fresh slots in order (fresh_run: no eviction,
# no policy), so in layer l token t writes its rows and then attends to the slots up to its own, which hold what
# forward() would have shown it (the tokens before it in this layer; the chunk's later tokens are beyond its scan).
# Every number goes through the same kernels in the same order per token.
import gc
import sys

from kvedge.cache import POS_LIMIT
from kvedge.compat import zeros, micropython
from kvedge.model.pass_int import RES_EXP
from kvedge.kernels.words import P_WO, P_ROWS, P_XM, P_OS, P_ADD, P_RO

WORD = 8 if sys.maxsize > 0x7FFFFFFF else 4  # bytes of a pointer here
# this module's code on a 32-bit board, loaded only by a run with chunks: 3,472 bytes as armv7m .mpy on the
# emulated Cortex-M3, 3,456 as armv6m on the Cortex-M0 (gc.mem_alloc() around its import), rounded up
CODE_BYTES = 3584


def chunk_bytes(cfg, chunk, word=WORD, wdtype="i8"):
    """Bytes of a Prefill of `chunk` tokens (0 below 2: none): per token a residual (dim), a matvec output (the
    widest: max(2 hidden_dim, dim + 2 kv_dim)), a matvec input (max(dim, hidden_dim); for `wdtype` int4 rows
    pass_int4.xq_codes, whole groups of 32), RoPE angles (head_dim)
    and 5 scalars, int32 each, in arrays of their own (12 words each for the header, the GC's rounding and the
    list's slot); the lists' and scalars' headers (24 words each); and this module's code (CODE_BYTES). word:
    the runtime's pointer size (a host plans a 32-bit board with 4)."""
    if chunk < 2:
        return 0
    d, h, kvd = cfg.dim, cfg.hidden_dim, cfg.kv_dim
    if wdtype == "i4":
        from kvedge.model.pass_int4 import xq_codes
        xq = xq_codes(cfg)
    else:
        xq = max(d, h, 4)
    per = 4 * (d + max(2 * h, d + 2 * kvd, d) + xq + cfg.head_dim + 5) + 4 * 12 * word
    return chunk * per + 9 * 24 * word + CODE_BYTES * word // 4


def fresh_run(c, n):
    """How many of the next n positions (n >= 0) the KVCache c's start_token() places in their own, empty
    slots, in order, past its f32 prefix, without a policy: no token is evicted, and a position's slot is the
    position (c._natural_slot, the cache's placement rule). Here, not in kvedge.cache: only a run with chunks
    loads it (an rp2040's integer pass pays for every byte of code)."""
    pos = c.n_seen
    if c.policy is not None or pos < c.P:
        return 0
    k = 0
    while k < n:
        p = pos + k
        if p >= c.N or p >= POS_LIMIT or c._natural_slot(p) != p or c.slot_pos[p] >= 0:
            break
        k += 1
    return k


def account(cfg, chunk, forward, word=WORD, wdtype="i8"):
    """chunk_bytes() of a run with `chunk` prompt tokens a chunk on the `forward` pass, checked first
    (kvedge.model.passes.check_prefill: ValueError before anything is allocated)."""
    from kvedge.model.passes import check_prefill
    check_prefill(chunk, forward)
    return chunk_bytes(cfg, chunk, word, wdtype)


def attach(model, chunk):
    """Give a Llama on the integer pass prompts in chunks of `chunk` tokens: a Prefill (its buffers allocated
    here; count them with account()) at model.intp.pre, which generate() below feeds the prompt through.
    Returns that generate()."""
    account(model.cfg, chunk, model.forward_kind)
    model.intp.pre = Prefill(model.intp, chunk) if chunk > 1 else None
    return generate


def generate(model, tokenizer, sampler, prompt_ids, steps, emit=None, keep=True):
    """kvedge.model.llama.generate with the prompt's leading tokens in chunks when the model has them
    (attach()): the same tokens and pieces, the same cache."""
    from kvedge.model.llama import check_token, generate as one_at_a_time
    if not prompt_ids:  # what one_at_a_time checks, checked before a chunk is fed
        raise ValueError("prompt_ids must hold at least one token (BOS)")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ValueError("steps must be an int >= 0, got %r" % (steps,))
    for t in prompt_ids:
        check_token(t, model.cfg.vocab_size)
    pre = getattr(getattr(model, "intp", None), "pre", None)
    pos = pre.prompt(prompt_ids, steps, emit, tokenizer) if pre is not None else 0
    return one_at_a_time(model, tokenizer, sampler, prompt_ids[pos:] if pos else prompt_ids, steps - pos, emit,
                         keep)


class Prefill:
    """Buffers of T tokens beside a Forward (f), and the chunk's steps."""

    def __init__(self, f, T):
        d, hd, zw, qw = f.d, f.hd, len(f.z), len(f.xq)
        # per token: max |x| (tv[0:T]), its matvec input's scale mantissa (tv[T:2T]) and exponent (tv[2T:3T]),
        # its slot (tv[3T:4T]), the last matvec's max |out| (tv[4T:5T])
        self.tv = zeros("i", 5 * T)
        # an array per token, not one per kind: a chunk of 8 made one 11 KB block, which the emulated rp2350's heap
        # (a measured plan's, fragmented by the model's small objects) did not have in one piece
        self.xs = [zeros("i", d) for _ in range(T)]  # residuals
        self.zs = [zeros("i", zw) for _ in range(T)]  # matvec outputs
        self.xqs = [zeros("i", qw) for _ in range(T)]  # matvec inputs
        self.css = [zeros("i", hd) for _ in range(T)]  # RoPE cos/sin of each position
        self.f = f
        self.T = T
        self.clean = False  # the last run's layers left the heap as they found it: the next runs them locked

    def room(self, n):
        """How many of the next n tokens run() can take at once: at most T, positions the cache places in order
        into fresh slots, no policy, not a tiered cache (0: none)."""
        c = self.f.m.cache
        if not c.chunks:
            return 0
        return fresh_run(c, n if n < self.T else self.T)

    def prompt(self, ids, steps, emit, tokenizer):
        """kvedge.model.llama.generate's prompt: its tokens before the last one, before a BOS (where generate
        stops) and below `steps`, in chunks through take() (the f32 prefix's positions one at a time, as
        forward() takes them), their pieces emitted as generate emits them. Returns how many it fed: generate
        goes on from there (a token at a time once no fresh slots are left)."""
        end = 0
        while end < len(ids) - 1 and end < steps and ids[end + 1] != 1:  # 1: BOS
            end += 1
        c = self.f.m.cache
        pos = 0
        while c.chunks and pos < end:
            n = self.take(ids, pos, end - pos)
            if n == 0:
                if c.n_seen >= c.P or c.n_seen >= c.N:
                    break  # no fresh slots: generate's loop goes on a token at a time
                self.f.m.forward(ids[pos])  # the f32 prefix
                n = 1
            if emit is not None:
                for i in range(pos, pos + n):
                    emit(tokenizer.piece(ids[i], ids[i + 1]))
            pos += n
        return pos

    def take(self, ids, i0, n):
        """run() as many of ids[i0:i0+n] as room() allows, each id checked first; returns how many (0: none,
        forward() takes the next one: a single token, no fresh slots, a policy, a tiered cache)."""
        n = self.room(n)
        if n < 2:
            return 0
        from kvedge.model.llama import check_token
        v = self.f.m.cfg.vocab_size
        for i in range(i0, i0 + n):
            check_token(ids[i], v)
        self.run(ids, i0, n)
        return n

    def run(self, tokens, i0, n):
        """tokens[i0:i0+n] (ids the caller checked) at the cache's next n positions, 2 <= n <= room(n): the
        same bits as n forward() calls, without their logits (the prompt's last token goes through forward())."""
        if n < 2 or n > self.room(n):
            raise ValueError("prefill of %d tokens: room for %d" % (n, self.room(n)))
        f = self.f
        k = f.k
        w = f.w
        cache = f.m.cache
        T = self.T
        tv = self.tv
        xs, zs, xqs, css = self.xs, self.zs, self.xqs, self.css
        for t in range(n):
            pos = cache.start_token()
            tv[3 * T + t] = cache.cur_slot
            tv[t] = f._embed(tokens[i0 + t], xs[t])
            k.q_angles(f.fq, f.sin, css[t], pos)
        d = f.d
        h = f.h
        hd = f.hd
        nrot = d + f.kvd
        hp, ap, ip, sig = f.hp, f.ap, f.ip, f.sig
        codes, scales, qc, qs, oq, oe = f.codes, f.scales, f.qc, f.qs, f.oq, f.oe
        z1, q1 = f.z, f.xq  # forward()'s own buffers, given back at the end
        # the layers with the heap locked once a run showed they allocate nothing (Forward.step's reason: frames
        # then go on the C stack; unlocked, a 64-token prompt on the emulated Cortex-M3 took 18 % more)
        lock = self.clean and f.m._lockable
        if lock:
            micropython.heap_lock()
        else:
            a = gc.mem_alloc() if f.m._lockable else 0
        try:
            for l in range(f.m.cfg.n_layers):
                # attention block
                self._norms(n, w.g_att[l])
                mat = w.wqkv[l]
                self._mv(mat, zs, n, 0)
                for t in range(n):
                    z = zs[t]
                    k.q_rope(z, css[t], nrot, hd)
                    hp[2] = mat.exp + tv[2 * T + t]
                    k.q_heads(z, codes, scales, hp)
                    slot = tv[3 * T + t]
                    cache.store_q8(l, codes, scales, slot)
                    cache.attend_q8(l, qc, qs, oq, oe, slot + 1)  # the slots up to its own
                    B = k.q_align(oq, oe, d, ap)
                    f.xq = xqs[t]
                    f._quant(oq, d, B, ap[2], f.cd)
                    tv[T + t] = f.xm
                    tv[2 * T + t] = f.xe
                self._mv(w.wo[l], xs, n, 1)
                # feed-forward block
                self._norms(n, w.g_ffn[l])
                mat = w.w13[l]
                self._mv(mat, zs, n, 0)
                for t in range(n):
                    e13 = mat.exp + tv[2 * T + t]
                    ip[0] = tv[4 * T + t]
                    ip[1] = e13 + 12
                    B = k.q_swiglu(zs[t], sig, h, ip)
                    f.xq = xqs[t]
                    f._quant(zs[t], h, B, 2 * (e13 + ip[0]), f.ch)
                    tv[T + t] = f.xm
                    tv[2 * T + t] = f.xe
                self._mv(w.w2[l], xs, n, 1)
        finally:
            if lock:
                micropython.heap_unlock()
            f.z, f.xq = z1, q1
        if not lock and f.m._lockable:
            self.clean = gc.mem_alloc() == a
        f.clean = 0

    def _norms(self, n, g):
        """Forward._norm() of each of the n residuals (max |x| in tv[t]) into its own matvec input."""
        f = self.f
        T = self.T
        tv = self.tv
        for t in range(n):
            f.z = self.zs[t]
            f.xq = self.xqs[t]
            f._norm(self.xs[t], tv[t], g)
            tv[T + t] = f.xm
            tv[2 * T + t] = f.xe

    def _mv(self, mat, outs, n, res):
        """Forward._mv() for each of the n tokens: outs[t] (+)= mat . xqs[t], into the residual when res (its max
        |x| into tv[t]), else max |out| into tv[4T + t]. A streamed matrix's rows are read once for all n."""
        f = self.f
        k = f.k
        p = mat.p
        T = self.T
        tv = self.tv
        xqs = self.xqs
        at = 0 if res else 4 * T
        os0 = RES_EXP - mat.exp if res else 0
        p[P_ADD] = res
        if mat.q4:  # int4 rows (kvedge.model.pass_int4)
            return mat.prefill(f, p, tv, T, n, res, os0, at, xqs, outs)
        p[P_WO] = 0
        if mat.codes is not None and not mat.parts:  # in RAM: the fused rows in one buffer
            p[P_RO] = 0
            p[P_ROWS] = mat.rows
            for t in range(n):
                p[P_XM] = tv[T + t]
                p[P_OS] = os0 - tv[2 * T + t] if res else 0
                tv[at + t] = k.q_mv(mat.codes, xqs[t], outs[t], p)
            return
        for t in range(n):
            tv[at + t] = 0
        if mat.codes is not None:  # in place from the mapped file: each part where it lies
            for part in mat.parts:
                p[P_WO] = part[0]
                p[P_RO] = part[1]
                p[P_ROWS] = part[2]
                for t in range(n):
                    p[P_XM] = tv[T + t]
                    p[P_OS] = os0 - tv[2 * T + t] if res else 0
                    b = k.q_mv(mat.codes, xqs[t], outs[t], p)
                    if b > tv[at + t]:
                        tv[at + t] = b
            return
        buf = f.wbuf
        for part in mat.parts:  # (file offset, first row, rows), kept since load
            r = 0
            while r < part[2]:
                nr = f._rows(mat, part, r)  # read once, multiplied into each token's input
                for t in range(n):
                    p[P_XM] = tv[T + t]
                    p[P_OS] = os0 - tv[2 * T + t] if res else 0
                    b = k.q_mv(buf, xqs[t], outs[t], p)
                    if b > tv[at + t]:
                        tv[at + t] = b
                r += nr
