"""Shared fixtures for the interop tests (gguf-py is the format's reference implementation)."""
import json
import os
import subprocess

import pytest

BIN = os.environ.get("GGUFKIT_BIN", "")
GEN = os.environ.get("GGUFKIT_GEN", "")
SHARED = os.environ.get("GGUFKIT_SHARED", "")


def gen_archs():
    """The architectures gguf-gen writes (`gguf-gen archs`): tests loop over these rather
    than over a list of their own. Empty when gguf-gen is not built (the tests that need
    it fail on that themselves)."""
    if not GEN or not os.access(GEN, os.X_OK):
        return []
    return subprocess.run([GEN, "archs"], capture_output=True, text=True,
                          check=True).stdout.split()


def tool(name):
    path = os.path.join(BIN, name)
    if not os.path.exists(path):
        pytest.fail(f"{path} is not built (GGUFKIT_BIN={BIN!r})")
    return path


def inspect_json(path, *args):
    out = subprocess.run([tool("gguf-inspect"), "--json", *args, path], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def shared_files(pattern_dirs=("models", "vocab", "hf/llama", "hf/deepseek_v3")):
    if not SHARED or not os.path.isdir(SHARED):
        return []
    files = []
    for d in pattern_dirs:
        p = os.path.join(SHARED, d)
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".gguf"))
    return files
