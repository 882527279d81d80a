#!/bin/sh
# install-deps.sh -- install what the tests need, only when it is missing.
# Each check looks for the very thing the build or a test uses, never for a
# file that some other package could also provide:
#   from Debian: NumPy and PyTorch for /usr/bin/python3 (the oracle); pip,
#   setuptools, venv, matplotlib, nbconvert and ipykernel (the Python binding,
#   the README's virtual environment and the notebook); clang
#   (the second compiler and the fuzzers, whose libFuzzer runtime is in
#   libclang-rt-14-dev) with the WebAssembly build's linker, wasi-libc and
#   wasm32 compiler runtime; pkg-config (the install test and OpenBLAS's
#   flags); cJSON (libcjson-dev, the command's safetensors header parser), by
#   its pkg-config entry `libcjson`; OpenBLAS itself, found by its own pkg-config entry `openblas`
#   (the cblas.h on the default include path belongs to whichever BLAS the
#   alternatives system points at, often the reference BLAS); Chromium and
#   Node.js (the browser test); Open MPI (libopenmpi-dev's mpicc, openmpi-bin's
#   mpirun: libattn-mpi, attn-mpi and their tests); SIMDe (libsimde-dev, by
#   its header: the AVX-512 kernels built for any CPU, test_fast_simde);
#   from npm: playwright-core and axe-core (the page's accessibility check),
#   pinned in package.json and package-lock.json,
#   and (optional: x86-64 Linux only) llama.cpp's prebuilt ggml libraries,
#   which `attn bench --ggml` is tested against (never linked or vendored).
set -e
need=""
add() { need="$need $1"; }
[ -x /usr/bin/python3 ] || add python3
/usr/bin/python3 -c 'import numpy' 2>/dev/null || add python3-numpy
/usr/bin/python3 -c 'import torch' 2>/dev/null || add python3-torch
# The Python binding (python/attn): pip and setuptools to install it offline,
# matplotlib for its plots, nbconvert and ipykernel to run the notebook.
/usr/bin/python3 -c 'import setuptools' 2>/dev/null || add python3-setuptools
/usr/bin/python3 -m pip --version >/dev/null 2>&1 || add python3-pip
# The README's virtual environment (tests/test_docs.py runs it): venv's ensurepip.
/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || add python3-venv
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || add python3-matplotlib
command -v jupyter-nbconvert >/dev/null 2>&1 || add jupyter-nbconvert
/usr/bin/python3 -c 'import ipykernel' 2>/dev/null || add python3-ipykernel
# clang's runtimes are looked up where this clang looks for them.
if command -v clang >/dev/null 2>&1; then
    rt=$(clang -print-resource-dir)/lib
    [ -f "$rt/wasi/libclang_rt.builtins-wasm32.a" ] || add libclang-rt-14-dev-wasm32
    [ -f "$rt/linux/libclang_rt.fuzzer-x86_64.a" ] || add libclang-rt-14-dev
else
    add clang
    add libclang-rt-14-dev-wasm32
    add libclang-rt-14-dev
fi
command -v wasm-ld >/dev/null 2>&1 || add lld
[ -f /usr/lib/wasm32-wasi/libc.a ] || add wasi-libc
command -v pkg-config >/dev/null 2>&1 || add pkg-config
pkg-config --exists openblas 2>/dev/null || add libopenblas-dev
# cJSON for the command's safetensors reader, by its own pkg-config entry.
pkg-config --exists libcjson 2>/dev/null || add libcjson-dev
# Open MPI for libattn-mpi and its tests: the compiler wrapper and mpirun.
command -v mpicc >/dev/null 2>&1 || add libopenmpi-dev
command -v mpirun >/dev/null 2>&1 || add openmpi-bin
# SIMDe (portable x86 intrinsics) for the tests' second build of the AVX-512
# kernel files, found by the header that build includes.
[ -f /usr/include/simde/x86/avx512.h ] || add libsimde-dev
[ -x /usr/bin/chromium ] || add chromium
command -v node >/dev/null 2>&1 || add nodejs
command -v npm >/dev/null 2>&1 || add npm
if [ -n "$need" ]; then
    echo "installing test dependencies:$need"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $need
fi
# The browser driver, exactly as locked.
cd "$(dirname "$0")/.."
if ! npm ls playwright-core axe-core @node-llama-cpp/linux-x64 >/dev/null 2>&1; then
    echo "installing playwright-core, axe-core (and ggml's prebuilt CPU libraries, optional) from package-lock.json"
    npm ci --no-audit --no-fund --loglevel=error
fi
