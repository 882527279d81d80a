"""_lib.py -- finding and loading libattn.so, and the C structs it takes,
mirrored with ctypes (include/attn.h and include/attn_teach.h say what each
field means). Nothing here is numpy-aware; _core.py builds on it.

Where the library is looked for, in order:
  1. ATTN_LIBRARY, a path to libattn.so (or to the folder holding it);
  2. the build tree this package sits in (python/attn/ -> build/libattn.so);
  3. an installed prefix: pkg-config's `attn` libdir, then the loader's
     search path (ldconfig), as ctypes.util.find_library finds it.
A library that is missing, or whose version or struct sizes are not the ones
this package was written for, is an ImportError that says what was found."""
import ctypes
import ctypes.util
import os
import subprocess

from ._version import __version__

MAX_RANK = 5
# attn_quant_kind (attn.h, attn_quant_format): a quantized format stored in
# rows, one per position (a dtype), or in groups of 32 positions (a key_dtype).
QUANT_ROWS, QUANT_GROUPS = 1, 2


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("shape", ctypes.c_int64 * MAX_RANK), ("strides", ctypes.c_int64 * MAX_RANK)]


class Error(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("message", ctypes.c_char * 512)]


class Context(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("num_threads", ctypes.c_int), ("workspace", ctypes.c_void_p),
                ("workspace_size", ctypes.c_size_t)]


class RopeOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("layout", ctypes.c_int), ("base", ctypes.c_double),
                ("rotary_dim", ctypes.c_int64), ("position_offset", ctypes.c_int64),
                ("linear_scaling", ctypes.c_double)]


P = ctypes.POINTER(Tensor)


class SdpaOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("has_scale", ctypes.c_int), ("scale", ctypes.c_double),
                ("causal", ctypes.c_int), ("mask", P), ("compute", ctypes.c_int),
                ("context", ctypes.POINTER(Context)), ("dropout_p", ctypes.c_double),
                ("dropout_seed", ctypes.c_uint64), ("softcap", ctypes.c_double), ("alibi_slopes", P),
                ("window", ctypes.c_int64), ("sinks", P), ("rope", ctypes.POINTER(RopeOptions)),
                ("query_start", ctypes.c_int64), ("key_start", ctypes.c_int64),
                ("total_queries", ctypes.c_int64), ("total_keys", ctypes.c_int64),
                ("k_descale", P), ("v_descale", P)]


MHA_PARAMS = ("in_proj_weight", "in_proj_bias", "q_proj_weight", "k_proj_weight", "v_proj_weight", "q_proj_bias",
              "k_proj_bias", "v_proj_bias", "out_proj_weight", "out_proj_bias", "bias_k", "bias_v", "sinks")


class MhaParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("embed_dim", ctypes.c_int64), ("num_heads", ctypes.c_int64),
                ("num_kv_heads", ctypes.c_int64), ("kdim", ctypes.c_int64), ("vdim", ctypes.c_int64)] + \
               [(n, P) for n in MHA_PARAMS]


class MhaOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("batch_first", ctypes.c_int), ("add_zero_attn", ctypes.c_int),
                ("key_padding_mask", P), ("attn_mask", P), ("causal", ctypes.c_int),
                ("average_attn_weights", ctypes.c_int), ("context", ctypes.POINTER(Context)),
                ("rope", ctypes.POINTER(RopeOptions)), ("attention", ctypes.POINTER(SdpaOptions)),
                ("packed", ctypes.c_void_p)]  # const attn_mha_weights *: packed weights, or None


class KVPagesDesc(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("heads", ctypes.c_int64), ("key_dim", ctypes.c_int64),
                ("value_dim", ctypes.c_int64), ("dtype", ctypes.c_int), ("page_size", ctypes.c_int64),
                ("num_pages", ctypes.c_int64), ("max_sequences", ctypes.c_int64), ("max_length", ctypes.c_int64),
                ("key_dtype", ctypes.c_int),
                ("k_scale", ctypes.POINTER(ctypes.c_float)), ("v_scale", ctypes.POINTER(ctypes.c_float)),
                ("hadamard", ctypes.c_int), ("residual", ctypes.c_int64), ("head_major", ctypes.c_int)]


class KVPagedView(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("dtype", ctypes.c_int), ("heads", ctypes.c_int64),
                ("key_dim", ctypes.c_int64), ("value_dim", ctypes.c_int64), ("page_size", ctypes.c_int64),
                ("num_pages", ctypes.c_int64), ("k_pages", ctypes.c_void_p), ("v_pages", ctypes.c_void_p),
                ("num_sequences", ctypes.c_int64), ("lengths", ctypes.POINTER(ctypes.c_int64)),
                ("page_table", ctypes.POINTER(ctypes.c_int32)), ("table_stride", ctypes.c_int64),
                ("table_offsets", ctypes.POINTER(ctypes.c_int64)), ("key_dtype", ctypes.c_int),
                ("k_residual", ctypes.c_void_p),
                ("k_scale", ctypes.POINTER(ctypes.c_float)), ("v_scale", ctypes.POINTER(ctypes.c_float)),
                ("hadamard", ctypes.c_int), ("residual", ctypes.c_int64), ("head_major", ctypes.c_int),
                ("generation", ctypes.POINTER(ctypes.c_uint64))]


class KVCacheDesc(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("batch", ctypes.c_int64), ("heads", ctypes.c_int64),
                ("capacity", ctypes.c_int64), ("key_dim", ctypes.c_int64), ("value_dim", ctypes.c_int64),
                ("dtype", ctypes.c_int), ("key_dtype", ctypes.c_int), ("k_scale", ctypes.POINTER(ctypes.c_float)),
                ("v_scale", ctypes.POINTER(ctypes.c_float)), ("hadamard", ctypes.c_int), ("residual", ctypes.c_int64)]


class ToyExplainOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("head", ctypes.c_int), ("mode", ctypes.c_int),
                ("causal", ctypes.c_int), ("no_scale", ctypes.c_int), ("scale_by_d_model", ctypes.c_int),
                ("tied", ctypes.c_int), ("positions", ctypes.c_int), ("source", ctypes.c_char_p)]


SCALING_BINS = 48


class ScalingRow(ctypes.Structure):
    _fields_ = [("d", ctypes.c_int), ("keys", ctypes.c_int), ("queries", ctypes.c_int),
                ("spread_raw", ctypes.c_double), ("spread_scaled", ctypes.c_double), ("top_raw", ctypes.c_double),
                ("top_scaled", ctypes.c_double), ("top_div_d", ctypes.c_double),
                ("grad_mean_raw", ctypes.c_double), ("grad_mean_scaled", ctypes.c_double),
                ("grad_median_raw", ctypes.c_double), ("grad_median_scaled", ctypes.c_double),
                ("hist_raw", ctypes.c_double * SCALING_BINS), ("hist_scaled", ctypes.c_double * SCALING_BINS)]


def _candidates():
    env = os.environ.get("ATTN_LIBRARY")
    if env:
        yield "ATTN_LIBRARY", os.path.join(env, "libattn.so") if os.path.isdir(env) else env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.path.join(here, "..", "..", "build", "libattn.so")
    if os.path.exists(build):
        yield "the build tree", os.path.normpath(build)
    try:
        libdir = subprocess.run(["pkg-config", "--variable=libdir", "attn"], capture_output=True, text=True,
                                timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        libdir = ""
    for name in ("libattn.so." + __version__.split(".")[0], "libattn.so"):
        if libdir and os.path.exists(os.path.join(libdir, name)):
            yield "pkg-config", os.path.join(libdir, name)
    found = ctypes.util.find_library("attn")
    if found:
        yield "the loader's path", found


def _declare(lib):
    """Argument and result types of the functions the package calls."""
    st, vp, pe = ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(Error)
    lib.attn_isa.restype = ctypes.c_char_p
    lib.attn_strerror.restype = ctypes.c_char_p
    lib.attn_strerror.argtypes = [ctypes.c_int]
    lib.attn_dtype_name.restype, lib.attn_dtype_name.argtypes = ctypes.c_char_p, [ctypes.c_int]
    lib.attn_dtype_from_name.restype = st
    lib.attn_dtype_from_name.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, pe]
    lib.attn_quant_format.restype = st
    lib.attn_quant_format.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int),
                                      ctypes.POINTER(ctypes.c_int64), ctypes.c_int, pe]
    lib.attn_get_num_threads.restype = ctypes.c_int
    lib.attn_set_num_threads.argtypes = [ctypes.c_int]
    for cls in _INIT:
        init = getattr(lib, _INIT[cls])
        init.restype, init.argtypes = ctypes.c_size_t, [ctypes.POINTER(cls), ctypes.c_size_t]
    for name in ("attn_sdpa", "attn_sdpa_backward", "attn_sdpa_shapes", "attn_sdpa_merge", "attn_mha",
                 "attn_mha_backward", "attn_toy_explain_json", "attn_scaling_measure", "attn_sdpa_reference",
                 "attn_sdpa_varlen", "attn_sdpa_varlen_backward"):
        getattr(lib, name).restype = st
    lib.attn_sdpa.argtypes = [P, P, P, P, P, P, ctypes.POINTER(SdpaOptions), pe]
    lib.attn_sdpa_backward.argtypes = [P, P, P, P, P, P, P, P, P, P, ctypes.POINTER(SdpaOptions), pe]
    lib.attn_sdpa_shapes.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int64),
                                     ctypes.POINTER(ctypes.c_int64), P, P, P, ctypes.POINTER(SdpaOptions), pe]
    lib.attn_sdpa_merge.argtypes = [P, P, ctypes.POINTER(P), ctypes.POINTER(P), ctypes.c_int, pe]
    lib.attn_sdpa_sinks_backward.restype = st
    lib.attn_sdpa_sinks_backward.argtypes = [P, P, P, P, ctypes.POINTER(SdpaOptions), pe]
    lib.attn_sdpa_dropout_mask.restype = st
    lib.attn_sdpa_dropout_mask.argtypes = [P, P, P, P, ctypes.POINTER(SdpaOptions), pe]
    lib.attn_alibi_slopes.restype = st
    lib.attn_alibi_slopes.argtypes = [ctypes.POINTER(ctypes.c_double), ctypes.c_int64, pe]
    i64p = ctypes.POINTER(ctypes.c_int64)
    lib.attn_sdpa_varlen.argtypes = [P, P, P, P, P, i64p, i64p, ctypes.c_int64, ctypes.POINTER(P),
                                     ctypes.POINTER(SdpaOptions), pe]
    lib.attn_sdpa_varlen_backward.argtypes = [P, P, P, P, P, P, P, P, P, i64p, i64p, ctypes.c_int64,
                                              ctypes.POINTER(P), ctypes.POINTER(SdpaOptions), pe]
    lib.attn_mha.argtypes = [P, P, P, P, P, ctypes.POINTER(MhaParams), ctypes.POINTER(MhaOptions), pe]
    lib.attn_mha_backward.argtypes = [P, P, P, ctypes.POINTER(MhaParams), P, P, P, P, ctypes.POINTER(MhaParams),
                                      ctypes.POINTER(MhaOptions), pe]
    lib.attn_toy_explain_json.argtypes = [vp, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t), ctypes.c_char_p,
                                          ctypes.POINTER(ToyExplainOptions), pe]
    lib.attn_scaling_measure.argtypes = [ctypes.POINTER(ScalingRow), ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                         ctypes.c_uint64, pe]
    i64, pi64, vpp = ctypes.c_int64, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_void_p)
    pd = ctypes.POINTER(KVPagesDesc)
    for name, args in (("attn_kv_pages_bytes", [ctypes.POINTER(ctypes.c_size_t), pd, pe]),
                       ("attn_kv_pages_init", [vpp, vp, ctypes.c_size_t, pd, pe]),
                       ("attn_kv_pages_create", [vp, pi64, pe]), ("attn_kv_pages_fork", [vp, pi64, i64, pe]),
                       ("attn_kv_pages_free", [vp, i64, pe]), ("attn_kv_pages_truncate", [vp, i64, i64, pe]),
                       ("attn_kv_pages_append", [vp, pi64, i64, P, P, pi64, pe]),
                       ("attn_kv_pages_sequence", [vp, i64, pi64, ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)), pe]),
                       ("attn_kv_pages_gather", [P, P, vp, i64, pe]),
                       ("attn_kv_pages_attend", [P, P, P, pi64, pi64, i64, vp, ctypes.POINTER(P), ctypes.POINTER(SdpaOptions), pe])):
        getattr(lib, name).restype, getattr(lib, name).argtypes = st, args
    pv, pmp, pmo = ctypes.POINTER(KVPagedView), ctypes.POINTER(MhaParams), ctypes.POINTER(MhaOptions)
    pso, psz = ctypes.POINTER(SdpaOptions), ctypes.POINTER(ctypes.c_size_t)
    for name, args in (("attn_kv_pages_view", [pv, vp, pe]),
                       ("attn_kv_paged_attend", [P, P, P, pi64, pv, ctypes.POINTER(P), pso, pe]),
                       ("attn_mha_paged", [P, P, pi64, pi64, i64, vp, ctypes.POINTER(P), pmp, pmo, pe]),
                       ("attn_kv_cache_bytes", [psz, ctypes.POINTER(KVCacheDesc), pe]),
                       ("attn_kv_cache_init", [vpp, vp, ctypes.c_size_t, ctypes.POINTER(KVCacheDesc), pe]),
                       ("attn_kv_cache_append", [vp, P, P, pe]), ("attn_kv_cache_attend", [P, P, P, vp, pso, pe]),
                       ("attn_kv_cache_view", [P, P, vp, ctypes.c_int, pe]), ("attn_kv_cache_gather", [P, P, vp, pe]),
                       ("attn_kv_cache_truncate", [vp, i64, pe]),
                       ("attn_mha_cached_batch", [P, P, pi64, pi64, i64, vp, pi64, ctypes.POINTER(P), pmp, pmo, pe]),
                       ("attn_sdpa_plan_bytes", [psz, i64, pe]),
                       ("attn_sdpa_plan_init", [vpp, vp, ctypes.c_size_t, psz, P, P, P, P, P, pso, pe]),
                       ("attn_sdpa_varlen_plan_init", [vpp, vp, ctypes.c_size_t, psz, P, P, P, P, P, pi64, pi64, i64,
                                                       ctypes.POINTER(P), pso, pe]),
                       ("attn_sdpa_run", [vp, P, P, P, P, P, vp, ctypes.c_size_t, pe]),
                       ("attn_kv_paged_plan_init", [vpp, vp, ctypes.c_size_t, psz, P, P, P, pi64, pv,
                                                    ctypes.POINTER(P), pso, pe]),
                       ("attn_kv_paged_run", [vp, P, P, P, vp, vp, vp, ctypes.c_size_t, pe]),
                       ("attn_kv_paged_run_view", [vp, P, P, P, pv, vp, ctypes.c_size_t, pe])):
        getattr(lib, name).restype, getattr(lib, name).argtypes = st, args
    lib.attn_kv_pages_free_pages.restype, lib.attn_kv_pages_free_pages.argtypes = i64, [vp]
    lib.attn_kv_pages_page_refs.restype, lib.attn_kv_pages_page_refs.argtypes = i64, [vp, i64]
    lib.attn_kv_cache_length.restype, lib.attn_kv_cache_length.argtypes = i64, [vp]


def _check_version(lib, where, path):
    """The library's version against this package's."""
    try:
        lib.attn_version.restype = ctypes.c_char_p
        found = lib.attn_version().decode()
    except AttributeError:
        raise ImportError("%s (%s) is not libattn: it has no attn_version" % (path, where))
    if found.split(".")[:2] != __version__.split(".")[:2]:
        raise ImportError("libattn %s from %s (%s) is not the version this package speaks to (%s): rebuild it, "
                          "or point ATTN_LIBRARY at a matching libattn.so" % (found, where, path, __version__))
    return found


# The versioned structs (attn.h: "Versioned structs") and the functions that
# fill one with the library's defaults, for the size given; each returns the
# library's own size of the struct.
_INIT = {Context: "attn_context_init", SdpaOptions: "attn_sdpa_options_init", RopeOptions: "attn_rope_options_init",
         MhaParams: "attn_mha_params_init", MhaOptions: "attn_mha_options_init",
         ToyExplainOptions: "attn_toy_explain_options_init", KVPagesDesc: "attn_kv_pages_desc_init",
         KVPagedView: "attn_kv_paged_view_init", KVCacheDesc: "attn_kv_cache_desc_init"}


def default(cls, lib=None):
    """A versioned struct (a class of _INIT) holding the library's defaults,
    its struct_size ours: what X_default() is in C."""
    o = cls()
    getattr(lib or LIB, _INIT[cls])(ctypes.byref(o), ctypes.sizeof(o))
    return o


def _check_sizes(lib, found, where, path):
    """The structs' sizes as the library has them against ours."""
    for cls, init in _INIT.items():
        c_size, py_size = getattr(lib, init)(None, 0), ctypes.sizeof(cls)
        if c_size != py_size:
            raise ImportError("libattn %s from %s (%s) has a %s of %d bytes; this package expects %d: rebuild one "
                              "of them from the same source" % (found, where, path, init[:-5], c_size, py_size))


def load():
    tried = []
    for where, path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s): %s" % (where, path, e))
            continue
        found = _check_version(lib, where, path)
        try:
            _declare(lib)
        except AttributeError as e:
            raise ImportError("libattn %s from %s (%s) lacks a function this package needs (%s): rebuild it"
                              % (found, where, path, e))
        _check_sizes(lib, found, where, path)
        lib.attn_path = path
        return lib
    raise ImportError("libattn.so not found (%s). Build it with `make` in the source tree, install it with "
                      "`make install`, or set ATTN_LIBRARY to its path" % ("; ".join(tried) or
                                                                        "not in ATTN_LIBRARY, the build tree, "
                                                                        "pkg-config or the loader's path"))


LIB = load()


def _dtype(name):
    """The library's attn_dtype named `name` (attn_dtype_from_name)."""
    code, err = ctypes.c_int(), Error()
    if LIB.attn_dtype_from_name(ctypes.byref(code), name.encode(), ctypes.byref(err)):
        raise ImportError("libattn from %s names no dtype %s: %s" % (LIB.attn_path, name, err.message.decode()))
    return code.value


def _quant_formats():
    """The library's quantized formats in its order (attn_quant_format, from
    index 0 until it says there is no more): (name, code, kind, multiple)
    each, kind QUANT_ROWS or QUANT_GROUPS and multiple the number of values
    a row (channels a group) must be a multiple of."""
    found, code, kind, multiple = [], ctypes.c_int(), ctypes.c_int(), ctypes.c_int64()
    while not LIB.attn_quant_format(ctypes.byref(code), ctypes.byref(kind), ctypes.byref(multiple), len(found), None):
        found.append((LIB.attn_dtype_name(code.value).decode(), code.value, kind.value, multiple.value))
    return tuple(found)


# The dtypes' codes and the quantized formats, as this library has them.
F32, F64, BOOL, F16, BF16 = (_dtype(name) for name in ("f32", "f64", "bool", "f16", "bf16"))
QUANT_FORMATS = _quant_formats()
