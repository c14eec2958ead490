"""NetCDF tools on a mounted `NAME.nc` against the same tools on a real NetCDF-3 file in the page cache.

The store: an ERA-like cube, `t2m` float32 (T, 721, 1440) (~1 GiB at T=256), Zarr v3,
zstd, chunks (8, 361, 720), with `time`, `lat`, `lon` coordinates and CF attributes
(dimension names, so zarrfs serves `era.nc`). The oracle: the same variables written
by netCDF4-python as NETCDF3_64BIT_OFFSET, read once before timing so that it is in
the page cache.

Timed commands, each run once per side per repeat, the sides alternating (the order
turning each repeat), each mounted run on a fresh mount (a cold daemon: every chunk
fetched from the store files, which are in the page cache, and decoded); every timed run,
on either side, starts on recently used memory (bench_data.recent_memory: on this VM fresh
memory costs up to ~3 s per GiB on first touch, what no ordinary machine charges):

    ncks -O -v t2m FILE out.nc      cdo -s timmean FILE out.nc

and, on a fresh mount, the chunk loads of `ncks -O -v t2m -d time,K` (one time step). Where
the time goes: cold `dd` of `t2m.raw` (C read path) against `NAME.nc` (Python, byte-swapped),
then with every chunk cached; `ncks` twice on one mount (the second from the page cache).
Reported: per-run seconds, medians, and ratios oracle seconds / mount seconds (>= 0.8
is the target; above 1 the mount is faster). The machine may be shared: see the note
printed with the numbers.

    python -P bench/bench_netcdf.py [--steps 256] [--repeat 3] [--root /tmp/zarrfs-bench]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_data import DEFAULT_ROOT, recent_memory, warm_page_cache  # noqa: E402
from bench_mount import mounted, stats, zarrfs_mount  # noqa: E402

LAT, LON = 721, 1440
CHUNKS = (8, 361, 720)
CACHE = "1GiB"


def field(step: int) -> np.ndarray:
    """One time step: a smooth temperature field plus noise (zstd compresses it as it would a reanalysis)."""
    lat = np.linspace(90, -90, LAT, dtype="float32")[:, None]
    lon = np.linspace(0, 360, LON, endpoint=False, dtype="float32")[None, :]
    noise = np.random.default_rng(step).standard_normal((LAT, LON)).astype("float32")
    return (273.15 + 30 * np.cos(np.radians(lat)) + 5 * np.sin(np.radians(lon + step)) + noise).astype("float32")


def ensure_data(root: Path, steps: int) -> tuple[Path, Path]:
    """(the Zarr store, the NetCDF-3 oracle), written once per step count."""
    import netCDF4
    import zarr

    store = root / f"era-{steps}.zarr"
    oracle = root / f"era-{steps}.nc"
    if store.exists() and oracle.exists():
        return store, oracle
    root.mkdir(parents=True, exist_ok=True)
    time_values = np.arange(steps, dtype="int32") * 6
    lat = np.linspace(90, -90, LAT)
    lon = np.linspace(0, 360, LON, endpoint=False)
    group = zarr.open_group(store, mode="w", zarr_format=3, attributes={"Conventions": "CF-1.8", "title": "ERA-like"})
    codecs = {"compressors": [zarr.codecs.ZstdCodec(level=3)]}
    for name, values, attrs in (("time", time_values, {"units": "hours since 2000-01-01", "calendar": "standard"}),
                                ("lat", lat, {"units": "degrees_north"}), ("lon", lon, {"units": "degrees_east"})):
        array = group.create_array(name, shape=values.shape, dtype=values.dtype, dimension_names=[name],
                                   attributes=attrs, **codecs)
        array[...] = values
    t2m = group.create_array("t2m", shape=(steps, LAT, LON), dtype="float32", chunks=CHUNKS,
                             dimension_names=["time", "lat", "lon"], fill_value=np.float32("nan"),
                             attributes={"units": "K", "long_name": "2 metre temperature"}, **codecs)
    with netCDF4.Dataset(oracle, "w", format="NETCDF3_64BIT_OFFSET") as nc:
        nc.setncatts({"Conventions": "CF-1.8", "title": "ERA-like"})
        for name, length in (("time", steps), ("lat", LAT), ("lon", LON)):
            nc.createDimension(name, length)
        for name, values, attrs in (("lat", lat, {"units": "degrees_north"}), ("lon", lon, {"units": "degrees_east"}),
                                    ("time", time_values, {"units": "hours since 2000-01-01", "calendar": "standard"})):
            variable = nc.createVariable(name, values.dtype, (name,))
            variable.setncatts(attrs)
            variable[:] = values
        variable = nc.createVariable("t2m", "f4", ("time", "lat", "lon"), fill_value=np.float32("nan"))
        variable.setncatts({"units": "K", "long_name": "2 metre temperature"})
        for start in range(0, steps, CHUNKS[0]):
            block = np.stack([field(k) for k in range(start, min(steps, start + CHUNKS[0]))])
            t2m[start:start + len(block)] = block
            variable[start:start + len(block)] = block
    return store, oracle


def run(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


COMMANDS = {
    "ncks -v t2m": lambda source, out: ["ncks", "-O", "-v", "t2m", str(source), str(out)],
    "cdo timmean": lambda source, out: ["cdo", "-s", "timmean", str(source), str(out)],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    args = parser.parse_args()
    store, oracle = ensure_data(args.root, args.steps)
    name = store.name.removesuffix(".zarr")
    print(f"store {store} ({sum(f.stat().st_size for f in store.rglob('*') if f.is_file()) / 2**20:.0f} MiB), "
          f"oracle {oracle} ({oracle.stat().st_size / 2**20:.0f} MiB); load average {os.getloadavg()[0]:.1f}")
    results: dict[str, dict[str, list[float]]] = {c: {"mount": [], "oracle": []} for c in COMMANDS}
    with tempfile.TemporaryDirectory(prefix="zarrfs-bench-nc-") as tmp:
        work = Path(tmp)
        out = work / "out.nc"
        for repeat in range(args.repeat):
            for command, build in COMMANDS.items():
                sides = ["mount", "oracle"] if repeat % 2 == 0 else ["oracle", "mount"]
                for side in sides:
                    warm_page_cache(store)
                    # Each timed run on recently used memory (bench_data.recent_memory), both sides alike.
                    if side == "oracle":
                        warm_page_cache(oracle)
                        recent_memory()
                        seconds = run(build(oracle, out))
                    else:
                        mountpoint = work / "mnt"
                        with mounted(zarrfs_mount(store, mountpoint, CACHE), mountpoint):
                            recent_memory()
                            seconds = run(build(mountpoint / f"{name}.nc", out))
                    out.unlink(missing_ok=True)
                    results[command][side].append(seconds)
                    print(f"repeat {repeat} {command:12s} {side:6s} {seconds:7.2f} s", flush=True)
        mountpoint = work / "mnt"
        # Where the time goes: the same cold read of the variable's bytes as `t2m.raw` (the C read
        # path, no byte swap) and as `NAME.nc` (Python, swapped), each on a fresh mount.
        for file in ("t2m.raw", f"{name}.nc", "t2m.raw", f"{name}.nc"):
            warm_page_cache(store)
            with mounted(zarrfs_mount(store, mountpoint, CACHE), mountpoint):
                recent_memory()
                cold = run(["dd", f"if={mountpoint / file}", "of=/dev/null", "bs=1M"])
                warm = run(["dd", f"if={mountpoint / file}", "of=/dev/null", "bs=1M", "iflag=direct"])
            print(f"dd {file:12s} cold daemon {cold:6.2f} s, every chunk cached (direct I/O) {warm:6.2f} s")
        with mounted(zarrfs_mount(store, mountpoint, CACHE), mountpoint):
            for repeat in range(2):  # the second run reads the kernel's page cache of the mounted file
                seconds = run(COMMANDS["ncks -v t2m"](mountpoint / f"{name}.nc", out))
                print(f"ncks -v t2m on one mount, run {repeat + 1}: {seconds:6.2f} s")
            out.unlink(missing_ok=True)
        with mounted(zarrfs_mount(store, mountpoint, CACHE), mountpoint):
            step = args.steps // 2 + 3
            run(["ncks", "-O", "-v", "t2m", "-d", f"time,{step}", str(mountpoint / f"{name}.nc"), str(out)])
            cache = stats(mountpoint)["cache"]
        per_step = CHUNKS[1] and -(-LAT // CHUNKS[1]) * -(-LON // CHUNKS[2])
        print(f"ncks -d time,{step}: {cache['loads']} chunk loads ({cache['prefetches']} by zarrfs readahead; "
              f"3 coordinate arrays; the step lies in {per_step} chunks of t2m)")
    summary = {}
    for command, sides in results.items():
        mount, reference = statistics.median(sides["mount"]), statistics.median(sides["oracle"])
        ratios = [o / m for o, m in zip(sides["oracle"], sides["mount"], strict=True)]
        summary[command] = {"mount_median_s": round(mount, 3), "oracle_median_s": round(reference, 3),
                            "ratio_median": round(statistics.median(ratios), 3)}
        print(f"{command:12s} mount {mount:6.2f} s  oracle {reference:6.2f} s  ratio oracle/mount "
              f"{statistics.median(ratios):.2f} (target >= 0.8)")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
