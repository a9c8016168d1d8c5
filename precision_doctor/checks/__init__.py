"""Every check module; importing this package registers their rules."""

from . import amp_loop, loading, precision  # noqa: F401
