"""Packages are found on disk, so a new subpackage cannot be left out of the wheel by a hand-kept list.

Everything else is in pyproject.toml; setuptools merges the two.
"""
from setuptools import find_packages, setup

# Import name → folder: the plugins and the shipped models live beside the core under shorter names.
ROOTS = {"onnxaff": "onnxaff", "onnxaff_plugins": "plugins", "onnxaff_models": "models"}


def packages() -> list[str]:
    found = []
    for name, folder in ROOTS.items():
        found += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]
    return found


setup(packages=packages())
