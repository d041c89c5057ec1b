"""One module per `lab` command: each has `add_parser(sub)` and `run(args) -> int`, and raises
`LabError` to stop with a message (cli.main prints it). Parts come up through a backend (backends.py)."""
