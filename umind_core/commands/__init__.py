"""One module per `umind` subcommand; `umind_core.cli` finds them here.

Each module defines NAME, HELP, `add_arguments(parser)` and `run(args) -> int`, and imports heavy libraries
inside `run`, so `umind --help` stays fast.
"""
