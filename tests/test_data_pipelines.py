"""Batches a data pipeline yields, read as the tensors they are: a torchvision dataset with ToTensor() behind a
DataLoader gives float32 images, which a half-precision network refuses at its first convolution (PD208)."""

import pytest

LOOP = (
    "import torch\nimport torchvision\nfrom torch.utils.data import DataLoader\n"
    "from torchvision import datasets, transforms\n\n"
    "model = torchvision.models.resnet18(num_classes=10).cuda().half()\n"
    "{transform}"
    "data = datasets.CIFAR10('data', train=True, download=True, transform={use})\n"
    "loader = DataLoader(data, batch_size=64, shuffle=True)\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "for {target} in loader:\n"
    "    images, labels = images.cuda(){cast}, labels.cuda()\n"
    "    loss = torch.nn.functional.cross_entropy(model(images), labels)\n"
    "    loss.backward()\n    opt.step()\n    opt.zero_grad()\n"
)
COMPOSE = (
    "tf = transforms.Compose([transforms.RandomCrop(32, padding=4), transforms.ToTensor(), "
    "transforms.Normalize((0.5,), (0.5,))])\n"
)


def pd208(run_check, **kw):
    fields = {"transform": "", "use": "transforms.ToTensor()", "target": "images, labels", "cast": "", **kw}
    result, _ = run_check(LOOP.format(**fields), target="a100")
    return [f for f in result.findings if f.rule_id == "PD208"]


@pytest.mark.parametrize(
    "kw",
    [{}, {"transform": COMPOSE, "use": "tf"}, {"target": "(images, labels)"}],
    ids=["to-tensor", "composed", "parenthesised"],
)
def test_float_images_into_a_half_network(run_check, kw):
    found = pd208(run_check, **kw)
    assert found and found[0].error == "RuntimeError: Input type (float) and weight type (c10::Half) should be the same"
    assert "images.to(torch.float16)" in found[0].fix.description


@pytest.mark.parametrize(
    "kw",
    [
        {"cast": ".half()"},  # the images cast to the network's dtype
        {"use": "transforms.Compose([transforms.ToTensor(), transforms.ConvertImageDtype(torch.float16)])"},
        {"target": "batch"},  # a batch the doctor does not unpack: not judged
    ],
    ids=["cast-half", "half-transform", "unpacked-later"],
)
def test_images_in_the_networks_dtype_or_unknown_are_silent(run_check, kw):
    assert not pd208(run_check, **kw)
