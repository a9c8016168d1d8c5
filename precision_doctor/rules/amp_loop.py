"""Hand-written AMP training loops: autocast, GradScaler, clipping, casts after the optimizer
(PD203, PD205-PD208, PD213)."""

from __future__ import annotations

from collections import Counter

from ..knowledge import dtypes
from ..derive import Setup, call_evidence, decide, dtype_of_cast, evidence_of, optimizer_steps
from .registry import Example, LogSignature, rule
from ..model.facts import ABSENT, KNOWN, Call, MachineFacts, ScriptFacts, StackFacts, TensorValue
from ..derive.live import live_evidence
from ..model.findings import Applicability, Draft, Edit, Fix
from ..probes.stack import at_least
from ._common import exclusive

_LOOP_HEAD = ("import torch\nmodel = torch.nn.Linear(16, 4).cuda()\n"
              "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n")


def _scaler_targets(script: ScriptFacts) -> set[str]:
    return {c.target for c in script.of("grad_scaler") if c.target}


def _enabled_scalers(setup: Setup, machine: MachineFacts, stack: StackFacts) -> list[Call]:
    """GradScalers that are always on: `enabled=False` is off; an `enabled=` expression, or creating it under an
    `if`, is the script's own switch."""
    out = []
    for s in setup.scalers:
        if s.in_branch:
            continue
        v = decide(s.kwarg("enabled"), machine, stack)
        if v.state == ABSENT or v.is_(True):
            out.append(s)
    return out


def _autocast_device(c: Call) -> str | None:
    if c.callee.startswith("torch.cuda.amp"):
        return "cuda"
    if c.callee.startswith("torch.cpu.amp"):
        return "cpu"
    v = c.args[0] if c.args else c.kwarg("device_type")
    return v.value if v.state == KNOWN and isinstance(v.value, str) else None


@rule(
    "PD203", "optimizer-state-dtype-mismatch", severity="error", phase="later-steps",
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
    log=LogSignature(patterns=(r"expected dtype c10::BFloat16 for `?end`? but got dtype float",
                           r"Tensors of the same index must be on the same device and the same dtype")),
    fires=[
        Example(_LOOP_HEAD + "for x in loader:\n    model(x).sum().backward()\n    opt.step()\n"
                "model = model.to(torch.bfloat16)  # phase 2 in bf16\nfor x in loader:\n"
                "    model(x.bfloat16()).sum().backward()\n    opt.step()\n",
                note="a second phase after a cast: the first phase's fp32 state meets bf16 gradients"),
        Example(_LOOP_HEAD + "def evaluate(m):\n    m.to(torch.bfloat16)\n    return m(torch.randn(2, 16))\n"
                "for step, x in enumerate(loader):\n    model(x).sum().backward()\n    opt.step()\n"
                "    if step % 400 == 0:\n        evaluate(model)\n", note="an eval helper casts the model in place"),
    ],
    silent=[
        Example("import torch\nmodel = torch.nn.Linear(16, 4).cuda().to(torch.bfloat16)\n"
                "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\nfor x in loader:\n"
                "    model(x).sum().backward()\n    opt.step()\n"),
        Example(_LOOP_HEAD + "model = model.to(torch.bfloat16)\nfor x in loader:\n"
                "    model(x).sum().backward()\n    opt.step()\n",
                note="cast before the first step: the state is created in bf16 (no master copy: PD212's concern)"),
        Example(_LOOP_HEAD + "for x in loader:\n    model(x).sum().backward()\n    opt.step()\n"
                "model.to(torch.bfloat16)\ntorch.save(model.state_dict(), 'model.pt')\n",
                note="cast after the last step, to save: no step meets the state again"),
        Example(_LOOP_HEAD + "def evaluate(m):\n    import copy\n    m = copy.deepcopy(m)\n    return m\n"
                "for step, x in enumerate(loader):\n    with torch.autocast('cuda', dtype=torch.bfloat16):\n"
                "        model(x).sum().backward()\n    opt.step()\n    evaluate(model)\n"),
    ],
)
def optimizer_state_dtype_mismatch(script: ScriptFacts, setup: Setup, live):
    if live is not None and live.optimizer is not None and live.optimizer.state_dtype_mismatches:
        n = live.optimizer.state_dtype_mismatches
        yield Draft(f"the live optimizer holds {n} state tensor{'s' if n != 1 else ''} whose dtype differs from its "
                    f"parameter's: the next step fails", evidence=(live_evidence(live, f"{n} state/param dtype "
                                                                                     f"mismatches"),),
                    fix=Fix("re-create the optimizer after casting the model, or keep one dtype", applicability=Applicability.UNSAFE))
    if not setup.optimizers:
        return
    opt = setup.optimizers[0]
    steps = optimizer_steps(opt, script)
    local = script.of("local_call")
    counts = Counter(c.callee for c in local)
    repeated = {c.callee for c in local if c.in_loop or counts[c.callee] > 1}  # functions entered again and again
    for c in setup.casts:
        d = dtype_of_cast(c)
        if d in (dtypes.FLOAT16, dtypes.BFLOAT16) and c.location.path == opt.location.path and c.scope == opt.scope \
                and (when := _between_steps(c, steps, repeated)):
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
    if any(s.location.line < line for s in in_its_loop) or (earlier and any(s.location.line > line for s in same)) \
            or (earlier and at.scope in repeated):
        return "always"
    if at.in_branch and any(s.location.line > line for s in in_its_loop):
        return "conditional"
    return ""


def _pd203(cast: Call, opt: Call, d: str, what: str, via: Call | None = None, when: str = "always") -> Draft:
    evidence = [call_evidence(opt, "optimizer created: its state follows the parameters' dtype at the first step")]
    if via is not None:
        runs = f"{via.callee}() casts {what}" if "." in via.callee and what.startswith("self.") \
            else f"{what} passed to {via.callee}()"  # (a method is recorded by its class: "Loop.evaluate")
        evidence.append(call_evidence(via, runs + (" inside the loop" if via.in_loop else "")))
    evidence.append(call_evidence(cast, f"cast to {d} in place"))
    state = "Adam's fp32 moments" if "adam" in opt.callee.lower() else f"the fp32 state of {opt.callee}"
    fix = Fix("cast before creating the optimizer (or re-create it after), or cast a copy "
              "(`copy.deepcopy(model)`) for evaluation", applicability=Applicability.UNSAFE)
    if when == "conditional":
        test = (via or cast).branches[-1].test if (via or cast).branches else "its condition"
        return Draft(f"{what} is cast to {d} in the training loop under `{test}`: if that holds after the first "
                     f"step, {state} created then meet{'s' * ('Adam' not in state)} {d} parameters and gradients (on "
                     f"the first iteration only, before any step, the state is created in {d} and nothing fails)",
                     evidence=tuple(evidence), fix=fix, severity="warning", confidence="likely")
    return Draft(f"{what} is cast to {d} after the optimizer has stepped: {state} meet{'s' * ('Adam' not in state)} "
                 f"{d} parameters and gradients", evidence=tuple(evidence), fix=fix)


@rule(
    "PD205", "autocast-default-fp16-no-scaler", severity="warning", phase="later-steps",
    summary="CUDA autocast without dtype= runs in fp16, and no GradScaler protects it.",
    what="`torch.autocast(\"cuda\")`, `torch.amp.autocast(device_type=\"cuda\")` or `torch.cuda.amp.autocast()` "
         "with no `dtype=`, in a script that creates no GradScaler.",
    why="CUDA autocast defaults to float16; fp16 without loss scaling underflows (or overflows to NaN). A "
        "`--dtype bfloat16` option the script never passes to autocast has no effect.",
    error="no exception: loss plateaus early (underflowed gradients) or turns NaN",
    fix="Pass `dtype=torch.bfloat16` on Ampere or newer, or keep fp16 and add `torch.amp.GradScaler(\"cuda\")`.",
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: bf16 needs an Ampere or newer GPU.",
    fires=[
        Example(_LOOP_HEAD + "for x in loader:\n    with torch.autocast('cuda'):\n        loss = model(x).sum()\n"
                "    loss.backward()\n    opt.step()\n"),
        Example(_LOOP_HEAD + "for x in loader:\n    with torch.cuda.amp.autocast():\n        loss = model(x).sum()\n"
                "    loss.backward()\n    opt.step()\n"),
    ],
    silent=[
        Example(_LOOP_HEAD + "for x in loader:\n    with torch.autocast('cuda', dtype=torch.bfloat16):\n"
                "        loss = model(x).sum()\n    loss.backward()\n    opt.step()\n"),
        Example(_LOOP_HEAD + "scaler = torch.amp.GradScaler('cuda')\nfor x in loader:\n"
                "    with torch.autocast('cuda'):\n        loss = model(x).sum()\n"
                "    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n"),
        Example(_LOOP_HEAD + "for x in loader:\n    with torch.autocast('cpu'):\n        loss = model(x).sum()\n"
                "    loss.backward()\n    opt.step()\n"),
    ],
)
def autocast_default_fp16_no_scaler(setup: Setup, machine: MachineFacts, stack: StackFacts):
    if setup.style in ("trainer", "accelerate") or setup.scalers:  # any scaler: the script handles scaling
        return
    for a in setup.autocasts:
        if _autocast_device(a) != "cuda" or a.kwarg("dtype").state != ABSENT:
            continue
        if decide(a.kwarg("enabled"), machine, stack).is_(False):
            continue
        new = a.callee.replace("torch.cuda.amp.autocast", "torch.amp.autocast")
        yield Draft("CUDA autocast without dtype= computes in float16, and no GradScaler scales the loss",
                    evidence=(call_evidence(a, "autocast dtype defaults to float16 on CUDA"),),
                    fix=Fix("pass dtype=torch.bfloat16 (Ampere or newer), or add torch.amp.GradScaler('cuda')",
                            applicability=Applicability.UNSAFE, edits=(Edit("set_kwarg", a.location.path, a.location.line,
                                                    call=new.rsplit(".", 1)[-1], name="dtype",
                                                    new="torch.bfloat16"),)))


@rule(
    "PD206", "grad-scaler-with-bf16-autocast", severity="warning", phase="first-step",
    summary="GradScaler next to bf16 autocast: loss scaling bf16 does not need, and a hard error on bf16 weights.",
    what="A GradScaler that is always on, in a loop whose autocast runs in bfloat16.",
    why="bf16 has almost fp32's dynamic range, so scaling only adds work and occasionally skips steps; with bf16 "
        "parameters it becomes PD202's hard error.",
    error="no exception on fp32 weights: extra scale/unscale work and skipped steps",
    fix="Drop the scaler for bf16, or make it conditional: `GradScaler(\"cuda\", enabled=(dtype == torch.float16))`.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: bf16 autocast needs no loss scaling.",
    fires=[
        Example(_LOOP_HEAD + "scaler = torch.amp.GradScaler('cuda')\nfor x in loader:\n"
                "    with torch.autocast('cuda', dtype=torch.bfloat16):\n        loss = model(x).sum()\n"
                "    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n"),
    ],
    silent=[
        Example(_LOOP_HEAD + "dtype = torch.bfloat16\n"
                "scaler = torch.amp.GradScaler('cuda', enabled=(dtype == torch.float16))\nfor x in loader:\n"
                "    with torch.autocast('cuda', dtype=dtype):\n        loss = model(x).sum()\n"
                "    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n"),
        Example(_LOOP_HEAD + "scaler = torch.amp.GradScaler('cuda')\nfor x in loader:\n"
                "    with torch.autocast('cuda', dtype=torch.float16):\n        loss = model(x).sum()\n"
                "    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n"),
    ],
)
def grad_scaler_with_bf16_autocast(setup: Setup, machine: MachineFacts, stack: StackFacts):
    scalers = _enabled_scalers(setup, machine, stack)
    if not scalers:
        return
    for a in setup.autocasts:
        v = decide(a.kwarg("dtype"), machine, stack)
        together = [s for s in scalers if s.location.path == a.location.path and
                    (s.scope == a.scope or "<module>" in (s.scope, a.scope))]  # one training loop, not a library
        if together and v.state == KNOWN and dtypes.from_string(v.value) == dtypes.BFLOAT16:
            scalers = together
            yield Draft("a GradScaler scales the loss of a bf16 autocast region, which needs no loss scaling",
                        evidence=(call_evidence(scalers[0], "GradScaler always enabled"),
                                  evidence_of(v, "autocast dtype bfloat16", a)),
                        fix=Fix(f"make the scaler conditional: enabled=({a.kwarg('dtype').text} == torch.float16)",
                                applicability=Applicability.SAFE,
                                edits=(Edit("set_kwarg", scalers[0].location.path, scalers[0].location.line,
                                            call="GradScaler", name="enabled",
                                            new=f"({a.kwarg('dtype').text} == torch.float16)"),)))
            return


@rule(
    "PD207", "clip-before-unscale", severity="warning", phase="later-steps",
    summary="Gradients clipped while still multiplied by the loss scale.",
    what="`clip_grad_norm_` after `scaler.scale(loss).backward()` without `scaler.unscale_(optimizer)` in between.",
    why="Until unscale_, every gradient is multiplied by the loss scale (65536 at first): the norm is never what "
        "max_norm means, so clipping either always or never triggers.",
    error="no exception: clipping has no effect (or clips everything); flat learning curves",
    fix="Call `scaler.unscale_(optimizer)` right before clipping, then `scaler.step(optimizer)`; `scaler.update()`. "
        "With accelerate use `accelerator.clip_grad_norm_` (it unscales).",
    applicability=Applicability.SAFE,
    fix_safety="Safe: unscale_ before clipping is what GradScaler documents.",
    fires=[
        Example(_LOOP_HEAD + "scaler = torch.amp.GradScaler('cuda')\nfor x in loader:\n"
                "    with torch.autocast('cuda', dtype=torch.float16):\n        loss = model(x).sum()\n"
                "    scaler.scale(loss).backward()\n"
                "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
                "    scaler.step(opt)\n    scaler.update()\n",
                fixed=_LOOP_HEAD + "scaler = torch.amp.GradScaler('cuda')\nfor x in loader:\n"
                "    with torch.autocast('cuda', dtype=torch.float16):\n        loss = model(x).sum()\n"
                "    scaler.scale(loss).backward()\n    scaler.unscale_(opt)\n"
                "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
                "    scaler.step(opt)\n    scaler.update()\n"),
    ],
    silent=[
        Example(_LOOP_HEAD + "scaler = torch.amp.GradScaler('cuda')\nfor x in loader:\n"
                "    with torch.autocast('cuda', dtype=torch.float16):\n        loss = model(x).sum()\n"
                "    scaler.scale(loss).backward()\n    scaler.unscale_(opt)\n"
                "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
                "    scaler.step(opt)\n    scaler.update()\n"),
        Example(_LOOP_HEAD + "import sys\nuse_amp = sys.argv[1] == 'amp'\nscaler = torch.amp.GradScaler('cuda')\n"
                "for x in loader:\n    loss = model(x).sum()\n    if use_amp:\n"
                "        scaler.scale(loss).backward()\n        scaler.unscale_(opt)\n"
                "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
                "        scaler.step(opt)\n        scaler.update()\n    else:\n        loss.backward()\n"
                "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n        opt.step()\n",
                note="the clip in the else branch has no scaler on its path"),
    ],
)
def clip_before_unscale(script: ScriptFacts, setup: Setup):
    scalers = _scaler_targets(script)
    if not scalers:
        return
    scale_calls = [m for m in setup.methods if m.receiver in scalers and m.callee.endswith(".scale")]
    unscales = [m for m in setup.methods if m.receiver in scalers and m.callee.endswith(".unscale_")]
    accelerators = {c.target for c in script.of("accelerator")}
    for clip in setup.clips:
        if clip.receiver in accelerators:
            continue
        before = [s for s in scale_calls if s.scope == clip.scope and s.location.line < clip.location.line
                  and not exclusive(s, clip)]  # a clip on the branch without the scaler clips true gradients
        if not before:
            continue
        last_scale = max(before, key=lambda s: s.location.line)
        if any(u.scope == clip.scope and last_scale.location.line < u.location.line < clip.location.line
               for u in unscales):
            continue
        scaler = last_scale.receiver
        # the optimizer as this scope writes it (`self.optimizer`), from its own scaler.step(...) call
        steps = [m for m in setup.methods if m.receiver == scaler and m.callee.endswith(".step") and
                 m.scope == clip.scope and m.args]
        optimizer = steps[0].args[0].text if steps else \
            setup.optimizers[0].target if setup.optimizers and setup.optimizers[0].target else "optimizer"
        yield Draft("gradients are clipped while still multiplied by the loss scale (no unscale_ before clipping)",
                    evidence=(call_evidence(last_scale, "loss scaled"), call_evidence(clip, "clipped before unscale_")),
                    fix=Fix(f"call {scaler}.unscale_({optimizer}) right before clipping", applicability=Applicability.SAFE,
                            edits=(Edit("insert_before", clip.location.path, clip.location.line,
                                        new=f"{scaler}.unscale_({optimizer})"),)))


@rule(
    "PD208", "half-model-float-inputs", severity="error", phase="first-step",
    summary="A model cast to fp16/bf16 is fed float32 tensors with no autocast.",
    what="`model.half()` / `.bfloat16()` / `.to(torch.float16)` in a hand-written loop, called on tensors the script "
         "builds as float32 (`torch.randn`, `.float()`, float `torch.tensor`) with no autocast around it.",
    why="Linear and conv layers need input and weight in one dtype; only autocast casts the inputs for you.",
    error="RuntimeError: mat1 and mat2 must have the same dtype, but got Float and Half",
    fix="Don't hand-cast the model: keep fp32 weights and use autocast (or Trainer fp16/bf16); if a half model is "
        "intended, cast the inputs to the same dtype (`x.to(model.dtype)`).",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    log=LogSignature(patterns=(r"mat1 and mat2 must have the same dtype", r"expected mat1 and mat2 to have the same dtype",
                           r"Input type \(.*\) and weight type \(.*\) should be the same",
                           r"expected scalar type (Half|BFloat16) but found Float"),
                 proven=0.6, yields_to=("PD301",)),
    related=('PD301', 'PD114'),
    fires=[
        Example("import torch\nmodel = torch.nn.Linear(16, 4).cuda().half()\n"
                "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                "x = torch.randn(8, 16, device='cuda')\nloss = model(x).sum()\nloss.backward()\nopt.step()\n"),
    ],
    silent=[
        Example("import torch\nmodel = torch.nn.Linear(16, 4).cuda()\n"
                "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nscaler = torch.amp.GradScaler('cuda')\n"
                "x = torch.randn(8, 16, device='cuda')\nwith torch.autocast('cuda', dtype=torch.float16):\n"
                "    loss = model(x).sum()\nscaler.scale(loss).backward()\nscaler.step(opt)\nscaler.update()\n"),
        Example("import torch\nmodel = torch.nn.Linear(16, 4).cuda().half()\n"
                "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                "x = torch.randn(8, 16, device='cuda').half()\nloss = model(x).sum()\nloss.backward()\nopt.step()\n"),
        Example("import torch\nmodel = torch.nn.Linear(16, 4).cuda().half()\n"
                "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                "x = torch.randn(8, 16, device='cuda')\nwith torch.autocast('cuda', dtype=torch.float16):\n"
                "    loss = model(x).sum()\nloss.backward()\nopt.step()\n"),
    ],
)
def half_model_float_inputs(script: ScriptFacts, setup: Setup):
    if setup.style == "trainer" or setup.autocasts or not dtypes.is_half(setup.weights.value):
        return
    for call in script.of("call_var"):
        if call.callee not in setup.model_names:
            continue
        for v in list(call.args) + list(call.kwargs.values()):
            if v.state == KNOWN and v.value == TensorValue(dtypes.FLOAT32):
                yield Draft(f"{call.callee} holds {setup.weights.value} weights but is called on a float32 tensor "
                            f"with no autocast", evidence=setup.weights.evidence + (
                                evidence_of(v, "float32 input", call), call_evidence(call, "forward call")),
                            error="RuntimeError: mat1 and mat2 must have the same dtype, but got Float and "
                                  + ("Half" if setup.weights.value == dtypes.FLOAT16 else "BFloat16"),
                            fix=Fix(f"cast the input: {v.text}.to({call.callee}.dtype), or keep fp32 weights and "
                                    f"use torch.autocast", applicability=Applicability.UNSAFE))
                return


@rule(
    "PD213", "deprecated-cuda-amp-api", severity="warning", phase="config",
    summary="torch.cuda.amp.autocast / GradScaler are deprecated (torch >= 2.4).",
    what="`torch.cuda.amp.autocast`, `torch.cuda.amp.GradScaler`, `torch.cpu.amp.*`, also imported by name.",
    why="torch 2.4 deprecated the device-specific AMP namespaces in favour of `torch.amp` with a device argument; "
        "they warn on every call and will be removed.",
    error="FutureWarning: `torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
          "`torch.amp.GradScaler('cuda', args...)` instead.",
    fix="`torch.amp.autocast(\"cuda\", ...)`, `torch.amp.GradScaler(\"cuda\", ...)`.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: the same behaviour under the new name.",
    fires=[Example(_LOOP_HEAD + "scaler = torch.cuda.amp.GradScaler()\n",
                   fixed=_LOOP_HEAD + "scaler = torch.amp.GradScaler('cuda')\n"),
           Example("import torch\nfrom torch.cuda.amp import autocast\nwith autocast(dtype=torch.bfloat16):\n"
                   "    pass\n")],
    silent=[Example(_LOOP_HEAD + "scaler = torch.amp.GradScaler('cuda')\n"),
            Example(_LOOP_HEAD + "scaler = torch.cuda.amp.GradScaler()\n", versions={"torch": "2.1.2"})],
)
def deprecated_cuda_amp_api(script: ScriptFacts, stack: StackFacts):
    if not at_least(stack, "torch", "2.4"):
        return
    for c in script.of("autocast", "grad_scaler"):
        for old in ("torch.cuda.amp.", "torch.cpu.amp."):
            if c.callee.startswith(old):
                device = "cuda" if "cuda" in old else "cpu"
                new = "torch.amp." + c.callee[len(old):]
                yield Draft(f"{c.callee} is deprecated since torch 2.4; use {new}({device!r}, ...)",
                            evidence=(call_evidence(c, f"deprecated {c.callee}"),),
                            error=f"FutureWarning: `{c.callee}(args...)` is deprecated. Please use "
                                  f"`{new}('{device}', args...)` instead.",
                            fix=Fix(f"{new}({device!r}, ...)", applicability=Applicability.SAFE,
                                    edits=(Edit("replace_callee", c.location.path, c.location.line,
                                                call=c.callee.rsplit(".", 1)[-1], old=c.callee, new=new,
                                                name=repr(device)),)))
