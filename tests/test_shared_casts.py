"""An evaluation helper that casts the model it is given, or a shallow copy of it, casts the trained model: a
shallow copy of a module shares its parameters. A deep copy does not."""

import copy

import pytest
import torch

LOOP = (
    "import copy\nimport torch\n\n"
    "model = torch.nn.Linear(512, 512).cuda()\n"
    "opt = torch.optim.AdamW(model.parameters(), lr=1e-4)\n"
    "scaler = torch.amp.GradScaler('cuda')\n\n\n"
    "def evaluate(net):\n"
    "    {cast}\n"
    "    with torch.no_grad():\n"
    "        return net(torch.randn(8, 512, device='cuda').half()).mean()\n\n\n"
    "for epoch in range(3):\n"
    "    for _ in range(100):\n"
    "        with torch.autocast('cuda', dtype=torch.float16):\n"
    "            loss = model(torch.randn(8, 512, device='cuda')).pow(2).mean()\n"
    "        scaler.scale(loss).backward()\n"
    "        scaler.step(opt)\n"
    "        scaler.update()\n"
    "        opt.zero_grad()\n"
    "    evaluate(model)\n"
)


@pytest.mark.parametrize(
    "cast,fires",
    [
        ("net.half()", True),
        ("net = copy.copy(net).half()", True),
        ("net = copy.deepcopy(net).half()", False),
    ],
    ids=["in-place", "shallow-copy", "deep-copy"],
)
def test_an_eval_helpers_cast_reaches_the_trained_model_unless_it_copies_deeply(run_check, cast, fires):
    result, _ = run_check(LOOP.format(cast=cast), target="a100")
    assert ("PD203" in {f.rule_id for f in result.findings}) is fires


def test_a_shallow_copy_of_a_module_shares_its_parameters():
    """What the doctor assumes, on the installed torch."""
    model = torch.nn.Linear(4, 4)
    copy.copy(model).half()
    assert model.weight.dtype == torch.float16
    model = torch.nn.Linear(4, 4)
    copy.deepcopy(model).half()
    assert model.weight.dtype == torch.float32
