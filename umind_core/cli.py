"""The `umind` command. Each subcommand is a thin shell over the library; errors end as one readable line.

Expected failures (bad input, a missing model folder) are ValueError or OSError subclasses raised with a message
that names the problem; they exit with status 2 and no traceback. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import os
import sys


def command_modules():
    """The subcommand modules in umind_core.commands, sorted by name."""
    import importlib
    import pkgutil

    from . import commands

    mods = [importlib.import_module(f"{commands.__name__}.{info.name}")
            for info in pkgutil.iter_modules(commands.__path__) if not info.name.startswith("_")]
    return sorted(mods, key=lambda m: m.NAME)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="umind", description="UMind ultrasound vision-language model tools")
    sub = parser.add_subparsers(dest="command", required=True)
    for mod in command_modules():
        cmd = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.__doc__)
        mod.add_arguments(cmd)
        cmd.set_defaults(func=mod.run)
    return parser


#: how long a finished command waits for a background decode build under way before it exits anyway
BUILD_STOP_S = 10.0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = int(args.func(args) or 0)
    except (ValueError, OSError) as exc:
        print(f"umind {args.command}: error: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print(f"umind {args.command}: interrupted", file=sys.stderr)
        code = 130
    _stop_background_work(args.command, code)
    return code


def _stop_background_work(command: str, code: int) -> None:
    """Background decode builds end before the interpreter does: the queue is dropped and a build under way gets
    `BUILD_STOP_S` to finish (`stop_all_builders`). A torch.compile still running when Python finalizes is killed
    mid-C++ and the process aborted with exit 134 after its work had succeeded (3 of 9 runs of `umind infer` on a
    loaded machine); one still running after the wait (a max-autotune build takes minutes there) is cut off by a
    hard exit with the command's own status, after the output is flushed (results are written atomically)."""
    if "umind_core.inference.step_builder" not in sys.modules:
        return  # no model was loaded: nothing runs in the background
    from umind_core.inference.step_builder import stop_all_builders

    if not stop_all_builders(timeout=BUILD_STOP_S):
        print(f"umind {command}: stopped a background decode build (it only speeds up later answers)",
              file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
