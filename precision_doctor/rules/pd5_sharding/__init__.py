"""PD5xx: DeepSpeed and FSDP: precision settings, ZeRO-3 with device maps, flattening."""
