#!/usr/bin/env python3
"""Build a release: an sdist and a wheel, SHA256SUMS, and its signature.

    python scripts/release.py --key-home ~/.awp-release [--out dist]

The build is reproducible: ``SOURCE_DATE_EPOCH`` is the last commit's time
(unless set), so the same commit gives the same bytes twice, and the commit
is recorded in the package (``awp/COMMIT``, which ``awp --version`` reads).
The release key is an ordinary awp identity (``identity.json`` of
``--key-home``), so ``awp verify-release`` checks what this signs.  Run from
a clean checkout: the script refuses a tree with uncommitted changes unless
``--dirty``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from awp.daemon.keyfile import load_identity_seed  # noqa: E402
from awp.wire.keys import Identity  # noqa: E402
from awp.wire.release import SIG, SUMS, sign, sums_text  # noqa: E402


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def build(out: str, env: dict, dirty: bool) -> list[str]:
    """The sdist and the wheel, built in a copy of the tree so nothing is left behind
    (the files git tracks; with ``dirty``, the untracked ones it does not ignore too)."""
    with tempfile.TemporaryDirectory(prefix="awp-release-") as tmp:
        src = os.path.join(tmp, "src")
        files = git("ls-files", "-z").split("\0")
        if dirty:
            files += git("ls-files", "-z", "--others", "--exclude-standard").split("\0")
        for f in filter(None, files):
            if not os.path.isfile(os.path.join(ROOT, f)):
                continue  # tracked, deleted in the tree
            dst = os.path.join(src, f)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, f), dst)
        with open(os.path.join(src, "awp", "COMMIT"), "w") as fh:
            fh.write(git("rev-parse", "HEAD") + "\n")
        epoch = int(env["SOURCE_DATE_EPOCH"])
        for dirpath, _dirs, names in os.walk(src):  # file times say nothing of the commit
            for n in names:
                os.utime(os.path.join(dirpath, n), (epoch, epoch))
        subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel",
                        "--outdir", out, src], check=True, env=env, cwd=src,
                       stdout=subprocess.DEVNULL if not os.environ.get("AWP_RELEASE_VERBOSE") else None)
    names = sorted(n for n in os.listdir(out) if n.endswith((".whl", ".tar.gz")))
    for n in names:
        if n.endswith(".tar.gz"):
            normalize_sdist(os.path.join(out, n), epoch)
    return names


def normalize_sdist(path: str, epoch: int) -> None:
    """Rewrite the sdist with every time set to ``epoch`` and no owner names: the
    directories setuptools makes while building, and gzip's own header, otherwise
    carry the time of the build."""
    import gzip
    import io
    import tarfile

    with tarfile.open(path, "r:gz") as src:
        members = [(m, src.extractfile(m).read() if m.isfile() else None)
                   for m in src.getmembers()]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for m, data in sorted(members, key=lambda x: x[0].name):
            m.mtime, m.uid, m.gid, m.uname, m.gname = epoch, 0, 0, "", ""
            m.pax_headers = {}
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    with open(path, "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f,
                                               mtime=epoch) as gz:
        gz.write(buf.getvalue())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--key-home", required=True, help="home whose identity.json signs")
    ap.add_argument("--out", default=os.path.join(ROOT, "dist"))
    ap.add_argument("--dirty", action="store_true", help="build with uncommitted changes")
    args = ap.parse_args()
    if not args.dirty and git("status", "--porcelain", "--untracked-files=no"):
        raise SystemExit("uncommitted changes: commit them, or --dirty")
    env = dict(os.environ)
    env.setdefault("SOURCE_DATE_EPOCH", git("log", "-1", "--format=%ct"))
    os.makedirs(args.out, exist_ok=True)
    for old in os.listdir(args.out):
        if old.endswith((".whl", ".tar.gz")) or old in (SUMS, SIG):
            os.remove(os.path.join(args.out, old))
    names = build(args.out, env, args.dirty)
    digests = {}
    for n in names:
        with open(os.path.join(args.out, n), "rb") as f:
            digests[n] = hashlib.sha256(f.read()).hexdigest()
    sums = sums_text(digests).encode()
    with open(os.path.join(args.out, SUMS), "wb") as f:
        f.write(sums)
    ident = Identity(load_identity_seed(args.key_home))
    with open(os.path.join(args.out, SIG), "w") as f:
        f.write(sign(ident, sums))
    for n in names:
        print(f"{digests[n]}  {n}")
    print(f"signed by {ident.key}: {os.path.join(args.out, SIG)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
