#!/usr/bin/env python3
"""Makes plugin archives for the install tests, good and hostile.
usage: make_archive.py KIND OUT BUNDLE_DIR
KIND: tgz, txz, tzst, zip (a good archive of BUNDLE_DIR under a top folder), or one of the hostile
kinds: slip, absolute, symlink-escape, symlink-chain, symlink-later, symlink-sibling, hardlink, device, fifo, setuid, bomb,
two-bundles, beside (a README beside the bundle folder)."""
import io, os, subprocess, sys, tarfile, zipfile

kind, out, bundle = sys.argv[1], sys.argv[2], sys.argv[3]
top = os.path.basename(bundle.rstrip("/"))

def add_bundle(tar):
    for name in sorted(os.listdir(bundle)):
        tar.add(os.path.join(bundle, name), arcname=f"{top}/{name}")

def info(name, size=0, type=tarfile.REGTYPE, mode=0o644, linkname=""):
    t = tarfile.TarInfo(name)
    t.size, t.type, t.mode, t.linkname = size, type, mode, linkname
    return t

if kind == "zip":
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(os.listdir(bundle)):
            z.write(os.path.join(bundle, name), f"{top}/{name}")
elif kind == "tzst":
    raw = out + ".tar"
    with tarfile.open(raw, "w") as tar:
        add_bundle(tar)
    subprocess.run(["zstd", "-q", "-f", raw, "-o", out], check=True)
    os.remove(raw)
elif kind in ("tgz", "txz"):
    with tarfile.open(out, "w:gz" if kind == "tgz" else "w:xz") as tar:
        add_bundle(tar)
else:
    with tarfile.open(out, "w:gz") as tar:
        add_bundle(tar)
        if kind == "slip":
            tar.addfile(info(f"{top}/../../escaped.txt", 3), io.BytesIO(b"bad"))
        elif kind == "absolute":
            tar.addfile(info("/tmp/absolute-escape.txt", 3), io.BytesIO(b"bad"))
        elif kind == "symlink-escape":
            tar.addfile(info(f"{top}/out", type=tarfile.SYMTYPE, linkname="../../../../../../tmp"))
            tar.addfile(info(f"{top}/out/written-through-link.txt", 3), io.BytesIO(b"bad"))
        elif kind == "symlink-chain":
            # Each link alone stays inside: `up` is the bundle's own folder, but `esc` goes through
            # it to the bundle's parent.
            tar.addfile(info(f"{top}/d", type=tarfile.DIRTYPE, mode=0o755))
            tar.addfile(info(f"{top}/d/up", type=tarfile.SYMTYPE, linkname=".."))
            tar.addfile(info(f"{top}/esc", type=tarfile.SYMTYPE, linkname="d/up/../"))
        elif kind == "symlink-later":
            # Inside when it is made; the link made after it takes it out of the bundle.
            tar.addfile(info(f"{top}/a", type=tarfile.SYMTYPE, linkname="b/x"))
            tar.addfile(info(f"{top}/b", type=tarfile.SYMTYPE, linkname=".."))
        elif kind == "symlink-sibling":
            # Inside the archive, but the bundle's own folder is all that is installed: once it is,
            # this is another plugin's.
            tar.addfile(info(f"{top}/other", type=tarfile.SYMTYPE, linkname="../h.other"))
        elif kind == "hardlink":
            tar.addfile(info(f"{top}/hard", type=tarfile.LNKTYPE, linkname=f"{top}/plugin.json"))
        elif kind == "device":
            t = info(f"{top}/dev", type=tarfile.CHRTYPE)
            t.devmajor, t.devminor = 1, 3
            tar.addfile(t)
        elif kind == "fifo":
            tar.addfile(info(f"{top}/fifo", type=tarfile.FIFOTYPE))
        elif kind == "setuid":
            tar.addfile(info(f"{top}/suid", 3, mode=0o4755), io.BytesIO(b"bad"))
        elif kind == "bomb":
            class Zeros(io.RawIOBase):
                def __init__(self, n): self.left = n
                def readable(self): return True
                def readinto(self, b):
                    n = min(len(b), self.left); b[:n] = bytes(n); self.left -= n; return n
            size = 1 << 30
            tar.addfile(info(f"{top}/zeros", size), io.BufferedReader(Zeros(size), 1 << 20))
        elif kind == "beside":
            tar.addfile(info("README", 5), io.BytesIO(b"hello"))
        elif kind == "two-bundles":
            tar.inodes.clear()  # real copies, not hard links to the first bundle's files
            for name in sorted(os.listdir(bundle)):
                tar.add(os.path.join(bundle, name), arcname=f"second/{name}")
        else:
            sys.exit(f"unknown kind {kind}")
