#!/bin/sh
# test_install.sh BUILD -- `make install` into a temporary prefix, then build
# an outside program with `pkg-config --cflags --libs attn` and run it.
BUILD=${1:-build}
prefix=$(mktemp -d /tmp/attn_prefix_XXXXXX)
if ! make -s --no-print-directory BUILD="$BUILD" PREFIX="$prefix" install >"$prefix.log" 2>&1; then
    echo "FAIL make_install: $(tail -n 3 "$prefix.log" | tr '\n' ' ')"
    exit 1
fi
echo "ok make_install"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs attn) || { echo "FAIL pkg_config: attn.pc not found"; exit 1; }
echo "ok pkg_config"
if ! ${CC:-cc} -std=c11 -Wall -Wextra -Werror tests/install/hello.c $flags -o "$prefix/hello" 2>"$prefix.log"; then
    echo "FAIL outside_program_builds: $(head -n 3 "$prefix.log" | tr '\n' ' ')"
    exit 1
fi
echo "ok outside_program_builds"
# Scores [1, 0] / sqrt(2); softmax gives w = 1 / (1 + exp(-1/sqrt(2))) = 0.669762 for
# the value row [1, 2] and 1 - w for [3, 4]: out = [3 - 2w, 4 - 2w].
got=$(LD_LIBRARY_PATH="$prefix/lib" "$prefix/hello")
want="attn $(sed -n 's/^#define ATTN_VERSION_STRING "\(.*\)"/\1/p' include/attn.h): 1.660477 2.660477"
if [ "$got" = "$want" ]; then echo "ok outside_program_runs"; else echo "FAIL outside_program_runs: got '$got', want '$want'"; fi
LD_LIBRARY_PATH="$prefix/lib" ldd "$prefix/hello" | grep -q "$prefix/lib/libattn.so" && echo "ok links_shared_library" ||
    echo "FAIL links_shared_library: $(ldd "$prefix/hello" | grep attn)"
# The teaching header, installed beside attn.h, builds against the same library.
if ${CC:-cc} -std=c11 -Wall -Wextra -Werror tests/install/hello_teach.c $flags -o "$prefix/hello_teach" 2>"$prefix.log" &&
    [ "$(LD_LIBRARY_PATH="$prefix/lib" "$prefix/hello_teach")" = "3 tokens: the cat sat" ]; then
    echo "ok outside_program_uses_attn_teach_h"
else
    echo "FAIL outside_program_uses_attn_teach_h: $(head -n 3 "$prefix.log" | tr '\n' ' ')"
fi
# The README's C example is real code: it must build and run too.
awk '/^```c$/{f=1;next} /^```$/{f=0} f' README.md >"$prefix/readme.c"
if ${CC:-cc} -std=c11 -Wall -Wextra -Werror "$prefix/readme.c" $flags -o "$prefix/readme" 2>"$prefix.log" &&
    LD_LIBRARY_PATH="$prefix/lib" "$prefix/readme" >/dev/null; then
    echo "ok readme_example"
else
    echo "FAIL readme_example: $(head -n 3 "$prefix.log" | tr '\n' ' ')"
fi
# libattn-mpi, when Open MPI built it: its header, library and command are
# installed, and an outside MPI program builds against them.
if [ -f "$BUILD/libattn-mpi.a" ]; then
    if [ -f "$prefix/include/attn_mpi.h" ] && [ -x "$prefix/bin/attn-mpi" ] &&
        printf '#include <attn_mpi.h>\nint main(void) { attn_mpi_shard s; return attn_mpi_shard_of(&s, 10, 0, 2, ATTN_MPI_ZIGZAG, 0) || s.rows != 5; }\n' >"$prefix/mpi.c" &&
        mpicc -std=c11 -Wall -Werror "$prefix/mpi.c" -I"$prefix/include" "$prefix/lib/libattn-mpi.a" $flags -o "$prefix/mpi" 2>"$prefix.log" &&
        LD_LIBRARY_PATH="$prefix/lib" "$prefix/mpi"; then
        echo "ok installs_libattn_mpi"
    else
        echo "FAIL installs_libattn_mpi: $(head -n 3 "$prefix.log" | tr '\n' ' ')"
    fi
fi
rm -rf "$prefix" "$prefix.log"
