#!/usr/bin/env bash
# Installs node-llama-cpp 3.21.1 (prebuilt llama.cpp v0.4.0, the same build the golden fixtures came from) into
# bench/llamacpp/node_modules. Needs node >= 20 and the npm registry; nothing is compiled.
set -euo pipefail
cd "$(dirname "$0")"
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' 2> /dev/null; then
    echo "setup.sh: node-llama-cpp 3.21.1 needs Node.js >= 20 (found: $(node --version 2> /dev/null || echo none))" >&2
    exit 1
fi
# The package's postinstall would try to download and build llama.cpp if no prebuilt binary fits; that cannot work
# offline and is never wanted here, so a missing prebuilt should fail loudly at load time instead.
export NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
npm i -E node-llama-cpp@3.21.1 --no-audit --no-fund
node -e "import('node-llama-cpp').then(() => console.log('node-llama-cpp ' + require('./node_modules/node-llama-cpp/package.json').version + ' installed'))"
