"""Every check module; importing this package registers their rules."""

from . import amp_loop, hardware, launch, loading, meta, precision  # noqa: F401
