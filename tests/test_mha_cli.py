#!/usr/bin/python3
"""test_mha_cli.py -- `attn mha` on weights from safetensors files and .npy
directories, against PyTorch in float64, and the safetensors reader's errors.

The safetensors files are written here with struct and json (the format: an
8-byte little-endian header length, a JSON header of dtype, shape and
data_offsets per tensor, then the data). Layers: torch.nn.MultiheadAttention's
own state_dict, and a Llama-style block (q/k/v/o_proj, GQA, RoPE in Hugging
Face's halves layout, causal) under the prefix model.layers.0.self_attn.,
checked against the same layer written in PyTorch (oracle_mha.gqa_reference).

Usage: test_mha_cli.py BUILD_DIR. Prints "ok NAME" / "FAIL NAME: why".
"""
import json
import os
import re
import resource
import struct
import subprocess

import numpy as np
import torch

from scratch import scratch_dir
from clicheck import RANKS, at_rank, rank_case_problems
from oracle_mha import gqa_reference
from oracle_quant import FORMATS, ref_dequantize, ref_quantize
from oracle_rope import reference as rope_reference
from torch_attention import Reporter, causal_allowed, oracle_args

DTYPES = {np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}


class BF16:
    """An array stored as bfloat16, which NumPy has not: its bits (rounded to
    nearest even by PyTorch) and its values widened back to float64."""
    def __init__(self, a):
        t = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(torch.bfloat16)
        self.bits = t.view(torch.int16).numpy().view(np.uint16)
        self.wide = t.to(torch.float64).numpy()
        self.shape = self.wide.shape


def widened(a):
    """The float64 values a 16-bit (or any) stored array holds."""
    return a.wide if isinstance(a, BF16) else np.asarray(a).astype(np.float64)


def safetensors_bytes(tensors, header_extra=None, header_override=None, edit=None):
    """The bytes of a safetensors file holding `tensors` (name -> array);
    edit, when given, rewrites the header's JSON text (bytes -> bytes)."""
    header, data, offset = {}, b"", 0
    for name, a in tensors.items():
        raw = a.bits.tobytes() if isinstance(a, BF16) else np.ascontiguousarray(a).tobytes()
        dtype = "BF16" if isinstance(a, BF16) else DTYPES[a.dtype]
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    if header_extra:
        header.update(header_extra)
    text = json.dumps(header_override if header_override is not None else header).encode()
    if edit:
        text = edit(text)
    return struct.pack("<Q", len(text)) + text + data


class Check(Reporter):
    def __init__(self, build):
        super().__init__()
        self.attn = os.path.join(build, "attn")
        self.dir = scratch_dir("attn-mha-")

    def path(self, name):
        return os.path.join(self.dir, name)

    def run(self, args, address_space=None):
        """attn mha with args; address_space: a limit on its bytes of
        address space (RLIMIT_AS), on one thread so that thread stacks and
        malloc's arenas do not fill it on a machine of many cores."""
        if address_space is None:
            return subprocess.run([self.attn, "mha"] + args, capture_output=True, text=True)
        return subprocess.run([self.attn, "mha"] + args, capture_output=True, text=True,
                              env=dict(os.environ, ATTN_NUM_THREADS="1"),
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (address_space,) * 2))

    def layer(self, name, weights_path, x, ref, args, tol=1e-12, address_space=None):
        np.save(self.path("x.npy"), x)
        out = self.path("out.npy")
        if os.path.exists(out):
            os.remove(out)
        r = self.run(["-x", self.path("x.npy"), "--weights", weights_path, "-o", out] + args, address_space)
        if r.returncode != 0:
            return self.report(name, "attn mha failed: " + r.stderr.strip())
        got = np.load(out)
        err = float(np.abs(got - ref).max()) / float(np.abs(ref).max())
        self.report(name, "" if err <= tol else "relative error %.3g" % err)

    def gemm_kernels(self, weights_path, x, args):
        """The kernels of the layer's four products, as ATTN_VERBOSE names them
        (gemm_q=bf16:avx512_bf16/12x32 ...): {"q": ..., "k": ..., "v": ..., "out": ...}."""
        np.save(self.path("x.npy"), x)
        r = subprocess.run([self.attn, "mha", "-x", self.path("x.npy"), "--weights", weights_path, "-o",
                            self.path("probe.npy")] + args, capture_output=True, text=True,
                           env=dict(os.environ, ATTN_VERBOSE="1"))
        line = [l for l in r.stderr.splitlines() if "_projections " in l]
        return dict(w[5:].split("=", 1) for w in line[-1].split() if w.startswith("gemm_")) if line else {}

    def layer_runs(self, name, data, args=("--heads", "2")):
        """A file that must be read: the command succeeds on it."""
        p = self.path("good.safetensors")
        with open(p, "wb") as f:
            f.write(data)
        np.save(self.path("x.npy"), np.zeros((3, 8)))
        r = self.run(["-x", self.path("x.npy"), "--weights", p, "-o", self.path("good_out.npy")] + list(args))
        self.report(name, "" if r.returncode == 0 else "rc %d, stderr %r" % (r.returncode, r.stderr))

    def bad_args(self, name, args, want, code=1, timeout=None):
        """attn mha with `args` fails with `code` (None: any but 0), one
        'attn: error:' line holding `want`, and no -o file (bad_out.npy)."""
        out = self.path("bad_out.npy")
        if os.path.exists(out):
            os.remove(out)
        try:
            r = subprocess.run([self.attn, "mha"] + list(args) + ["-o", out], capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return self.report(name, "still running after %g s" % timeout)
        lines = r.stderr.strip().splitlines()
        ok = (r.returncode == code if code is not None else r.returncode != 0) and len(lines) == 1 and \
            lines[0].startswith("attn: error: ") and want in lines[0]
        self.report(name, "" if ok and not os.path.exists(out) else "rc %d, stderr %r" % (r.returncode, r.stderr))

    def bad(self, name, data, want, args=("--heads", "2")):
        """A safetensors file holding `data` is refused as bad_args says."""
        p = self.path("bad.safetensors")
        with open(p, "wb") as f:
            f.write(data)
        np.save(self.path("x.npy"), np.zeros((3, 8)))
        self.bad_args(name, ["-x", self.path("x.npy"), "--weights", p] + list(args), want, code=None)


def torch_module_layers(c, rng):
    """nn.MultiheadAttention's own state_dict, in a safetensors file and as .npy files."""
    torch.manual_seed(3)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True, add_bias_kv=True, dtype=torch.float64)
    sd = {k.replace("out_proj.", "out_proj."): v.detach().numpy() for k, v in mha.state_dict().items()}
    x = rng.standard_normal((2, 5, 16))
    with torch.no_grad():
        ref = mha(*(torch.from_numpy(x),) * 3, need_weights=False)[0].numpy()
    with open(c.path("mha.safetensors"), "wb") as f:
        f.write(safetensors_bytes(sd))
    c.layer("torch_module_safetensors", c.path("mha.safetensors"), x, ref, ["--heads", "4"])
    os.makedirs(c.path("npy"), exist_ok=True)
    for k, v in sd.items():
        np.save(os.path.join(c.path("npy"), k + ".npy"), v)
    c.layer("torch_module_npy_directory", c.path("npy"), x, ref, ["--heads", "4"])
    with torch.no_grad():  # unbatched (L, E)
        ref1 = mha(*(torch.from_numpy(x[0]),) * 3, need_weights=False)[0].numpy()
    c.layer("torch_module_unbatched", c.path("mha.safetensors"), x[0], ref1, ["--heads", "4"])
    # --causal on a layer with bias_k/bias_v: the limit holds over the input's
    # keys and the bias key is visible to every query, as in the module given
    # the causal (L, S) attn_mask (which it pads with a zero column for the
    # bias key). Self-attention, and cross-attention with S > L, where
    # bottom-right differs from top-left.
    kx = rng.standard_normal((2, 8, 16))
    np.save(c.path("key.npy"), kx)
    for mode, causal in (("", 1), ("=top-left", 1), ("=bottom-right", 2)):
        for name, key, extra in (("self", x, []), ("cross", kx, ["--key", c.path("key.npy")])):
            hidden = ~causal_allowed(x.shape[1], key.shape[1], causal)
            with torch.no_grad():
                refc = mha(torch.from_numpy(x), torch.from_numpy(key), torch.from_numpy(key), attn_mask=hidden,
                           need_weights=False)[0].numpy()
            c.layer("torch_module_bias_kv_causal%s_%s" % (mode.replace("=", "_").replace("-", "_"), name),
                    c.path("mha.safetensors"), x, refc, ["--heads", "4", "--causal" + mode] + extra)
    # f32, without -w: the f32 attention kernels, the causal limit in the merged mask.
    with open(c.path("mha32.safetensors"), "wb") as f:
        f.write(safetensors_bytes({k: v.astype(np.float32) for k, v in sd.items()}))
    np.save(c.path("key32.npy"), kx.astype(np.float32))
    with torch.no_grad():
        refc = mha(torch.from_numpy(x), torch.from_numpy(kx), torch.from_numpy(kx),
                   attn_mask=~causal_allowed(x.shape[1], kx.shape[1], 2), need_weights=False)[0].numpy()
    c.layer("torch_module_bias_kv_causal_bottom_right_cross_f32", c.path("mha32.safetensors"), x.astype(np.float32),
            refc, ["--heads", "4", "--causal=bottom-right", "--key", c.path("key32.npy")], tol=1e-5)


def llama_layer(c, rng):
    """A Llama-style block under a prefix, with GQA inferred from k_proj, RoPE and causal."""
    E, H, Hkv, D = 32, 4, 2, 8
    f = rng.standard_normal
    state = {"q_proj_weight": f((E, E)) / 4, "k_proj_weight": f((Hkv * D, E)) / 4,
             "v_proj_weight": f((Hkv * D, E)) / 4, "out_proj_weight": f((E, E)) / 4}
    names = {"q_proj_weight": "q_proj.weight", "k_proj_weight": "k_proj.weight", "v_proj_weight": "v_proj.weight",
             "out_proj_weight": "o_proj.weight"}
    prefix = "model.layers.0.self_attn."
    tensors = {prefix + names[k]: v for k, v in state.items()}
    tensors["model.embed_tokens.weight"] = f((10, E))  # other tensors of the checkpoint are ignored
    with open(c.path("llama.safetensors"), "wb") as fh:
        fh.write(safetensors_bytes(tensors))
    x = f((2, 7, E))
    ref = gqa_reference(x, x, x, state, H, Hkv, 1, rope=(0, 10000.0, 0, 0))
    c.layer("llama_gqa_rope_causal_prefix", c.path("llama.safetensors"), x, ref,
            ["--heads", "4", "--rope", "halves", "--causal"])
    # f32 weights and input: within f32's bound.
    t32 = {k: v.astype(np.float32) for k, v in tensors.items()}
    with open(c.path("llama32.safetensors"), "wb") as fh:
        fh.write(safetensors_bytes(t32))
    c.layer("llama_f32", c.path("llama32.safetensors"), x.astype(np.float32), ref,
            ["--heads", "4", "--rope", "halves", "--causal"], tol=1e-5)
    # Through the KV cache, one token at a time: the same output.
    c.layer("llama_incremental_kv_cache", c.path("llama.safetensors"), x, ref,
            ["--heads", "4", "--rope", "halves", "--causal", "--incremental"])
    ref1 = gqa_reference(x[:1], x[:1], x[:1], state, H, Hkv, 1, rope=(0, 10000.0, 0, 0))[0]
    c.layer("llama_incremental_unbatched", c.path("llama.safetensors"), x[0], ref1,
            ["--heads", "4", "--rope", "halves", "--incremental"])
    c.layer("llama_incremental_f32", c.path("llama32.safetensors"), x.astype(np.float32), ref,
            ["--heads", "4", "--rope", "halves", "--incremental"], tol=1e-5)
    # The score variants on the layer, whole and token by token.
    variants = {"softcap": 5.0, "slopes": np.array([2.0 ** -(2 * i + 2) for i in range(4)]), "window": 3}
    refv = gqa_reference(x, x, x, state, H, Hkv, 1, rope=(0, 10000.0, 0, 0), variants=variants)
    flags = ["--heads", "4", "--rope", "halves", "--causal", "--softcap", "5", "--alibi", "--window", "3"]
    c.layer("llama_softcap_alibi_window", c.path("llama.safetensors"), x, refv, flags)
    c.layer("llama_softcap_alibi_window_incremental", c.path("llama.safetensors"), x, refv, flags + ["--incremental"])
    # gpt-oss's learned sinks, a tensor of the layer: whole and through the KV cache.
    sinks = dict(tensors)
    sinks[prefix + "sinks"] = f(H)
    with open(c.path("sinks.safetensors"), "wb") as fh:
        fh.write(safetensors_bytes(sinks))
    refs = gqa_reference(x, x, x, dict(state, sinks=sinks[prefix + "sinks"]), H, Hkv, 1, rope=(0, 10000.0, 0, 0))
    c.layer("gpt_oss_sinks", c.path("sinks.safetensors"), x, refs, ["--heads", "4", "--rope", "halves", "--causal"])
    c.layer("gpt_oss_sinks_incremental", c.path("sinks.safetensors"), x, refs,
            ["--heads", "4", "--rope", "halves", "--causal", "--incremental"])
    # Two layers in one file: the prefix must be chosen.
    two = dict(tensors)
    two.update({k.replace("layers.0", "layers.1"): v for k, v in tensors.items() if "layers.0" in k})
    with open(c.path("two.safetensors"), "wb") as fh:
        fh.write(safetensors_bytes(two))
    c.bad("error_two_layers_need_prefix", safetensors_bytes(two), "choose one with --prefix", ["--heads", "4"])
    c.layer("two_layers_with_prefix", c.path("two.safetensors"), x, ref,
            ["--heads", "4", "--rope", "halves", "--causal", "--prefix", prefix])
    # The same checkpoint as a directory of NAME.npy files: the prefix is found
    # there too (a directory took names without a prefix only, and said it had
    # no q_proj.weight); two layers' files need --prefix, as in one file.
    llama_dir, two_dir = c.path("llama_npy"), c.path("two_npy")
    for d, ts in ((llama_dir, tensors), (two_dir, two)):
        os.makedirs(d, exist_ok=True)
        for name, a in ts.items():
            np.save(os.path.join(d, name + ".npy"), a)
    c.layer("llama_npy_directory_prefix_found", llama_dir, x, ref, ["--heads", "4", "--rope", "halves", "--causal"])
    c.bad_args("error_npy_directory_two_layers_need_prefix",
               ["-x", c.path("x.npy"), "--weights", two_dir, "--heads", "4"], "choose one with --prefix")
    c.layer("npy_directory_two_layers_with_prefix", two_dir, x, ref,
            ["--heads", "4", "--rope", "halves", "--causal", "--prefix", prefix])


def grouped_keys_cache(c, rng, R=0, L=40):
    """attn mha --incremental --kv q4c|q2c [--kv-residual R]: the cache's keys
    per channel over groups of 32 positions, token by token over L tokens.
    The reference (float64) is the layer over what the cache holds when each
    token attends: after token t's append the cache has t + 1 positions,
    those of the groups before the residual window (j < 32 floor((t + 1) /
    32) - R) quantized by oracle_quant's reference of attn.h's layout, the
    others in f16; values q4_1 per token. The keys are
    exact in f16 (each k_proj row has one weight, a multiple of 2^-8 below
    2^-6, so every key is a multiple of 2^-14 below 2^-3) and the values
    exact in f32, so the library and the reference quantize the very same
    floats and only the f32 arithmetic of the attention and out_proj is left:
    within 1e-5. The layer with unquantized keys is checked to lie farther
    away, so the groups are what is measured."""
    from oracle_quant import Q4C, Q2C, ref_group, ref_group_dequantize
    E, H, Hkv, D, N = 128, 4, 2, 32, 2
    tag = "" if R == 0 else "_residual_%d" % R
    state = {"q_proj_weight": rng.integers(-64, 65, (E, E)) / 16.0,
             "k_proj_weight": np.zeros((Hkv * D, E)),
             "v_proj_weight": rng.integers(-64, 65, (Hkv * D, E)) / 256.0,
             "out_proj_weight": rng.integers(-64, 65, (E, E)) / 256.0}
    state["k_proj_weight"][np.arange(Hkv * D), rng.integers(0, E, Hkv * D)] = rng.integers(-3, 4, Hkv * D) / 256.0
    names = {"q_proj_weight": "q_proj.weight", "k_proj_weight": "k_proj.weight", "v_proj_weight": "v_proj.weight",
             "out_proj_weight": "o_proj.weight"}
    with open(c.path("groups.safetensors"), "wb") as fh:
        fh.write(safetensors_bytes({names[k]: v.astype(np.float32) for k, v in state.items()}))

    def heads(a, h):
        return a.reshape(N, L, h, D).transpose(0, 2, 1, 3)

    x = rng.integers(-128, 129, (N, L, E)) / 64.0
    k = heads(x @ state["k_proj_weight"].T, Hkv)
    assert np.array_equal(k.astype(np.float16).astype(np.float64), k)
    v = heads(x @ state["v_proj_weight"].T, Hkv)
    vh = ref_dequantize(ref_quantize(np.ascontiguousarray(v, np.float32).reshape(-1, D), 10), 10,
                        D).astype(np.float64).reshape(v.shape)
    q = heads(x @ state["q_proj_weight"].T, H)

    def layer(keys_at, vv):
        out = np.zeros((N, H, L, D))
        vv = np.repeat(vv, H // Hkv, axis=1)
        for t in range(L):
            kk = np.repeat(keys_at(t), H // Hkv, axis=1)[:, :, :t + 1]
            s = q[:, :, t:t + 1] @ kk.transpose(0, 1, 3, 2) / np.sqrt(D)
            p = np.exp(s - s.max(-1, keepdims=True))
            out[:, :, t:t + 1] = (p / p.sum(-1, keepdims=True)) @ vv[:, :, :t + 1]
        return out.transpose(0, 2, 1, 3).reshape(N, L, E) @ state["out_proj_weight"].T

    for name, fmt in (("q4c", Q4C), ("q2c", Q2C)):
        G = L // 32 * 32  # every full group, each quantized the same whenever it leaves the window
        raw = ref_group(np.ascontiguousarray(k[:, :, :G], np.float32).reshape(-1, G, D), fmt)
        gk = ref_group_dequantize(raw, fmt, D).reshape(N, Hkv, G, D).astype(np.float64)

        def held(t):  # the cache's keys when token t attends: the groups that left the window
            kk = k.copy()
            full = max(0, (t + 1) // 32 * 32 - R)
            kk[:, :, :full] = gk[:, :, :full]
            return kk

        ref = layer(held, vh)
        apart = float(np.abs(layer(lambda t: k, vh) - ref).max()) / float(np.abs(ref).max())
        if apart <= 1e-4:  # the keys' groups alone
            c.report("grouped_keys_cache_%s%s" % (name, tag), "the groups' rounding moves the layer by only %.3g" % apart)
            continue
        # Decode scores the groups by integer dot products where the CPU has
        # them (the query times the scales rounded to int8 per block; its
        # bound is checked against f64 in test_quant_kv). ATTN_QDOT=widen
        # scores them on the dequantized f32 values, so only the cache's
        # rounding is measured; then the default run, near the same result.
        args = ["--heads", "4", "--causal", "--incremental", "--kv", name] + (["--kv-residual", str(R)] if R else [])
        os.environ["ATTN_QDOT"] = "widen"
        try:
            c.layer("grouped_keys_cache_%s%s" % (name, tag), c.path("groups.safetensors"), x.astype(np.float32), ref,
                    args, tol=1e-5)
        finally:
            os.environ.pop("ATTN_QDOT", None)
        c.layer("grouped_keys_cache_%s%s_int8_query_rounding" % (name, tag), c.path("groups.safetensors"),
                x.astype(np.float32), ref, args, tol=5e-2)


def quantized_cache(c, rng):
    """attn mha --incremental --kv FORMAT: the layer's KV cache holds its keys
    and values quantized. The reference is the layer written in NumPy/PyTorch
    float64 over the values the cache holds: k (after RoPE) and v rounded to
    f32, quantized and widened back by oracle_quant's reference of attn.h's
    layout. X and the weights are multiples of 2^-6 and 2^-8 small enough
    that the projections are exact in f32 in any order of summation; RoPE
    then rounds k in f32 (a few ulps, below delta = 1e-6 of the row's largest
    value), so the inputs are drawn until no key lies within delta of a
    rounding boundary of its format (its code is then the same for every
    value the library may have computed). What is left is the f32
    arithmetic of the attention and out_proj: within 1e-5 of the largest
    output, as the f32 layer's other cases; the unquantized layer is checked
    to lie farther than that, so the cache's rounding is what is measured."""
    E, H, Hkv, D, N, L = 128, 4, 2, 32, 2, 9
    names = {"q_proj_weight": "q_proj.weight", "k_proj_weight": "k_proj.weight", "v_proj_weight": "v_proj.weight",
             "out_proj_weight": "o_proj.weight"}
    state = {"q_proj_weight": (E, E), "k_proj_weight": (Hkv * D, E), "v_proj_weight": (Hkv * D, E),
             "out_proj_weight": (E, E)}
    state = {k: rng.integers(-64, 65, shape) / 256.0 for k, shape in state.items()}
    with open(c.path("quant.safetensors"), "wb") as fh:
        fh.write(safetensors_bytes({names[k]: v.astype(np.float32) for k, v in state.items()}))
    rope = (0, 10000.0, 0, 0)

    def heads(a, h):  # (N, L, h*D) -> (N, h, L, D)
        return a.reshape(N, L, h, D).transpose(0, 2, 1, 3)

    def held(a, fmt, scale=1.0):  # what the cache holds of f32 rows a (..., D), as float64: fp8(a / scale) * scale
        raw = ref_quantize((np.ascontiguousarray(a, np.float32) / np.float32(scale)).reshape(-1, D), fmt)
        return ref_dequantize(raw, fmt, D).astype(np.float64).reshape(a.shape) * scale, raw

    # Sylvester's Hadamard matrix / sqrt(D): --hadamard's rotation (symmetric)
    hm = np.ones((1, 1))
    while hm.shape[0] < D:
        hm = np.block([[hm, hm], [hm, -hm]])
    hm /= np.sqrt(D)

    def one(name, fmt, turn, scales=None):
        """scales: --kv-scale's two (powers of two: x / S is exact in f32, and
        code * S too), or None."""
        ks, vs = scales or (1.0, 1.0)
        tag = "quantized_cache_%s%s%s" % (name, "_hadamard" if turn else "", "_scaled" if scales else "")
        for draw in range(20):
            x = rng.integers(-128, 129, (N, L, E)) / 64.0
            k = rope_reference(heads(x @ state["k_proj_weight"].T, Hkv), *rope, 1.0).numpy()
            if turn:  # the cache stores H k, rounded once to f32, then its format
                k = (k.astype(np.float32).astype(np.float64) @ hm).astype(np.float32).astype(np.float64)
            delta = 1e-6 * np.abs(k).max(axis=-1, keepdims=True)
            _, raw = held(k, fmt, ks)
            if all(np.array_equal(held(k + s * delta, fmt, ks)[1], raw) for s in (-1, 1)):
                break
        else:
            c.report(tag, "no draw of X kept its keys clear of the rounding boundaries")
            return
        kh, _ = held(k, fmt, ks)
        vh, _ = held(heads(x @ state["v_proj_weight"].T, Hkv), fmt, vs)
        q = rope_reference(heads(x @ state["q_proj_weight"].T, H), *rope, 1.0).numpy()
        if turn:  # attention turns each query alike (in f32), so q.k is kept
            q = (q.astype(np.float32).astype(np.float64) @ hm).astype(np.float32).astype(np.float64)

        def layer(kk, vv):
            kk, vv = np.repeat(kk, H // Hkv, axis=1), np.repeat(vv, H // Hkv, axis=1)
            s = q @ kk.transpose(0, 1, 3, 2) / np.sqrt(D)
            s = np.where(np.tril(np.ones((L, L), bool)), s, -np.inf)
            p = np.exp(s - s.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            return (p @ vv).transpose(0, 2, 1, 3).reshape(N, L, E) @ state["out_proj_weight"].T

        ref = layer(kh, vh)
        exact = layer(k, heads(x @ state["v_proj_weight"].T, Hkv))
        apart = float(np.abs(exact - ref).max()) / float(np.abs(ref).max())
        if apart <= 1e-4:
            c.report(tag, "the %s cache's rounding moves the layer by only %.3g" % (name, apart))
            return
        args = ["--heads", "4", "--rope", "halves", "--causal", "--incremental", "--kv", name]
        args += ["--hadamard"] if turn else []
        args += ["--kv-scale", "%r,%r" % (ks, vs)] if scales else []
        # q8 and q4 keys are scored by default with the query rounded to int8
        # per block (attn.h, "How attention reads them"): its own bound is
        # checked against f64 in test_quant_kv. Here ATTN_QDOT=widen scores
        # them on the widened f32 values, so only the cache's rounding is
        # measured; then the default run, near the same result.
        integer_keys = name in ("q8", "q4")
        if integer_keys:
            os.environ["ATTN_QDOT"] = "widen"
        try:
            c.layer(tag, c.path("quant.safetensors"), x.astype(np.float32), ref, args,
                    tol=1e-5)
        finally:
            os.environ.pop("ATTN_QDOT", None)
        if integer_keys:
            c.layer(tag + "_int8_query_rounding", c.path("quant.safetensors"),
                    x.astype(np.float32), ref, args, tol=5e-2)

    for name, fmt in FORMATS.items():
        one(name, fmt, False)
    for name in ("q8", "q4", "e4m3"):  # keys stored turned by the Walsh-Hadamard rotation
        one(name, FORMATS[name], True)
    for name in ("e4m3", "e5m2"):  # one scale for every head's keys, another for the values
        one(name, FORMATS[name], False, (4.0, 0.5))
    one("e4m3", FORMATS["e4m3"], True, (0.25, 2.0))
    fp8_range(c, rng, E)
    # Bad input: one line, a non-zero exit, no output.
    np.save(c.path("qx64.npy"), rng.standard_normal((3, E)))
    np.save(c.path("qx32.npy"), rng.standard_normal((3, E)).astype(np.float32))
    np.save(c.path("qx16.npy"), rng.standard_normal((3, E)).astype(np.float16))  # the layer takes f32 or f64 X
    np.save(c.path("qx8.npy"), rng.standard_normal((3, 32)).astype(np.float32))
    with open(c.path("quant_d8.safetensors"), "wb") as fh:  # 4 heads of 8
        fh.write(safetensors_bytes({"in_proj_weight": np.ones((96, 32), np.float32)}))
    np.save(c.path("qx96.npy"), rng.standard_normal((3, 192)).astype(np.float32))
    with open(c.path("quant_d96.safetensors"), "wb") as fh:  # 2 heads of 96
        fh.write(safetensors_bytes({"in_proj_weight": np.ones((576, 192), np.float32)}))
    base = ["--weights", c.path("quant.safetensors"), "--heads", "4"]
    for case, args, want in (
            ("unknown_format", ["-x", c.path("qx32.npy"), "--incremental", "--kv", "q3"],
             "--kv 'q3' is not q8, q4, q4_1, e4m3, e5m2, q4c or q2c"),
            ("without_incremental", ["-x", c.path("qx32.npy"), "--kv", "q8"], "give --incremental too"),
            ("f64_input", ["-x", c.path("qx64.npy"), "--incremental", "--kv", "q4"], "needs float32 X"),
            ("f16_input", ["-x", c.path("qx16.npy"), "--incremental", "--kv", "q8"],
             "needs float32 X (the cache quantizes the layer's own rows), not float16"),
            ("head_dim_not_32", ["-x", c.path("qx8.npy"), "--weights", c.path("quant_d8.safetensors"), "--heads", "4",
                                 "--incremental", "--kv", "q8"], "multiple of 32, but E / heads = 8"),
            ("missing_value", ["-x", c.path("qx32.npy"), "--incremental", "--kv"], "--kv"),
            ("hadamard_without_kv", ["-x", c.path("qx32.npy"), "--incremental", "--hadamard"],
             "--hadamard turns the keys of a quantized KV cache: give --incremental --kv"),
            ("hadamard_keys_per_channel", ["-x", c.path("qx32.npy"), "--incremental", "--kv", "q4c", "--hadamard"],
             "--hadamard is for keys stored per token; --kv q4c keys"),
            ("residual_not_multiple_of_32", ["-x", c.path("qx32.npy"), "--incremental", "--kv", "q4c", "--kv-residual",
                                             "48"], "--kv-residual '48' is not 0 or a multiple of 32 up to 1024"),
            ("residual_too_large", ["-x", c.path("qx32.npy"), "--incremental", "--kv", "q2c", "--kv-residual", "1056"],
             "--kv-residual '1056' is not 0 or a multiple of 32 up to 1024"),
            ("residual_without_per_channel_keys", ["-x", c.path("qx32.npy"), "--incremental", "--kv", "q8",
                                                   "--kv-residual", "64"],
             "--kv-residual keeps recent keys of a per-channel cache in float16: give --incremental --kv q4c or q2c"),
            ("residual_missing_value", ["-x", c.path("qx32.npy"), "--incremental", "--kv", "q4c", "--kv-residual"],
             "--kv-residual"),
            ("hadamard_head_dim_not_power_of_two", ["-x", c.path("qx96.npy"), "--weights",
                                                    c.path("quant_d96.safetensors"), "--heads", "2", "--incremental",
                                                    "--kv", "q8", "--hadamard"],
             "--hadamard needs a head dimension that is a power of two up to 1024, but E / heads = 96")):
        out = c.path("qbad_out.npy")
        if os.path.exists(out):
            os.remove(out)
        r = c.run(["-o", out] + ([] if "--weights" in args else base) + args)  # a missing value is last
        lines = r.stderr.strip().splitlines()
        ok = r.returncode != 0 and len(lines) == 1 and lines[0].startswith("attn: error: ") and want in lines[0]
        c.report("quantized_cache_error_" + case,
                 "" if ok and not os.path.exists(out) and not r.stdout else "rc %d, stderr %r" % (r.returncode, r.stderr))


def fp8_range(c, rng, E):
    """attn mha --incremental --kv e4m3|e5m2 refuses keys or values that the
    format cannot hold, as attn sdpa --kv does (one shared check, one
    wording): a projection past the format's largest value was stored as
    that value, or one of none as 0, and the layer ran without a word. The
    scale the message names is then taken, and the layer runs."""
    x = rng.standard_normal((3, E)).astype(np.float32)
    base = ["--weights", c.path("quant.safetensors"), "--heads", "4", "--incremental", "--causal"]
    largest = {"e4m3": "448", "e5m2": "57344"}
    for fmt, times in (("e4m3", 1e3), ("e5m2", 1e5)):
        np.save(c.path("fp8_big.npy"), x * np.float32(times))
        c.bad_args("fp8_range_%s_saturating_refused" % fmt, ["-x", c.path("fp8_big.npy")] + base + ["--kv", fmt],
                   "--kv %s: the key projection of -x %s holds " % (fmt, c.path("fp8_big.npy")))
        r = c.run(["-x", c.path("fp8_big.npy"), "-o", c.path("fp8_out.npy")] + base + ["--kv", fmt])
        m = re.search(r"past %s's largest value %s \(it would be stored as %s\); --kv-scale ([\d.e+-]+),1 \(max \|k\| "
                      r"/ %s, and v as it is\) keeps every value$" % (fmt, largest[fmt], largest[fmt], largest[fmt]),
                      r.stderr.strip())
        c.report("fp8_range_%s_message_as_sdpa" % fmt, "" if m else "stderr %r" % r.stderr)
        if not m:
            continue
        # The suggestion for k, then v's if it asks for one: the layer runs.
        scale, why = [m[1], "1"], ""
        for _ in range(2):
            r = c.run(["-x", c.path("fp8_big.npy"), "-o", c.path("fp8_out.npy")] + base +
                      ["--kv", fmt, "--kv-scale", ",".join(scale)])
            v = re.search(r"a scale of at least ([\d.e+-]+) \(max \|v\|", r.stderr)
            if r.returncode == 0 or not v:
                break
            scale[1] = v[1]
        why = "" if r.returncode == 0 and os.path.exists(c.path("fp8_out.npy")) else "rc %d, stderr %r" % (
            r.returncode, r.stderr)
        c.report("fp8_range_%s_suggested_scale_runs" % fmt, why)
    np.save(c.path("fp8_tiny.npy"), x * np.float32(1e-9))
    c.bad_args("fp8_range_e5m2_vanishing_refused", ["-x", c.path("fp8_tiny.npy")] + base + ["--kv", "e5m2"],
               "--kv e5m2: every value of the key projection of -x %s would be stored as 0" % c.path("fp8_tiny.npy"))
    np.save(c.path("fp8_x.npy"), x)
    c.bad_args("fp8_range_scale_saturating_refused", ["-x", c.path("fp8_x.npy")] + base +
               ["--kv", "e4m3", "--kv-scale", "1e-30"], "--kv-scale 1e-30: the key projection of -x ")
    c.bad_args("fp8_range_scale_without_fp8", ["-x", c.path("fp8_x.npy")] + base + ["--kv", "q8", "--kv-scale", "2"],
               "--kv-scale needs --kv e4m3 or --kv e5m2", code=2)
    c.bad_args("fp8_range_scale_bad_value", ["-x", c.path("fp8_x.npy")] + base + ["--kv", "e4m3", "--kv-scale", "0"],
               "--kv-scale '0' is not one or two finite numbers above 0", code=2)


def half_weights(c, rng):
    """Checkpoints as they ship, in bf16 or f16, loaded as they are whatever X's
    dtype: checked against the layer in float64 with the same 16-bit weights
    widened (and X as the command reads it). f32 X: the f32 layer's tolerance;
    f64 X: the f64 layer's, the widening being exact."""
    E, H, Hkv, D = 32, 4, 2, 8
    f = rng.standard_normal
    state = {"q_proj_weight": f((E, E)) / 4, "k_proj_weight": f((Hkv * D, E)) / 4,
             "v_proj_weight": f((Hkv * D, E)) / 4, "out_proj_weight": f((E, E)) / 4,
             "q_proj_bias": f(E), "k_proj_bias": f(Hkv * D), "v_proj_bias": f(Hkv * D), "out_proj_bias": f(E)}
    names = {"q_proj_weight": "q_proj.weight", "k_proj_weight": "k_proj.weight", "v_proj_weight": "v_proj.weight",
             "out_proj_weight": "o_proj.weight", "q_proj_bias": "q_proj.bias", "k_proj_bias": "k_proj.bias",
             "v_proj_bias": "v_proj.bias", "out_proj_bias": "o_proj.bias"}
    prefix = "model.layers.0.self_attn."
    x = f((2, 7, E))
    x32 = x.astype(np.float32)
    rope = ["--heads", "4", "--rope", "halves", "--causal"]
    for kind in ("bf16", "f16"):
        stored = {n: BF16(a) if kind == "bf16" else a.astype(np.float16) for n, a in state.items()}
        wide = {n: widened(a) for n, a in stored.items()}
        tensors = {prefix + names[n]: a for n, a in stored.items()}
        sinks = BF16(f(H)) if kind == "bf16" else f(H).astype(np.float16)  # gpt-oss ships its sinks in bf16 too
        path = c.path("llama_%s.safetensors" % kind)
        with open(path, "wb") as fh:
            fh.write(safetensors_bytes(tensors))
        # An f32 layer's bf16 weights run on the bf16 GEMM where the CPU has
        # one (AVX512_BF16 at full rate, AMX; ATTN_VERBOSE names it): each
        # product's input is then rounded to bf16 too, and so is the reference's.
        # (1e-5 holds while no heads' output lies within f32 noise of a bf16
        # rounding boundary, as on these inputs.)
        gemm = c.gemm_kernels(path, x32, rope)
        on16 = kind == "bf16" and gemm.get("q", "").startswith("bf16:")
        want = ("bf16:" if on16 else "f32:") if kind == "bf16" else "f32:"
        c.report("%s_weights_f32_input_gemm_kernel" % kind,
                 "" if gemm and all(g.startswith(want) for g in gemm.values()) else "verbose names %r" % gemm)
        ref32 = gqa_reference(x32.astype(np.float64), x32.astype(np.float64), x32.astype(np.float64), wide, H, Hkv, 1,
                              rope=(0, 10000.0, 0, 0), bf16_products=on16)
        suffix = "_on_" + gemm["q"].split("/")[0].replace(":", "_") if gemm else ""
        c.layer("%s_weights_f32_input%s" % (kind, suffix), path, x32, ref32, rope, tol=1e-5)
        c.layer("%s_weights_f32_input_incremental%s" % (kind, suffix), path, x32, ref32, rope + ["--incremental"],
                tol=1e-5)
        ref64 = gqa_reference(x, x, x, wide, H, Hkv, 1, rope=(0, 10000.0, 0, 0))
        c.layer("%s_weights_f64_input" % kind, path, x, ref64, rope)
        with_sinks = dict(tensors)
        with_sinks[prefix + "sinks"] = sinks
        path = c.path("gpt_oss_%s.safetensors" % kind)
        with open(path, "wb") as fh:
            fh.write(safetensors_bytes(with_sinks))
        refs = gqa_reference(x, x, x, dict(wide, sinks=widened(sinks)), H, Hkv, 1, rope=(0, 10000.0, 0, 0))
        c.layer("%s_weights_and_sinks_f64_input" % kind, path, x, refs, rope)
    # f16 weights as .npy files (NumPy has float16; it has no bfloat16), f32 input.
    d = c.path("npy16")
    os.makedirs(d, exist_ok=True)
    files = {"q_proj_weight": "q_proj_weight", "k_proj_weight": "k_proj_weight", "v_proj_weight": "v_proj_weight",
             "out_proj_weight": "out_proj.weight", "out_proj_bias": "out_proj.bias"}
    half = {n: state[n].astype(np.float16) for n in files}
    for n, a in half.items():
        np.save(os.path.join(d, files[n] + ".npy"), a)
    ref = gqa_reference(x32.astype(np.float64), x32.astype(np.float64), x32.astype(np.float64),
                        {n: a.astype(np.float64) for n, a in half.items()}, H, Hkv, 1, rope=(0, 10000.0, 0, 0))
    c.layer("f16_npy_weights_f32_input", d, x32, ref, rope, tol=1e-5)


def empty_inputs(c, rng):
    """An X with no sequence or no position gives an output of its shape,
    as the module gives one, through --incremental's KV cache too (a cache
    of batch 0 or capacity 0 was an error naming the desc's fields); a
    step of no token still checks what every step checks (bias_k)."""
    E, H, f = 8, 2, rng.standard_normal
    # f32 weights: an f64 X takes them too
    layer = {"in_proj_weight": f((3 * E, E)).astype(np.float32), "out_proj.weight": f((E, E)).astype(np.float32)}
    p = c.path("empty_layer.safetensors")
    with open(p, "wb") as fh:
        fh.write(safetensors_bytes(layer))
    out = c.path("empty_out.npy")
    for shape in ((0, E), (2, 0, E), (0, 3, E)):
        for dtype in (np.float64, np.float32):
            for mode in ([], ["--causal"], ["--incremental"], ["--incremental", "--kv", "q4c"]):
                if "--kv" in mode and dtype != np.float32:
                    continue
                np.save(c.path("x_empty.npy"), np.zeros(shape, dtype))
                if os.path.exists(out):
                    os.remove(out)
                r = c.run(["-x", c.path("x_empty.npy"), "--weights", p, "--heads", str(H), "-o", out] + mode)
                name = "empty_x_%s_%s%s" % ("x".join(map(str, shape)), np.dtype(dtype).name,
                                            "".join("_" + m.lstrip("-") for m in mode))
                got = np.load(out) if r.returncode == 0 else None
                c.report(name, "rc %d, %r" % (r.returncode, r.stderr) if got is None else
                         "" if got.shape == shape and got.dtype == dtype else "out %s %s" % (got.shape, got.dtype))
    with open(c.path("bias_kv.safetensors"), "wb") as fh:
        fh.write(safetensors_bytes(dict(layer, bias_k=f((1, 1, E)).astype(np.float32),
                                         bias_v=f((1, 1, E)).astype(np.float32))))
    np.save(c.path("x_empty.npy"), np.zeros((2, 0, E)))
    c.bad_args("error_incremental_no_position_bias_kv", ["-x", c.path("x_empty.npy"), "--weights",
                                                         c.path("bias_kv.safetensors"), "--heads", str(H),
                                                         "--incremental"], "bias_k")


def bad_files(c):
    w = np.zeros((6, 2))
    good = safetensors_bytes({"in_proj_weight": w})
    c.bad("error_short_file", b"\x01\x02", "8-byte header length")
    c.bad("error_header_past_end", struct.pack("<Q", 10 ** 6) + b"{}", "runs past the end")
    c.bad("error_not_json", struct.pack("<Q", 5) + b"{nope", "not a JSON object")
    c.bad("error_offsets_out_of_range", safetensors_bytes({"a": w}, header_override={
        "a": {"dtype": "F64", "shape": [6, 2], "data_offsets": [0, 10 ** 6]}}), "outside the")
    c.bad("error_bytes_do_not_match_shape", safetensors_bytes({"a": w}, header_override={
        "a": {"dtype": "F64", "shape": [6, 3], "data_offsets": [0, 96]}}), "its shape needs")
    c.bad("error_overlap", safetensors_bytes({"a": w, "b": w}, header_override={
        "a": {"dtype": "F64", "shape": [6, 2], "data_offsets": [0, 96]},
        "b": {"dtype": "F64", "shape": [2, 2], "data_offsets": [64, 96]}}), "overlap")
    c.bad("error_dtype", safetensors_bytes({"a": w}, header_override={
        "in_proj_weight": {"dtype": "I64", "shape": [6, 2], "data_offsets": [0, 96]}}),
        "tensor 'in_proj_weight' has dtype I64; attn reads F64, F32, F16 and BF16")
    c.bad("error_dtype_not_in_format", safetensors_bytes({"a": w}, header_override={
        "a": {"dtype": "Q4_K", "shape": [6, 2], "data_offsets": [0, 96]}}),
        "tensor 'a' has dtype Q4_K, which the safetensors format does not have")
    c.bad("error_negative_dimension", safetensors_bytes({"a": w}, header_override={
        "a": {"dtype": "F64", "shape": [-6, 2], "data_offsets": [0, 96]}}), "not a whole number")
    c.bad("error_no_projection", good.replace(b"in_proj_weight", b"zz_proj_weight"), "neither in_proj_weight")
    # What the format forbids in a layer that is otherwise good (so that only
    # the check stands between the file and an output): a NUL in a name or a
    # dtype, escaped or raw (a C string ends there: "in_proj_weight\0x" would
    # be read as in_proj_weight), and __metadata__ other than strings.
    layer = {"in_proj_weight": np.ones((24, 8)), "out_proj.weight": np.ones((8, 8))}
    nul_name = {"in_proj_weight\0x": layer["in_proj_weight"], "out_proj.weight": layer["out_proj.weight"]}
    c.bad("error_name_with_nul_escape", safetensors_bytes(nul_name), "NUL character")
    c.bad("error_name_with_raw_nul", safetensors_bytes(layer, edit=lambda t: t.replace(b'"in_proj_weight"',
                                                                                   b'"in_proj_weight\0x"')), "NUL character")
    c.bad("error_dtype_with_nul", safetensors_bytes(layer, edit=lambda t: t.replace(b'"F64"', b'"F64\\u0000"', 1)),
          "NUL character")
    c.bad("error_metadata_key_with_nul", safetensors_bytes(layer, header_extra={"__metadata__": {"a\0b": "c"}}),
          "NUL character")
    c.bad("error_metadata_value_with_nul", safetensors_bytes(layer, header_extra={"__metadata__": {"format": "p\0t"}}),
          "NUL character")
    for kind, value in (("number", 1), ("null", None), ("bool", True), ("array", ["pt"]), ("object", {"a": "b"})):
        c.bad("error_metadata_value_" + kind, safetensors_bytes(layer, header_extra={"__metadata__": {"format": value}}),
              "__metadata__ value 'format' is not a string")
    c.bad("error_metadata_not_an_object", safetensors_bytes(layer, header_extra={"__metadata__": ["format", "pt"]}),
          "__metadata__ must be an object")
    # null is no metadata, as the format's reader (an optional map) takes it
    c.layer_runs("metadata_null_is_none", safetensors_bytes(layer, header_extra={"__metadata__": None}))
    c.bad("error_metadata_twice", safetensors_bytes(layer, edit=lambda t: t[:-1] + b', "__metadata__": {}}'),
          "__metadata__ appears twice")
    # An escaped backslash before u0000 is text, not a NUL: the file is read.
    c.layer_runs("metadata_with_escaped_backslash_is_text", safetensors_bytes(
        layer, header_extra={"__metadata__": {"format": "pt\\u0000", "note": "\u00e9"}}))
    c.bad("error_missing_file", b"", "8-byte header length")
    # What the format also forbids, each once read as a good layer: text after
    # the header's JSON object (white space pads it), bytes of the data that
    # belong to no tensor (the format allows no holes: no polyglot files), a
    # header that is not UTF-8, and an empty tensor whose other dimensions
    # overflow (it had a tensor of rank 0 made for it, and its copy leaked).
    with open(c.path("w.npy"), "wb") as f:
        np.save(f, w)
    c.bad("error_npy_given_as_safetensors", open(c.path("w.npy"), "rb").read(), "this is a .npy file, not safetensors")
    c.bad("error_text_after_header", safetensors_bytes(layer, edit=lambda t: t + b" {}"), "text after its JSON object")
    c.layer_runs("header_padded_with_spaces", safetensors_bytes(layer, edit=lambda t: t + b"     "))
    c.bad("error_bytes_after_last_tensor", safetensors_bytes(layer) + bytes(8),
          "the data's last 8 bytes belong to no tensor")
    c.bad("error_hole_between_tensors", safetensors_bytes(
        layer, edit=lambda t: t.replace(b"[1536, 2048]", b"[1544, 2056]")) + bytes(8),
        "bytes 1536 to 1543 of the data belong to no tensor")
    # An empty tensor sits where one tensor ends and the next begins (as the
    # format's own reader checks): inside another's bytes it was taken.
    for at in (0, 1536, 2048):
        c.layer_runs("empty_tensor_at_boundary_%d" % at, safetensors_bytes(layer, header_extra={
            "e": {"dtype": "F64", "shape": [0, 4], "data_offsets": [at, at]}}))
    c.bad("error_empty_tensor_inside_another", safetensors_bytes(layer, header_extra={
        "e": {"dtype": "F64", "shape": [0], "data_offsets": [8, 8]}}),
        "tensor 'e' is empty but its offset 8 lies inside tensor 'in_proj_weight'")
    # Tensors of the format's other dtypes beside the layer (a checkpoint's
    # int64 position_ids, a bool mask, fp8 scales, 4-bit codes): checked as
    # any tensor is, not read; each refused the whole file.
    extra = {"position_ids": ("I64", [1, 5], 40), "mask": ("BOOL", [3, 3], 9), "scale": ("F8_E4M3", [4], 4),
             "codes": ("F4", [2, 3], 3), "rank6": ("I8", [1, 1, 1, 1, 1, 2], 2)}
    def with_extra(t, extra=extra):
        h, end = json.loads(t), 2048
        for name, (dt, shape, n) in extra.items():
            h[name] = {"dtype": dt, "shape": shape, "data_offsets": [end, end + n]}
            end += n
        return json.dumps(h).encode()
    c.layer_runs("other_dtypes_beside_the_layer_not_read", safetensors_bytes(layer, edit=with_extra) + bytes(58))
    # Float tensors of more dimensions than attn's tensors hold, beside the layer, likewise: named,
    # not read (they refused the whole file); the layer's own tensor of 6 dimensions is refused by name.
    c.layer_runs("float_tensors_of_6_and_8_dimensions_beside_the_layer_not_read", safetensors_bytes(
        layer, edit=lambda t: with_extra(t, {"video.rel_pos": ("F32", [1, 1, 1, 1, 2, 2], 16),
                                             "deep": ("BF16", [1] * 7 + [3], 6)})) + bytes(22))
    c.bad("error_layer_tensor_of_6_dimensions", safetensors_bytes(
        {"in_proj_weight": np.ones((1, 1, 1, 1, 24, 8)), "out_proj.weight": layer["out_proj.weight"]}),
        "tensor 'in_proj_weight' has 6 dimensions; attn reads at most 5")
    c.bad("error_other_dtype_bytes_do_not_match", safetensors_bytes(
        layer, edit=lambda t: with_extra(t, {"ids": ("I32", [3], 8)})) + bytes(8), "'ids' has 8 bytes of data but")
    c.bad("error_sub_byte_dtype_not_whole_bytes", safetensors_bytes(
        layer, edit=lambda t: with_extra(t, {"codes": ("F6_E2M3", [3], 3)})) + bytes(3), "not a whole number of bytes")
    for field, value in (("dtype", b'"F32"'), ("shape", b"[2048]"), ("data_offsets", b"[0, 1536]")):
        c.bad("error_tensor_gives_%s_twice" % field, safetensors_bytes(layer, edit=lambda t, f=field, v=value: t.replace(
            b'"in_proj_weight": {', b'"in_proj_weight": {"%s": %s, ' % (f.encode(), v), 1)),
            "tensor 'in_proj_weight' gives its %s twice" % field)
    # Integers written as floats (or with a sign or leading zero): cJSON reads
    # 24.0 as 24, the format's own reader refuses the file. The layer is
    # good otherwise, so only the check stands between it and an output.
    for case, old, new, field, shown in (
            ("shape_point", b'"shape": [24, 8]', b'"shape": [24.0, 8]', "shape", "24.0"),
            ("shape_exponent", b'"shape": [24, 8]', b'"shape": [24, 8e0]', "shape", "8e0"),
            ("offsets_exponent", b'"data_offsets": [0, 1536]', b'"data_offsets": [0, 1.536E3]', "data_offsets",
             "1.536E3"),
            ("offsets_negative_zero", b'"data_offsets": [0, 1536]', b'"data_offsets": [-0, 1536]', "data_offsets",
             "-0"),
            ("offsets_leading_zero", b'"data_offsets": [0, 1536]', b'"data_offsets": [00, 1536]', "data_offsets",
             "00")):
        c.bad("error_%s_not_written_as_integer" % case, safetensors_bytes(
            layer, edit=lambda t, o=old, n=new: t.replace(o, n, 1) if o in t else b"edit found nothing"),
            "tensor 'in_proj_weight' has %s in its %s; the format takes integers there" % (shown, field))
    # ... and numbers elsewhere are not the format's business here.
    c.layer_runs("integer_fields_written_as_digits_beside_a_float", safetensors_bytes(
        layer, edit=lambda t: t.replace(b'"in_proj_weight": {', b'"in_proj_weight": {"note": 2.5, ', 1)))
    c.bad("error_header_byte_order_mark", safetensors_bytes(layer, edit=lambda t: b"\xef\xbb\xbf" + t),
          "the header starts with a UTF-8 byte-order mark")
    c.bad("error_header_not_utf8", safetensors_bytes(layer, header_extra={"__metadata__": {"note": "x"}},
                                                     edit=lambda t: t.replace(b'"x"', b'"\xff"')), "not UTF-8")
    c.bad("error_header_overlong_utf8", safetensors_bytes(layer, header_extra={"__metadata__": {"note": "x"}},
                                                          edit=lambda t: t.replace(b'"x"', b'"\xc0\xaf"')), "not UTF-8")
    # A name given twice: JSON allows it, the format does not (which one
    # would be read?).
    c.bad("error_tensor_named_twice", safetensors_bytes(layer, edit=lambda t: t[:-1] + b', "out_proj.weight": ' +
                                                        json.dumps(json.loads(t)["out_proj.weight"]).encode() + b"}"),
          "tensor 'out_proj.weight' appears twice")
    # The format sets no limit on tensors or on a shape's length: 200,000
    # empty tensors beside the layer, one of them with a shape of 200,000
    # dimensions (a dtype attn does not read may have any rank), are read in
    # a second or so. Each name was looked up among those before it and each
    # dimension fetched from the shape's start: over two minutes.
    many = {"t%d" % i: {"dtype": "I8", "shape": [0], "data_offsets": [0, 0]} for i in range(200000)}
    many["t0"]["shape"] = [0] * 200000
    p = c.path("many.safetensors")
    with open(p, "wb") as f:
        f.write(safetensors_bytes(layer, header_extra=many))
    np.save(c.path("x.npy"), np.zeros((3, 8)))
    try:
        r = subprocess.run([c.attn, "mha", "-x", c.path("x.npy"), "--weights", p, "--heads", "2", "-o",
                            c.path("many_out.npy")], capture_output=True, text=True, timeout=30)
        c.report("many_tensors_and_a_long_shape_read_in_time", "" if r.returncode == 0 else
                 "rc %d, stderr %r" % (r.returncode, r.stderr))
    except subprocess.TimeoutExpired:
        c.report("many_tensors_and_a_long_shape_read_in_time", "still reading the header after 30 s")
    os.remove(p)
    c.bad("error_empty_shape_overflows", safetensors_bytes(layer, header_extra={
        "z": {"dtype": "F32", "shape": [0, 2 ** 52, 2 ** 52], "data_offsets": [0, 0]}}), "element count overflows")
    # A whole number from 2^53 on is not what cJSON's double holds (2^53 + 1
    # was read as 2^53, a shape other than the file's): refused.
    for dim in (2 ** 53 + 1, 2 ** 53):
        c.bad("error_dimension_%d_past_a_double" % dim, safetensors_bytes(layer, header_extra={
            "z": {"dtype": "F32", "shape": [0, dim], "data_offsets": [0, 0]}}),
            "tensor 'z' has a dimension that is not a whole number below 2^53")
    # -o and -w: one file by two spellings is refused (the weights would
    # have been renamed onto the output).
    p = c.path("good.safetensors")
    with open(p, "wb") as f:
        f.write(safetensors_bytes(layer))
    np.save(c.path("x.npy"), np.zeros((3, 8)))
    r = c.run(["-x", c.path("x.npy"), "--weights", p, "--heads", "2", "-o", c.path("o.npy"), "-w",
               os.path.join(c.dir, ".", "o.npy")])
    c.report("error_out_and_weights_out_one_file", "" if r.returncode == 2 and not os.path.exists(c.path("o.npy")) and
             r.stderr.startswith("attn: error: -o and -w name the same file") else "rc %d, %r" % (r.returncode, r.stderr))
    # A --prefix too long for the command's buffer was cut to fit, and the
    # layer read from the tensors of that shorter prefix, without a word.
    long_prefix = "p" * 1100 + "."
    with open(c.path("cut.safetensors"), "wb") as f:
        f.write(safetensors_bytes({long_prefix[:1023] + name: a for name, a in layer.items()}))
    c.bad_args("error_prefix_too_long_not_cut", ["-x", c.path("x.npy"), "--weights", c.path("cut.safetensors"),
                                                 "--heads", "2", "--prefix", long_prefix],
               "--prefix is 1101 bytes long; at most 1023", code=2)
    # A batch of 0 beside a declared length of 2^40 is an X of no bytes, but
    # its weights (0, 2^40, 2^40) have no strides that fit: said so, where
    # the layer was handed an empty tensor and asked for that very shape.
    header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (0, 1099511627776, 8), }"
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    with open(c.path("x_no_batch.npy"), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
    c.bad_args("error_weights_out_shape_overflows", ["-x", c.path("x_no_batch.npy"), "--weights", p, "--heads", "2",
                                                     "-w", c.path("bad_w.npy")],
               "-w %s: the weights' shape (0, 1099511627776, 1099511627776): element count of the shape overflows"
               % c.path("bad_w.npy"))
    # The output printed (no -o) to a full disk: the run fails, and -w's file
    # is not left written (the result was printed after it was renamed into
    # place).
    wout = c.path("printed_w.npy")
    if os.path.exists(wout):
        os.remove(wout)
    with open("/dev/full", "w") as full:
        r = subprocess.run([c.attn, "mha", "-x", c.path("x.npy"), "--weights", p, "--heads", "2", "-w", wout],
                           stdout=full, stderr=subprocess.PIPE, text=True)
    c.report("error_printed_output_on_full_disk_leaves_no_weights_out", "" if r.returncode == 1 and
             not os.path.exists(wout) and r.stderr == "attn: error: cannot write to standard output: No space left "
             "on device\n" else "rc %d, %r, weights out %s" % (r.returncode, r.stderr, os.path.exists(wout)))


def bad_paths(c):
    """Input paths that name no readable file: one error line each."""
    layer = {"in_proj_weight": np.ones((24, 8)), "out_proj.weight": np.ones((8, 8))}
    p = c.path("paths.safetensors")
    with open(p, "wb") as f:
        f.write(safetensors_bytes(layer))
    x = c.path("x_paths.npy")
    np.save(x, np.zeros((3, 8)))
    # An empty name (an unset shell variable) is said to be empty: it was
    # "-x : cannot open : ..." and "--weights : no such file or directory".
    c.bad_args("error_x_name_empty", ["-x", "", "--weights", p, "--heads", "2"], "-x: the input file name is empty")
    c.bad_args("error_key_name_empty", ["-x", x, "--key", "", "--weights", p, "--heads", "2"],
               "--key: the input file name is empty")
    c.bad_args("error_weights_name_empty", ["-x", x, "--weights", "", "--heads", "2"],
               "--weights: the input file name is empty")
    # Why a path cannot be used is said as the system says it: every failure
    # was "no such file or directory", also a path through a file or a loop
    # of symbolic links.
    c.bad_args("error_weights_not_a_directory", ["-x", x, "--weights", x + "/w.safetensors", "--heads", "2"],
               "x_paths.npy/w.safetensors: Not a directory")
    for a, b in (("loop_a", "loop_b"), ("loop_b", "loop_a")):
        if not os.path.lexists(c.path(a)):
            os.symlink(b, c.path(a))
    c.bad_args("error_weights_symlink_loop", ["-x", x, "--weights", c.path("loop_a"), "--heads", "2"],
               "loop_a: Too many levels of symbolic links")
    # In a directory of weights, an optional weight whose name is there but
    # cannot be read (a dangling link) was taken as absent, and the layer ran
    # without it.
    d = c.path("dangling_dir")
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "in_proj_weight.npy"), np.ones((24, 8)))
    np.save(os.path.join(d, "out_proj.weight.npy"), np.ones((8, 8)))
    if not os.path.lexists(os.path.join(d, "in_proj_bias.npy")):
        os.symlink("no_such_bias.npy", os.path.join(d, "in_proj_bias.npy"))
    c.bad_args("error_weights_dir_dangling_bias", ["-x", x, "--weights", d, "--heads", "2"],
               "in_proj_bias.npy: cannot open")
    c.bad_args("error_weights_dir_path_too_long", ["-x", x, "--weights", d, "--heads", "2", "--prefix", "p" * 5000],
               "is too long")
    # A FIFO that no one writes, as --weights or as a weight in a directory:
    # fopen waited for a writer forever; it is refused at once.
    fifo = c.path("fifo.safetensors")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    c.bad_args("error_weights_fifo", ["-x", x, "--weights", fifo, "--heads", "2"],
               "fifo.safetensors is neither a regular file nor a directory", timeout=30)
    d = c.path("fifo_dir")
    os.makedirs(d, exist_ok=True)
    if not os.path.exists(os.path.join(d, "in_proj_weight.npy")):
        os.mkfifo(os.path.join(d, "in_proj_weight.npy"))
    c.bad_args("error_weights_dir_fifo", ["-x", x, "--weights", d, "--heads", "2"],
               "in_proj_weight.npy is not a regular file", timeout=30)


def rank_sweeps(c, rng):
    """-x, --key, --value and every weight of three layers (PyTorch's packed
    one with bias_k/bias_v, a Llama-style block with biases, GQA and sinks,
    PyTorch's separate weights with kdim and vdim), from .npy files and from a
    safetensors file, at every rank from 0 to 6 in turn, with -w: the rank
    each takes runs, every other is one clean error before any dimension that
    is not there is read."""
    E, H, f = 8, 2, rng.standard_normal
    layers = {
        "packed": {"in_proj_weight": (3 * E, E), "in_proj_bias": (3 * E,), "out_proj.weight": (E, E),
                   "out_proj.bias": (E,), "bias_k": (1, 1, E), "bias_v": (1, 1, E)},
        "llama": {"q_proj.weight": (E, E), "k_proj.weight": (E // 2, E), "v_proj.weight": (E // 2, E),
                  "q_proj.bias": (E,), "k_proj.bias": (E // 2,), "v_proj.bias": (E // 2,), "o_proj.weight": (E, E),
                  "sinks": (H,)},
        "separate": {"q_proj_weight": (E, E), "k_proj_weight": (E, 6), "v_proj_weight": (E, 5),
                     "in_proj_bias": (3 * E,), "out_proj.weight": (E, E), "out_proj.bias": (E,)},
    }
    outs = ("out.npy", "w.npy")
    # What an input's error names: its flag, or the layer's word for it.
    NAMES = {"-x": "-x |query", "--key": r"--key |\bkey\b", "--value": r"--value |\bvalue\b"}

    def run(*args):
        return c.run(list(args))

    def sweep(name, write, args_for, accepted, pattern, outputs=outs):
        problems = []
        for rank in RANKS:
            write(rank)
            problems += ["rank %d: %s" % (rank, p) for p in rank_case_problems(
                run, c.dir, args_for(), rank in accepted, pattern, outputs)]
        c.report("ranks_0_to_6_" + name, "; ".join(problems))

    for lname, shapes in layers.items():
        kd, vd = (6, 5) if lname == "separate" else (E, E)
        good = {n: f(s) for n, s in shapes.items()}
        wdir = c.path("sweep_" + lname)
        os.makedirs(wdir, exist_ok=True)
        for n, a in good.items():
            np.save(os.path.join(wdir, n + ".npy"), a)
        inputs = {"-x": (2, 3, E), "--key": (2, 4, kd), "--value": (2, 4, vd)}
        base = {flag: c.path("sweep%s.npy" % flag) for flag in inputs}
        for flag, shape in inputs.items():
            np.save(base[flag], f(shape))
        # -x alone is self-attention, (L, E) or (N, L, E); the key and value
        # are tried beside a batched -x, and so must be batched too.
        cross = lname == "separate"
        for flag, shape in inputs.items():
            if not cross and flag != "-x":
                continue
            bad = c.path("sweep%s_bad.npy" % flag)
            given = [x for g in inputs if (cross or g == "-x") for x in (g, bad if g == flag else base[g])]
            sweep("%s_%s" % (lname, flag.lstrip("-")), lambda r, b=bad, s=shape: np.save(b, f(at_rank(s, r))),
                  lambda g=given: g + ["--weights", wdir, "--heads", str(H), "-o", c.path("out.npy"),
                                       "-w", c.path("w.npy")],
                  {2, 3} if flag == "-x" and not cross else {3}, NAMES[flag])
        given = [x for g in inputs if cross or g == "-x" for x in (g, base[g])]
        for n, shape in shapes.items():
            canonical = n.replace(".", "_").replace("o_proj", "out_proj", n.startswith("o_proj"))
            pattern = "%s|%s" % (re.escape(n), re.escape(canonical))
            accepted = {len(shape)}
            for form in ("npy", "safetensors"):
                wpath = c.path("sweep_%s_%s_%s" % (lname, n, form))

                def write(r, n=n, shape=shape, wpath=wpath, form=form):
                    tensors = dict(good, **{n: f(at_rank(shape, r))})
                    if form == "safetensors":
                        with open(wpath, "wb") as fh:
                            fh.write(safetensors_bytes(tensors))
                        return
                    os.makedirs(wpath, exist_ok=True)
                    for name, a in tensors.items():
                        np.save(os.path.join(wpath, name + ".npy"), a)
                sweep("%s_%s_%s" % (lname, form, n), write,
                      lambda w=wpath: given + ["--weights", w, "--heads", str(H), "-o", c.path("out.npy"),
                                               "-w", c.path("w.npy")], accepted, pattern)
    # --incremental reads -x's rows one at a time: its rank is checked first too.
    sweep("llama_incremental_x", lambda r: np.save(c.path("sweep_inc.npy"), f(at_rank((2, 3, E), r))),
          lambda: ["-x", c.path("sweep_inc.npy"), "--weights", c.path("sweep_llama"), "--heads", str(H), "--causal",
                   "--incremental", "-o", c.path("out.npy")], {2, 3}, NAMES["-x"], ("out.npy",))


def large_checkpoints(c, rng):
    """A checkpoint is read by its header and the tensors the layer takes:
    nn.MultiheadAttention's state_dict beside a 6 GiB tensor (a sparse file:
    its data is never written) runs under a 4 GiB address-space limit and
    gives the module's output (the whole file was read and copied: "out of
    memory"); an ASan build, whose shadow memory needs more address space
    than any such limit, says skip. And a header longer than the format's
    limit (100,000,000 bytes) is refused before any of it is read."""
    torch.manual_seed(5)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
    sd = {k: v.detach().numpy() for k, v in mha.state_dict().items()}
    x = rng.standard_normal((2, 5, 8))
    with torch.no_grad():
        ref = mha(*(torch.from_numpy(x),) * 3, need_weights=False)[0].numpy()
    with open(c.attn, "rb") as f:
        asan = b"__asan_init" in f.read()
    if asan:
        print("skip large_checkpoint_reads_one_layer: an ASan build cannot run under an address-space limit")
    else:
        header, offset = {}, 0
        for name, a in sd.items():
            header[name] = {"dtype": "F64", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
            offset += a.nbytes
        big = 6 << 30
        header["other_layer.weight"] = {"dtype": "F32", "shape": [big // 4], "data_offsets": [offset, offset + big]}
        text = json.dumps(header).encode()
        path = c.path("large.safetensors")
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"".join(a.tobytes() for a in sd.values()))
            f.truncate(8 + len(text) + offset + big)
        c.layer("large_checkpoint_reads_one_layer", path, x, ref, ["--heads", "2"], address_space=4 << 30)
        os.remove(path)
    path = c.path("long_header.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", 100000001))
        f.truncate(8 + 100000001)
    c.bad_args("error_header_past_format_limit", ["-x", c.path("x.npy"), "--weights", path, "--heads", "2"],
               "header length 100000001 is past the format's limit of 100000000 bytes")
    os.remove(path)

def main():
    build, rng = oracle_args(20261130)
    c = Check(build)
    torch_module_layers(c, rng)
    llama_layer(c, rng)
    half_weights(c, rng)
    quantized_cache(c, rng)
    grouped_keys_cache(c, rng)
    grouped_keys_cache(c, rng, R=64, L=200)  # KIVI's residual window: groups quantized as they leave it
    grouped_keys_cache(c, rng, R=128, L=200)
    empty_inputs(c, rng)
    bad_files(c)
    bad_paths(c)
    large_checkpoints(c, rng)
    rank_sweeps(c, rng)
    r = c.run(["-x", "x.npy"])
    c.report("error_usage", "" if r.returncode == 2 and "needs -x, --weights and --heads" in r.stderr else r.stderr)
    print("# attn mha: %d passed, %d failed" % (c.passed, c.failed))
    return 1 if c.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
