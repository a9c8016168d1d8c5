"""PD3xx: where the model and its inputs live: DataParallel, device maps, DDP, checkpointing, devices, live dtypes."""
