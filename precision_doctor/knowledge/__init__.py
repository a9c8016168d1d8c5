"""What the rules know of the libraries, models and hardware: signatures, model families, dtypes, versions,
launchers, Lightning's connectors and the tables in data/. Imports model/ only."""
