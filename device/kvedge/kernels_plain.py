# Plain-Python kernels: the reference for the viper/native ones and the path CPython and CircuitPython take.
OK = True


def dot_i8(a, ia, b, ib, n):
    """Integer dot product of n int8 values: a[ia:ia+n] . b[ib:ib+n] (array('b') or signed buffers)."""
    s = 0
    for i in range(n):
        s += a[ia + i] * b[ib + i]
    return s
