"""The command line: one module per command group, registered in :data:`main.COMMANDS`."""
