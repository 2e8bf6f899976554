"""The `converge` command: its parser, its commands, and how it prints (`converge.cli`)."""
