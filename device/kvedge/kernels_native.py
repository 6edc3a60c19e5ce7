# @micropython.native kernels: bytecode compiled to machine code, same semantics as kernels_plain.
import micropython

OK = True


@micropython.native
def dot_i8(a, ia, b, ib, n):
    s = 0
    for i in range(n):
        s += a[ia + i] * b[ib + i]
    return s
