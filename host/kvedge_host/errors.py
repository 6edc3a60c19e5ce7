"""The host's one error for bad input: every command prints it as one line naming the file and the problem, and
exits 2 (kvedge_host.cli.main). Below the CLI (the planner, the plan runner) so that nothing there imports the CLI."""


class UserError(Exception):
    """A problem with the user's input: printed as one line, exit status 2."""
