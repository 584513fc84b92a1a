"""One runner per command: the library core each CLI command calls."""
