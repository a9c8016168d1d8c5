"""The doctor's system I/O: reading files from the checked tree, writing safely, walking folders, worker pools, supervised processes, programs it starts. Imports model/ only."""
