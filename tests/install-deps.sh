#!/bin/sh
# install-deps.sh -- install what the tests need from Debian's packages, only
# when it is missing: NumPy and PyTorch for /usr/bin/python3 (the oracle),
# clang (the second compiler), pkg-config (the install test).
set -e
need=""
[ -x /usr/bin/python3 ] || need="$need python3"
/usr/bin/python3 -c 'import numpy' 2>/dev/null || need="$need python3-numpy"
/usr/bin/python3 -c 'import torch' 2>/dev/null || need="$need python3-torch"
command -v clang >/dev/null 2>&1 || need="$need clang"
command -v pkg-config >/dev/null 2>&1 || need="$need pkg-config"
[ -z "$need" ] && exit 0
echo "installing test dependencies:$need"
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $need
