# kvedge sim on the emulated board (kvedge_host.boards.m3sim.PRIME_CODE, after m3_mount): runs in the raw REPL after
# each reset: boot.py, and whether there is a main.py.
import os
if 'boot.py' in os.listdir():
    exec(open('boot.py').read())
print('KVPRIMED', 'main.py' in os.listdir())
