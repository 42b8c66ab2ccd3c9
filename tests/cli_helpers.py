"""What the command-line tests share: a program called in-process through its error guard, and the check
that a failure is one error line without a traceback."""

from experiments.cli import main_guard


def call(module, argv, capsys):
    """Run ``module.main(argv)`` as its command does; returns (exit code, stdout, stderr)."""
    code = main_guard(module.main)(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code, err):
    """The one ``error:`` line of a failed command (asserting there is exactly one, and no traceback)."""
    lines = [line for line in err.strip().splitlines() if "error:" in line]
    assert code != 0 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]
