# kvedge deploy (kvedge_host.boards.deploy.check_version): import the package afresh and print its version.
import sys
for _k in list(sys.modules):
    if _k == 'kvedge' or _k.startswith('kvedge.'):
        del sys.modules[_k]
import kvedge
print('KVVERSION', kvedge.__version__)
