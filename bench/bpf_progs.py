#!/usr/bin/env python3
"""Loaded BPF programs (root): id, type, name, verified_insns, xlated and jited sizes, run
time and count when BPF stats are on. No bpftool needed: BPF_PROG_GET_NEXT_ID,
BPF_PROG_GET_FD_BY_ID and BPF_OBJ_GET_INFO_BY_FD through ctypes. `--name SUBSTR` filters."""
import ctypes, os, struct, sys

libc = ctypes.CDLL(None, use_errno=True)
SYS_bpf = 321
BPF_PROG_GET_NEXT_ID, BPF_PROG_GET_FD_BY_ID, BPF_OBJ_GET_INFO_BY_FD = 11, 13, 15


def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 128)
    r = libc.syscall(SYS_bpf, cmd, buf, 128)
    return r, buf


def progs():
    pid = 0
    while True:
        r, buf = bpf(BPF_PROG_GET_NEXT_ID, struct.pack("II", pid, 0))
        if r < 0:
            return
        pid = struct.unpack_from("II", buf.raw)[1]
        fd, _ = bpf(BPF_PROG_GET_FD_BY_ID, struct.pack("I", pid))
        if fd < 0:
            continue
        info = ctypes.create_string_buffer(256)
        r, _ = bpf(BPF_OBJ_GET_INFO_BY_FD, struct.pack("IIQ", fd, 256, ctypes.addressof(info)))
        os.close(fd)
        if r < 0:
            continue
        raw = info.raw
        ptype, pid_, = struct.unpack_from("II", raw, 0)
        jited_len, xlated_len = struct.unpack_from("II", raw, 16)
        name = raw[64:80].split(b"\0")[0].decode()
        run_time_ns, run_cnt = struct.unpack_from("QQ", raw, 192)
        verified = struct.unpack_from("I", raw, 216)[0]
        yield pid_, ptype, name, verified, xlated_len, jited_len, run_time_ns, run_cnt


if __name__ == "__main__":
    want = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "--name" else ""
    for p in progs():
        if want in p[2]:
            print("id %d type %d %-16s verified_insns %d xlated %d jited %d run_ns %d run_cnt %d" % p)
