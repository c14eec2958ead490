#!/usr/bin/env bash
# The README's first command: set up the product alone (scripts/setup.sh --product: .venv with the runtime
# extras, no test tooling, no writers' venvs), write the built-in sample, mount it, read it with plain
# tools, numpy and tifffile, and unmount (also on failure).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
bash scripts/setup.sh --product
echo "== setup took $((SECONDS - started)) s"
work=$(mktemp -d /tmp/zarrfs-demo.XXXXXX)
mnt="$work/mnt" && mkdir -p "$mnt"
cleanup() { .venv/bin/zarrfs unmount "$mnt" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

.venv/bin/python scripts/make_sample.py "$work" >/dev/null
echo "== zarrfs tree $work/sample.zarr"
.venv/bin/zarrfs tree "$work/sample.zarr"
echo
echo "== zarrfs mount $work/sample.zarr $mnt"
.venv/bin/zarrfs mount "$work/sample.zarr" "$mnt" --log-file "$work/zarrfs.log"
echo "== ls -lR $mnt"
ls -lR "$mnt"
echo
echo "== reading with numpy and tifffile"
MNT="$mnt" .venv/bin/python - <<'PY'
import os, sys
import numpy as np, tifffile
sys.path.insert(0, "scripts")
from make_sample import sample_arrays
mnt = os.environ["MNT"]
image = np.load(f"{mnt}/image.npy", mmap_mode="r")
print(f"np.load(image.npy, mmap_mode='r'): shape {image.shape} {image.dtype}, mean {image.mean():.1f}")
stack = tifffile.imread(f"{mnt}/stack.tif")
with tifffile.TiffFile(f"{mnt}/stack.tif") as tif:
    ij = tif.imagej_metadata
print(f"tifffile.imread(stack.tif): shape {stack.shape}; ImageJ frames={ij['frames']} slices={ij['slices']}")
labels = np.fromfile(f"{mnt}/cells/labels.raw", dtype="<i4").reshape(1024, 1024)
print(f"cells/labels.raw via np.fromfile: max label {labels.max()}")
written = sample_arrays()
same = all(np.array_equal(read, written[path]) and read.dtype == written[path].dtype
           for path, read in (("image", image), ("stack", stack), ("cells/labels", labels)))
print("identical to the arrays handed to zarr-python:", same)
assert same
PY
echo
echo "== head -c 300 $mnt/image.json"
head -c 300 "$mnt/image.json"; echo " ..."
echo "== zarrfs unmount $mnt"
.venv/bin/zarrfs unmount "$mnt"
echo "done in $((SECONDS - started)) s"
