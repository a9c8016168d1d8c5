"""PD203 optimizer-state-dtype-mismatch: The model is cast to another dtype between optimizer steps: its fp32 moment
state meets bf16 grads."""

from __future__ import annotations

from collections import Counter

from ...derive import Setup, call_evidence, dtype_of_cast, optimizer_steps
from ...derive.live import live_evidence
from ...knowledge import dtypes
from ...model.facts import Call, ScriptFacts
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, LogSignature, rule
from ._amp_loop import LOOP_HEAD


def _between_steps(at: Call, steps: list[Call], repeated: set[str] = frozenset()) -> str:
    """Does `at` run after one optimizer step and before another: "always", "conditional" (a cast under a condition
    in a loop that steps, before the step: `if epoch == 1:` crashes, `if step == 0:` casts before the state
    exists), or "" (never)? The state is created, in the parameters' dtype of the time, at the first step: a cast
    before it, or after the last, never meets state of another dtype. In a loop that steps, a cast after the step
    runs before the next iteration's step; an unconditional one before the step repeats the first iteration's
    cast, which changed nothing the state saw; a cast in another loop (an evaluation after training) meets a step
    only if one comes after it. In a function that is entered again (`repeated`: called in a loop, or twice), a
    cast after its steps meets the next call's."""
    same = [s for s in steps if s.location.path == at.location.path and s.scope == at.scope]
    line = at.location.line
    earlier = [s for s in same if s.location.line < line]
    in_its_loop = [s for s in same if set(s.loops) & set(at.loops)]
    if (
        any(s.location.line < line for s in in_its_loop)
        or (earlier and any(s.location.line > line for s in same))
        or (earlier and at.scope in repeated)
    ):
        return "always"
    if at.in_branch and any(s.location.line > line for s in in_its_loop):
        return "conditional"
    return ""


def _pd203(cast: Call, opt: Call, d: str, what: str, via: Call | None = None, when: str = "always") -> Draft:
    evidence = [call_evidence(opt, "optimizer created: its state follows the parameters' dtype at the first step")]
    if via is not None:
        runs = (
            f"{via.callee}() casts {what}"
            if "." in via.callee and what.startswith("self.")
            else f"{what} passed to {via.callee}()"
        )  # (a method is recorded by its class: "Loop.evaluate")
        evidence.append(call_evidence(via, runs + (" inside the loop" if via.in_loop else "")))
    evidence.append(call_evidence(cast, f"cast to {d} in place"))
    state = "Adam's fp32 moments" if "adam" in opt.callee.lower() else f"the fp32 state of {opt.callee}"
    fix = Fix(
        "cast before creating the optimizer (or re-create it after), or cast a copy "
        "(`copy.deepcopy(model)`) for evaluation",
        applicability=Applicability.UNSAFE,
    )
    if when == "conditional":
        test = (via or cast).branches[-1].test if (via or cast).branches else "its condition"
        return Draft(
            f"{what} is cast to {d} in the training loop under `{test}`: if that holds after the first "
            f"step, {state} created then meet{'s' * ('Adam' not in state)} {d} parameters and gradients (on "
            f"the first iteration only, before any step, the state is created in {d} and nothing fails)",
            evidence=tuple(evidence),
            fix=fix,
            severity="warning",
            confidence="likely",
        )
    return Draft(
        f"{what} is cast to {d} after the optimizer has stepped: {state} meet{'s' * ('Adam' not in state)} "
        f"{d} parameters and gradients",
        evidence=tuple(evidence),
        fix=fix,
    )


@rule(
    "PD203",
    "optimizer-state-dtype-mismatch",
    severity="error",
    phase="later-steps",
    summary="The model is cast to another dtype between optimizer steps: its fp32 moment state meets bf16 grads.",
    what="`model.to(torch.bfloat16)` / `.bfloat16()` / `.half()` after the optimizer that holds its parameters has "
    "stepped, with more steps to come: in the training loop after the step, between two training phases, or "
    "in a helper (an eval or save routine) that casts the model it is given, or in a method of a trainer class "
    "that casts `self.model` between the epochs its `fit()` runs. A cast after the last step is not "
    "this failure, nor one before the first: that is the dtype the model trains in (PD204, PD212 judge it).",
    why="`Module.to(dtype)` swaps `param.data` in place, so the optimizer keeps the same parameters but the moment "
    "buffers it created at its first step, in the dtype the parameters had then, are not converted; the next "
    "step's `exp_avg.lerp_(grad)` requires one dtype.",
    error="RuntimeError: expected dtype float for `end` but got dtype c10::BFloat16",
    fix="Keep params, grads and optimizer state in one dtype: fp32 master weights with autocast for bf16 compute; "
    "cast before creating the optimizer, or re-create the optimizer after the cast; evaluate a copy "
    "(`copy.deepcopy(model).to(torch.bfloat16)`) instead of casting the trained model in place.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: where to cast depends on the script's intent.",
    log=LogSignature(
        patterns=(
            r"expected dtype c10::BFloat16 for `?end`? but got dtype float",
            r"Tensors of the same index must be on the same device and the same dtype",
        )
    ),
    fires=[
        Example(
            LOOP_HEAD + "for x in loader:\n    model(x).sum().backward()\n    opt.step()\n"
            "model = model.to(torch.bfloat16)  # phase 2 in bf16\nfor x in loader:\n"
            "    model(x.bfloat16()).sum().backward()\n    opt.step()\n",
            note="a second phase after a cast: the first phase's fp32 state meets bf16 gradients",
        ),
        Example(
            LOOP_HEAD + "def evaluate(m):\n    m.to(torch.bfloat16)\n    return m(torch.randn(2, 16))\n"
            "for step, x in enumerate(loader):\n    model(x).sum().backward()\n    opt.step()\n"
            "    if step % 400 == 0:\n        evaluate(model)\n",
            note="an eval helper casts the model in place",
        ),
    ],
    silent=[
        Example(
            "import torch\nmodel = torch.nn.Linear(16, 4).cuda().to(torch.bfloat16)\n"
            "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\nfor x in loader:\n"
            "    model(x).sum().backward()\n    opt.step()\n"
        ),
        Example(
            LOOP_HEAD + "model = model.to(torch.bfloat16)\nfor x in loader:\n"
            "    model(x).sum().backward()\n    opt.step()\n",
            note="cast before the first step: the state is created in bf16 (no master copy: PD212's concern)",
        ),
        Example(
            LOOP_HEAD + "for x in loader:\n    model(x).sum().backward()\n    opt.step()\n"
            "model.to(torch.bfloat16)\ntorch.save(model.state_dict(), 'model.pt')\n",
            note="cast after the last step, to save: no step meets the state again",
        ),
        Example(
            LOOP_HEAD + "def evaluate(m):\n    import copy\n    m = copy.deepcopy(m)\n    return m\n"
            "for step, x in enumerate(loader):\n    with torch.autocast('cuda', dtype=torch.bfloat16):\n"
            "        model(x).sum().backward()\n    opt.step()\n    evaluate(model)\n"
        ),
    ],
)
def optimizer_state_dtype_mismatch(script: ScriptFacts, setup: Setup, live):
    if live is not None and live.optimizer is not None and live.optimizer.state_dtype_mismatches:
        n = live.optimizer.state_dtype_mismatches
        yield Draft(
            f"the live optimizer holds {n} state tensor{'s' if n != 1 else ''} whose dtype differs from its "
            f"parameter's: the next step fails",
            evidence=(live_evidence(live, f"{n} state/param dtype mismatches"),),
            fix=Fix(
                "re-create the optimizer after casting the model, or keep one dtype", applicability=Applicability.UNSAFE
            ),
        )
    if not setup.optimizers:
        return
    opt = setup.optimizers[0]
    steps = optimizer_steps(opt, script)
    local = script.of("local_call")
    counts = Counter(c.callee for c in local)
    repeated = {c.callee for c in local if c.in_loop or counts[c.callee] > 1}  # functions entered again and again
    for c in setup.casts:
        d = dtype_of_cast(c)
        if (
            d in (dtypes.FLOAT16, dtypes.BFLOAT16)
            and c.location.path == opt.location.path
            and c.scope == opt.scope
            and (when := _between_steps(c, steps, repeated))
        ):
            yield _pd203(c, opt, d, c.receiver or "the model", when=when)
    helpers = {}
    for c in script.of("cast"):
        d = dtype_of_cast(c)
        if d in (dtypes.FLOAT16, dtypes.BFLOAT16) and c.scope != "<module>" and c.receiver:
            helpers.setdefault(c.scope, []).append((c, d))
    for call in script.of("local_call"):
        for cast, d in helpers.get(call.callee, ()):
            if cast.receiver.startswith("self.") and "." in call.callee:  # a method casting its own object's model
                what = cast.receiver if cast.receiver in setup.model_names else ""
            else:
                passed = call.kwargs.get(cast.receiver)
                what = passed.text if passed is not None and passed.text in setup.model_names else ""
            if what and (when := _between_steps(call, steps, repeated)):
                yield _pd203(cast, opt, d, what, via=call, when=when)
