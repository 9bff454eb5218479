"""`python -m ui`: serve the live meeting page."""

from ui.cli import main

main()
