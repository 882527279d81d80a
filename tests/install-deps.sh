#!/bin/sh
# install-deps.sh -- install what the tests need, only when it is missing:
#   from Debian: NumPy and PyTorch for /usr/bin/python3 (the oracle), clang
#   (the second compiler, and the WebAssembly build with wasi-libc and the
#   wasm32 compiler runtime), pkg-config (the install test), OpenBLAS (the
#   benchmark's baseline), Chromium and Node.js (the browser test);
#   from npm: playwright-core, pinned in package.json and package-lock.json.
set -e
need=""
[ -x /usr/bin/python3 ] || need="$need python3"
/usr/bin/python3 -c 'import numpy' 2>/dev/null || need="$need python3-numpy"
/usr/bin/python3 -c 'import torch' 2>/dev/null || need="$need python3-torch"
command -v clang >/dev/null 2>&1 || need="$need clang"
command -v wasm-ld >/dev/null 2>&1 || need="$need lld"
[ -f /usr/lib/wasm32-wasi/libc.a ] || need="$need wasi-libc"
ls /usr/lib/llvm-*/lib/clang/*/lib/wasi/libclang_rt.builtins-wasm32.a >/dev/null 2>&1 ||
    need="$need libclang-rt-14-dev-wasm32"
command -v pkg-config >/dev/null 2>&1 || need="$need pkg-config"
pkg-config --exists openblas 2>/dev/null || [ -f /usr/include/x86_64-linux-gnu/cblas.h ] ||
    need="$need libopenblas-dev"
[ -x /usr/bin/chromium ] || need="$need chromium"
command -v node >/dev/null 2>&1 || need="$need nodejs"
command -v npm >/dev/null 2>&1 || need="$need npm"
if [ -n "$need" ]; then
    echo "installing test dependencies:$need"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $need
fi
# The browser driver, exactly as locked.
cd "$(dirname "$0")/.."
if ! npm ls playwright-core >/dev/null 2>&1; then
    echo "installing playwright-core from package-lock.json"
    npm ci --no-audit --no-fund --loglevel=error
fi
