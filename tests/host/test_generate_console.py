"""`kvedge generate --port` prints the generated text on stdout and the board's stats lines on stderr as they
arrive; on a terminal both land on one screen, where a stats line must start its own line, never glued to the
text before it (issue 23), and stdout must keep the text exactly as generated."""
import io

from kvedge_host.cli.cmd_generate import Console


class Screen:
    """Both streams written to one screen, as a terminal shows them; and stdout alone."""

    def __init__(self):
        self.screen = io.StringIO()
        self.stdout = io.StringIO()
        parent = self

        class Out:
            def write(self, s):
                parent.screen.write(s)
                parent.stdout.write(s)

            def flush(self):
                pass

        class Err:
            def write(self, s):
                parent.screen.write(s)

            def flush(self):
                pass

        self.out, self.err = Out(), Err()


def test_stats_lines_start_a_line_and_stdout_keeps_the_text():
    s = Screen()
    c = Console(s.out, s.err)
    pieces = ["Once", " upon", " a", " time", ",", " there", "\n", "Lily"]
    stats = {1: 'KVSTATS {"seq":1}', 3: 'KVSTATS {"seq":2}', 6: 'KVSTATS {"seq":3}', 7: 'KVSTATS {"seq":4}'}
    for i, p in enumerate(pieces):
        c.text(p)
        if i in stats:
            c.stats(stats[i])
    assert s.stdout.getvalue() == "".join(pieces)  # the text, untouched
    lines = s.screen.getvalue().split("\n")
    for line in stats.values():
        assert line in lines, (line, lines)   # each stats line whole, on a line of its own
    # by hand: "Once upon" then the first stats line, " a time" then the second, ", there\n" (the text's own
    # newline: nothing added), the third, "Lily", the fourth
    assert s.screen.getvalue() == ('Once upon\nKVSTATS {"seq":1}\n a time\nKVSTATS {"seq":2}\n, there\n'
                                   'KVSTATS {"seq":3}\nLily\nKVSTATS {"seq":4}\n')
