# kvedge deploy (kvedge_host.boards.deploy.sync): runs after the files were sent. With OK, each new file PATH + TMP is
# renamed over PATH (removed first: FAT's rename does not replace); without, every new file is removed.
# Parameters (prepended by the host): PATHS, a list of board paths; OK, a bool; TMP, the suffix of a new file.
import os
for _p in PATHS:
    if OK:
        try:
            os.remove(_p)
        except OSError:
            pass
        os.rename(_p + TMP, _p)
    else:
        try:
            os.remove(_p + TMP)
        except OSError:
            pass
print('KVSWAP')
