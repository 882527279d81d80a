# attn -- build, test and install. Plain GNU make; see README.md.
#
#   make            build/attn, build/libattn.a, build/libattn.so
#   make run        build, then explain one attention head step by step (attn explain)
#   make test       install test dependencies if missing, build, run every test
#   make install    PREFIX=/usr/local (DESTDIR honoured)

CC      ?= cc
BUILD   ?= build
PREFIX  ?= /usr/local
VERSION := $(shell sed -n 's/^#define ATTN_VERSION_STRING "\(.*\)"/\1/p' include/attn.h)
SOMAJOR := 0

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wvla
# -O2 and strict IEEE semantics: never -ffast-math (it breaks -inf masks and NaN).
CFLAGS   ?= -O2 -g
# x86-64 builds add the AVX2 and AVX-512 microkernels, each file compiled for
# its instruction set and chosen at run time (src/kernels/dispatch.c).
ifneq ($(findstring x86_64,$(shell $(CC) -dumpmachine)),)
ISA_DEFS := -DATTN_HAVE_X86_KERNELS
endif
ALL_CFLAGS := -std=c11 -D_POSIX_C_SOURCE=200809L $(WARN) $(CFLAGS) -Iinclude -Isrc $(ISA_DEFS)
LIB_CFLAGS := $(ALL_CFLAGS) -fPIC -fvisibility=hidden -DATTN_BUILDING_LIBRARY
SAN_FLAGS  := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
LIBS       := -lm -pthread
# The command reads safetensors headers with cJSON (Debian's libcjson-dev) when
# pkg-config finds it; `make test` installs it. Without it the command still
# builds, and reads weights from .npy files only. cli/safetensors.c is
# rebuilt when the choice changes: its objects depend on a stamp file named
# by a checksum of the flags, $(BUILD)/cli-json.SUM, which exists only for
# the flags last built with. A stamp that is there is up to date (nothing
# FORCE'd, so `make -n` after a build is quiet); other flags name a stamp
# that is not, and making it removes the old one, so going back rebuilds too.
JSON_LIBS  := $(shell pkg-config --libs libcjson 2>/dev/null)
JSON_DEFS  := $(if $(JSON_LIBS),-DATTN_HAVE_CJSON $(shell pkg-config --cflags libcjson 2>/dev/null))
JSON_STAMP := $(BUILD)/cli-json.$(firstword $(shell printf '%s' '$(JSON_DEFS)' | cksum))
CLI_LIBS   := $(LIBS) $(JSON_LIBS)

# src/ holds one folder per layer (docs/design.md): base, kernels, exact,
# fast, sdpa, io, teach.
LIB_SRC := $(sort $(shell find src -name '*.c'))
CLI_SRC := $(wildcard cli/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
HEADERS := include/attn.h include/attn_teach.h $(shell find src -name '*.h') $(wildcard cli/*.h)
# The tests' own headers (check.h, process.h, rng.h, tensors.h): a test is
# rebuilt when one it may include changes (the fuzzers track theirs, below).
TEST_HEADERS := $(wildcard tests/*.h)

TEST_BINS := $(BUILD)/tests/test_api $(BUILD)/tests/sdpa_strided $(BUILD)/tests/explain_api \
             $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c)) \
             $(BUILD)/tests/test_fast $(BUILD)/tests/test_backward $(BUILD)/tests/test_gemm \
             $(BUILD)/tests/test_subnormal $(BUILD)/tests/test_memory \
             $(BUILD)/asan/test_api $(BUILD)/asan/test_backward $(BUILD)/asan/test_alloc \
             $(BUILD)/asan/attn $(BUILD)/asan/test_gemm $(BUILD)/tsan/test_fast $(BUILD)/tsan/test_backward \
             $(BUILD)/tsan/test_gemm $(BUILD)/tests/test_edges $(BUILD)/asan/test_edges \
             $(BUILD)/tests/test_varlen $(BUILD)/asan/test_varlen $(BUILD)/tsan/test_varlen \
             $(BUILD)/tests/test_kv_pages $(BUILD)/asan/test_kv_pages $(BUILD)/tsan/test_kv_pages \
             $(BUILD)/tests/test_plan $(BUILD)/asan/test_plan $(BUILD)/tsan/test_plan \
             $(BUILD)/tests/test_quant_kv $(BUILD)/asan/test_quant_kv $(BUILD)/tsan/test_quant_kv \
             $(BUILD)/tests/test_threads $(BUILD)/asan/test_threads $(BUILD)/tsan/test_threads \
             $(BUILD)/asan/test_dlclose \
             $(BUILD)/asan/test_abi_0_2_static $(BUILD)/asan/test_abi_0_2_shared $(BUILD)/asan/test_abi_kv_desc \
             $(BUILD)/asan/test_abi_npy_info $(BUILD)/asan/test_abi_npy_info_shared \
             $(BUILD)/asan/test_abi_mha_options $(BUILD)/asan/test_abi_newer

# libattn-mpi (mpi/, include/attn_mpi.h), the attn-mpi command (cli/mpi/) and
# their test are built when mpicc exists (Debian's libopenmpi-dev; `make test`
# installs it). mpicc compiles with $(CC) (OMPI_CC), so the clang build is clang's.
MPICC     ?= mpicc
HAVE_MPI  := $(shell command -v $(MPICC) 2>/dev/null)
MPI_CC     = OMPI_CC=$(CC) $(MPICC)
MPI_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard mpi/*.c))
MPI_CLI   := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard cli/mpi/*.c))
MPI_TARGETS := $(if $(HAVE_MPI),$(BUILD)/libattn-mpi.a $(BUILD)/attn-mpi)
TEST_BINS   += $(if $(HAVE_MPI),$(BUILD)/tests/test_mpi $(BUILD)/asan/test_mpi)

.PHONY: all lib run web bench fuzz test test-deps test-bins install uninstall clean
all: $(BUILD)/attn $(BUILD)/libattn.a $(BUILD)/libattn.so $(BUILD)/libattn.so.$(SOMAJOR) $(MPI_TARGETS)
lib: $(BUILD)/libattn.a $(BUILD)/libattn.so $(BUILD)/libattn.so.$(SOMAJOR)

$(BUILD)/obj/src/%.o: src/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) $(ISA_FLAGS_$(notdir $*)) -c $< -o $@

ISA_FLAGS_ukernel_avx2   := -mavx2 -mfma -mf16c
ISA_FLAGS_ukernel_avx512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma
ISA_FLAGS_ukernel_avx512bf16 := -mavx512f -mavx512bw -mavx512vl -mavx512bf16 -mfma
ISA_FLAGS_widen_quant_avx2   := -mavx2 -mf16c
ISA_FLAGS_widen_quant_avx512 := -mavx512f -mavx512bw -mavx512vl
ISA_FLAGS_decode_quant_avx2   := -mavx2 -mfma -mf16c
ISA_FLAGS_decode_quant_avx512 := -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512bf16 -mfma -mf16c
ISA_FLAGS_decode_quant_avxvnni := -mavx2 -mfma -mf16c -mavxvnni
ISA_FLAGS_decode_groups_avx2   := -mavx2 -mfma -mf16c
ISA_FLAGS_decode_values_avx512 := -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mfma -mf16c
ISA_FLAGS_decode_groups_avx512 := -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mfma -mf16c
ISA_FLAGS_ukernel_amx    := -mavx512f -mavx512bw -mavx512vl -mavx512bf16 -mfma -mamx-tile -mamx-bf16
ISA_FLAGS_dgemm_avx2     := -mavx2 -mfma
ISA_FLAGS_dgemm_avx512   := -mavx512f -mfma
ISA_FLAGS_sgemm_avx2     := -mavx2 -mfma
ISA_FLAGS_sgemm_avx512   := -mavx512f -mfma

# The AVX-512, AVX512_BF16 and integer dot product (AVX512-VNNI, AVX-VNNI)
# kernel files compiled a second time, against
# SIMDe's portable implementations of the intrinsics (Debian's libsimde-dev,
# found by its header; `make test` installs it) and without -mavx512f, so
# that test_fast_simde runs their code on any CPU. tests/simde/ holds the
# prelude and the intrinsics SIMDe lacks; the library never sees them.
HAVE_SIMDE  := $(wildcard /usr/include/simde/x86/avx512.h)
# -Wno-psabi: simde_extra.h's static functions pass 512-bit vectors by value
# in a build without AVX-512, which crosses no ABI (GCC's note ignores pragmas).
# -O1: at -O2 GCC takes about 5 minutes on the integer kernel's file through
# SIMDe's portable vectors (1 minute at -O1); the results are the same (C11
# without -ffast-math: no contraction, no reassociation), and these objects
# are for checking, not for timing.
SIMDE_FLAGS := -Itests/simde -include tests/simde/intrin_simde.h -Wno-psabi -O1
SIMDE_OBJ   := $(BUILD)/simde/ukernel_avx512.o $(BUILD)/simde/ukernel_avx512bf16.o \
               $(BUILD)/simde/widen_quant_avx512.o $(BUILD)/simde/decode_quant_avx512.o \
               $(BUILD)/simde/decode_quant_avxvnni.o $(BUILD)/simde/decode_groups_avx512.o \
               $(BUILD)/simde/decode_values_avx512.o
$(BUILD)/simde/%.o: src/kernels/x86/%.c $(HEADERS) tests/simde/intrin_simde.h tests/simde/simde_extra.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SIMDE_FLAGS) -c $< -o $@
$(BUILD)/tests/test_fast_simde: tests/test_fast.c $(SIMDE_OBJ) $(BUILD)/libattn.a $(HEADERS) $(TEST_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -DATTN_TEST_SIMDE -o $@ $< $(SIMDE_OBJ) $(BUILD)/libattn.a $(LIBS)
TEST_BINS += $(if $(HAVE_SIMDE),$(BUILD)/tests/test_fast_simde)

# The AMX kernel file compiled a second time against the tests' tile
# emulator (tests/amx/amx_emu.h), without -mamx-tile or AVX-512: test_amx
# runs it on any x86-64 CPU. Its bf16 conversions are the portable ones.
AMX_EMU_OBJ := $(BUILD)/amx_emu/ukernel_amx.o
$(AMX_EMU_OBJ): src/kernels/x86/ukernel_amx.c $(HEADERS) tests/amx/amx_emu.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -include tests/amx/amx_emu.h -DATTN_AMX_HELPERS=attn_bf16_emulated -c $< -o $@
$(BUILD)/tests/test_amx: tests/test_amx.c tests/amx/amx_emu.h $(AMX_EMU_OBJ) $(BUILD)/libattn.a $(HEADERS) $(TEST_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests -o $@ $< $(AMX_EMU_OBJ) $(BUILD)/libattn.a $(LIBS)
# ... and under ASan+UBSan, library and emulated kernels together.
$(BUILD)/asan/amx_emu/ukernel_amx.o: src/kernels/x86/ukernel_amx.c $(HEADERS) tests/amx/amx_emu.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O1 $(SAN_FLAGS) -include tests/amx/amx_emu.h -DATTN_AMX_HELPERS=attn_bf16_emulated -c $< -o $@
$(BUILD)/asan/obj/tests/test_amx.o: tests/amx/amx_emu.h
$(BUILD)/asan/test_amx: $(BUILD)/asan/obj/tests/test_amx.o $(BUILD)/asan/amx_emu/ukernel_amx.o $(LIB_SRC:%.c=$(BUILD)/asan/obj/%.o)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(LIBS)
TEST_BINS += $(if $(ISA_DEFS),$(BUILD)/tests/test_amx $(BUILD)/asan/test_amx)

$(BUILD)/obj/cli/%.o: cli/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(JSON_DEFS) -c $< -o $@

$(JSON_STAMP):
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/cli-json $(BUILD)/cli-json.*
	@echo '$(JSON_DEFS)' > $@
$(BUILD)/obj/cli/safetensors.o $(BUILD)/asan/obj/cli/safetensors.o $(BUILD)/fuzz/obj/cli/safetensors.o: $(JSON_STAMP)

$(BUILD)/libattn.a: $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/libattn.so: $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libattn.so.$(SOMAJOR) -o $@ $^ $(LIBS)

# The soname's link beside it, so that a program linked with -Lbuild -lattn
# (and -Wl,-rpath) runs from the build tree: the loader looks for the soname.
$(BUILD)/libattn.so.$(SOMAJOR): $(BUILD)/libattn.so
	ln -sf libattn.so $@

$(BUILD)/obj/mpi/%.o: mpi/%.c mpi/ring.h include/attn_mpi.h include/attn.h
	@mkdir -p $(dir $@)
	$(MPI_CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/libattn-mpi.a: $(MPI_OBJ)
	rm -f $@
	ar rcs $@ $^

# attn-mpi's own headers (cli/mpi/*.h) are not in $(HEADERS): the library
# never sees them, so an edit of one rebuilds attn-mpi's objects (and the
# fuzzer's args_mpi.o) alone.
MPI_CLI_HEADERS := $(wildcard cli/mpi/*.h)
$(BUILD)/obj/cli/mpi/%.o: cli/mpi/%.c include/attn_mpi.h $(HEADERS) $(MPI_CLI_HEADERS)
	@mkdir -p $(dir $@)
	$(MPI_CC) $(ALL_CFLAGS) -Icli -c $< -o $@
$(BUILD)/fuzz/obj/cli/mpi/args_mpi.o: $(MPI_CLI_HEADERS)

# The command reuses the plain command's output and error helpers (cli/util.c).
$(BUILD)/attn-mpi: $(MPI_CLI) $(BUILD)/obj/cli/util.o $(BUILD)/obj/cli/text.o $(BUILD)/libattn-mpi.a $(BUILD)/libattn.a
	$(MPI_CC) $(ALL_CFLAGS) -o $@ $(MPI_CLI) $(BUILD)/obj/cli/util.o $(BUILD)/obj/cli/text.o $(BUILD)/libattn-mpi.a $(BUILD)/libattn.a $(LIBS)

$(BUILD)/tests/test_mpi: tests/test_mpi.c $(BUILD)/libattn-mpi.a $(BUILD)/libattn.a $(HEADERS) $(TEST_HEADERS) include/attn_mpi.h
	@mkdir -p $(dir $@)
	$(MPI_CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libattn-mpi.a $(BUILD)/libattn.a $(LIBS)

# The command links the static library: it runs from build/ without an rpath.
$(BUILD)/attn: $(CLI_OBJ) $(BUILD)/libattn.a
	$(CC) $(ALL_CFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libattn.a $(CLI_LIBS)

# Memory linear in L and S: the library's objects with tests/test_memory.c's
# allocator wrappers, which count live and peak bytes (ALLOC_WRAP, below).
$(BUILD)/tests/test_memory: tests/test_memory.c $(LIB_OBJ) $(HEADERS) $(TEST_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(ALLOC_WRAP) -o $@ $< $(LIB_OBJ) $(LIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libattn.a $(HEADERS) $(TEST_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libattn.a $(LIBS)

# The worked examples, built as an outside program is: the public header
# alone, linked with the shared library in the build tree (its soname's
# link beside it), which an rpath finds; the tests run them.
$(BUILD)/examples/%: examples/%.c $(BUILD)/libattn.so $(BUILD)/libattn.so.$(SOMAJOR) include/attn.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(WARN) $(CFLAGS) -Iinclude -o $@ $< -L$(BUILD) -lattn -lm -Wl,-rpath,$(abspath $(BUILD))

# Unit tests again, library and test together under AddressSanitizer and
# UndefinedBehaviorSanitizer; and the command, for the bad-input tests.
SAN_LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/asan/obj/%.o)
$(BUILD)/asan/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(JSON_DEFS) -O1 $(SAN_FLAGS) $(ISA_FLAGS_$(notdir $*)) -c $< -o $@

# The sanitizer builds' test objects come from the pattern rules above and
# below, which know only $(HEADERS): the tests' headers added here.
$(patsubst %.c,$(BUILD)/asan/obj/%.o,$(wildcard tests/*.c)) $(patsubst %.c,$(BUILD)/tsan/obj/%.o,$(wildcard tests/*.c)): \
    $(TEST_HEADERS)

$(BUILD)/asan/test_api: $(BUILD)/asan/obj/tests/test_api.o $(SAN_LIB_OBJ)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(LIBS)

$(BUILD)/asan/test_backward: $(BUILD)/asan/obj/tests/test_backward.o $(SAN_LIB_OBJ)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(LIBS)

$(BUILD)/asan/test_gemm: $(BUILD)/asan/obj/tests/test_gemm.o $(SAN_LIB_OBJ)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(LIBS)

$(BUILD)/asan/test_edges: $(BUILD)/asan/obj/tests/test_edges.o $(SAN_LIB_OBJ)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(LIBS)

$(BUILD)/asan/test_varlen: $(BUILD)/asan/obj/tests/test_varlen.o $(SAN_LIB_OBJ)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(LIBS)
$(BUILD)/asan/test_kv_pages: $(BUILD)/asan/obj/tests/test_kv_pages.o $(SAN_LIB_OBJ)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(LIBS)
$(BUILD)/asan/test_plan: $(BUILD)/asan/obj/tests/test_plan.o $(SAN_LIB_OBJ)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(LIBS)
$(BUILD)/asan/test_quant_kv: $(BUILD)/asan/obj/tests/test_quant_kv.o $(SAN_LIB_OBJ)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(LIBS)
$(BUILD)/asan/test_threads: $(BUILD)/asan/obj/tests/test_threads.o $(SAN_LIB_OBJ)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(LIBS)
# The plain shared library dlopen'd and dlclose'd in a loop by a program
# under ASan+UBSan (its leak check sees the library's allocations too).
$(BUILD)/asan/test_dlclose: tests/test_dlclose.c $(TEST_HEADERS) include/attn.h $(BUILD)/libattn.so
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O1 $(SAN_FLAGS) -o $@ $< $(LIBS) -ldl

# A program built against release 0.2.0's headers (tests/abi/0.2/, frozen
# copies; it never sees include/) with today's library, under ASan+UBSan:
# linked with the library's sanitized objects, and with build/libattn.so as
# an installed binary is (by its soname, a link to it beside the test).
ABI_CFLAGS := -std=c11 -D_POSIX_C_SOURCE=200809L $(WARN) -O1 -g $(SAN_FLAGS) -Itests/abi/0.2
ABI_DEPS   := tests/abi/test_abi_0_2.c tests/abi/0.2/attn.h tests/abi/0.2/attn_teach.h $(TEST_HEADERS)
$(BUILD)/asan/test_abi_0_2_static: $(ABI_DEPS) $(SAN_LIB_OBJ)
	$(CC) $(ABI_CFLAGS) -o $@ $< $(SAN_LIB_OBJ) $(LIBS)
$(BUILD)/asan/test_abi_0_2_shared: $(ABI_DEPS) $(BUILD)/libattn.so
	@mkdir -p $(BUILD)/asan/abi
	ln -sf $(abspath $(BUILD))/libattn.so $(BUILD)/asan/abi/libattn.so.$(SOMAJOR)
	$(CC) $(ABI_CFLAGS) -o $@ $< $(BUILD)/asan/abi/libattn.so.$(SOMAJOR) -Wl,-rpath,'$$ORIGIN/abi' $(LIBS)

# A program that knows the KV caches' descriptions as they were before
# key_dtype was added at their end, with today's library (ASan+UBSan).
$(BUILD)/asan/test_abi_kv_desc: tests/abi/test_abi_kv_desc.c include/attn.h $(TEST_HEADERS) $(SAN_LIB_OBJ)
	$(CC) -std=c11 -D_POSIX_C_SOURCE=200809L $(WARN) -O1 -g $(SAN_FLAGS) -Iinclude -o $@ $< $(SAN_LIB_OBJ) $(LIBS)

# A program with 0.3.0's attn_mha_options (before `packed`), each call of the
# layer given it in a heap block of its size, with today's library (ASan+UBSan).
$(BUILD)/asan/test_abi_mha_options: tests/abi/test_abi_mha_options.c include/attn.h $(TEST_HEADERS) $(SAN_LIB_OBJ)
	$(CC) -std=c11 -D_POSIX_C_SOURCE=200809L $(WARN) -O1 -g $(SAN_FLAGS) -Iinclude -o $@ $< $(SAN_LIB_OBJ) $(LIBS)

# A program built against a newer attn.h: each versioned struct in a heap
# block of a larger sizeof, refused by every call that takes it (ASan+UBSan).
$(BUILD)/asan/test_abi_newer: tests/abi/test_abi_newer.c include/attn.h $(TEST_HEADERS) $(SAN_LIB_OBJ)
	$(CC) -std=c11 -D_POSIX_C_SOURCE=200809L $(WARN) -O1 -g $(SAN_FLAGS) -Iinclude -o $@ $< $(SAN_LIB_OBJ) $(LIBS)

# A program built against 0.3.0's attn_npy_info (no struct_size), and
# today's struct at its caller's sizes, with today's library (ASan+UBSan).
$(BUILD)/asan/test_abi_npy_info: tests/abi/test_abi_npy_info.c include/attn.h $(TEST_HEADERS) $(SAN_LIB_OBJ)
	$(CC) -std=c11 -D_POSIX_C_SOURCE=200809L $(WARN) -O1 -g $(SAN_FLAGS) -Iinclude -o $@ $< $(SAN_LIB_OBJ) $(LIBS)
# ... and with build/libattn.so, where a 0.3 binary finds attn_npy_header.
$(BUILD)/asan/test_abi_npy_info_shared: tests/abi/test_abi_npy_info.c include/attn.h $(TEST_HEADERS) $(BUILD)/libattn.so
	@mkdir -p $(BUILD)/asan/abi
	ln -sf $(abspath $(BUILD))/libattn.so $(BUILD)/asan/abi/libattn.so.$(SOMAJOR)
	$(CC) -std=c11 -D_POSIX_C_SOURCE=200809L $(WARN) -O1 -g $(SAN_FLAGS) -Iinclude -o $@ $< \
	      $(BUILD)/asan/abi/libattn.so.$(SOMAJOR) -Wl,-rpath,'$$ORIGIN/abi' $(LIBS)

# The ring under ASan+UBSan too (library, libattn-mpi and test together).
$(BUILD)/asan/obj/mpi/%.o: mpi/%.c mpi/ring.h include/attn_mpi.h include/attn.h
	@mkdir -p $(dir $@)
	$(MPI_CC) $(ALL_CFLAGS) -O1 $(SAN_FLAGS) -c $< -o $@
$(BUILD)/asan/test_mpi: tests/test_mpi.c $(MPI_OBJ:$(BUILD)/obj/%=$(BUILD)/asan/obj/%) $(SAN_LIB_OBJ) $(TEST_HEADERS) include/attn_mpi.h
	$(MPI_CC) $(ALL_CFLAGS) -O1 $(SAN_FLAGS) -o $@ $< $(MPI_OBJ:$(BUILD)/obj/%=$(BUILD)/asan/obj/%) $(SAN_LIB_OBJ) $(LIBS)

# Allocation failure: every allocation of the library's objects goes through
# tests/test_alloc.c's wrappers, which fail the n-th on request.
ALLOC_WRAP := -Wl,--wrap=malloc,--wrap=calloc,--wrap=aligned_alloc,--wrap=realloc,--wrap=free
$(BUILD)/asan/test_alloc: $(BUILD)/asan/obj/tests/test_alloc.o $(SAN_LIB_OBJ)
	$(CC) $(SAN_FLAGS) $(ALLOC_WRAP) -o $@ $^ $(LIBS)

$(BUILD)/asan/attn: $(CLI_SRC:%.c=$(BUILD)/asan/obj/%.o) $(SAN_LIB_OBJ)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(CLI_LIBS)

# The thread pool and the fast kernels under ThreadSanitizer.
TSAN_LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/tsan/obj/%.o)
$(BUILD)/tsan/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O1 -fsanitize=thread $(ISA_FLAGS_$(notdir $*)) -c $< -o $@

$(BUILD)/tsan/test_fast: $(BUILD)/tsan/obj/tests/test_fast.o $(TSAN_LIB_OBJ)
	$(CC) -fsanitize=thread -o $@ $^ $(LIBS)

$(BUILD)/tsan/test_backward: $(BUILD)/tsan/obj/tests/test_backward.o $(TSAN_LIB_OBJ)
	$(CC) -fsanitize=thread -o $@ $^ $(LIBS)

$(BUILD)/tsan/test_varlen: $(BUILD)/tsan/obj/tests/test_varlen.o $(TSAN_LIB_OBJ)
	$(CC) -fsanitize=thread -o $@ $^ $(LIBS)

$(BUILD)/tsan/test_gemm: $(BUILD)/tsan/obj/tests/test_gemm.o $(TSAN_LIB_OBJ)
	$(CC) -fsanitize=thread -o $@ $^ $(LIBS)

$(BUILD)/tsan/test_kv_pages: $(BUILD)/tsan/obj/tests/test_kv_pages.o $(TSAN_LIB_OBJ)
	$(CC) -fsanitize=thread -o $@ $^ $(LIBS)

$(BUILD)/tsan/test_plan: $(BUILD)/tsan/obj/tests/test_plan.o $(TSAN_LIB_OBJ)
	$(CC) -fsanitize=thread -o $@ $^ $(LIBS)

$(BUILD)/tsan/test_quant_kv: $(BUILD)/tsan/obj/tests/test_quant_kv.o $(TSAN_LIB_OBJ)
	$(CC) -fsanitize=thread -o $@ $^ $(LIBS)

$(BUILD)/tsan/test_threads: $(BUILD)/tsan/obj/tests/test_threads.o $(TSAN_LIB_OBJ)
	$(CC) -fsanitize=thread -o $@ $^ $(LIBS)

# The explainer page: the library and web/attn_web.c compiled to wasm32 with
# clang and Debian's wasi-libc (see docs/web.md), inlined with the page's
# HTML, CSS and JS into one self-contained file.
WASM_CC    ?= clang
WASM_FLAGS := --target=wasm32-wasi -mexec-model=reactor -std=c11 -D_POSIX_C_SOURCE=200809L \
              $(WARN) -O2 -Iinclude -Isrc
# The page reads no files: no .npy reader (src/io/npy.c), nor 0.3's shim of it.
WEB_LIB_SRC := $(filter-out src/io/npy.c src/abi/abi_0_3.c src/kernels/x86/%,$(LIB_SRC))
# wasm-ld gives the stack 64 KiB by default, placed after the data, where
# an overflow silently overwrites malloc's state (training on the page,
# whose backward pass nests planned calls, needed more). 1 MiB, placed
# first: an overflow then runs below address 0 and traps where it happens.
WASM_STACK  := -Wl,-z,stack-size=1048576 -Wl,--stack-first

$(BUILD)/web/attn.wasm: web/attn_web.c $(WEB_LIB_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(WASM_CC) $(WASM_FLAGS) -o $@ web/attn_web.c $(WEB_LIB_SRC) -Wl,--strip-all $(WASM_STACK) -lm

$(BUILD)/explainer.html: web/explainer.html web/explainer.css web/explainer.js web/explainer_kernel.js web/build.sh \
                         $(BUILD)/web/attn.wasm
	sh web/build.sh $(BUILD)/web/attn.wasm $@

web: $(BUILD)/explainer.html

# The fuzzers (tests/fuzz/): libFuzzer targets built with clang, library and
# command under AddressSanitizer and UndefinedBehaviorSanitizer. `make fuzz`
# builds them; `make test` replays their committed corpus; docs/testing.md
# says how to run them for longer, and how to measure what they cover:
# FUZZ_EXTRA adds flags to every fuzzer object and link, e.g.
# `make BUILD=/tmp/cov FUZZ_EXTRA='-fprofile-instr-generate -fcoverage-mapping' fuzz`.
FUZZ_CC      ?= clang
FUZZ_EXTRA   ?=
FUZZ_TARGETS := npy tokenize args explain_load mha_load safetensors mpi_args api varlen kv_pages quant env sdpa_load bench_args
FUZZ_BASE    := -std=c11 -D_POSIX_C_SOURCE=200809L $(WARN) -g -O1 -Iinclude -Isrc $(ISA_DEFS) -fno-omit-frame-pointer $(FUZZ_EXTRA)
FUZZ_CFLAGS  := $(FUZZ_BASE) -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_OBJ := $(LIB_SRC:%.c=$(BUILD)/fuzz/obj/%.o) $(filter-out $(BUILD)/fuzz/obj/cli/main.o,$(CLI_SRC:%.c=$(BUILD)/fuzz/obj/%.o))
FUZZ_BINS := $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
# The microkernels (src/kernels/c, src/kernels/x86) are built under the sanitizers but
# without coverage feedback: their branches are loop counters that say nothing about the
# input, and tracing every compare in the FMA loops cost the API fuzzer half its speed.
# The x86 microkernel files are built here without the sanitizers too: clang's
# ASan+UBSan took 14 minutes and 5 GB on ukernel_avx512.c alone (10 s without),
# and the kernels run under ASan+UBSan in the sanitizer build's suites (gcc).
FUZZ_COV = $(if $(filter src/kernels/c/% src/kernels/x86/%,$*),,-fsanitize=fuzzer-no-link)
FUZZ_OBJ_FLAGS = $(if $(filter src/kernels/x86/%,$*),$(FUZZ_BASE),$(FUZZ_CFLAGS))
$(BUILD)/fuzz/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_OBJ_FLAGS) $(JSON_DEFS) $(FUZZ_COV) $(ISA_FLAGS_$(notdir $*)) -c $< -o $@
# A fuzzer is compiled and linked in one step, which writes the headers
# its source includes (tests/fuzz/*.h, cli.h, attn.h ...) to FUZZER.d, read
# back below: editing one relinks the fuzzers that include it and no other.
# A fuzzer without its .d (built before it had one) is rebuilt once.
FUZZ_DEPS = -MMD -MP -MT $@ -MF $@.d
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(BUILD)/fuzz/fuzz_%.d $(FUZZ_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_DEPS) -fsanitize=fuzzer -o $@ $< $(FUZZ_OBJ) $(CLI_LIBS)
# attn-mpi's argument parser has no MPI in it: fuzzed without MPI.
$(BUILD)/fuzz/fuzz_mpi_args: tests/fuzz/fuzz_mpi_args.c $(BUILD)/fuzz/fuzz_mpi_args.d $(FUZZ_OBJ) \
                             $(BUILD)/fuzz/obj/cli/mpi/args_mpi.o
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_DEPS) -fsanitize=fuzzer -o $@ $< $(FUZZ_OBJ) $(BUILD)/fuzz/obj/cli/mpi/args_mpi.o \
	    $(CLI_LIBS)
# The benchmark's options, attn bench's and attn-mpi bench's: their parsers
# have neither OpenBLAS nor MPI in them.
$(BUILD)/fuzz/obj/bench/bench_args.o: bench/bench_args.h
$(BUILD)/fuzz/fuzz_bench_args: tests/fuzz/fuzz_bench_args.c $(BUILD)/fuzz/fuzz_bench_args.d $(FUZZ_OBJ) \
                               $(BUILD)/fuzz/obj/bench/bench_args.o $(BUILD)/fuzz/obj/cli/mpi/args_mpi.o
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_DEPS) -fsanitize=fuzzer -o $@ $< $(FUZZ_OBJ) $(BUILD)/fuzz/obj/bench/bench_args.o \
	    $(BUILD)/fuzz/obj/cli/mpi/args_mpi.o $(CLI_LIBS)
$(FUZZ_BINS:%=%.d): ;
-include $(wildcard $(FUZZ_BINS:%=%.d))
fuzz: $(FUZZ_BINS)
.SECONDARY: $(FUZZ_OBJ)

# The benchmark (bench/bench.c), run as `attn bench`. It alone uses OpenBLAS,
# for the unfused baseline; the library needs only libc, libm and pthreads.
# OpenBLAS is found by its own pkg-config entry, so that <cblas.h> is OpenBLAS's
# header (with openblas_set_num_threads) and not whichever BLAS the Debian
# alternatives system points at. The bench loads the library beside that
# header (its soname, as the loader would) with dlopen when a run starts,
# rather than linking it: on a machine without it, --help and --ggml run,
# and a run says what is missing in one line, where the loader refused to
# start the program.
BLAS_FOUND   = $(shell pkg-config --exists openblas 2>/dev/null && echo yes)
BLAS_FLAGS   = $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBDIR  = $(patsubst %/,%,$(shell pkg-config --variable=libdir openblas 2>/dev/null))
BLAS_SONAME  = $(shell objdump -p $(BLAS_LIBDIR)/libopenblas.so 2>/dev/null | sed -n 's/^ *SONAME *//p')
BLAS_LIBRARY = $(BLAS_LIBDIR)/$(or $(BLAS_SONAME),libopenblas.so.0)
# Its text fits the terminal by the commands' own rule (cli/text.c, which
# needs only libc), and it ends as they do (cli/util.c's cli_close_stdout).
$(BUILD)/attn-bench: bench/bench.c bench/bench_args.c bench/bench_args.h bench/ggml_compare.c bench/ggml_compare.h bench/table.c bench/table.h $(BUILD)/obj/cli/text.o $(BUILD)/obj/cli/util.o cli/text.h cli/cli.h $(BUILD)/libattn.a include/attn.h
	@[ -n "$(BLAS_FOUND)" ] || { echo "attn-bench needs OpenBLAS: pkg-config finds no 'openblas' (apt-get install libopenblas-dev)"; exit 1; }
	$(CC) $(ALL_CFLAGS) -Icli -DOPENBLAS_PATH='"$(BLAS_LIBRARY)"' -o $@ bench/bench.c bench/bench_args.c bench/ggml_compare.c bench/table.c $(BUILD)/obj/cli/text.o $(BUILD)/obj/cli/util.o $(BUILD)/libattn.a $(BLAS_FLAGS) $(LIBS) -ldl

bench: $(BUILD)/attn $(BUILD)/attn-bench

run: $(BUILD)/attn
	$(BUILD)/attn explain

test-deps:
	@sh tests/install-deps.sh

test-bins: $(TEST_BINS)

# Dependencies first, then the build: a separate make, so that a parallel
# `make -j test` cannot start compiling before the tools are installed.
# The test binaries are named by the inner make, which sees what test-deps
# installed (Open MPI decides whether the ring's tests exist).
test: test-deps
	@$(MAKE) --no-print-directory all web bench fuzz test-bins
	@sh tests/run.sh $(BUILD)

# The loader finds a library newly put in a directory of its configuration
# (Debian's /usr/local/lib) only through its cache: `sudo make install` there
# runs ldconfig, or a program built against attn.pc would not start. A staged
# (DESTDIR) or private prefix is left to its user (LD_LIBRARY_PATH, -rpath).
# LDSO_CONF: the loader's configuration (a test points it elsewhere).
LDSO_CONF ?= /etc/ld.so.conf /etc/ld.so.conf.d/*.conf
LDCONFIG = if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null && \
	     cat $(LDSO_CONF) 2>/dev/null | grep -qxF "$(PREFIX)/lib"; then ldconfig; fi

# attn-bench is installed when it was built (`make bench`), and brought up
# to date first: an old one, linked with an old libattn.a, was installed
# beside the new attn that runs it.
install: all $(wildcard $(BUILD)/attn-bench)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 755 $(BUILD)/attn $(DESTDIR)$(PREFIX)/bin/attn
	if [ -x $(BUILD)/attn-bench ]; then install -m 755 $(BUILD)/attn-bench $(DESTDIR)$(PREFIX)/bin/; fi
	install -m 644 include/attn.h include/attn_teach.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libattn.a $(DESTDIR)$(PREFIX)/lib/libattn.a
	install -m 755 $(BUILD)/libattn.so $(DESTDIR)$(PREFIX)/lib/libattn.so.$(VERSION)
	ln -sf libattn.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libattn.so.$(SOMAJOR)
	ln -sf libattn.so.$(SOMAJOR) $(DESTDIR)$(PREFIX)/lib/libattn.so
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	  'Name: attn' 'Description: scaled dot-product attention in C' 'Version: $(VERSION)' \
	  'Libs: -L$${libdir} -lattn' 'Libs.private: -lm -pthread' 'Cflags: -I$${includedir}' \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/attn.pc
	if [ -f $(BUILD)/libattn-mpi.a ]; then \
	  install -m 644 include/attn_mpi.h $(DESTDIR)$(PREFIX)/include/ && \
	  install -m 644 $(BUILD)/libattn-mpi.a $(DESTDIR)$(PREFIX)/lib/ && \
	  install -m 755 $(BUILD)/attn-mpi $(DESTDIR)$(PREFIX)/bin/ && \
	  printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	    'Name: attn-mpi' 'Description: ring attention over MPI (libattn-mpi); build with mpicc, or add your MPI (mpi-c)' \
	    'Version: $(VERSION)' 'Requires: attn' 'Libs: -L$${libdir} -lattn-mpi' 'Cflags: -I$${includedir}' \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/attn-mpi.pc; fi
	@$(LDCONFIG)

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/attn $(DESTDIR)$(PREFIX)/bin/attn-bench $(DESTDIR)$(PREFIX)/include/attn.h \
	  $(DESTDIR)$(PREFIX)/include/attn_teach.h $(DESTDIR)$(PREFIX)/include/attn_mpi.h \
	  $(DESTDIR)$(PREFIX)/bin/attn-mpi $(DESTDIR)$(PREFIX)/lib/libattn-mpi.a \
	  $(DESTDIR)$(PREFIX)/lib/libattn.a $(DESTDIR)$(PREFIX)/lib/libattn.so.$(VERSION) \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig/attn.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/attn-mpi.pc
	@# The links only where they lead to this version: another version's
	@# library (libattn.so.1.*, or an older 0.x the links were moved to)
	@# belongs to its own install.
	cd $(DESTDIR)$(PREFIX)/lib 2>/dev/null || exit 0; \
	  if [ "$$(readlink libattn.so.$(SOMAJOR))" = libattn.so.$(VERSION) ]; then rm -f libattn.so.$(SOMAJOR); fi; \
	  if [ "$$(readlink libattn.so)" = libattn.so.$(SOMAJOR) ] && [ ! -e libattn.so.$(SOMAJOR) ]; then rm -f libattn.so; fi
	@$(LDCONFIG)

clean:
	rm -rf $(BUILD)
