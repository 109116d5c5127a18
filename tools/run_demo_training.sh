#!/usr/bin/env bash
# On the GPU machine: train the demo model, export it, write its fixtures. Everything lands in
# $OUT/demo.tar.gz.part-* (parts under 16 MiB; `cat` them back together).
#   bash tools/run_demo_training.sh [--smoke] [more train_demo_model.py flags]
# Needs data/demo-corpus (python3 tools/prepare_corpus.py here first; carry it with the call).
set -uo pipefail
cd "$(dirname "$0")/.."
W=$(mktemp -d); mkdir -p "$W/demo"
export PYTHONUNBUFFERED=1
python3 -c "import torch, transformers, tokenizers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, torch.cuda.get_device_name(0))"
python3 tools/train_demo_model.py --corpus data/demo-corpus --out "$W/demo" "$@" 2>&1 | tee "$W/demo/train.log"
rc=${PIPESTATUS[0]}
echo "train_demo_model.py exit code $rc" | tee -a "$W/demo/train.log"
if [[ " $* " == *" --smoke "* ]]; then rm -f "$W/demo/model/model.safetensors"; fi
tar czf "$W/demo.tar.gz" -C "$W" demo
split -b 15M "$W/demo.tar.gz" "$OUT/demo.tar.gz.part-"
ls -la "$OUT"
exit "$rc"
