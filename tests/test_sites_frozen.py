"""No regression in site discovery: every real model the tests load keeps its site list exactly.

The expected lists live in fixtures/frozen_sites.json. `ONNXAFF_FREEZE=1 python -m pytest
tests/test_sites_frozen.py` rewrites it; only do that for a change an issue asks for, and say so.
"""

import json
import os
from pathlib import Path

import pytest

from onnxaff.graph import discover_sites, load_model
from tests.conftest import FIXTURES, LIGHT_MODELS, SHARED_MODELS

FROZEN = FIXTURES / "frozen_sites.json"
FIELDS = ("id", "kind", "input", "output", "op_types", "status")
SHARED = SHARED_MODELS


def model_paths() -> dict[str, Path]:
    from onnxaff_models import shipped_models

    paths = {f"shipped/{m.name}": m.path for m in shipped_models()}
    paths |= {f"fixtures/{p.stem}": p for p in sorted(FIXTURES.glob("*.onnx"))}
    paths |= {f"light/{p.stem}": p for p in sorted(LIGHT_MODELS.glob("*.onnx"))}
    paths |= {f"shared/{p.stem}": p for p in sorted(SHARED.glob("*.onnx"))}
    return paths


def site_list(path: Path) -> list[dict]:
    sites = discover_sites(load_model(path).model, infer_shapes=False)
    return [{k: getattr(s, k) for k in FIELDS} for s in sites]


def frozen() -> dict:
    return json.loads(FROZEN.read_text()) if FROZEN.exists() else {}


if os.environ.get("ONNXAFF_FREEZE") == "1":
    FROZEN.write_text(json.dumps({k: site_list(p) for k, p in model_paths().items()} | {
        k: v for k, v in frozen().items() if k.startswith("shared/") and not SHARED.exists()}, indent=1) + "\n")


@pytest.mark.parametrize("key", sorted(frozen()))
def test_site_list_is_frozen(key):
    path = model_paths().get(key)
    if path is None:
        pytest.skip(f"{key} is not here")
    assert site_list(path) == frozen()[key]


def test_every_model_is_frozen():
    assert set(model_paths()) <= set(frozen())
