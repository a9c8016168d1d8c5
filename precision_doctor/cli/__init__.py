"""Command line: `precision-doctor check|fix|explain|memory|snapshot|rules|rule|targets|completion|server`.

Exit codes: 0 nothing at or above --fail-on, 1 findings at or above it, 2 bad usage or unreadable
input, 3 an internal error of the doctor.

Built on argparse: the CLI framework is on the hot path of every `check` (<= 150 ms cold) and is
installed into the user's training environment, so it adds no import cost and no dependency.

Each command is a module of this package with `register(sub)` (its parser) and the function that runs it;
COMMANDS in app.py is the one place they are listed."""
