#!/usr/bin/python3
"""make_seeds.py -- write the fuzzers' seed corpus (tests/fuzz/corpus/TARGET/).

A few well-formed inputs per target, so that the fuzzers start from every
format version, dtype, subcommand and option instead of from nothing. The
committed corpus is these seeds plus what the fuzzers found (merged with
-merge=1, named by the SHA-1 of their bytes); rerun this only to add seeds.

Usage: make_seeds.py          write the seeds into tests/fuzz (corpus/, regressions/)
       make_seeds.py DIR      write them into DIR/corpus and DIR/regressions instead
       make_seeds.py --check  write them into a temporary directory and compare: every
                              file written must be the committed one, byte for byte, and
                              every committed corpus file not named by a SHA-1 must be one
                              it writes (exit 1 naming the differences)
"""
import io
import json
import os
import re
import shutil
import struct
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = HERE  # where write() puts the files (main's argument)


def npy(a, version=None):
    b = io.BytesIO()
    if version is None:
        np.save(b, a)
    else:
        np.lib.format.write_array(b, a, version=version)
    return b.getvalue()


def npy_raw(header, data):
    """A version 1.0 .npy file of this header text (padded as NumPy pads it) and data."""
    text = header.encode()
    text += b" " * ((64 - (10 + len(text) + 1) % 64) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + data


def with_descr(data, old, new):
    """A .npy file's bytes with its descr changed, the header's padding made up so its length stays."""
    data = data.replace(b"'%s'" % old.encode(), b"'%s'" % new.encode(), 1)
    end = data.index(b"\n")
    grow = len(new) - len(old)
    return data[:end - grow] + data[end:] if grow > 0 else data[:end] + b" " * -grow + data[end:]


def safetensors_raw(header, data=b""):
    """A safetensors file: the header's JSON text (bytes) after its 8-byte length, then the data."""
    return struct.pack("<Q", len(header)) + header + data


def safetensors(tensors):
    """The bytes of a safetensors file: its header's length, the JSON header, the data."""
    header, data = {}, b""
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": {"float64": "F64", "float32": "F32"}[a.dtype.name], "shape": list(a.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def write(target, name, data, where="corpus"):
    d = os.path.join(OUT, where, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    r = np.random.default_rng(0)
    arrays = {
        "f32_2x3": r.standard_normal((2, 3)).astype(np.float32),
        "f64_4d": r.standard_normal((1, 2, 2, 3)),
        "f16_5": r.standard_normal(5).astype(np.float16),
        "bool_3x4": r.random((3, 4)) < 0.5,
        "f32_scalar": np.float32(1.5).reshape(()),
        "f32_5d": np.zeros((1, 1, 1, 2, 2), np.float32),
    }
    for name, a in arrays.items():
        write("npy", name + ".npy", npy(a))
    write("npy", "v2.npy", npy(arrays["f32_2x3"], (2, 0)))
    write("npy", "v3.npy", npy(arrays["f64_4d"], (3, 0)))
    write("npy", "fortran.npy", npy(np.asfortranarray(arrays["f32_2x3"])))
    write("npy", "big_endian.npy", npy(arrays["f32_2x3"].astype(">f4")))
    nul = npy(arrays["f32_2x3"]).replace(b"'<f4'", b"'<f4\0'", 1)  # a NUL in the descr, a padding space less
    write("npy", "nul_in_descr.npy", nul[:nul.index(b"\n") - 1] + nul[nul.index(b"\n"):])
    # Byte orders NumPy reads as the machine's: '=' (native), '|' (none, even
    # for an 8-byte float), no order character, and bool by its type code '?'
    write("npy", "native_order_f8.npy", with_descr(npy(arrays["f64_4d"]), "<f8", "=f8"))
    write("npy", "no_order_f4.npy", with_descr(npy(arrays["f32_2x3"]), "<f4", "|f4"))
    write("npy", "bare_f2.npy", with_descr(npy(arrays["f16_5"]), "<f2", "f2"))
    write("npy", "bool_type_code.npy", with_descr(npy(arrays["bool_3x4"]), "|b1", "?"))
    write("npy", "cu_i8_native_order.npy", with_descr(npy(np.array([0, 3, 3, 8], np.int64)), "<i8", "=i8"))
    # --cu-seqlens-q/-k offsets: the integers attn_npy_read_i64 reads (fuzz_npy reads each input as a file too)
    write("npy", "cu_i8.npy", npy(np.array([0, 3, 3, 8], np.int64)))
    write("npy", "cu_i4_big_endian.npy", npy(np.array([0, 5, 9], ">i4")))
    write("npy", "cu_i8_rank2.npy", npy(np.array([[0, 3], [3, 8]], np.int64)))
    write("npy", "cu_i8_truncated.npy", npy(np.array([0, 3, 3, 8], np.int64))[:-4])
    # headers written by hand, each refused for one reason
    for name, header in {
        "shape_leading_zero": "{'descr': '<f4', 'fortran_order': False, 'shape': (07,), }",
        "shape_bare_number": "{'descr': '<f4', 'fortran_order': False, 'shape': (3), }",
        "structured_dtype": "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }",
        "dict_missing_comma": "{'descr': '<f4' 'fortran_order': False, 'shape': (1,), }",
        "text_after_dict": "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } x",
    }.items():
        write("npy", name + ".npy", npy_raw(header, b"\0" * 4))

    for i, s in enumerate(["the cat sat on the mat", "The quick brown fox jumped over the lazy dog.",
                           "my dog chased a ball in the park", "  cat,dog;   ball ", "Cat's MAT",
                           "the catt sat", "naïve café", "a " * 40]):
        write("tokenize", f"s{i}", s)

    args = [
        ["sdpa", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--causal=bottom-right", "--scale", "1.5"],
        ["sdpa", "--query=q.npy", "--key", "k.npy", "--value", "v.npy", "-m", "m.npy", "-o", "o.npy",
         "-w", "w.npy", "--threads", "3", "--kv-bf16"],
        ["sdpa", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--compute=bf16", "--causal"],
        ["explain", "--step", "weights", "--causal", "--random-head", "the", "cat"],
        ["explain", "--mode", "dot", "--json", "--color", "never", "--no-scale"],
        ["explain", "--embeddings", "x.npy", "--tokens", "a,b,c", "--wq", "q", "--wk", "k", "--wv", "v"],
        ["explain", ""],
        ["scaling", "--dims", "16,64,256", "--queries", "10", "--keys", "8", "--seed", "3", "--json"],
        ["scaling", "--variance", "--svg", "s.svg"],
        ["demo"], ["--help"], ["--version"], ["sdpa", "--help"], ["bench", "--quick"],
        ["sdpa", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "-m", "m.npy", "--grad-out", "do.npy",
         "--dq", "dq.npy", "--dk", "dk.npy", "--dv", "dv.npy", "--dmask", "dm.npy"],
        ["train", "--dk", "8", "--steps", "5", "--batch", "2", "--lr", "0.2", "--no-scale", "--seed", "3",
         "--json", "--svg", "t.svg", "the dog ran"],
        ["scaling", "--dims", "4,64", "--no-train"],
        ["sdpa", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--dropout", "0.1", "--seed", "5",
         "--dropout-mask", "keep.npy"],
        # the score variants, and attn mha
        ["sdpa", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--softcap", "30", "--alibi", "--window", "128",
         "--causal=bottom-right"],
        ["sdpa", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--alibi-slopes", "s.npy", "--window", "-3", "--softcap",
         "nan", "--alibi"],
        ["sdpa", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--window", "1099511627777", "--softcap", "1e309"],
        ["mha", "-x", "x.npy", "--weights", "w.safetensors", "--heads", "4", "--rope", "halves", "--causal", "-o",
         "o.npy"],
        ["mha", "-x", "x.npy", "--weights", "d", "--heads", "0", "--kv-heads", "x", "--rope", "spiral", "--rope-base",
         "-1"],
    ]
    named = {  # written under their names (the list above is numbered)
        # an option "--rope-base(0", --rope-base's name with more after it (refused); then the base given
        "sdpa_rope": ["sdpa", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--rope", "interleaved", "--rope-base(0",
                      "--rope-dim", "-4", "--rope-offset", "99"],
        "sdpa_rope_base": ["sdpa", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--rope", "interleaved", "--rope-base",
                           "500", "--rope-dim", "-4", "--rope-offset", "99"],
        "explain_vocab": ["explain", "--vocab"],
        "explain_trained": ["explain", "--trained", "--step", "summary"],
        "explain_additive": ["explain", "--score", "additive", "the", "cat"],
        "explain_json_step": ["explain", "--json", "--step", "weights"],
        "explain_tied": ["explain", "--tied", "--step", "scores", "the", "cat"],
        "explain_scale_by": ["explain", "--scale-by", "d_model", "--step", "scaled"],
        "explain_positions": ["explain", "--positions", "rope", "--step", "q"],
        "explain_heads": ["explain", "--heads", "3", "--json", "the", "cat", "sat"],
        "explain_source": ["explain", "--source", "the dog chased a ball", "--step", "weights", "the", "cat", "sat"],
        "explain_kernel": ["explain", "--kernel", "--step", "online", "--block", "3", "--workers=4", "--ranks", "2",
                           "--json", "the", "cat"],
        "explain_kernel_refused": ["explain", "--kernel", "--causal", "--block=9", "--step", "tokens"],
        "sdpa_kv_scale": ["sdpa", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--kv", "e4m3", "--kv-scale", "0.5,2"],
        "sdpa_kv_scale_one": ["sdpa", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--kv=e5m2", "--kv-scale=3"],
        "sdpa_kv_scale_bad": ["sdpa", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--kv-scale",
                              "1," + "9" * 80, "--kv", "q8"],
        "sdpa_kv_hadamard": ["sdpa", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--kv", "e4m3", "--hadamard",
                             "--kv-scale", "0.5"],
        "sdpa_hadamard_refused": ["sdpa", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--hadamard", "--rope", "halves"],
        "sdpa_kv_residual": ["sdpa", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--kv", "q4c", "--kv-residual", "128",
                             "--causal=bottom-right"],
        "sdpa_kv_residual_bad": ["sdpa", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--kv=q2c", "--kv-residual=48"],
        "sdpa_kv_residual_refused": ["sdpa", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--kv", "q8",
                                     "--kv-residual", "64"],
    }
    for n, a in named.items():
        write("args", n, "\0".join(a))
    for i, a in enumerate(args):
        write("args", f"a{i}", "\0".join(a))

    mark = b"|~|\n"
    x = r.standard_normal((3, 4)).astype(np.float32)
    wq = r.standard_normal((4, 2))
    wv = r.standard_normal((4, 3)).astype(np.float16)
    write("explain_load", "full", b"a,b,c" + mark + npy(x) + mark + npy(wq) + mark + npy(wq) + mark + npy(wv))
    write("explain_load", "x_only", mark + npy(x))
    write("explain_load", "toy_width", mark + npy(r.standard_normal((2, 8))))
    # Regressions: inputs that crashed the command once, kept after the fix.
    # An f16 .npy as --embeddings was read as 8-byte doubles (heap overflow).
    write("explain_load", "f16_embeddings", mark + npy(r.standard_normal((4, 8)).astype(np.float16)),
          where="regressions")
    write("explain_load", "mismatch", b"a,b" + mark + npy(x) + mark + npy(wq.T.copy()) + mark + npy(wq) + mark + npy(wv))
    write("explain_load", "embeddings_65_rows", mark + npy(np.zeros((65, 1), np.float32)))
    # no --embeddings file: the first part is the sentence
    write("explain_load", "sentence", b"the cat sat on the mat")
    write("explain_load", "sentence_unknown_word", b"the cat sta on teh mat")
    write("explain_load", "sentence_no_words", b" ,;")
    # the data of the first safetensors seeds, drawn here where they were
    # once written (mha_seeds, before them now, draws from its own generator)
    mha_seeds(mark, r.standard_normal((2, 3)).tobytes())
    refusal_seeds()
    sdpa_load_seeds(mark)
    bench_args_seeds()


def sdpa_load_seeds(mark):
    """attn sdpa's files (fuzz_sdpa_load: a byte of options, then q, k, v, the
    mask, the ragged batch's offsets and the sinks, separated by the mark)."""
    g = np.random.default_rng(3).standard_normal

    def files(flags, *parts):
        return bytes([flags]) + mark.join(npy(a) if a is not None else b"" for a in parts)
    q, k, v = g((2, 3, 4)), g((2, 5, 4)), g((2, 5, 3))
    f32 = [a.astype(np.float32) for a in (q, k, v)]
    # byte 0: bits 0-1 none, --causal, --causal=bottom-right, --alibi; bits 2-4 as stored or computed: none,
    # --kv-bf16, q8, q4_1, e4m3, q4c, --compute=bf16, --softcap 30; bits 5-6 none, --window 2, --rope halves,
    # --dropout 0.5; bit 7 --scale 0.5
    write("sdpa_load", "f64", files(0, q, k, v))
    write("sdpa_load", "f64_bool_mask_causal", files(1, q, k, v, g((3, 5)) > 0))
    write("sdpa_load", "f32_f16_kv_bottom_right_window", files(2 | 1 << 5, f32[0], k.astype(np.float16),
                                                                  v.astype(np.float16)))
    write("sdpa_load", "f32_kv_bf16_alibi", files(3 | 1 << 2, *f32))
    write("sdpa_load", "f32_kv_e4m3_scale", files(4 << 2 | 128, *f32))
    write("sdpa_load", "f32_kv_q4c", files(2 | 5 << 2, g((2, 1, 64)).astype(np.float32), g((2, 40, 64)).astype(np.float32),
                                          g((2, 40, 32)).astype(np.float32)))
    write("sdpa_load", "f32_rope_sinks", files(2 << 5, *f32, None, None, None, g(2).astype(np.float32)))
    write("sdpa_load", "ragged", files(0, g((5, 2, 4)), g((7, 2, 4)), g((7, 2, 3)), None,
                                        np.array([0, 2, 5]), np.array([0, 3, 7])))
    write("sdpa_load", "ragged_offsets_differ", files(0, g((5, 2, 4)), g((7, 2, 4)), g((7, 2, 3)), None,
                                                       np.array([0, 5]), np.array([0, 3, 7])))
    write("sdpa_load", "mixed_dtypes", files(0, q, f32[1], v))
    write("sdpa_load", "shapes_disagree", files(0, q, g((2, 5, 3)), v))
    # a last byte after the seventh mark (past the sinks file): bits 0-1 --kv-scale none, 16, 8,32, 1e30; bit 2 e5m2
    # for e4m3 and q2c for q4c; bits 3-4 --kv-residual none, 32, 64, 33; bit 5 --hadamard
    def stores(flags, extra, *parts):
        return files(flags, *parts, *[None] * (7 - len(parts))) + mark + bytes([extra])
    h = np.random.default_rng(4).standard_normal  # its own numbers: the seeds above stay as they were
    big = [(h(s) * 500).astype(np.float32) for s in ((2, 3, 32), (2, 5, 32), (2, 5, 32))]  # past e4m3's 448
    write("sdpa_load", "f32_kv_e4m3_per_head_scales", stores(4 << 2, 2, *big))
    write("sdpa_load", "f32_kv_e5m2_one_scale_hadamard_bottom_right", stores(2 | 4 << 2, 1 | 4 | 32, *big))
    write("sdpa_load", "f32_kv_e4m3_scale_rounds_all_to_0", stores(4 << 2, 3, *f32))
    grouped = [h(s).astype(np.float32) for s in ((2, 1, 64), (2, 70, 64), (2, 70, 32))]
    write("sdpa_load", "f32_kv_q2c_residual_32", stores(2 | 5 << 2, 4 | 1 << 3, *grouped))
    write("sdpa_load", "f32_kv_q4c_residual_64", stores(2 | 5 << 2, 2 << 3, *grouped))
    write("sdpa_load", "f32_kv_q4c_residual_refused", stores(2 | 5 << 2, 3 << 3, *grouped))



def refusal_seeds():
    """Command lines each refused for one combination of options, so that
    fuzz_args starts from every usage error the parsers have."""
    qkv = ["-q", "q.npy", "-k", "k.npy", "-v", "v.npy"]
    mha = ["mha", "-x", "x.npy", "--weights", "w", "--heads", "2"]
    emb = ["--embeddings", "x.npy"]
    for n, a in {
        "explain_sentence_too_long": ["explain", "w" * 4100],
        "explain_kernel_causal": ["explain", "--kernel", "--causal"],
        "explain_kernel_unknown_step": ["explain", "--kernel", "--step", "softmax"],
        "explain_block_without_kernel": ["explain", "--block", "32"],
        "explain_dot_random_head": ["explain", "--mode", "dot", "--random-head"],
        "explain_dot_step_wq": ["explain", "--mode", "average", "--step", "wq"],
        "explain_tied_wk": ["explain", "--tied", "--wq", "q.npy", "--wk", "k.npy", "--wv", "v.npy"],
        "explain_tokens_not_utf8": ["explain"] + emb + ["--tokens", "a,\udcff"],
        "explain_tokens_control": ["explain"] + emb + ["--tokens", "a,b\x01"],
        "explain_tokens_c1_control": ["explain"] + emb + ["--tokens", "a\u0085,b"],
        "mha_kv_scale_bad": mha + ["--incremental", "--kv", "e4m3", "--kv-scale", "0,1"],
        "mha_window_without_causal": mha + ["--window", "4"],
        "mha_incremental_key": mha + ["--incremental", "--key", "k.npy"],
        "mha_kv_without_incremental": mha + ["--kv", "q8"],
        "mha_kv_scale_q8": mha + ["--incremental", "--kv", "q8", "--kv-scale", "2"],
        "mha_hadamard_without_kv": mha + ["--hadamard"],
        "mha_kv_residual_q8": mha + ["--incremental", "--kv", "q8", "--kv-residual", "32"],
        "mha_hadamard_q4c": mha + ["--incremental", "--kv", "q4c", "--hadamard"],
        "scaling_variance_no_train": ["scaling", "--variance", "--no-train"],
        "scaling_variance_one_query": ["scaling", "--variance", "--queries", "1"],
        "sdpa_kv_unknown": ["sdpa"] + qkv + ["--kv", "q3"],
        "sdpa_dropout_mask_without_dropout": ["sdpa"] + qkv + ["--dropout-mask", "keep.npy"],
        "sdpa_bf16_weights": ["sdpa"] + qkv + ["--compute=bf16", "-w", "w.npy"],
        "sdpa_cu_seqlens_q_alone": ["sdpa"] + qkv + ["--cu-seqlens-q", "cu.npy"],
        "sdpa_kv_scale_q8": ["sdpa"] + qkv + ["--kv", "q8", "--kv-scale", "2"],
        "sdpa_hadamard_q4c": ["sdpa"] + qkv + ["--kv", "q4c", "--hadamard"],
        "sdpa_hadamard_rope": ["sdpa"] + qkv + ["--kv", "q8", "--hadamard", "--rope", "halves"],
        "sdpa_ragged_mask": ["sdpa"] + qkv + ["--cu-seqlens-q", "cq.npy", "--cu-seqlens-k", "ck.npy", "-m", "m.npy"],
        "sdpa_ragged_dsinks": ["sdpa"] + qkv + ["--cu-seqlens-q", "cq.npy", "--cu-seqlens-k", "ck.npy", "--sinks",
                                                "s.npy", "--dsinks", "ds.npy"],
    }.items():
        write("args", n, "\0".join(a).encode("utf-8", "surrogateescape"))
    # attn-mpi sdpa (fuzz_mpi_args: the arguments after "attn-mpi sdpa")
    mpi = qkv + ["-o", "o.npy"]
    for n, a in {
        "window_without_causal": mpi + ["--window", "4"],
        "timeout_without_value": mpi + ["--timeout"],
        "layout_without_value": mpi + ["--layout"],
    }.items():
        write("mpi_args", n, "\0".join(a))


def bench_args_seeds():
    """The benchmark's options (fuzz_bench_args: the arguments after
    "attn-bench", and again after "attn-mpi bench"): each option, and each
    error either parser has."""
    for n, a in {
        # attn bench: each option and section
        "quick": ["--quick"],
        "quick_json": ["--quick", "--json"],
        **{"section_" + s: ["--quick", "--" + s] for s in
           ("backward", "layer", "variants", "varlen", "decode", "overhead", "paged", "kv")},
        "threads": ["--threads", "4", "--json"],
        "threads_joined": ["--threads=256", "--layer"],
        "ggml": ["--ggml", "dir", "--quick"],
        "ggml_joined": ["--json", "--ggml=dir"],
        "help_after_bad_value": ["--threads", "0", "--help"],
        "help_short_after_sections": ["--decode", "--kv", "-h"],
        "help_as_ggml_dir": ["--ggml", "--help"],
        # attn bench: each error
        "unknown": ["--quick", "--frobnicate"],
        "threads_zero": ["--threads", "0"],
        "threads_not_whole": ["--threads", "5x"],
        "threads_too_many": ["--threads=257"],
        "threads_without_value": ["--quick", "--threads"],
        "ggml_without_value": ["--ggml"],
        "ggml_empty": ["--ggml="],
        "ggml_empty_next": ["--ggml", ""],
        "two_sections": ["--decode", "--kv"],
        "section_and_ggml": ["--varlen", "--ggml", "dir"],
        "ggml_and_section": ["--ggml=dir", "--paged"],
        "quick_twice": ["--quick", "--quick"],
        "threads_twice": ["--threads", "2", "--threads=3"],
        "section_twice": ["--kv", "--kv"],
        "mpi": ["--mpi"],
        "error_then_more": ["--threads", "0", "--quick"],
        "section_joined": ["--kv=1"],
        "section_prefix": ["--kvx"],
        "ggml_prefix": ["--ggmlx=dir"],
        # attn-mpi bench: each option and error
        "mpi_seq_layout": ["--quick", "--seq", "64", "--layout", "contiguous"],
        "mpi_seq_joined": ["--seq=4096", "--layout=zigzag"],
        "mpi_seq_short": ["--seq", "1"],
        "mpi_seq_not_whole": ["--seq", "abc"],
        "mpi_seq_past_int32": ["--seq", "2147483648"],
        "mpi_seq_without_value": ["--seq"],
        "mpi_seq_twice": ["--seq", "64", "--seq=128"],
        "mpi_layout_unknown": ["--layout", "ring"],
        "mpi_layout_without_value": ["--quick", "--layout"],
        "mpi_help_after_bad_value": ["--seq", "abc", "-h"],
        "mpi_timeout": ["--timeout", "2.5"],
        "mpi_timeout_nan": ["--timeout", "nan", "--quick"],
        "mpi_timeout_zero": ["--timeout=0"],
    }.items():
        write("bench_args", n, "\0".join(a))


def mha_seeds(mark, first_data):
    """attn mha: its arguments, and its files (fuzz_mha_load: a byte of heads
    and flags, then -x, --key, --value and the weights' safetensors file)."""
    args = {
        "mha_self_weights_out": ["mha", "-x", "x.npy", "--weights", "w.safetensors", "--heads", "4",
                                 "--causal=bottom-right", "-w", "w.npy", "-o", "o.npy"],
        "mha_llama_cross": ["mha", "-x", "x.npy", "--key", "k.npy", "--value", "v.npy", "--weights", "dir",
                            "--prefix", "model.layers.0.self_attn.", "--heads", "8", "--kv-heads", "2", "--rope",
                            "halves", "--rope-base", "500000", "--softcap", "30", "--alibi", "--window", "128",
                            "--causal"],
        "mha_incremental": ["mha", "-x", "x.npy", "--weights", "w", "--heads", "2", "--incremental", "--causal"],
        "mha_incremental_kv_q4_1": ["mha", "-x", "x.npy", "--weights", "w", "--heads", "2", "--incremental",
                                    "--kv", "q4_1"],
        "mha_incremental_kv_hadamard": ["mha", "-x", "x.npy", "--weights", "w", "--heads", "2", "--incremental",
                                        "--kv", "q8", "--hadamard"],
        "mha_incremental_kv_residual": ["mha", "-x", "x.npy", "--weights", "w", "--heads", "2", "--incremental",
                                        "--kv", "q2c", "--kv-residual", "64"],
        "mha_kv_residual_too_large": ["mha", "-x", "x.npy", "--weights", "w", "--heads", "2", "--incremental",
                                      "--kv", "q4c", "--kv-residual=99999999999999999999"],
        "mha_help": ["mha", "--help"],
    }
    for n, a in args.items():
        write("args", n, "\0".join(a))
    r = np.random.default_rng(1)
    f = r.standard_normal
    E = 4
    packed = {"in_proj_weight": f((3 * E, E)), "in_proj_bias": f(3 * E), "out_proj.weight": f((E, E)),
              "out_proj.bias": f(E), "bias_k": f((1, 1, E)), "bias_v": f((1, 1, E))}
    llama = {"model.layers.0.self_attn.q_proj.weight": f((E, E)).astype(np.float32),
             "model.layers.0.self_attn.k_proj.weight": f((E // 2, E)).astype(np.float32),
             "model.layers.0.self_attn.v_proj.weight": f((E // 2, E)).astype(np.float32),
             "model.layers.0.self_attn.o_proj.weight": f((E, E)).astype(np.float32),
             "model.layers.0.self_attn.sinks": f(2).astype(np.float32)}
    separate = {"q_proj_weight": f((E, E)), "k_proj_weight": f((E, 3)), "v_proj_weight": f((E, 2)),
                "in_proj_bias": f(3 * E), "out_proj.weight": f((E, E))}

    def files(flags, x, key=None, value=None, weights=packed):
        parts = [npy(x), npy(key) if key is not None else b"", npy(value) if value is not None else b"",
                 safetensors(weights)]
        return bytes([flags]) + mark.join(parts)
    # byte 0: heads - 1 (bits 0-1), --causal (4), -w (8), --incremental (16),
    # --kv none, q8, q4_1, e4m3 (bits 5-6)
    write("mha_load", "packed_weights_out", files(1 | 8, f((2, 3, E))))

    def npy_dir(flags, x, weights):
        """The weights as a directory of NAME.npy files: "dir\\n", then each name, a newline, its bytes."""
        entries = [name.encode() + b"\n" + npy(a) for name, a in weights.items()]
        return bytes([flags]) + mark.join([npy(x), b"", b"", b"dir\n" + mark.join(entries)])
    g = np.random.default_rng(2).standard_normal  # its own draws: the seeds after these stay as they were
    write("mha_load", "npy_dir_packed", npy_dir(1, g((2, 3, E)), packed))
    write("mha_load", "npy_dir_llama_prefix", npy_dir(1 | 4, g((3, E)).astype(np.float32), llama))
    write("mha_load", "npy_dir_two_layers", npy_dir(1, g((3, E)).astype(np.float32),
                                                    dict(llama, **{"model.layers.1.self_attn.q_proj.weight": g((E, E))})))
    write("mha_load", "npy_dir_empty", npy_dir(1, g((2, 3, E)), {}))
    write("mha_load", "npy_dir_bad_npy", bytes([1]) + mark.join([npy(g((2, 3, E))), b"", b"",
                                                                b"dir\nin_proj_weight\nnot a .npy file"]))
    write("mha_load", "llama_gqa_sinks_causal_incremental", files(1 | 4 | 16, f((3, E)).astype(np.float32),
                                                                 weights=llama))
    write("mha_load", "separate_cross_attention", files(1 | 8, f((2, 3, E)), f((2, 5, 3)), f((2, 5, 2)),
                                                        weights=separate))
    # Regressions: -x of rank 1 read shape[-1]; rank 4 with -w overflowed the
    # weights' 3-element shape.
    write("mha_load", "x_rank1_weights_out", files(1 | 8, f(E)), where="regressions")
    write("mha_load", "x_rank4_weights_out", files(1 | 8, f((1, 2, 3, E))), where="regressions")
    write("mha_load", "key_rank0", files(1 | 8, f((2, 3, E)), np.float64(1.0).reshape(()), f((2, 5, 2)),
                                         weights=separate), where="regressions")
    # A quantized cache: e4m3 on heads of 2 values; q8 refusing them; q4_1 on
    # heads of 32 (E = 64, 2 heads).
    write("mha_load", "llama_incremental_kv_e4m3", files(1 | 4 | 16 | 3 << 5, f((3, E)).astype(np.float32),
                                                         weights=llama))
    write("mha_load", "llama_incremental_kv_q8_head_dim_2", files(1 | 16 | 1 << 5, f((3, E)).astype(np.float32),
                                                                  weights=llama))
    wide = {"in_proj_weight": f((3 * 64, 64)).astype(np.float32), "out_proj.weight": f((64, 64)).astype(np.float32)}
    write("mha_load", "packed_incremental_kv_q4_1", files(1 | 16 | 2 << 5, f((2, 3, 64)).astype(np.float32),
                                                          weights=wide))
    # A last byte after a fourth mark (past the weights file): bits 0-1 --kv-scale none, 16, 8,32, 1e30; bit 2 e5m2
    # for e4m3 and q4c for q4_1; bit 3 q2c for q8; bits 4-5 --kv-residual none, 32, 64, 33; bit 6 --hadamard
    h = np.random.default_rng(5).standard_normal  # its own draws: the seeds after these stay as they were
    write("mha_load", "llama_incremental_kv_e4m3_per_head_scales", files(1 | 4 | 16 | 3 << 5, (h((3, E)) * 500)
                                                                         .astype(np.float32), weights=llama) + mark + b"\x02")
    write("mha_load", "llama_incremental_kv_e5m2_scale_rounds_all_to_0_hadamard",
          files(1 | 16 | 3 << 5, h((3, E)).astype(np.float32), weights=llama) + mark + bytes([3 | 4 | 64]))
    write("mha_load", "packed_incremental_kv_q4c_residual_32", files(1 | 4 | 16 | 2 << 5, h((2, 40, 64)).astype(np.float32),
                                                                     weights=wide) + mark + bytes([4 | 1 << 4]))
    write("mha_load", "packed_incremental_kv_q2c_residual_refused", files(1 | 16 | 1 << 5, h((2, 40, 64)).astype(np.float32),
                                                                          weights=wide) + mark + bytes([8 | 3 << 4]))

    # safetensors files of attn mha's weights: two tensors and __metadata__,
    # f16 with an empty tensor, bf16, two tensors over the same bytes, a
    # header cut short, six dimensions
    a12 = np.arange(12, dtype=np.float32)
    for name, (header, data12) in {
        "s1": ({"in_proj_weight": {"dtype": "F32", "shape": [6, 2], "data_offsets": [0, 48]},
                "out_proj.bias": {"dtype": "F64", "shape": [2], "data_offsets": [48, 64]}, "__metadata__": {"format": "pt"}},
               a12.tobytes() + np.ones(2).tobytes()),
        "s2": ({"a": {"dtype": "F16", "shape": [6, 2], "data_offsets": [0, 24]},
                "b": {"dtype": "F64", "shape": [0, 3], "data_offsets": [24, 24]}, "__metadata__": {"format": "pt"}},
               a12.astype(np.float16).tobytes()),
        "s3": ({"a": {"dtype": "BF16", "shape": [6, 4], "data_offsets": [0, 48]}}, a12.tobytes()),
        "s4": ({"a": {"dtype": "F32", "shape": [6, 2], "data_offsets": [0, 48]},
                "b": {"dtype": "F32", "shape": [2, 2], "data_offsets": [32, 48]}}, a12.tobytes() * 2),
        "s6": ({"a": {"dtype": "F32", "shape": [1] * 6, "data_offsets": [0, 4]}}, a12.tobytes()),
    }.items():
        write("safetensors", name, safetensors_raw(json.dumps(header).encode(), data12))
    write("safetensors", "s5", struct.pack("<Q", 3) + b'{"a')

    # safetensors: what the format forbids next to what it allows, so that the
    # fuzzer mutates the NUL and __metadata__ checks' both sides.
    data = r.standard_normal((2, 3)).tobytes()
    t = {"dtype": "F64", "shape": [2, 3], "data_offsets": [0, 48]}
    for name, header in {
        "nul_name_escape": json.dumps({"a\0b": t}).encode(),
        "nul_name_raw": json.dumps({"a": t}).encode().replace(b'"a"', b'"a\0b"'),
        "nul_dtype": json.dumps({"a": dict(t, dtype="F64\0")}).encode(),
        "metadata_strings": json.dumps({"a": t, "__metadata__": {"format": "pt", "x\\u0000": "\u00e9"}}).encode(),
        "metadata_number": json.dumps({"a": t, "__metadata__": {"format": 1}}).encode(),
        "metadata_nested": json.dumps({"a": t, "__metadata__": {"format": {"pt": [1, None, True]}}}).encode(),
        "metadata_array": json.dumps({"a": t, "__metadata__": ["format", "pt"]}).encode(),
        "metadata_twice": json.dumps({"a": t, "__metadata__": {}}).encode()[:-1] + b', "__metadata__": {}}',
        "text_after_header": json.dumps({"a": t}).encode() + b" {}",
        "spaces_after_header": json.dumps({"a": t}).encode() + b"       ",
        "not_utf8": json.dumps({"a": t, "__metadata__": {"x": "\u00e9"}}).encode().replace(b"\\u00e9", b"\xc3"),
        "empty_shape_overflows": json.dumps({"a": t, "z": {"dtype": "F32", "shape": [0, 2 ** 53, 2 ** 53],
                                                           "data_offsets": [48, 48]}}).encode(),
        "hole_before": json.dumps({"a": dict(t, data_offsets=[8, 56])}).encode(),
        "shape_float": json.dumps({"a": dict(t, shape=[2.0, 3])}).encode(),
        "offsets_exponent": json.dumps({"a": t}).encode().replace(b"[0, 48]", b"[0e0, 4.8E1]"),
    }.items():
        first = name.startswith(("nul_", "metadata_"))  # the first written, with first_data
        write("safetensors", name, safetensors_raw(header, (first_data if first else data) +
                                                   (b"\0" * 8 if name == "hole_before" else b"")))
    write("safetensors", "bytes_after_data", safetensors_raw(json.dumps({"a": t}).encode(), data + b"\0" * 8))
    write("safetensors", "npy_file", npy(np.zeros((2, 3))))
    # entries each refused (or, for more dimensions than attn reads, named but not loaded) for one reason
    big = 2 ** 52 - 1
    for name, (entries, size) in {
        "entry_not_object": ({"a": 1}, 0),
        "dtype_unknown": ({"a": dict(t, dtype="F33")}, 48),
        "offsets_three": ({"a": dict(t, data_offsets=[0, 48, 48])}, 48),
        "offsets_reversed": ({"a": dict(t, data_offsets=[48, 0])}, 48),
        "offsets_past_data": ({"a": dict(t, data_offsets=[0, 4800])}, 48),
        "offsets_fraction": ({"a": dict(t, data_offsets=[0, 47.5])}, 48),
        "shape_negative": ({"a": dict(t, shape=[-2, 3])}, 48),
        "bytes_not_shape": ({"a": dict(t, shape=[2, 2])}, 48),
        "f4_half_byte": ({"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 1]}}, 1),
        "u8_too_large": ({"a": {"dtype": "U8", "shape": [big, big], "data_offsets": [0, 0]}}, 0),
        "f32_rank_9_not_read": ({"a": {"dtype": "F32", "shape": [1] * 9, "data_offsets": [0, 4]}}, 4),
        "i64_rank_9_not_read": ({"a": {"dtype": "I64", "shape": [1] * 9, "data_offsets": [0, 8]}}, 8),
        "empty_strides_overflow": ({"a": t, "z": {"dtype": "F32", "shape": [0, big, big], "data_offsets": [48, 48]}}, 48),
    }.items():
        write("safetensors", name, safetensors_raw(json.dumps(entries).encode(), data[:size]))
    kv_pages_seeds()
    env_seeds()
    varlen_seeds()
    api_property_inputs()


def varlen_seeds():
    """Programs for fuzz_varlen (its reader: the first byte picks the call,
    0 a ragged batch, 1 its backward, 2 one paged sequence, 3 a ragged batch
    over a pool; then sizes, offsets, page tables and lengths, each a byte
    or an edge of int64 or int32)."""
    for name, hexbytes in {
        "ragged_ok": "0003090c000003040508090c0000000000000000000000000102",
        "ragged_edges": "0002090c0000e2e3e1e0090c0000000000000000000000000000",
        "ragged_decreasing": "0003090c000005040308090c0000000000000000000000000001",
        "ragged_negative_batch": "00e0040400000000000000000000000000000000000000000000",
        "backward_ok": "0102070500000300070500000000000000000000000000000101",
        "paged_ok": "02071403000102000000000001",
        "paged_outside": "02040c03000502000000000000",
        "paged_negative_entry": "02040c0300e002000000000000",
        "paged_length_past": "02042702000100000000000001",
        "paged_batch_ok": "030714030000010102020000000000000000000001011e04",
        "paged_batch_outside": "03040c03000501e002020000000000000000000000020d04",
    }.items():
        write("varlen", name, bytes.fromhex(hexbytes))


def env_seeds():
    """Values for fuzz_env: ATTN_NUM_THREADS, ATTN_VERBOSE, COLUMNS,
    ATTN_ISA, TERM, COLORTERM and NO_COLOR, separated by NUL; those the
    input does not reach are unset."""
    def env(*values):
        return b"\0".join(v.encode() for v in values)
    for name, values in {
        "threads_4": ["4"],
        "threads_over_256": ["99999999999999999999"],
        "threads_0": ["0"],
        "threads_negative": ["-3"],
        "threads_trailing_text": ["3x"],
        "threads_space_and_sign": [" +7"],
        "verbose_false_any_case": ["", "FaLsE"],
        "verbose_off_no_0": ["", "no"],
        "verbose_yes": ["", "yes"],
        "verbose_empty": ["", ""],
        "columns_120": ["", "", "120"],
        "columns_19": ["", "", "19"],
        "columns_10001": ["", "", "10001"],
        "columns_trailing_text": ["", "", "80x"],
        "isa_avx2": ["", "", "", "avx2"],
        "isa_c": ["", "", "", "c"],
        "isa_avx512": ["", "", "", "avx512"],
        "isa_unknown": ["", "", "", "avx2x"],
        "term_256": ["", "", "", "", "xterm-256color"],
        "term_dumb": ["", "", "", "", "dumb"],
        "colorterm_truecolor": ["", "", "", "", "xterm", "truecolor"],
        "colorterm_24bit": ["", "", "", "", "xterm", "24bit"],
        "no_color": ["", "", "", "", "xterm", "", "1"],
        "no_color_empty": ["", "", "", "", "xterm-256color", "", ""],
        "every_value": ["2", "1", "100", "c", "xterm-256color", "truecolor", "1"],
    }.items():
        write("env", name, env(*values))


def kv_pages_seeds():
    """Programs for fuzz_kv_pages (its reader: a pool's description, then
    operations, one byte choosing each and bytes for its arguments)."""
    def pool(dtype=0, page=0, pages=3, seqs=2, heads=1, e=1, ev=1, window=None):
        # dtype, page size (a byte < 250, then which of 16, 17, 32, 255, 256), pages, sequences,
        # heads (each a byte < 240, then the value), dims, max_length 0, no rotation, no scale, for keys
        # per channel (the top codes 252.., 248.., 244.., 228..) the residual window's byte (9, then which
        # of 32, 64, 48, -32; else none), all the bytes offered
        grouped = dtype >> 2 in (63, 62, 61, 57)
        residual = bytes([9, window]) if window is not None else b"\0" if grouped else b""
        return bytes([dtype, 0, page, 0, pages, 0, seqs, 0, heads, e, ev, 0, 0, 0]) + residual + b"\0"
    create, fork0, free0 = bytes([0]), bytes([1, 0, 0]), bytes([2, 0, 0])
    def append(ids, steps, page=16, how=(0, 0)):  # the ids, each sequence's rows, k's and v's tensors (0: as given)
        # each step: its rows (a byte % (page + 3)), then a byte that is not 9 (9: a fuzzed offset)
        return bytes([4, 0, len(ids)]) + b"".join(bytes([0, i]) for i in ids) + b"\0" + \
            b"".join(bytes([n % (page + 3), 0]) for n in steps) + bytes([0, how[0], how[1]])
    gather0, attend = bytes([6, 0, 0, 0]), bytes([7, 2, 0, 0, 0, 0, 0, 1, 0, 1, 0, 2, 1])
    view = bytes([8, 3, 1, 0, 0, 1, 2]) + bytes([0, 1] * 64) + bytes([0, 9, 0, 5]) + bytes([0, 2])
    write("kv_pages", "create_append_fork_append_attend",
          pool() + create + append([0], [17]) + fork0 + append([0, 1], [1, 1]) + attend + gather0)
    write("kv_pages", "f16_page_256_full", pool(1, 4, 2, 3, 2, 3, 2) + create + create + append([0, 1], [200, 250], 256) +
          append([1], [100], 256) + free0 + create)
    write("kv_pages", "bf16_truncate_free", pool(2, 2, 4, 3) + create + append([0], [30]) + fork0 +
          bytes([3, 0, 1, 5]) + append([1], [4]) + free0 + gather0)
    write("kv_pages", "same_sequence_twice", pool() + create + create + append([1, 1], [2, 2]))
    write("kv_pages", "caller_view", pool(0, 0, 2, 2, 1, 2, 2) + view)
    # q4c keys with a residual window of 64: appends past the window, a fork, both grow, attend, gather
    window = pool(252, 2, 7, 3, 1, 3, 3, window=1)
    write("kv_pages", "q4c_residual_64_fork_past_window",
          window + create + append([0], [34], 32) + append([0], [34], 32) + append([0], [34], 32) +
          append([0], [34], 32) + fork0 + append([0, 1], [34, 34], 32) + attend + gather0)
    # q4c keys, a window of 32: 70 positions (group 1 still in the window, its page's values written),
    # a fork, then the child's 30 more retire group 1 into the page both hold: the child's copy, and
    # the parent gathers as before; then the parent's own 30
    window32 = pool(252, 2, 7, 3, 1, 3, 3, window=0)
    write("kv_pages", "q4c_residual_32_child_retires_a_shared_group",
          window32 + create + append([0], [34], 32) + append([0], [34], 32) + append([0], [2], 32) + fork0 +
          append([1], [30], 32) + append([0], [30], 32) + gather0 + attend)
    # a caller's view (op 8) of one page of one position: the window's byte, page size, pages, their
    # fuzzed sizes' bytes, `missing` (4: no lengths, 5: no page table), no rotation, the count (255:
    # -1), 64 table entries of page 0, a length byte pair each, an even byte (a stride, not offsets), the
    # table stride's (5: fuzzed, 209 its -1), then the sequence gathered (255: the one past the count)
    def caller_view(missing=0, count=1, stride=(0, 0, 1), which=0):
        return bytes([8, 0, 0, 0, 0, 0, missing, 0, count]) + bytes([0, 0] * 64) + \
            bytes([0, 1] * (count if count < 8 else 0)) + bytes(stride) + bytes([which])
    for name, v in (("negative_count", caller_view(count=255)), ("no_lengths", caller_view(missing=4)),
                    ("no_page_table", caller_view(missing=5)), ("negative_stride", caller_view(stride=(0, 5, 209))),
                    ("gather_past_the_count", caller_view(which=255))):
        write("kv_pages", "caller_view_" + name, pool(0, 0, 2, 2, 1, 2, 2) + v)
    # the pool's view written into blocks of each struct_size (the top op codes: a size, a fill byte)
    write("kv_pages", "view_at_every_struct_size",
          pool(0, 0, 2, 2, 1, 2, 2) + create + append([0], [5]) + b"".join(bytes([250, i, 0xa5]) for i in range(8)))
    # pages with each head's pages together (head_major 1): fork, append to both, gather, attend
    write("kv_pages", "head_major_fork_append", pool(236, 0, 3, 3, 1, 2, 1) + create + append([0], [18]) + fork0 +
          append([0, 1], [3, 5]) + gather0 + attend)
    # descriptions to refuse: a bool pool, head_major 2, a window without keys per channel, q4c keys turned
    for kind, name in ((240, "bool_dtype"), (238, "head_major_2"), (232, "residual_without_key_dtype"),
                       (228, "q4c_with_hadamard")):
        write("kv_pages", "refused_" + name, pool(kind) + create)
    # appends to refuse, the pool as it was: k with a head too many, v a row longer than k
    write("kv_pages", "append_refused_heads_and_rows",
          pool() + create + append([0], [3]) + append([0], [4], how=(7, 0)) + append([0], [4], how=(0, 8)) + gather0)


# ---------------------------------------------------------------------------
# Inputs for the API targets' properties: fuzz_api (16-bit queries, weights,
# versioned structs' sizes, plain attention and attn_sdpa_reference compared),
# fuzz_varlen (GQA, dtypes, head-major rows, options, masks per sequence, the
# options a batch refuses) and fuzz_quant (attention over quantized keys
# against the same over their widened rows); main() writes them with the rest.
# ---------------------------------------------------------------------------
def api_property_inputs():
    # fuzz_api: the call (0 forward, 1 backward), q's dtype byte (bit 0 f64;
    # bits 1-2 f16/bf16 k and v beside f32 q; bits 3-4 set: q f16, with bit 5
    # bf16), B, Hq, Hk, L, S, E, Ev (each byte b < 192 is b % 9), 0 (kept
    # well-formed: B % 3 + 1 ...), the rank byte (2 + b % 3), then each
    # tensor's layout byte (< 128: C order) and fill byte.
    def problem(call, dt, B, Hq, Hk, L, S, E, Ev, rank=4):
        return bytes([call, dt, B, Hq, Hk, L, S, E, Ev, 0, rank - 2, 0, 1, 0, 2, 0, 3])
    def opts(which, *rest, more=0, tail=b""):  # threads byte, 0, which, its fields; more, its fields
        return bytes([1, 0, which]) + bytes(rest) + bytes([more]) + tail
    outs = bytes([0, 9, 0, 10])
    # f16 q, f32 k and v, GQA (Hq 2, Hk 1), causal bottom-right and a bool (Hq, L, S) mask
    write("api", "prop_f16_q_gqa_bool_mask",
          problem(0, 0x18, 0, 1, 0, 2, 4, 3, 2) + opts(2 | 4, 2, 1, 0, 7) + outs + b"\0")
    # bf16 q, k and v; f32 float mask, soft cap, ALiBi slopes and sinks, RoPE (the reference)
    write("api", "prop_bf16_variants_rope",
          problem(0, 0x3c, 1, 1, 1, 3, 5, 3, 3) + opts(4 | 16 | 32 | 64, 0, 0, 8, 5, 1, 0, 9, 1, 0, 11, 0, 3, 0, 0, 1) +
          outs + b"\0")
    # f64 with the weights and no lse
    write("api", "prop_f64_weights_no_lse", problem(0, 1, 1, 1, 0, 4, 6, 2, 3) + opts(2, 1) + outs + bytes([3, 0, 12]))
    # f32: options of struct_size 8 (every field its default), an older context, a newer RoPE
    write("api", "prop_struct_sizes", problem(0, 0, 0, 2, 1, 1, 2, 3, 3) + opts(1 | 2, 0, 1) + outs +
          bytes([4, 233, 237, 236]))
    write("api", "prop_options_newer_header", problem(0, 0, 0, 0, 0, 1, 1, 1, 1) + opts(0) + outs + bytes([4, 236, 0, 0]))
    # f32 decode (L 2) with dropout and bf16 compute (no comparison), then f32 flash (L 9) with causal top-left
    write("api", "prop_f32_dropout_bf16", problem(0, 0, 1, 0, 1, 1, 7, 5, 5) +
          opts(0, more=1 | 2, tail=bytes([3]) + bytes(8) + bytes([1])) + outs + b"\0")
    write("api", "prop_f32_flash_top_left", problem(1, 0, 0, 2, 0, 8, 8, 7, 7) + opts(2, 1) + outs + b"\0" + bytes(12))
    # backward in f64 with GQA: its gradients twice, the same bits
    write("api", "prop_f64_backward_gqa", problem(1, 1, 0, 2, 1, 2, 3, 2, 2) + opts(2, 2) + outs + b"\0" + bytes(8))

    # fuzz_varlen: the call (0 forward, 1 backward), batch, Tq, Tk, ten pairs of offsets, 1 (a well-formed split),
    # causal, then the shapes byte x (Hk 1 + x % 2, Hq Hk·(1 + x/2 % 3), q's dtype x/8 % 4 of f32 f64 f16 bf16, k's
    # x/32 % 4 of f32 f16 bf16 f32, bit 2 head-major rows, bit 7 no lse), E, Ev, the options byte y and its fields.
    def batch(call, b, tq, tk, causal, x, e, ev, y, *rest):
        cu = bytes(v for i in range(10) for v in (i * 3, i * 4))
        return bytes([call, b, tq, tk]) + cu + bytes([1, causal, x, e, ev, y]) + bytes(rest)
    # GQA (Hq 4, Hk 2), head-major rows, a bool mask per sequence over its heads
    write("varlen", "prop_gqa_head_major_masks", batch(0, 3, 7, 9, 1, 7, 2, 1, 64, 3))
    # f16 q, bf16 k and v: scale, soft cap, ALiBi, sinks, RoPE
    write("varlen", "prop_f16_bf16_variants", batch(0, 2, 5, 6, 2, 81, 3, 3, 1 | 2 | 4 | 16 | 32, 24, 5,
                                                     *([1] * 16), *([3] * 16), 1, 0))
    # f64 backward, GQA, a window and dropout (p = 8/32, dropout_seed from 8 bytes)
    write("varlen", "prop_f64_backward_window_dropout", batch(1, 3, 6, 8, 1, 8, 3, 2, 8 | 128, 2, 1 | (8 << 4), *range(8)))
    # refused: options->mask (masks go per sequence), attention in pieces
    write("varlen", "prop_refuse_options_mask", batch(0, 2, 4, 4, 0, 1, 2, 2, 128, 4))
    write("varlen", "prop_refuse_pieces", batch(0, 2, 4, 4, 0, 1, 2, 2, 128, 8))
    # bf16 q and f32 k and v, no lse, float masks of one head, bf16 compute
    write("varlen", "prop_bf16_no_lse_float_masks", batch(0, 4, 8, 8, 0, 152 + 32 * 3, 4, 4, 64 | 128, 2, 4))

    # fuzz_quant: format byte (5 q4_1, 0 q8, 2 e4m3), n (1, then ·32), rank 3, six (shape, stride) pairs
    # (shape b % 5 + 1, stride 0: C order), the last dimension 32, NULL strides, the rows' bytes, one byte
    # for the size offered, 4 bytes a float to quantize, then the queries: their count byte (bit 7: 8 more,
    # the flash kernel), a byte each, and no per-head scale.
    def quant(fmt, heads, keys, row, row_bytes, qrows_byte):
        desc = bytes([fmt, 0, 1, 3, 0]) + bytes([heads - 1, 0, keys - 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]) + bytes([0, 0, 0])
        n = heads * keys * 32
        floats = b"".join(struct.pack(">f", ((i * 7) % 23 - 11) / 4) for i in range(n))
        L = (qrows_byte % 3 + 1) + (8 if qrows_byte & 0x80 else 0)
        qs = bytes((i * 5) % 17 for i in range(heads * L * 32))
        return desc + (row * (heads * keys))[:row_bytes * heads * keys] + b"\0" + floats + bytes([qrows_byte]) + qs + b"\0"
    q41_row = struct.pack("<ee", 0.25, -1.0) + bytes((i * 37) % 256 for i in range(16))
    q8_row = struct.pack("<e", 0.125) + bytes((i * 29) % 256 for i in range(32))
    e4m3_row = bytes((i * 11) % 0x7e for i in range(32))
    write("quant", "prop_q4_1_flash_widened", quant(5, 2, 3, q41_row, 20, 0x80))
    write("quant", "prop_q8_flash_widened", quant(0, 1, 4, q8_row, 34, 0x81))
    write("quant", "prop_e4m3_decode_widened", quant(2, 2, 2, e4m3_row, 32, 1))
    # fuzz_quant's keys per channel (its input read again from the start): format byte (odd q4c, even
    # q2c), rank byte (b % 4 + 1), two leading sizes (b % 2 + 1), positions (b < 150: 32 · (b % 3 + 1)),
    # channels (b < 150: 4 · (b % 8 + 1)), the last stride 1, 4 bytes a float, the size offered (5: a
    # byte short), then the dtype the groups widen into (f64, f16, bf16, or bool to refuse)
    def groups(fmt, rank, lead, pos, chans, offer, wide):
        shape = ([lead[0] % 2 + 1, lead[1] % 2 + 1] + [32 * (pos % 3 + 1), 4 * (chans % 8 + 1)])[4 - (rank % 4 + 1):]
        n = 1
        for x in shape:
            n *= x
        floats = b"".join(struct.pack(">f", ((i * 13) % 29 - 14) / 8) for i in range(n))
        return bytes([fmt, rank, lead[0], lead[1], pos, chans, 0]) + floats + bytes([offer, wide])
    write("quant", "prop_q4c_groups_a_byte_short", groups(1, 1, (0, 0), 0, 0, 5, 0))
    write("quant", "prop_q2c_groups_widened_f16", groups(0, 3, (1, 0), 1, 0, 0, 1))
    write("quant", "prop_q4c_groups_widened_bf16", groups(1, 2, (0, 1), 0, 1, 0, 2))
    write("quant", "prop_q4c_groups_widened_f64", groups(1, 1, (0, 0), 2, 3, 0, 0))
    write("quant", "prop_q2c_groups_into_bool_refused", groups(0, 1, (0, 0), 0, 0, 0, 3))


def files_under(root):
    """{path relative to root: bytes} of every file under root/corpus and root/regressions."""
    found = {}
    for where in ("corpus", "regressions"):
        for d, _, names in os.walk(os.path.join(root, where)):
            for n in names:
                path = os.path.join(d, n)
                with open(path, "rb") as f:
                    found[os.path.relpath(path, root)] = f.read()
    return found


def check():
    """The committed seeds are exactly what main() writes (see the usage)."""
    global OUT
    tmp = tempfile.mkdtemp(prefix="attn-seeds-")
    try:
        OUT = tmp
        main()
        written = files_under(tmp)
    finally:
        OUT = HERE
        shutil.rmtree(tmp)
    committed = files_under(HERE)
    found_by_fuzzer = re.compile(r"^[0-9a-f]{40}$")
    problems = ["%s: not committed" % p for p in sorted(written) if p not in committed]
    problems += ["%s: the committed bytes differ" % p for p in sorted(written)
                 if p in committed and committed[p] != written[p]]
    problems += ["%s: committed, but make_seeds.py does not write it" % p for p in sorted(committed)
                 if p.startswith("corpus" + os.sep) and p not in written
                 and not found_by_fuzzer.match(os.path.basename(p))]
    for p in problems:
        print("make_seeds.py --check: " + p)
    print("make_seeds.py --check: %d seeds written, %d differences" % (len(written), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(check())
    if len(sys.argv) > 2 or (sys.argv[1:] and sys.argv[1].startswith("-")):
        sys.exit(__doc__.split("\n\n", 2)[2])
    if sys.argv[1:]:
        OUT = os.path.abspath(sys.argv[1])
    main()
