#!/bin/sh
# Install what the Prefect UI test needs, only when missing (idempotent). Run as root
# (`make test` calls it). Debian/Ubuntu (apt-get) only.
#   chromium            - headless browser that loads the Prefect UI's run page
#   tesseract-ocr(-eng) - reads the node names the UI draws on its graph canvas
set -eu

need=""
command -v chromium >/dev/null 2>&1 || need="$need chromium"
command -v tesseract >/dev/null 2>&1 || need="$need tesseract-ocr"
[ -n "$(ls /usr/share/tesseract-ocr/*/tessdata/eng.traineddata 2>/dev/null)" ] \
    || need="$need tesseract-ocr-eng"

if [ -z "$need" ]; then
    echo "install-ui-deps: nothing to do (chromium, tesseract-ocr, tesseract-ocr-eng present)"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "install-ui-deps: missing:$need - run this script as root" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-ui-deps: missing:$need and no apt-get here; install them by hand" >&2
    exit 1
fi
echo "install-ui-deps: installing$need"
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086
apt-get install -y --no-install-recommends $need || {
    apt-get update
    apt-get install -y --no-install-recommends $need
}
