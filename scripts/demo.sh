#!/usr/bin/env bash
# Set up everything and run the main job on built-in demo data: generate a small
# model with the project's own generator into a temporary folder and inspect it.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bash "$here/scripts/setup.sh" "$here/build"
bin=$here/build/tools
gen=$here/build/testdata/gguf-gen
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== gguf-gen: a small llama-style model (Q8_0 weights), split in 3 parts"
"$gen" model --arch llama --type Q8_0 --split-max-tensors 8 "$work/demo.gguf"
ls -l "$work"
echo
echo "== gguf-inspect: the whole split set, from its second part"
"$bin/gguf-inspect" "$work/demo-00002-of-00003.gguf" | head -40
echo
echo "== gguf-inspect --hash --json: digests for CI manifests"
"$bin/gguf-inspect" --hash --json --tensors-only "$work/demo-00001-of-00003.gguf" | head -c 600
echo
