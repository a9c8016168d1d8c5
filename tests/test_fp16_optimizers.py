"""PD204 says what each optimizer really does to float16 weights trained without loss scaling. Each case runs the
optimizer for real on the CPU (fp16 weights, no scaler) and checks the doctor's message for the same line: it
claims NaN exactly where the weights turn NaN."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SCRIPT = """
import torch
from transformers import AutoModelForCausalLM
from transformers.optimization import Adafactor

model = AutoModelForCausalLM.from_pretrained("gpt2", dtype=torch.float16).cuda()
opt = {optimizer}
for batch in loader:
    loss = model(**batch).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
"""

# (optimizer as the script writes it, the words PD204 must use for it)
CASES = [
    ("torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)", "update turns NaN"),
    ("torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)", "steps grow far past the learning rate"),
    ("Adafactor(model.parameters(), lr=1e-3, relative_step=False, scale_parameter=False)", "never sees them"),
    ("torch.optim.SGD(model.parameters(), lr=1e-3)", "stops updating"),
]


def _weights_after_steps(optimizer: str) -> torch.Tensor:
    """Three real steps on fp16 weights with small gradients, as a loss late in fine-tuning gives them."""
    from transformers.optimization import Adafactor  # noqa: F401  (named by the optimizer expression)

    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64).half()
    opt = eval(optimizer, {"torch": torch, "model": model, "Adafactor": Adafactor})
    x = torch.randn(32, 64).half()
    for _ in range(3):
        loss = model(x).float().pow(2).mean() * 1e-4
        loss.backward()
        opt.step()
        opt.zero_grad()
    return model.weight.detach()


@pytest.mark.parametrize("optimizer,words", CASES, ids=[c[0].split("(")[0] for c in CASES])
def test_pd204_claims_nan_exactly_where_the_optimizer_makes_it(run_check, optimizer, words):
    weights = _weights_after_steps(optimizer)
    result, _ = run_check(SCRIPT.format(optimizer=optimizer), target="a100")
    pd204 = next(f for f in result.findings if f.rule_id == "PD204")
    assert words in pd204.message, pd204.message
    claims_nan = "nan" in pd204.message.lower() or "nan at the first" in (pd204.error or "")
    assert bool(torch.isnan(weights).any()) == claims_nan, (optimizer, pd204.message, pd204.error)


def test_a_trainer_bitsandbytes_optimizer_is_not_said_to_turn_nan(run_check):
    """bitsandbytes' optimizers compute in fp32 with uint8/fp32 state (measured with bitsandbytes 0.50 on the CPU:
    AdamW8bit, PagedAdamW8bit and AdamW all leave fp16 weights finite), so the loss is in the lost gradients."""
    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float16)\n"
        "args = TrainingArguments('out', optim='adamw_bnb_8bit')\n"
        "Trainer(model=model, args=args).train()\n"
    )
    pd204 = next(f for f in run_check(code, target="a100")[0].findings if f.rule_id == "PD204")
    assert "adamw_bnb_8bit never sees them" in pd204.message
    assert "no NaN" in pd204.error and "nan at the first" not in pd204.error
