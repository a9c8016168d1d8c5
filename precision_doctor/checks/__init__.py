"""Every check module; importing this package registers their rules."""

from . import amp_loop, distributed, hardware, launch, live, loading, meta, placement, precision, quantization  # noqa: F401,E501
