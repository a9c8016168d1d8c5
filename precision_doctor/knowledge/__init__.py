"""What the rules know of the libraries, models and hardware (signatures, families, dtypes, versions, launchers, data/*.json). Imports model/ only."""
