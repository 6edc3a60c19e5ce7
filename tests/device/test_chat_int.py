# Turns of a conversation on one cache (kvedge.chat, issue 45), on the integer pass: two turns leave exactly the
# tokens and the cache of a fresh model fed the same ids one step at a time from scratch: every token kept (each
# line's tokens one at a time and in chunks, kvedge.model.prefill), a window with sinks and an H2O policy that
# evict during turn 2.
import gc
from _chatkit import files as _files
_files()  # the model files written first, while the heap has room for the writer's code
gc.collect()
import _intmodel  # noqa: E402
_intmodel.preload()
from kvedge.model import prefill  # noqa: F401,E402 (the chunks' module, on a collected heap)
gc.collect()
from _chatkit import same_as_one_stream  # noqa: E402


def test_two_turns_on_the_integer_pass_equal_one_stream_from_scratch():
    same_as_one_stream({"dtype": "i8", "align": 0, "max_tokens": 48}, "i8")


def test_each_lines_tokens_in_chunks_equal_one_stream_from_scratch():
    same_as_one_stream({"dtype": "i8", "align": 0, "max_tokens": 48}, "i8", chunk=4)


def test_a_window_evicting_during_turn_two_equals_one_stream():
    st = same_as_one_stream({"dtype": "i8", "align": 0, "window": 12, "sinks": 2, "max_tokens": 14}, "i8",
                            max_new=(4, 9))
    assert st[0]["evictions"] == 0 and st[1]["evictions"] > 0, st


def test_an_h2o_policy_evicting_during_turn_two_equals_one_stream():
    from kvedge.evict import H2O

    def policy(c):
        return H2O(c, budget=14, recent=6, sinks=1)
    st = same_as_one_stream({"dtype": "i8", "align": 0, "max_tokens": 14}, "i8", policy, max_new=(4, 9))
    assert st[0]["evictions"] == 0 and st[1]["evictions"] > 0, st
