"""The `umind` command. Each subcommand is a thin shell over the library; errors end as one readable line.

Expected failures (bad input, a missing model folder) are ValueError or OSError subclasses raised with a message
that names the problem; they exit with status 2 and no traceback. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError) as exc:
        print(f"umind {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"umind {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
