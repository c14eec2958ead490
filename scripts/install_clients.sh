#!/usr/bin/env bash
# Install the real third-party readers that tests/clients.py drives:
#   imagej             stock ImageJ 1.x (/usr/share/java/ij.jar via libij-java);
#                      pulls default-jre when no Java runtime is installed
#   xvfb               ImageJ builds its menu bar even in -batch mode, so it needs an X display
#   fonts-dejavu-core  Java's AWT needs a font to start; fontconfig usually pulls it in already
#   gdal-bin           gdalinfo and gdal_translate
#   libtiff-tools      tiffinfo and tiffcp: libtiff's own reading of the tiled TIFFs
#   systemd            systemd-analyze, to verify systemd/zarrfs@.service
# Idempotent: does nothing (not even apt-get update) when all are installed.
set -euo pipefail

packages=(imagej xvfb fonts-dejavu-core gdal-bin libtiff-tools systemd)

missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$package")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install_clients: all installed (${packages[*]})"
    exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    sudo=(sudo)
fi
echo "install_clients: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
