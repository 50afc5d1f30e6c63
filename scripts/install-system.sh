#!/usr/bin/env bash
# Install the Debian packages leakwidget and its tests need: the browser tests (tests/browser/),
# the allocators an isolated watch preloads.
#
# Playwright drives Debian's own `chromium` (/usr/bin/chromium); `playwright install`
# is never used because it downloads a browser build of its own.
# Idempotent: packages already installed are skipped, and without anything to install
# nothing is fetched. Uses sudo only when not root.
set -euo pipefail

# Fonts: without them the screenshots in docs/screenshots/ show boxes for text.
# jemalloc and tcmalloc: isolated watches preload them (--allocator, --compare-allocators).
# gcc: tests/test_native.py builds a tiny leaking C library.
# stress-ng: a CPU hog beside a test that must hold on a busy machine (the allocators notebook's
# promises: `stress-ng --cpu 2` while tests/test_notebooks.py runs it).
packages=(chromium fonts-liberation fonts-dejavu-core libjemalloc2 libtcmalloc-minimal4 gcc stress-ng)
# Node.js runs the strip's JS tests (js/tests/); any node on PATH will do.
command -v node >/dev/null 2>&1 || packages+=(nodejs)

missing=()
for pkg in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-system: already installed: ${packages[*]}"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
else
    echo "install-system: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "install-system: installing ${missing[*]}"
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-system: done"
