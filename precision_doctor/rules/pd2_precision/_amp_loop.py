"""What the amp_loop rules share: hand-written AMP training loops: autocast, GradScaler, clipping, casts after the
optimizer."""

from __future__ import annotations

LOOP_HEAD = (
    "import torch\nmodel = torch.nn.Linear(16, 4).cuda()\nopt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
)
