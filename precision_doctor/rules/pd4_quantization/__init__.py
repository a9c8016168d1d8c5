"""PD4xx: quantized models: casts, compute dtypes, k-bit preparation, adapters, bitsandbytes keywords."""
