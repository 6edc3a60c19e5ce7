# A ROMFS image (MicroPython's read-only, memory-mappable filesystem, extmod/vfs_rom.c) written in memory, for
# tests that mount one with vfs.VfsRom: records are varint kind, varint length, payload; a file is its name and
# a verbatim data record. `skew` shifts the file's data off 4-byte alignment (leading 0x80 bytes are zero
# continuation digits of the length varint, as mpremote pads the header).
def _uint(v, width=0):
    out = [v & 0x7F]
    v >>= 7
    while v:
        out.insert(0, 0x80 | (v & 0x7F))
        v >>= 7
    while len(out) < width:
        out.insert(0, 0x80)
    return bytes(out)


def image(name, path, skew=0, into=None):
    """A bytearray holding the file at `path` as the top-level file `name`, its data at a multiple of 4 plus
    `skew` from the image's start (read straight into the image: one copy in RAM). into: a buffer reserved
    beforehand to build it in (a fragmented heap may have no block of the image's size left); then a memoryview
    of its first bytes is returned."""
    import os
    size = os.stat(path)[6]
    name = name.encode()
    head = _uint(len(name)) + name + _uint(2)
    pad = 0
    while True:
        rec = head + _uint(size, 4 + pad)
        frec = _uint(5) + _uint(len(rec) + size, 4)
        top = b"\xd2\xcd\x31" + _uint(len(frec) + len(rec) + size, 4)
        at = len(top) + len(frec) + len(rec)
        if at % 4 == skew % 4:
            break
        pad += 1
    at = len(top) + len(frec) + len(rec)
    if into is not None:
        if len(into) < at + size:
            raise ValueError("image of %d bytes, buffer of %d" % (at + size, len(into)))
        img = memoryview(into)[:at + size]
    else:
        img = bytearray(at + size)
    img[:at] = top + frec + rec
    with open(path, "rb") as f:
        f.readinto(memoryview(img)[at:])
    return img
