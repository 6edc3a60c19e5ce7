# kvedge deploy (kvedge_host.boards.deploy.check_version, native=True): with .mpy the viper kernels are machine code for
# one architecture; a board of another one refuses them.
try:
    import kvedge.kernels.viper
    print('KVNATIVE ok')
except Exception as e:
    print('KVNATIVE %s: %s' % (type(e).__name__, e))
