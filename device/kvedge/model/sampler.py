# Picking the next token: greedy (argmax) or seeded temperature sampling.
#
# The generator is llama2.c's xorshift64* (run.c random_u32 / random_f32), written with explicit 64-bit masks
# so CPython, MicroPython (64-bit and 31-bit small ints) and CircuitPython draw the same numbers; a seeded
# run can be compared with llama2.c's own. It works on long ints, a few per token: nothing in a hot loop.
import math

_M64 = 0xFFFFFFFFFFFFFFFF


class Rng:
    def __init__(self, seed):
        if not isinstance(seed, int) or seed <= 0:
            raise ValueError("seed must be a positive integer, got %r" % (seed,))
        self.state = seed & _M64

    def u32(self):
        s = self.state
        s ^= s >> 12
        s = (s ^ (s << 25)) & _M64
        s ^= s >> 27
        self.state = s
        return ((s * 0x2545F4914F6CDD1D) & _M64) >> 32

    def f32(self):
        """Uniform in [0, 1) with 24 bits, as llama2.c's random_f32."""
        return (self.u32() >> 8) / 16777216.0


def argmax(x, n):
    best = 0
    bv = x[0]
    for i in range(1, n):
        if x[i] > bv:
            bv = x[i]
            best = i
    return best


def softmax(x, n):
    """In place over x[0:n]."""
    mx = x[0]
    for i in range(1, n):
        if x[i] > mx:
            mx = x[i]
    s = 0.0
    for i in range(n):
        e = math.exp(x[i] - mx)
        x[i] = e
        s += e
    for i in range(n):
        x[i] = x[i] / s


class Sampler:
    """temperature 0 = greedy; otherwise softmax(logits / temperature) sampled with a seeded Rng (the logits
    buffer is overwritten with probabilities)."""

    def __init__(self, vocab_size, temperature=0.0, seed=1):
        if not (temperature >= 0):
            raise ValueError("temperature must be >= 0, got %r" % (temperature,))
        self.vocab_size = vocab_size
        self.temperature = temperature
        self.rng = Rng(seed)

    def sample(self, logits):
        n = self.vocab_size
        if self.temperature == 0:
            return argmax(logits, n)
        inv = 1.0 / self.temperature
        for i in range(n):
            logits[i] = logits[i] * inv
        softmax(logits, n)
        coin = self.rng.f32()
        cdf = 0.0
        for i in range(n):
            cdf += logits[i]
            if coin < cdf:
                return i
        return n - 1
