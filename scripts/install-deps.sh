#!/usr/bin/env bash
# Installs the Debian packages diskformer builds with, only those that are missing. Idempotent.
set -euo pipefail
packages=(cmake ninja-build g++ clang libclang-rt-14-dev pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libfmt-dev libcli11-dev
  libxxhash-dev liburing-dev libssl-dev libicu-dev libcurl4-openssl-dev python3
  libcpp-httplib-dev curl nodejs chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

# Debian's nodejs comes without npm (its own package); a nodejs from elsewhere (NodeSource) carries it, and
# Debian's npm would conflict with it: install npm only when there is none.
if ! command -v npm >/dev/null 2>&1; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  { $sudo_cmd apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq npm; } || true
fi

# The real-client tests of `serve` (tests/node): the official openai npm package, at the version the lock file
# names. Without node and npm the test skips, saying so.
if command -v npm >/dev/null 2>&1; then
  node_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/node"
  if [ ! -d "$node_dir/node_modules/openai" ] || [ "$node_dir/package-lock.json" -nt "$node_dir/node_modules" ]; then
    (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
else
  echo "note: npm not found: the openai client test of serve (server_openai_client) will skip"
fi
