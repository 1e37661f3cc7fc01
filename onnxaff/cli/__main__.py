"""`python -m onnxaff.cli`, as the installed `onnxaff` command."""

from onnxaff.cli import main

main()
