from .cli.program import entry

entry()
