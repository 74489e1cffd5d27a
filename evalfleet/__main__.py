"""``python -m evalfleet``: the same as the ``evalfleet`` command."""

from evalfleet.cli import main

main(prog_name="evalfleet")
