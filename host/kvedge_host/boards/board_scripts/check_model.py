# kvedge check's model case (kvedge_host.cli.cmd_check.check_model): teacher-forced tokens through kvedge.model.llama
# on the runtime; each position's logits back as raw float32 (LOGITS HEX), then DONE.
# Parameters (prepended by the host): PATH, the checkpoint; DTYPE, the cache dtype; MAX_TOKENS, the cache's
# length; TOKENS, the token ids.
import binascii
from kvedge.model.llama import Llama
m = Llama(PATH, kv={'align': 0, 'dtype': DTYPE, 'max_tokens': MAX_TOKENS})
for t in TOKENS:
    print('LOGITS ' + binascii.hexlify(bytes(m.forward(t))).decode())
m.close()
print('DONE')
