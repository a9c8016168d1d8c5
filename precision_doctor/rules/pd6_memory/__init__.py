"""PD6xx: memory: will the job fit at load, forward, backward and step, and at which batch size."""
