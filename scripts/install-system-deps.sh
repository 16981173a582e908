#!/bin/sh
# Install the system packages rldag's sandbox needs, only when missing (idempotent).
# Run as root (CI and `make` call it). Debian/Ubuntu (apt-get) only.
#   bubblewrap  - namespaces, read-only mounts, seccomp loading (bwrap)
#   python3     - a world-readable system interpreter the sandbox's non-root uid can execute
#   libseccomp2 - used (via PyPI pyseccomp) to compile the syscall filter
set -eu

need=""
command -v bwrap >/dev/null 2>&1 || need="$need bubblewrap"
[ -x /usr/bin/python3 ] || need="$need python3"
ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2' || need="$need libseccomp2"

if [ -z "$need" ]; then
    echo "install-system-deps: nothing to do (bubblewrap, python3, libseccomp2 present)"
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
