"""``python -m netcheck`` runs the command line."""

from netcheck.cli import main

main()
