"""`check --live`: the supervised child that runs the script up to training."""
