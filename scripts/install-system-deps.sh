#!/bin/sh
# Install the Debian packages rldag and its tests need, only when missing (idempotent).
# Run as root (`make test` calls it). Debian/Ubuntu (apt-get) only.
#   bubblewrap          - the sandbox: namespaces, read-only mounts, seccomp loading (bwrap)
#   python3             - a world-readable interpreter the sandbox's non-root uid can execute
#   libseccomp2         - used (via PyPI pyseccomp) to compile the sandbox's syscall filter
#   chromium            - headless browser that loads the Prefect UI's run page (UI test)
#   tesseract-ocr(-eng) - reads the node names the UI draws on its graph canvas (UI test)
set -eu

need=""
command -v bwrap >/dev/null 2>&1 || need="$need bubblewrap"
[ -x /usr/bin/python3 ] || need="$need python3"
ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2' || need="$need libseccomp2"
command -v chromium >/dev/null 2>&1 || need="$need chromium"
command -v tesseract >/dev/null 2>&1 || need="$need tesseract-ocr"
[ -n "$(ls /usr/share/tesseract-ocr/*/tessdata/eng.traineddata 2>/dev/null)" ] \
    || need="$need tesseract-ocr-eng"

if [ -z "$need" ]; then
    echo "install-system-deps: nothing to do"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "install-system-deps: missing:$need - run this script as root" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-system-deps: missing:$need and no apt-get here; install them by hand" >&2
    exit 1
fi
echo "install-system-deps: installing$need"
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086
apt-get install -y --no-install-recommends $need || {
    apt-get update
    apt-get install -y --no-install-recommends $need
}
