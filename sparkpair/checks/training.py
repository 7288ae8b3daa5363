"""Checks of what `sparkpair train-draft` needs on the head: its training image (train-draft's default, NVIDIA's
PyTorch container) with NVIDIA ModelOpt and what its `hf` extra brings. Never launch-critical: serving does
not need it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sparkpair.checks import Facts, Finding, info, ok, skip, warn
from sparkpair.inventory import Inventory, Node
from sparkpair.probes import Probe, ProbeFailure, training

NEEDED = ("nvidia-modelopt", "transformers", "accelerate", "torch")


def training_probes(inventory: Inventory, node: Node) -> list[Probe[Any]]:
    """The probes these checks judge: the training image, on the head only (where train-draft trains)."""
    return [training.image_packages(training.DEFAULT_IMAGE)] if node.name == inventory.head.name else []


def check_training_image(facts: Facts) -> Iterable[Finding]:
    """draft.image: the head holds train-draft's default image with ModelOpt and its hf extra (INFO when the image
    is not there: train-draft is optional, and `--image` names another)."""
    head, image = facts.inventory.head.name, training.DEFAULT_IMAGE
    if head in facts.unreachable:
        return
    found = facts.fact(head, training.image_packages(image))
    if found is None and not isinstance(found, ProbeFailure):
        return   # not asked
    if isinstance(found, ProbeFailure):
        yield skip("draft.image", head, f"cannot look inside {image} ({found})")
    elif not found.present:
        yield info("draft.image", head, f"train-draft's image {image} is not here: pull it and add "
                                       "nvidia-modelopt[hf] (docs/runbooks.md#draft-image), or pass train-draft --image")
    elif missing := [name for name in NEEDED if not found.versions.get(name)]:
        yield warn("draft.image", head, f"{image} lacks {', '.join(missing)}: train-draft cannot train with it",
                   f"an image FROM {image} with RUN pip install -U \"nvidia-modelopt[hf]\" (docs/runbooks.md#draft-image)")
    else:
        versions = found.versions
        yield ok("draft.image", head, f"{image}: ModelOpt {versions['nvidia-modelopt']}, transformers "
                                      f"{versions['transformers']}, torch {versions['torch']}")
