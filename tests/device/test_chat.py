# Turns of a conversation on one cache (kvedge.chat, issue 45), on the float pass: two turns leave exactly the
# tokens and the cache of a fresh model fed the same ids one step at a time from scratch, every token kept and with
# a window that evicts during turn 2. The integer pass: test_chat_int.py (a file each: a board-sized heap).
import gc
from kvedge.model import llama  # noqa: F401 (the runner's large modules first, each on a collected heap)
gc.collect()
from kvedge import attention  # noqa: F401,E402
gc.collect()
from kvedge.model import pass_float  # noqa: F401,E402
gc.collect()
from _support import preload_floats  # noqa: E402
preload_floats()
from _chatkit import same_as_one_stream  # noqa: E402


def test_two_turns_on_the_float_pass_equal_one_stream_from_scratch():
    st = same_as_one_stream({"align": 0, "max_tokens": 48})
    assert st[1]["tokens_seen"] > st[0]["tokens_seen"] > 0 and st[1]["evictions"] == 0


def test_a_window_evicting_during_turn_two_equals_one_stream_on_the_float_pass():
    st = same_as_one_stream({"align": 0, "window": 12, "sinks": 2, "max_tokens": 14}, max_new=(4, 9))
    assert st[0]["evictions"] == 0 and st[1]["evictions"] > 0, st
