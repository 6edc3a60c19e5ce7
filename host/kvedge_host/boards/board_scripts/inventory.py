# kvedge deploy (kvedge_host.boards.deploy.inventory): every file under the managed folders DIRS (and the single files
# FILES that exist) with its SHA-256 (None without hashlib), each folder, and the filesystem's free space.
# Prints KVDIR PATH, KVFILE HEX PATH, KVFREE BLOCK_SIZE FREE_BLOCKS.
# Parameters (prepended by the host): DIRS, FILES: lists of board paths.
import os
try:
    import hashlib, binascii
except ImportError:
    hashlib = None
def _h(p):
    if hashlib is None:
        return None
    h = hashlib.sha256()
    with open(p, 'rb') as f:
        while True:
            b = f.read(512)
            if not b:
                break
            h.update(b)
    return binascii.hexlify(h.digest()).decode()
def _walk(d):
    try:
        ents = list(os.ilistdir(d))
    except OSError:
        return
    print('KVDIR ' + d)
    for e in ents:
        p = d + '/' + e[0]
        if e[1] & 0x4000:
            _walk(p)
        else:
            print('KVFILE %s %s' % (_h(p), p))
for _d in DIRS:
    _walk(_d)
for _f in FILES:
    try:
        os.stat(_f)
        print('KVFILE %s %s' % (_h(_f), _f))
    except OSError:
        pass
try:
    _s = os.statvfs('.')
    print('KVFREE %d %d' % (_s[1] or _s[0], _s[4]))
except (AttributeError, OSError):
    pass
