"""System I/O: reading files from the checked tree, writing safely, walking folders, worker pools, supervised
processes and the programs the doctor starts. Imports model/ only."""
