"""``python -m experiments``: the commands (``experiments.commands``); ``python -m experiments NAME ...``
runs one."""

from __future__ import annotations

import sys

from experiments.cli import main_guard
from experiments.commands import COMMANDS


def main(argv: list[str] | None = None) -> int:
    """List the commands, or run the one ``argv`` names with the rest of it."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        width = max(len(name) for name in COMMANDS)
        print("usage: python -m experiments COMMAND [options]  (COMMAND --help: its options)\n")
        print("\n".join(f"  {name:<{width}}  {command.summary}" for name, command in COMMANDS.items()))
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"error: no command {name[:40]!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return main_guard(COMMANDS[name].main())(rest)


if __name__ == "__main__":
    sys.exit(main())
