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
# An embedder's other compilers and dialects: the header and both example
# programs with gcc and clang at -std=c99 and -std=c11 (-pedantic), and as
# C++ with g++ and clang++ (the extern "C" guards: a call that links).
want_teach="3 tokens: the cat sat"
for cc in gcc clang g++ clang++; do
    if ! command -v "$cc" >/dev/null; then echo "skip outside_program_$cc: $cc is not installed"; continue; fi
    case $cc in *++) stds="c++11 c++17" lang="-x c++" ;; *) stds="c99 c11" lang="" ;; esac
    for std in $stds; do
        name="outside_program_${cc}_$std"
        # shellcheck disable=SC2086 # $lang and $flags are word lists
        if $cc $lang -std="$std" -pedantic -Wall -Wextra -Werror tests/install/hello.c -x none $flags \
            -o "$prefix/hello_$std" 2>"$prefix.log" &&
            $cc $lang -std="$std" -pedantic -Wall -Wextra -Werror tests/install/hello_teach.c -x none $flags \
                -o "$prefix/teach_$std" 2>>"$prefix.log" &&
            [ "$(LD_LIBRARY_PATH="$prefix/lib" "$prefix/hello_$std")" = "$want" ] &&
            [ "$(LD_LIBRARY_PATH="$prefix/lib" "$prefix/teach_$std")" = "$want_teach" ]; then
            echo "ok $name"
        else
            echo "FAIL $name: $(head -n 3 "$prefix.log" | tr '\n' ' ')"
        fi
    done
done
# Static linking through attn.pc's Libs.private (-lm -pthread): a program
# with no shared libattn, and no shared library at all.
static_libs=$(pkg-config --static --libs attn)
# shellcheck disable=SC2086
if ${CC:-cc} -std=c11 tests/install/hello.c $(pkg-config --cflags attn) -static $static_libs -o "$prefix/hello_static" \
    2>"$prefix.log" && [ "$("$prefix/hello_static")" = "$want" ] && ! readelf -d "$prefix/hello_static" | grep -q NEEDED; then
    echo "ok static_link_with_pkg_config"
elif grep -q "cannot find -lc\b\|cannot find -lm\b" "$prefix.log"; then
    echo "skip static_link_with_pkg_config: no static C library (libc6-dev's libc.a)"
else
    echo "FAIL static_link_with_pkg_config: '$static_libs': $(head -n 3 "$prefix.log" | tr '\n' ' ')"
fi
# The shared library: its soname, the version it is installed as, and
# nothing exported but attn_*; and the library never prints except in
# verbose mode (fprintf), never exits and never aborts (assert included).
lib="$prefix/lib/libattn.so"
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
version=$(sed -n 's/^#define ATTN_VERSION_STRING "\(.*\)"/\1/p' include/attn.h)
[ "$soname" = "libattn.so.0" ] && [ "$(readlink "$prefix/lib/libattn.so.0")" = "libattn.so.$version" ] &&
    [ -f "$prefix/lib/libattn.so.$version" ] && echo "ok soname_and_version" ||
    echo "FAIL soname_and_version: soname '$soname', libattn.so.0 -> '$(readlink "$prefix/lib/libattn.so.0")'"
others=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^attn_' | tr '\n' ' ')
[ -z "$others" ] && echo "ok exports_only_attn_symbols" || echo "FAIL exports_only_attn_symbols: $others"
# The static libraries too: a program linked with libattn.a shares one
# namespace with every global the archive defines, hidden visibility or
# not. The JSON writer's put and put_string clashed with a program's own
# put ("multiple definition of `put'"), and libattn-mpi.a's ring_open,
# ring_wait, ring_add ... with a program's own ring buffer.
for archive in "$prefix/lib/libattn.a" "$prefix/lib/libattn-mpi.a"; do
    [ -f "$archive" ] || continue
    others=$(nm -g --defined-only "$archive" | awk 'NF == 3 {print $3}' | grep -v '^attn_' | sort -u | tr '\n' ' ')
    [ -z "$others" ] && echo "ok $(basename "$archive" .a)_defines_only_attn_globals" ||
        echo "FAIL $(basename "$archive" .a)_defines_only_attn_globals: $others"
done
banned=$(nm -D --undefined-only "$lib" | awk '{print $2}' | sed 's/@.*//' |
    grep -xE 'exit|_exit|_Exit|quick_exit|abort|__assert_fail|printf|vprintf|puts|putchar|perror|fputs|fputc|putc' |
    tr '\n' ' ')
[ -z "$banned" ] && echo "ok never_prints_exits_or_aborts" || echo "FAIL never_prints_exits_or_aborts: $banned"
# A built attn-bench is brought up to date before it is installed: an old
# one, linked with an old libattn.a, was installed as it was beside the new
# attn that runs it (make -n: as if bench/table.c had just been edited).
if [ -x "$BUILD/attn-bench" ]; then
    make -n --no-print-directory BUILD="$BUILD" PREFIX="$prefix" -W bench/table.c install 2>&1 |
        grep -q -- "-o $BUILD/attn-bench " && echo "ok install_rebuilds_stale_attn_bench" ||
        echo "FAIL install_rebuilds_stale_attn_bench: make install would install $BUILD/attn-bench as it is"
else
    echo "skip install_rebuilds_stale_attn_bench: $BUILD/attn-bench is not built (make bench)"
fi
# DESTDIR stages the same tree under another root, attn.pc naming PREFIX.
stage="$prefix/stage"
if make -s --no-print-directory BUILD="$BUILD" DESTDIR="$stage" PREFIX=/opt/attn install >"$prefix.log" 2>&1 &&
    [ -f "$stage/opt/attn/include/attn.h" ] && [ -f "$stage/opt/attn/include/attn_teach.h" ] &&
    [ -f "$stage/opt/attn/lib/libattn.a" ] && [ -L "$stage/opt/attn/lib/libattn.so" ] &&
    [ -x "$stage/opt/attn/bin/attn" ] && grep -qx 'prefix=/opt/attn' "$stage/opt/attn/lib/pkgconfig/attn.pc" &&
    grep -qx 'Libs.private: -lm -pthread' "$stage/opt/attn/lib/pkgconfig/attn.pc"; then
    echo "ok destdir_install"
else
    echo "FAIL destdir_install: $(tail -n 3 "$prefix.log" | tr '\n' ' ')"
fi
# `sudo make install` into a lib directory the loader's configuration names
# runs ldconfig (else the loader's cache lacks libattn.so.0 and a program
# built against attn.pc does not start); into any other prefix, or staged
# with DESTDIR, it does not. A stand-in ldconfig first on PATH records it.
if [ "$(id -u)" != 0 ]; then
    echo "skip install_runs_ldconfig: make install runs ldconfig only as root"
else
    mkdir -p "$prefix/fake/bin" && printf '#!/bin/sh\necho ran >>"%s"\n' "$prefix/fake/ran" >"$prefix/fake/bin/ldconfig" &&
        chmod +x "$prefix/fake/bin/ldconfig" && printf '%s\n' "$prefix/lib" >"$prefix/fake/ld.so.conf"
    ran() { [ -f "$prefix/fake/ran" ] && wc -l <"$prefix/fake/ran" || echo 0; }
    PATH="$prefix/fake/bin:$PATH" make -s --no-print-directory BUILD="$BUILD" PREFIX="$prefix" \
        LDSO_CONF="$prefix/fake/ld.so.conf" install >"$prefix.log" 2>&1 && configured=$(ran) &&
        PATH="$prefix/fake/bin:$PATH" make -s --no-print-directory BUILD="$BUILD" PREFIX="$prefix" \
            LDSO_CONF="$prefix/fake/none.conf" install >>"$prefix.log" 2>&1 && elsewhere=$(ran) &&
        PATH="$prefix/fake/bin:$PATH" make -s --no-print-directory BUILD="$BUILD" PREFIX="$prefix" DESTDIR="$prefix/st" \
            LDSO_CONF="$prefix/fake/ld.so.conf" install >>"$prefix.log" 2>&1 && staged=$(ran)
    if [ "${configured:-}" = 1 ] && [ "${elsewhere:-}" = 1 ] && [ "${staged:-}" = 1 ]; then
        echo "ok install_runs_ldconfig"
    else
        echo "FAIL install_runs_ldconfig: ldconfig runs after each install: ${configured:-?}, ${elsewhere:-?}, ${staged:-?} (want 1, 1, 1); $(tail -n 2 "$prefix.log" | tr '\n' ' ')"
    fi
fi
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
    # attn-mpi.pc, as attn.pc is tested: found, of the library's version,
    # and an outside MPI program built with its flags alone (Requires: attn
    # brings libattn's) and mpicc, or the system's cc and MPI's mpi-c.
    want_mpi="attn-mpi $version: 1.660477 2.660477"
    # shellcheck disable=SC2086,SC2046 # $mpi_flags and pkg-config's output are word lists
    if mpi_flags=$(pkg-config --cflags --libs attn-mpi 2>/dev/null) && [ "$(pkg-config --modversion attn-mpi)" = "$version" ] &&
        mpicc -std=c11 -Wall -Wextra -Werror tests/install/hello_mpi.c $mpi_flags -o "$prefix/hello_mpi" 2>"$prefix.log" &&
        [ "$(LD_LIBRARY_PATH="$prefix/lib" "$prefix/hello_mpi")" = "$want_mpi" ]; then
        echo "ok pkg_config_attn_mpi"
    else
        echo "FAIL pkg_config_attn_mpi: '${mpi_flags:-no attn-mpi.pc}': $(head -n 3 "$prefix.log" | tr '\n' ' ')"
    fi
    if ! pkg-config --exists mpi-c; then
        echo "skip pkg_config_attn_mpi_with_cc: MPI has no mpi-c.pc"
    elif ${CC:-cc} -std=c11 -Wall -Wextra -Werror tests/install/hello_mpi.c $(pkg-config --cflags --libs attn-mpi mpi-c 2>"$prefix.log") \
        -o "$prefix/hello_mpi_cc" 2>"$prefix.log" && [ "$(LD_LIBRARY_PATH="$prefix/lib" "$prefix/hello_mpi_cc")" = "$want_mpi" ]; then
        echo "ok pkg_config_attn_mpi_with_cc"
    else
        echo "FAIL pkg_config_attn_mpi_with_cc: $(head -n 3 "$prefix.log" | tr '\n' ' ')"
    fi
    stage="$prefix/stage_mpi"
    if make -s --no-print-directory BUILD="$BUILD" DESTDIR="$stage" PREFIX=/opt/attn install >"$prefix.log" 2>&1 &&
        grep -qx 'prefix=/opt/attn' "$stage/opt/attn/lib/pkgconfig/attn-mpi.pc" &&
        make -s --no-print-directory BUILD="$BUILD" DESTDIR="$stage" PREFIX=/opt/attn uninstall >>"$prefix.log" 2>&1 &&
        [ ! -e "$stage/opt/attn/lib/pkgconfig/attn-mpi.pc" ]; then
        echo "ok destdir_install_attn_mpi_pc"
    else
        echo "FAIL destdir_install_attn_mpi_pc: $(tail -n 3 "$prefix.log" | tr '\n' ' ')"
    fi
fi
# make uninstall removes what install put there and nothing else: another
# version's library beside it (a libattn.so.1, an older 0.x) stays, and the
# links stay where they lead to another version.
un="$prefix/un"
if make -s --no-print-directory BUILD="$BUILD" PREFIX="$un" install >"$prefix.log" 2>&1 &&
    touch "$un/lib/libattn.so.1.0.0" "$un/lib/libattn.so.0.0.1" &&
    make -s --no-print-directory BUILD="$BUILD" PREFIX="$un" uninstall >>"$prefix.log" 2>&1 &&
    [ "$(find "$un" ! -type d | sort | tr '\n' ' ')" = "$un/lib/libattn.so.0.0.1 $un/lib/libattn.so.1.0.0 " ] &&
    make -s --no-print-directory BUILD="$BUILD" PREFIX="$un" install >>"$prefix.log" 2>&1 &&
    ln -sf libattn.so.0.0.1 "$un/lib/libattn.so.0" &&
    make -s --no-print-directory BUILD="$BUILD" PREFIX="$un" uninstall >>"$prefix.log" 2>&1 &&
    [ "$(readlink "$un/lib/libattn.so.0")" = libattn.so.0.0.1 ] && [ "$(readlink "$un/lib/libattn.so")" = libattn.so.0 ] &&
    [ ! -e "$un/lib/libattn.so.$version" ]; then
    echo "ok uninstall_leaves_other_versions"
else
    echo "FAIL uninstall_leaves_other_versions: left $(find "$un" ! -type d | tr '\n' ' ') $(tail -n 2 "$prefix.log" | tr '\n' ' ')"
fi
rm -rf "$prefix" "$prefix.log"
