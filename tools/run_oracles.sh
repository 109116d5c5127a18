#!/usr/bin/env bash
# On the GPU machine: every oracle fixture in one call. Everything lands in $OUT/oracles.tar.gz.
# Carry data/deepseek-v3 (the tokenizer) with the call.
set -uo pipefail
cd "$(dirname "$0")/.."
W=$(mktemp -d)
export PYTHONUNBUFFERED=1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name(0))"
python3 tools/make_fixtures.py "$W/model" 2>&1 | tee "$W/make_fixtures.log"
python3 tools/make_dtype_goldens.py "$W/dtypes" 2>&1 | tee "$W/dtypes.log"
python3 tools/make_tokenizer_goldens.py data/deepseek-v3 tests/fixtures/tokenizer/texts.json \
  tests/fixtures/tokenizer/conversations.json "$W/tokenizer" 2>&1 | tee "$W/tokenizer.log"
# The installed transformers sources the fixtures came from, for the record.
python3 - "$W/src" <<'PY'
import os, sys, inspect, transformers
from transformers.models.deepseek_v4 import modeling_deepseek_v4, configuration_deepseek_v4
from transformers import modeling_rope_utils
os.makedirs(sys.argv[1], exist_ok=True)
for m in (modeling_deepseek_v4, configuration_deepseek_v4, modeling_rope_utils):
    open(os.path.join(sys.argv[1], m.__name__.split('.')[-1] + '.py'), 'w').write(inspect.getsource(m))
try:
    from transformers import conversion_mapping
    open(os.path.join(sys.argv[1], 'conversion_mapping.py'), 'w').write(inspect.getsource(conversion_mapping))
except Exception as e:
    print('no conversion_mapping', e)
PY
tar czf "$OUT/oracles.tar.gz" -C "$W" .
ls -la "$OUT"
