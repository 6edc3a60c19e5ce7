# kvedge: prepended to code run in a fresh session on the emulated board (kvedge_host.boards.m3board.MOUNT): the
# RAM disk at / and the current folder, with the module from /rom when the image has it.
try:
    import _m3disk as _d
except ImportError:
    _d = None
if _d:
    _d.mount()
    del _d
