"""PD0xx: rules about the doctor's own configuration (suppressions)."""
