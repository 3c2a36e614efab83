"""``python -m lowwater.cli``."""

from lowwater.cli import main

main()
