#!/usr/bin/python3
"""test_faults.py -- the command's outputs under faults: devices, FIFOs and
symbolic links given as -o, stdout that cannot be written (a full device, a
closed pipe), a full or read-only file system, a rename that fails after
others succeeded, and file-size and memory limits. Each case checks the
exit code, the one `attn: error:` line, and exactly which files exist
afterwards (and what the old ones hold).

The faults need root: the suite runs itself again under `unshare -m`, in a
private mount namespace, on tmpfs mounts of its own, so that nothing it
mounts or creates is seen outside. Without root or unshare every case says
skip.

Usage: test_faults.py BUILD_DIR"""
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading

import numpy as np

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ATTN = os.path.abspath(os.path.join(BUILD, "attn"))
CASES = ["char_device_written_in_place", "full_device_error_device_kept", "fifo_written_in_place",
         "symlink_target_replaced_link_kept", "dangling_symlink_refused", "svg_onto_full_device",
         "stdout_full_device", "stdout_full_device_long_text", "stdout_closed_pipe_sigpipe_ignored",
         "stdout_closed_pipe_sigpipe_default", "enospc_small_tmpfs_old_file_kept", "read_only_mount",
         "directory_in_the_way_nothing_renamed", "later_rename_fails_earlier_undone",
         "ulimit_f_efbig_no_temporary", "ulimit_v_out_of_memory_no_files"]
# Every option that writes a file beside a result printed on stdout. A run
# is all or nothing: when the file cannot be written nothing is printed,
# and when stdout cannot be written the file is not left behind.
FILE_OPTIONS = ["sdpa -w", "sdpa --lse", "sdpa --dq", "sdpa --dk", "sdpa --dv", "sdpa --dmask", "sdpa --dsinks",
                "sdpa --dropout-mask", "mha -w", "scaling --svg", "train --svg"]


def option_cases(option):
    """The names of an option's three cases: "sdpa --dropout-mask" gives
    sdpa_dropout_mask_onto_full_device_prints_nothing and its two others."""
    slug = option.replace(" --", "_").replace(" -", "_").replace("-", "_")
    return [f"{slug}_onto_full_device_prints_nothing", f"{slug}_rename_fails_prints_nothing",
            f"{slug}_stdout_full_no_file"]


for _o in FILE_OPTIONS:
    CASES += option_cases(_o)
CASES += ["stdout_full_old_file_restored", "stdout_closed_pipe_sigpipe_default_no_file",
          "second_file_fails_first_removed", "second_file_fails_first_removed_mha", "second_file_enospc_first_removed"]
failed = 0


def report(name, problems):
    global failed
    print(f"ok {name}" if not problems else f"FAIL {name}: {'; '.join(problems)}", flush=True)
    failed += bool(problems)


def outside():
    """Run this file again in a private mount namespace, or skip every case."""
    why = None
    if os.getuid() != 0:
        why = "needs root for a private mount namespace and tmpfs"
    elif subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode:
        why = "unshare -m is not permitted here"
    if why:
        for c in CASES:
            print(f"skip {c}: {why}")
        return 0
    # The mount point is made out here, so that it can be removed after the
    # namespace (and with it every mount) is gone.
    root = tempfile.mkdtemp(prefix="attn_faults_")
    try:
        return subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, __file__, BUILD,
                               "--inside", root]).returncode
    finally:
        os.rmdir(root)


def mount_tmpfs(path, size="8m", opts=""):
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}{opts}", "none", path], check=True)


def listing(d):
    return sorted(os.listdir(d))


def attn(args, cwd, **kw):
    kw.setdefault("stdout", subprocess.PIPE)
    return subprocess.run([ATTN, *args], cwd=cwd, stderr=subprocess.PIPE, **kw)


def check(r, code, words, d=None, files=None):
    """Exit code `code`; with words, stderr is exactly one 'attn: error:'
    line holding them, else stderr is empty; with d, the directory holds
    exactly `files`."""
    problems = []
    err = r.stderr.decode(errors="replace") if isinstance(r.stderr, bytes) else (r.stderr or "")
    if r.returncode != code:
        problems.append(f"exit {r.returncode}, wanted {code} (stderr {err!r})")
    lines = err.splitlines()
    if words:
        if len(lines) != 1 or not lines[0].startswith("attn: error: ") or words not in lines[0]:
            problems.append(f"stderr {err!r}, wanted one 'attn: error:' line with {words!r}")
    elif lines:
        problems.append(f"stderr {err!r}, wanted none")
    if d is not None and listing(d) != sorted(files):
        problems.append(f"{d} holds {listing(d)}, wanted {sorted(files)}")
    return problems


def inside(root):
    mount_tmpfs(root)
    rng = np.random.default_rng(34)
    ins = os.path.join(root, "in")
    os.mkdir(ins)
    for n in "qkv":
        np.save(os.path.join(ins, n + ".npy"), rng.standard_normal((2, 4, 3)))
        np.save(os.path.join(ins, "big_" + n + ".npy"), rng.standard_normal((1, 64, 64)))
    qkv = ["-q", f"{ins}/q.npy", "-k", f"{ins}/k.npy", "-v", f"{ins}/v.npy"]
    big = ["-q", f"{ins}/big_q.npy", "-k", f"{ins}/big_k.npy", "-v", f"{ins}/big_v.npy"]
    # The right output, from a plain run, to compare what the devices got.
    want = os.path.join(ins, "want.npy")
    subprocess.run([ATTN, "sdpa", *qkv, "-o", want], check=True)
    want_bytes = open(want, "rb").read()

    def fresh(name):
        d = os.path.join(root, name)
        os.mkdir(d)
        return d

    # -o onto a private null device: written through, still the device.
    d = fresh("chr")
    os.mknod(f"{d}/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    p = check(attn(["sdpa", *qkv, "-o", "null"], d), 0, None, d, ["null"])
    if not stat.S_ISCHR(os.lstat(f"{d}/null").st_mode):
        p.append("null is no longer a character device")
    report("char_device_written_in_place", p)

    # -o onto a private full device: ENOSPC reported, the node not removed.
    d = fresh("full")
    os.mknod(f"{d}/full", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    p = check(attn(["sdpa", *qkv, "-o", "full"], d), 1, "No space left on device", d, ["full"])
    if os.path.exists(f"{d}/full") and not stat.S_ISCHR(os.lstat(f"{d}/full").st_mode):
        p.append("full is no longer a character device")
    report("full_device_error_device_kept", p)

    # -o onto a FIFO with a reader: the reader gets the .npy, the FIFO stays.
    d = fresh("fifo")
    os.mkfifo(f"{d}/pipe")
    got = []
    # A daemon: if the FIFO were replaced, its open would wait forever.
    reader = threading.Thread(target=lambda: got.append(open(f"{d}/pipe", "rb").read()), daemon=True)
    reader.start()
    p = check(attn(["sdpa", *qkv, "-o", "pipe"], d, timeout=60), 0, None, d, ["pipe"])
    reader.join(30)
    if got != [want_bytes]:
        p.append(f"the reader got {len(got[0]) if got else 'nothing'} bytes, not the {len(want_bytes)} of the output")
    if not stat.S_ISFIFO(os.lstat(f"{d}/pipe").st_mode):
        p.append("pipe is no longer a FIFO")
    report("fifo_written_in_place", p)

    # -o onto a symbolic link: the target replaced, the link still a link.
    d = fresh("link")
    os.mkdir(f"{d}/real")
    with open(f"{d}/real/out.npy", "wb") as f:
        f.write(b"old")
    os.symlink("real/out.npy", f"{d}/out.npy")
    p = check(attn(["sdpa", *qkv, "-o", "out.npy"], d), 0, None, d, ["out.npy", "real"])
    if not os.path.islink(f"{d}/out.npy"):
        p.append("out.npy is no longer a symbolic link")
    if open(f"{d}/real/out.npy", "rb").read() != want_bytes:
        p.append("the link's target does not hold the output")
    if listing(f"{d}/real") != ["out.npy"]:
        p.append(f"real/ holds {listing(d + '/real')}")
    report("symlink_target_replaced_link_kept", p)

    d = fresh("dangling")
    os.symlink("nowhere/out.npy", f"{d}/out.npy")
    report("dangling_symlink_refused",
           check(attn(["sdpa", *qkv, "-o", "out.npy"], d), 1, "symbolic link to a missing file", d, ["out.npy"]))

    # The text outputs take the same path: scaling --svg onto a full device.
    d = fresh("svg")
    os.mknod(f"{d}/full", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    report("svg_onto_full_device", check(attn(["scaling", "--no-train", "--svg", "full"], d, stdout=subprocess.DEVNULL), 1, "No space left on device", d, ["full"]))

    # stdout onto the private full device: a short print (only the final
    # flush fails) and a long one (writes fail along the way).
    d = fresh("stdout")
    os.mknod(f"{d}/full", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    for name, args in (("stdout_full_device", ["sdpa", *qkv]), ("stdout_full_device_long_text", ["explain"])):
        with open(f"{d}/full", "wb") as full:
            r = subprocess.run([ATTN, *args], stdout=full, stderr=subprocess.PIPE, cwd=d)
        report(name, check(r, 1, "cannot write to standard output: No space left on device", d, ["full"]))

    # stdout a pipe whose reader has gone: with SIGPIPE ignored the write
    # fails with EPIPE, reported; by default SIGPIPE ends the command, as
    # it ends any Unix tool, and nothing is printed.
    for name, ignore in (("stdout_closed_pipe_sigpipe_ignored", True), ("stdout_closed_pipe_sigpipe_default", False)):
        rfd, wfd = os.pipe()
        os.close(rfd)
        how = signal.SIG_IGN if ignore else signal.SIG_DFL
        r = subprocess.run([ATTN, "explain"], stdout=wfd, stderr=subprocess.PIPE,
                           preexec_fn=lambda: signal.signal(signal.SIGPIPE, how))
        os.close(wfd)
        if ignore:
            report(name, check(r, 1, "cannot write to standard output: Broken pipe"))
        else:
            report(name, check(r, -signal.SIGPIPE, None))

    # ENOSPC: a 16 KiB tmpfs, a 32 KiB output; the old out.npy is kept.
    d = fresh("small")
    mount_tmpfs(d, "16k")
    with open(f"{d}/out.npy", "wb") as f:
        f.write(b"old")
    p = check(attn(["sdpa", *big, "-o", "out.npy"], d), 1, "No space left on device", d, ["out.npy"])
    if open(f"{d}/out.npy", "rb").read() != b"old":
        p.append("out.npy was changed")
    report("enospc_small_tmpfs_old_file_kept", p)

    # A read-only mount: nothing can be created, the old file stays.
    d = fresh("ro")
    mount_tmpfs(d, "1m")
    with open(f"{d}/out.npy", "wb") as f:
        f.write(b"old")
    subprocess.run(["mount", "-o", "remount,ro", d], check=True)
    p = check(attn(["sdpa", *qkv, "-o", "out.npy"], d), 1, "Read-only file system", d, ["out.npy"])
    if open(f"{d}/out.npy", "rb").read() != b"old":
        p.append("out.npy was changed")
    report("read_only_mount", p)

    # -w naming a non-empty directory: the run fails before any rename, so
    # the old out.npy stays as it was and nothing else appears.
    d = fresh("dir")
    os.makedirs(f"{d}/w/sub")
    with open(f"{d}/out.npy", "wb") as f:
        f.write(b"old")
    p = check(attn(["sdpa", *qkv, "-o", "out.npy", "--lse", "lse.npy", "-w", "w"], d), 1, "directory", d,
              ["out.npy", "w"])
    if open(f"{d}/out.npy", "rb").read() != b"old":
        p.append("out.npy was changed")
    report("directory_in_the_way_nothing_renamed", p)

    # A rename that fails after others succeeded: --lse names a mount point
    # (a file bind-mounted there), which no rename may replace (EBUSY). -o
    # and -w are renamed first; they are undone: out.npy holds its old
    # bytes again, w.npy (new) is gone, and no temporary or kept link is left.
    d = fresh("busy")
    with open(f"{d}/out.npy", "wb") as f:
        f.write(b"old")
    with open(f"{d}/lse.npy", "wb") as f:
        f.write(b"mount point")
    with open(f"{ins}/other", "wb") as f:
        f.write(b"bound")
    subprocess.run(["mount", "--bind", f"{ins}/other", f"{d}/lse.npy"], check=True)
    p = check(attn(["sdpa", *qkv, "-o", "out.npy", "-w", "w.npy", "--lse", "lse.npy"], d), 1,
              "cannot rename into lse.npy: Device or resource busy", d, ["out.npy", "lse.npy"])
    if open(f"{d}/out.npy", "rb").read() != b"old":
        p.append("out.npy does not hold its old bytes")
    subprocess.run(["umount", f"{d}/lse.npy"], check=True)
    report("later_rename_fails_earlier_undone", p)

    # ulimit -f: SIGXFSZ is ignored, the write fails with EFBIG, the
    # temporary is removed.
    d = fresh("fsize")
    r = subprocess.run(["sh", "-c", f'ulimit -f 4; exec "{ATTN}" "$@"', "sh", "sdpa", *big, "-o", "out.npy"],
                       cwd=d, capture_output=True)
    report("ulimit_f_efbig_no_temporary", check(r, 1, "File too large", d, []))

    # ulimit -v: -w's (1, 4096, 4096) float64 weights (128 MiB) do not fit
    # in 96 MiB of address space: out of memory, and no file.
    d = fresh("vmem")
    for n in "qkv":
        np.save(f"{ins}/long_{n}.npy", rng.standard_normal((1, 4096, 8)))
    r = subprocess.run(["sh", "-c", f'ulimit -v 98304; exec "{ATTN}" "$@"', "sh", "sdpa", "-q", f"{ins}/long_q.npy",
                        "-k", f"{ins}/long_k.npy", "-v", f"{ins}/long_v.npy", "-o", "out.npy", "-w", "w.npy"],
                       cwd=d, capture_output=True, env=dict(os.environ, ATTN_NUM_THREADS="1"))
    report("ulimit_v_out_of_memory_no_files", check(r, 1, "out of memory", d, []))

    all_or_nothing(root, ins, qkv, rng)
    return 1 if failed else 0


def file_option_commands(ins, qkv, rng):
    """FILE_OPTIONS' commands, each without its option: {option: argv}."""
    np.save(f"{ins}/go.npy", rng.standard_normal((2, 4, 3)))  # dLoss/dout, shaped like the output
    np.save(f"{ins}/fmask.npy", rng.standard_normal((4, 4)))  # a float mask, for --dmask
    np.save(f"{ins}/sinks.npy", rng.standard_normal(2))  # (Hq,)
    E = 4  # mha: torch.nn.MultiheadAttention's parameters, 2 heads of 2
    os.makedirs(f"{ins}/mha", exist_ok=True)
    for name, shape in (("in_proj_weight", (3 * E, E)), ("in_proj_bias", (3 * E,)), ("out_proj.weight", (E, E)),
                        ("out_proj.bias", (E,))):
        np.save(f"{ins}/mha/{name}.npy", rng.standard_normal(shape))
    np.save(f"{ins}/x.npy", rng.standard_normal((3, E)))
    grad = [*qkv, "--grad-out", f"{ins}/go.npy"]
    return {"sdpa -w": ["sdpa", *qkv], "sdpa --lse": ["sdpa", *qkv], "sdpa --dq": ["sdpa", *grad],
            "sdpa --dk": ["sdpa", *grad], "sdpa --dv": ["sdpa", *grad],
            "sdpa --dmask": ["sdpa", *grad, "-m", f"{ins}/fmask.npy"],
            "sdpa --dsinks": ["sdpa", *grad, "--sinks", f"{ins}/sinks.npy"],
            "sdpa --dropout-mask": ["sdpa", *qkv, "--dropout", "0.5", "--seed", "3"],
            "mha -w": ["mha", "-x", f"{ins}/x.npy", "--weights", f"{ins}/mha", "--heads", "2"],
            "scaling --svg": ["scaling", "--no-train", "--dims", "8", "--queries", "50"],
            "train --svg": ["train", "--steps", "20"]}


def all_or_nothing(root, ins, qkv, rng):
    """A run that prints its result and writes files: all of it, or an
    error and nothing (no byte on stdout, no file), whichever part fails."""
    commands = file_option_commands(ins, qkv, rng)
    with open(f"{ins}/bound", "wb") as f:
        f.write(b"bound")
    n = 0

    def fresh():
        nonlocal n
        n += 1
        d = os.path.join(root, f"aon{n}")
        os.mkdir(d)
        os.mknod(f"{d}/full", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        return d

    def printed_nothing(r):
        return [] if r.stdout == b"" else [f"stdout got {len(r.stdout)} bytes: {r.stdout[:60]!r}"]

    for option in FILE_OPTIONS:
        full_case, rename_case, stdout_case = option_cases(option)
        cmd, flag = commands[option], option.split()[1]
        # Each command runs first as it is, so that a case below fails for
        # what it tests and not for a command that fails anyway.
        plain = subprocess.run([ATTN, *cmd, flag, os.devnull], capture_output=True)
        if plain.returncode or not plain.stdout:
            for case in (full_case, rename_case, stdout_case):
                report(case, [f"the plain run failed: {plain.stderr!r}"])
            continue

        # The file onto a full device: an error, and not a byte of the result.
        d = fresh()
        r = attn([*cmd, flag, "full"], d)
        report(full_case, check(r, 1, "No space left on device", d, ["full"]) + printed_nothing(r))

        # The file's rename fails (its name is a mount point): likewise.
        d = fresh()
        with open(f"{d}/f.out", "wb") as f:
            f.write(b"mount point")
        subprocess.run(["mount", "--bind", f"{ins}/bound", f"{d}/f.out"], check=True)
        r = attn([*cmd, flag, "f.out"], d)
        p = check(r, 1, "Device or resource busy", d, ["full", "f.out"]) + printed_nothing(r)
        subprocess.run(["umount", f"{d}/f.out"], check=True)
        report(rename_case, p)

        # stdout onto a full device: the file is not left behind.
        d = fresh()
        with open(f"{d}/full", "wb") as full:
            r = attn([*cmd, flag, "f.out"], d, stdout=full)
        report(stdout_case, check(r, 1, "cannot write to standard output: No space left on device", d, ["full"]))

    # stdout full, the file there before: it holds its old bytes again.
    d = fresh()
    with open(f"{d}/lse.npy", "wb") as f:
        f.write(b"old")
    with open(f"{d}/full", "wb") as full:
        r = attn(["sdpa", *qkv, "--lse", "lse.npy"], d, stdout=full)
    p = check(r, 1, "cannot write to standard output", d, ["full", "lse.npy"])
    if open(f"{d}/lse.npy", "rb").read() != b"old":
        p.append("lse.npy does not hold its old bytes")
    report("stdout_full_old_file_restored", p)

    # stdout a closed pipe, SIGPIPE as it comes: the command ends by the
    # signal, and the file it had written is gone with it.
    d = fresh()
    rfd, wfd = os.pipe()
    os.close(rfd)
    r = subprocess.run([ATTN, *commands["train --svg"], "--svg", "loss.svg"], stdout=wfd, stderr=subprocess.PIPE,
                       cwd=d, preexec_fn=lambda: signal.signal(signal.SIGPIPE, signal.SIG_DFL))
    os.close(wfd)
    report("stdout_closed_pipe_sigpipe_default_no_file", check(r, -signal.SIGPIPE, None, d, ["full"]))

    # The second file fails: the first is not left, and nothing is printed.
    d = fresh()
    r = attn(["sdpa", *qkv, "-w", "w.npy", "--lse", "full"], d)
    report("second_file_fails_first_removed",
           check(r, 1, "No space left on device", d, ["full"]) + printed_nothing(r))
    d = fresh()
    r = attn([*commands["mha -w"], "-o", "out.npy", "-w", "full"], d)
    report("second_file_fails_first_removed_mha",
           check(r, 1, "No space left on device", d, ["full"]) + printed_nothing(r))
    # ... when the second one fills its file system (a 32 KiB -w on 16 KiB).
    d = fresh()
    mount_tmpfs(f"{d}/small", "16k")
    big = ["-q", f"{ins}/big_q.npy", "-k", f"{ins}/big_k.npy", "-v", f"{ins}/big_v.npy"]
    r = attn(["sdpa", *big, "--lse", "lse.npy", "-w", "small/w.npy"], d)
    p = check(r, 1, "No space left on device", d, ["full", "small"]) + printed_nothing(r)
    if listing(f"{d}/small"):
        p.append(f"small/ holds {listing(d + '/small')}")
    report("second_file_enospc_first_removed", p)


if __name__ == "__main__":
    sys.exit(inside(sys.argv[3]) if "--inside" in sys.argv else outside())
