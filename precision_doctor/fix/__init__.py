"""`fix`: verified edits, the interactive session and its undo. Imports every layer below the command line."""
